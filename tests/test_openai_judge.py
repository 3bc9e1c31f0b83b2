"""The OpenAI provider, driven by the real ``openai`` SDK against a loopback HTTP server."""

from __future__ import annotations

import asyncio
import json

import pytest

from summeval_runner import (
    JudgeAPIError,
    JudgeAuthError,
    MissingAPIKeyError,
    OpenAIJudge,
    OpenAIJudgeConfig,
    PreprocessStepResult,
    create_summarization_scorer,
)
from summeval_runner._judges._protocol import (
    AnalyzeReply,
    ReasonStepResult,
    strict_json_schema,
)
from tests.chat_server import ChatServer, Fault, Reply

pytestmark = pytest.mark.usefixtures("no_openai_env")

SOURCE = (
    "The Halvorsen bridge opened on Monday after six years of work. It cost 40 million dollars."
)
SUMMARY = "A bridge opened on Monday."
KEY = "sk-test-not-a-real-key"


def judge_settings(server: ChatServer, **overrides: object) -> dict[str, object]:
    # SDK-level retries off: a fault must reach the scorer, not be retried with real sleeps.
    return {
        "provider": "openai",
        "name": "judge-model",
        "base_url": server.base_url,
        "max_retries": 0,
    } | overrides


@pytest.fixture
def key(no_openai_env: None, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return KEY


@pytest.mark.usefixtures("key")
def test_an_evaluation_is_three_requests_each_with_its_strict_schema(
    chat_server: ChatServer,
) -> None:
    scorer = create_summarization_scorer(judge_settings(chat_server), {"max_questions": 3})

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    assert [r.step for r in chat_server.requests] == ["preprocess", "analyze", "reason"]
    expected = {
        "preprocess": strict_json_schema(PreprocessStepResult),
        # The judge answers by position: the questions are not echoed back (tokens).
        "analyze": strict_json_schema(AnalyzeReply),
        "reason": strict_json_schema(ReasonStepResult),
    }
    for request in chat_server.requests:
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == f"Bearer {KEY}"
        body = request.body
        assert body["model"] == "judge-model"
        assert body["temperature"] == 0
        assert body["seed"] == 42
        response_format = body["response_format"]
        assert response_format["type"] == "json_schema"
        assert response_format["json_schema"]["strict"] is True
        assert response_format["json_schema"]["schema"] == expected[request.step]
        # Paid for on every request: no descriptions, no $defs, no shape repeated in the prompt.
        schema_text = json.dumps(response_format["json_schema"]["schema"])
        assert "description" not in schema_text
        assert "$defs" not in schema_text
        assert '"alignment"' not in body["messages"][0]["content"]
    # The server's scripted verdicts: 1 of 2 claims supported, 1 of 3 questions answered.
    assert result.alignment_score == 0.5
    assert result.coverage_score == pytest.approx(1 / 3)
    assert result.score == pytest.approx(1 / 3)
    assert result.reason == "Alignment set the score."
    # Each verdict is paired with the question it answers.
    assert result.analyze_step_result is not None
    asked = result.preprocess_step_result.questions[:3]  # type: ignore[union-attr]
    assert [v.question for v in result.analyze_step_result.coverage] == list(asked)
    assert result.usage.calls == 3
    assert result.usage.input_tokens > 0
    assert result.judge == "openai/judge-model"


@pytest.mark.usefixtures("key")
def test_only_the_preprocess_request_carries_the_source(chat_server: ChatServer) -> None:
    scorer = create_summarization_scorer(judge_settings(chat_server))

    scorer.run_sync(input=SOURCE, output=SUMMARY)

    preprocess, analyze, reason = chat_server.requests
    assert "Halvorsen" in preprocess.text
    for phrase in ("Halvorsen", "six years of work", SOURCE):
        assert phrase not in analyze.text
        assert phrase not in reason.text
    # The analyze step is asked the questions, from the summary.
    assert "Did traffic fall?" in analyze.text
    assert SUMMARY in analyze.text


@pytest.mark.usefixtures("key")
def test_a_malformed_reply_is_reasked_with_the_problem(chat_server: ChatServer) -> None:
    chat_server.script(Reply("Sure! Here are the claims: none"))
    scorer = create_summarization_scorer(judge_settings(chat_server))

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    assert [r.step for r in chat_server.requests] == [
        "preprocess",
        "preprocess",
        "analyze",
        "reason",
    ]
    reask = chat_server.requests[1].body["messages"]
    assert reask[-2] == {"role": "assistant", "content": "Sure! Here are the claims: none"}
    assert "could not be used" in reask[-1]["content"]
    assert result.usage.preprocess.calls == 2


@pytest.mark.usefixtures("key")
def test_a_reply_malformed_every_time_is_an_error_not_a_zero(chat_server: ChatServer) -> None:
    bad = json.dumps({"coverage": [{"question": "q", "answered": "yes", "reason": "r"}]})
    chat_server.script(
        Reply(
            json.dumps(
                {
                    "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
                    "questions": ["q"],
                }
            )
        ),
        *[Reply(bad)] * 3,
    )
    scorer = create_summarization_scorer(judge_settings(chat_server), {"max_reasks": 2})

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "error"
    assert result.score is None
    assert result.error is not None
    assert result.error.type == "JudgeOutputError"
    assert result.error.step == "analyze"
    assert result.error.attempts == 3
    assert result.error.raw_reply == bad
    assert "answered" in result.error.message
    assert [r.step for r in chat_server.requests] == ["preprocess"] + ["analyze"] * 3


def test_a_missing_key_fails_before_any_request(chat_server: ChatServer) -> None:
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY"):
        create_summarization_scorer(judge_settings(chat_server))
    with pytest.raises(MissingAPIKeyError, match="MY_JUDGE_KEY"):
        create_summarization_scorer(judge_settings(chat_server, api_key_env="MY_JUDGE_KEY"))
    assert chat_server.requests == []


def test_api_key_env_names_the_variable_that_holds_the_key(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-from-my-variable")
    scorer = create_summarization_scorer(judge_settings(chat_server, api_key_env="MY_JUDGE_KEY"))

    scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert chat_server.requests[0].headers["authorization"] == "Bearer sk-from-my-variable"


def test_a_server_that_needs_no_key_needs_no_variable(chat_server: ChatServer) -> None:
    scorer = create_summarization_scorer(judge_settings(chat_server, api_key_env=None))

    assert scorer.run_sync(input=SOURCE, output=SUMMARY).status == "scored"
    assert len(chat_server.requests) == 3


@pytest.mark.usefixtures("key")
def test_openai_base_url_is_honoured_as_the_sdk_does(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    scorer = create_summarization_scorer("openai/judge-model")

    assert scorer.run_sync(input=SOURCE, output=SUMMARY).status == "scored"
    assert len(chat_server.requests) == 3


@pytest.mark.usefixtures("key")
def test_json_object_mode_for_servers_without_json_schema(chat_server: ChatServer) -> None:
    scorer = create_summarization_scorer(judge_settings(chat_server, response_format="json_object"))

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    expected = {
        "preprocess": strict_json_schema(PreprocessStepResult),
        "analyze": strict_json_schema(AnalyzeReply),
        "reason": strict_json_schema(ReasonStepResult),
    }
    for request in chat_server.requests:
        # The schema rides beside json_object, where llama.cpp's servers make a grammar of it
        # (without it they constrain the reply to any JSON object at all) ...
        assert request.body["response_format"] == {
            "type": "json_object",
            "schema": expected[request.step],
        }
        # ... and in the prompt, for servers that ignore it there.
        system_prompt = request.body["messages"][0]["content"]
        assert json.dumps(expected[request.step], separators=(",", ":")) in system_prompt


@pytest.mark.usefixtures("key")
def test_max_output_tokens_bounds_each_reply_and_is_sent_only_when_set(
    chat_server: ChatServer,
) -> None:
    bounded = create_summarization_scorer(judge_settings(chat_server, max_output_tokens=256))
    assert bounded.run_sync(input=SOURCE, output=SUMMARY).status == "scored"
    unbounded = create_summarization_scorer(judge_settings(chat_server))
    assert unbounded.run_sync(input=SOURCE, output=SUMMARY).status == "scored"

    assert [r.body.get("max_tokens") for r in chat_server.requests] == [256] * 3 + [None] * 3
    # A bound changes the replies, so the cache keys on it; an unset one leaves keys unchanged.
    assert bounded.judge.cache_identity()["max_output_tokens"] == 256
    assert "max_output_tokens" not in unbounded.judge.cache_identity()


@pytest.mark.usefixtures("key")
def test_a_server_that_refuses_json_schema_gets_json_object_and_the_error_names_the_fix(
    chat_server: ChatServer,
) -> None:
    # As llama-cpp-python's server: HTTP 500 with the validation error for json_schema.
    chat_server.json_schema_supported = False

    refused = create_summarization_scorer(judge_settings(chat_server)).run_sync(
        input=SOURCE, output=SUMMARY
    )

    assert refused.status == "error"
    assert refused.error is not None
    # Not a JudgeAPIError: every request would be refused alike, so none is retried.
    assert refused.error.type == "JudgeError"
    assert refused.error.step == "preprocess"
    assert refused.error.attempts == 1
    # The server's own words, and the fix.
    assert "HTTP 500" in refused.error.message
    assert "'response_format', 'type'" in refused.error.message
    assert "set the judge's response_format to json_object" in refused.error.message
    assert chat_server.counts["json_schema refused"] == 1

    scorer = create_summarization_scorer(judge_settings(chat_server, response_format="json_object"))
    assert scorer.run_sync(input=SOURCE, output=SUMMARY).status == "scored"
    assert chat_server.counts["json_schema refused"] == 1


@pytest.mark.usefixtures("key")
def test_one_client_and_one_connection_serve_every_call(chat_server: ChatServer) -> None:
    judge = OpenAIJudge(OpenAIJudgeConfig(name="judge-model", base_url=chat_server.base_url))
    scorer = create_summarization_scorer(judge)

    async def two_evaluations() -> None:
        await scorer.run(input=SOURCE, output=SUMMARY)
        await scorer.run(input=SOURCE, output=SUMMARY)
        await judge.aclose()

    asyncio.run(two_evaluations())

    assert len(chat_server.requests) == 6
    assert len({r.client_port for r in chat_server.requests}) == 1


@pytest.mark.usefixtures("key")
def test_a_server_error_is_an_error_result_with_its_status(chat_server: ChatServer) -> None:
    chat_server.script(
        Reply(
            json.dumps(
                {
                    "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
                    "questions": ["q"],
                }
            )
        ),
        Fault(503),
    )
    scorer = create_summarization_scorer(judge_settings(chat_server))

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "error"
    assert result.score is None
    assert result.error is not None
    assert result.error.type == "JudgeAPIError"
    assert result.error.step == "analyze"
    assert "503" in result.error.message
    assert result.preprocess_step_result is not None  # the completed step is kept


@pytest.mark.usefixtures("key")
@pytest.mark.parametrize(
    "fault",
    [Fault(401, "Incorrect API key"), Fault(403), Fault(429, "quota", code="insufficient_quota")],
)
def test_refused_credentials_or_quota_stop_the_caller(
    chat_server: ChatServer, fault: Fault
) -> None:
    chat_server.script(fault)
    scorer = create_summarization_scorer(judge_settings(chat_server))

    with pytest.raises(JudgeAuthError) as raised:
        scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert raised.value.status_code == fault.status
    assert len(chat_server.requests) == 1


@pytest.mark.usefixtures("key")
def test_the_key_never_shows_in_results_or_reprs(chat_server: ChatServer) -> None:
    chat_server.script(Fault(500, "boom"))
    scorer = create_summarization_scorer(judge_settings(chat_server))

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert KEY not in result.model_dump_json()
    assert KEY not in repr(scorer)


def test_a_key_in_the_settings_is_refused_without_echoing_it(chat_server: ChatServer) -> None:
    from summeval_runner import ConfigError

    with pytest.raises(ConfigError, match="api_key_env") as raised:
        create_summarization_scorer(judge_settings(chat_server, api_key="sk-secret-value"))
    assert "sk-secret-value" not in str(raised.value)


@pytest.mark.parametrize(
    ("status", "message", "refused"),
    [
        # llama-cpp-python's own refusal (see chat_server): the formats it takes are named.
        (
            500,
            "HTTP 500: ('body', 'response_format', 'type'): Input should be 'text' or 'json_object'",
            True,
        ),
        (400, "HTTP 400: response_format json_schema is not supported by this model", True),
        # A 500 that only mentions response_format is a fault to retry, not a refusal.
        (
            500,
            "HTTP 500: CUDA out of memory while compiling the grammar for response_format",
            False,
        ),
        # A schema the server finds invalid is not json_schema refused.
        (
            400,
            "HTTP 400: Invalid schema for response_format 'x': 'minItems' is not permitted",
            False,
        ),
        (503, "HTTP 503: response_format 'text' or 'json_object'", False),
    ],
)
def test_only_a_refusal_of_json_schema_itself_is_named_and_not_retried(
    status: int, message: str, refused: bool
) -> None:
    judge = OpenAIJudge(
        OpenAIJudgeConfig(name="m", base_url="http://127.0.0.1:9/v1", api_key_env=None)
    )

    assert judge._json_schema_refused(JudgeAPIError(message, status_code=status)) is refused
