"""The Google provider, driven by the official ``google-genai`` SDK against the loopback server
that speaks the Gemini API's ``generateContent`` (tests/gemini_server.py): its wire format (the
system instruction, ``responseMimeType`` application/json with the step's schema as
``responseJsonSchema``), thought tokens counted as output and shown apart, its prices, its errors
in this package's tree (429 with ``RetryInfo``, 5xx, 401/403 and Gemini's 400 for a key it does
not know, a reply cut at ``maxOutputTokens``, a blocked reply), and the extra that installs it."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from summeval_runner import ConfigError, GoogleJudge, GoogleJudgeConfig, create_summarization_scorer
from summeval_runner._errors import (
    JudgeAPIError,
    JudgeAuthError,
    JudgeConnectionError,
    MissingAPIKeyError,
)
from summeval_runner._judges import _google as google_module
from summeval_runner._judges._prices import price_of
from summeval_runner._judges._protocol import REPLY_MODELS, strict_json_schema
from summeval_runner._runner._retry import RetryPolicy
from tests.app import ENV, FAST_RETRIES, SECRET, openai_run, run_app, run_process, table
from tests.chat_server import SUMMARY_REPLY, ChatServer, valid_content
from tests.documents import write_dataset
from tests.gemini_server import Blocked, Fault, Finish, GeminiServer, Reply
from tests.test_model_families import a_request
from tests.test_secrets import assert_nowhere

SOURCE = "The Halvorsen bridge opened on Monday after six years of work. It cost 40 million."
SUMMARY = "A bridge opened on Monday."
GEMINI_KEY = "AIza-test-SECRET-5b7e2c91d0"
THOUGHTS = 11
STEP_SCHEMAS = [strict_json_schema(model) for model in REPLY_MODELS.values()]


@pytest.fixture
def gemini_env(no_openai_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Google setting from the machine the tests run on; the test key in GEMINI_API_KEY."""
    for name in (
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_GEMINI_BASE_URL",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GENAI_API_VERSION",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)


@pytest.fixture
def server() -> Iterator[GeminiServer]:
    started = GeminiServer(key=GEMINI_KEY).start()
    yield started
    started.stop()


def google_run(base_url: str, dataset: Path, *overrides: str) -> tuple[str, ...]:
    """The overrides of a quiet run of ``dataset`` judged by Gemini at ``base_url``."""
    return (
        "model=google",
        f"model.base_url={base_url}",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        *FAST_RETRIES,
        *overrides,
    )


def judge(server: GeminiServer, **settings: object) -> GoogleJudge:
    return GoogleJudge(
        GoogleJudgeConfig.model_validate(
            {"name": "gemini-2.5-flash", "base_url": server.base_url, "max_retries": 0} | settings
        )
    )


@pytest.mark.usefixtures("gemini_env")
def test_a_twenty_item_run_is_scored_through_generate_content_and_no_file_holds_the_key(
    tmp_path: Path, server: GeminiServer
) -> None:
    server.thoughts_tokens = THOUGHTS
    dataset = write_dataset(tmp_path / "docs.jsonl", 20)

    done = run_app(
        tmp_path / "run",
        *google_run(server.base_url, dataset),
        env={"GEMINI_API_KEY": GEMINI_KEY},
    )

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    assert len(items) == 20
    assert (items["status"] == "scored").all()
    assert set(items["judge"]) == {"google/gemini-2.5-flash"}
    assert server.requests
    for request in server.requests:
        assert request.path == "/v1beta/models/gemini-2.5-flash:generateContent"
        assert request.headers["x-goog-api-key"] == GEMINI_KEY
        body = request.body
        assert "summar" in body["systemInstruction"]["parts"][0]["text"].lower()
        assert [turn["role"] for turn in body["contents"]] == ["user"]
        config = body["generationConfig"]
        assert config["responseMimeType"] == "application/json"
        # The step's strict schema as it is: closed objects, every property required.
        assert config["responseJsonSchema"] in STEP_SCHEMAS
        assert (config["temperature"], config["seed"]) == (0.0, 42)
        assert "maxOutputTokens" not in config  # none set: the model's own bound
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["judge"]["name"] == "google/gemini-2.5-flash"
    # Thought tokens: among the output tokens, and shown apart.
    assert manifest["tokens"]["reasoning"] == THOUGHTS * len(server.requests)
    assert manifest["tokens"]["output"] == sum(c + t for _, c, t in server.usage)
    assert manifest["tokens"]["input"] == sum(p for p, _, _ in server.usage)
    assert f"({manifest['tokens']['reasoning']:,} of them reasoning)" in done.stdout
    # Priced from the genai-prices table, thoughts at the output price.
    known = price_of("gemini-2.5-flash", provider="google", base_url=server.base_url, given=None)
    assert known is not None
    assert known.source.startswith("genai-prices")
    expected = sum(p * known.price.input + (c + t) * known.price.output for p, c, t in server.usage)
    assert manifest["cost"]["judge"] == pytest.approx(expected / 1e6)
    assert_nowhere([GEMINI_KEY], tmp_path / "run", done.stdout, done.stderr)


@pytest.mark.usefixtures("gemini_env")
def test_a_429_and_5xx_are_retried_by_the_run_and_every_item_is_scored(
    tmp_path: Path, server: GeminiServer
) -> None:
    server.script(
        Fault(429, "Resource has been exhausted (e.g. check quota).", retry_delay="0.01s"),
        Fault(503, "The model is overloaded. Please try again later."),
        Fault(500, "An internal error has occurred."),
    )
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    done = run_app(
        tmp_path / "run",
        *google_run(server.base_url, dataset, "runner.max_judge_requests_in_flight=1"),
        env={"GEMINI_API_KEY": GEMINI_KEY},
    )

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    assert (items["status"] == "scored").all()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["judge"]["retries"] == 3
    assert len(server.requests) == len(server.usage) + 3


@pytest.mark.usefixtures("gemini_env")
def test_a_429s_retry_info_is_the_wait_the_retry_policy_keeps(server: GeminiServer) -> None:
    server.script(Fault(429, "Quota exceeded for metric", retry_delay="1.5s"), Fault(503))
    google = judge(server)

    async def twice() -> tuple[JudgeAPIError, JudgeAPIError]:
        errors = []
        for _ in range(2):
            with pytest.raises(JudgeAPIError) as raised:
                await google.complete(a_request())
            errors.append(raised.value)
        await google.aclose()
        return errors[0], errors[1]

    throttled, unavailable = asyncio.run(twice())

    assert (throttled.status_code, throttled.retry_after_s) == (429, 1.5)
    assert "RESOURCE_EXHAUSTED" in str(throttled)
    assert RetryPolicy().delay_s(1, throttled) == 1.5
    assert unavailable.status_code == 503
    assert RetryPolicy().is_retryable(throttled)
    assert RetryPolicy().is_retryable(unavailable)


@pytest.mark.usefixtures("gemini_env")
@pytest.mark.parametrize(
    "fault",
    [
        Fault(401, "Request had invalid authentication credentials."),
        Fault(403, "Method doesn't allow unregistered callers."),
        # Gemini's answer to a key it does not know: 400, with the reason API_KEY_INVALID.
        Fault(400, "API key not valid. Please pass a valid API key.", reason="API_KEY_INVALID"),
    ],
)
def test_refused_credentials_stop_the_caller(server: GeminiServer, fault: Fault) -> None:
    server.script(fault)
    scorer = create_summarization_scorer(judge(server))

    with pytest.raises(JudgeAuthError) as raised:
        scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert raised.value.status_code == fault.status
    assert "refused the credentials" in str(raised.value)
    assert len(server.requests) == 1


@pytest.mark.usefixtures("gemini_env")
def test_a_key_gemini_does_not_know_stops_the_run_at_once(
    tmp_path: Path, server: GeminiServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 20)

    done = run_app(
        tmp_path / "run",
        *google_run(server.base_url, dataset, "runner.max_judge_requests_in_flight=1"),
        env={"GEMINI_API_KEY": "AIza-a-revoked-key-0000"},
    )

    assert done.returncode != 0
    assert "refused the credentials (HTTP 400 API_KEY_INVALID)" in done.stderr
    # Not one refusal per item: the first stops the run, and no item is counted as judged.
    assert len(server.requests) <= 5
    assert "20 unfinished" in done.stdout
    assert_nowhere(["AIza-a-revoked-key-0000"], tmp_path / "run", done.stdout, done.stderr)


@pytest.mark.usefixtures("gemini_env")
def test_a_reply_cut_at_max_output_tokens_is_re_asked_counted_and_named_once(
    server: GeminiServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.thoughts_tokens = THOUGHTS
    server.script(*[Finish("MAX_TOKENS")] * 3)
    google = judge(server, max_output_tokens=64, thinking_budget=512)
    scorer = create_summarization_scorer(google)

    with caplog.at_level(logging.WARNING, logger="summeval_runner"):
        result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "JudgeOutputError"
    assert result.error.attempts == 3
    # Never read as a verdict; the cut text is kept for diagnosis.
    assert result.error.raw_reply is not None
    raw = json.loads(result.error.raw_reply)
    assert raw["cut_off"].startswith("the reply was cut off at 64 tokens")
    assert raw["received"].startswith('{"alignment"')
    assert all(r.body["generationConfig"]["maxOutputTokens"] == 64 for r in server.requests)
    # The SDK sends the field under its proto name, which Google's JSON parsers take as they
    # take the camel-case one (proto3's JSON mapping).
    thinking = ({"thinkingBudget": 512}, {"thinking_budget": 512})
    assert all(r.body["generationConfig"]["thinkingConfig"] in thinking for r in server.requests)
    identity = google.cache_identity()
    assert (identity["max_output_tokens"], identity["thinking_budget"]) == (64, 512)
    # Its tokens were spent and billed: counted, thoughts among them.
    assert result.usage.preprocess.output_tokens == sum(c + t for _, c, t in server.usage)
    assert result.usage.preprocess.reasoning_tokens == 3 * THOUGHTS
    warnings = [r.getMessage() for r in caplog.records if "MAX_TOKENS" in r.getMessage()]
    assert len(warnings) == 1
    assert "model.max_output_tokens" in warnings[0]
    assert "model.thinking_budget" in warnings[0]


@pytest.mark.usefixtures("gemini_env")
@pytest.mark.parametrize(
    ("entry", "words"),
    [(Finish("SAFETY"), "finishReason SAFETY"), (Blocked(), "prompt blocked: SAFETY")],
)
def test_a_blocked_reply_is_the_items_error_and_not_sent_again(
    tmp_path: Path, server: GeminiServer, entry: Finish | Blocked, words: str
) -> None:
    server.script(entry)
    dataset = write_dataset(tmp_path / "docs.jsonl", 1)

    done = run_app(
        tmp_path / "run",
        *google_run(server.base_url, dataset),
        env={"GEMINI_API_KEY": GEMINI_KEY},
    )

    assert done.returncode != 0 or "error" in done.stdout
    items = table(tmp_path / "run", "items")
    assert list(items["status"]) == ["error"]
    assert words in items["error_message"].iloc[0]
    assert items["error_step"].iloc[0] == "preprocess"
    # Neither retried nor re-asked: the API's filters would answer the same.
    assert len(server.requests) == 1


@pytest.mark.usefixtures("gemini_env")
def test_no_connection_is_the_outage_watchs_error(server: GeminiServer) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
        google = judge(server, base_url=f"http://127.0.0.1:{bound.getsockname()[1]}")

        with pytest.raises(JudgeConnectionError, match="connection refused"):
            asyncio.run(google.complete(a_request()))


@pytest.mark.usefixtures("gemini_env")
def test_a_connection_closed_unanswered_is_tried_once_when_the_run_owns_retries(
    server: GeminiServer,
) -> None:
    """Before: with no retry options the SDK retried a dropped or refused connection itself,
    once, after sleeping 1 to 10 random seconds, unseen by the runner's retries and outage
    watch (a refused connection took 2 to 10 s to surface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        accepted: list[int] = []

        def hang_up() -> None:
            while True:
                try:
                    connection, _ = listening.accept()
                except OSError:
                    return  # the test closed the socket
                accepted.append(1)
                connection.close()  # closed before any reply: the server disconnected

        hanging_up = threading.Thread(target=hang_up)
        hanging_up.start()
        google = judge(server, base_url=f"http://127.0.0.1:{listening.getsockname()[1]}")

        try:
            with pytest.raises(JudgeAPIError):
                asyncio.run(google.complete(a_request()))
        finally:
            listening.shutdown(socket.SHUT_RDWR)  # wakes the accept() above, pass or fail
            hanging_up.join()

    assert len(accepted) == 1


@pytest.mark.usefixtures("gemini_env")
def test_a_reply_that_never_comes_is_a_retryable_timeout(server: GeminiServer) -> None:
    server.hanging = True  # held until the test ends: the client's timeout decides
    google = judge(server, timeout_s=0.2)

    with pytest.raises(JudgeAPIError, match="did not answer in time") as raised:
        asyncio.run(google.complete(a_request()))

    assert raised.value.status_code is None
    assert not isinstance(raised.value, JudgeConnectionError)  # it connected: no outage
    assert RetryPolicy().is_retryable(raised.value)


@pytest.mark.usefixtures("gemini_env")
def test_a_missing_sdk_is_exit_2_naming_the_extra(
    tmp_path: Path, server: GeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As where the extra is not installed: importing google.genai fails.
    monkeypatch.setitem(sys.modules, "google.genai", None)
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    done = run_app(
        tmp_path / "run",
        *google_run(server.base_url, dataset),
        env={"GEMINI_API_KEY": GEMINI_KEY},
    )

    assert done.returncode == 2, done.stderr
    assert "pip install 'summeval_runner[google]'" in done.stderr
    assert server.requests == []
    with pytest.raises(ConfigError, match=r"summeval_runner\[google\]"):
        create_summarization_scorer("google/gemini-2.5-flash")


BATCH = ("runner.mode=batch", "runner.batch_poll_s=0.02")


@pytest.mark.usefixtures("gemini_env")
@pytest.mark.parametrize("split", [False, True])
def test_batch_mode_sends_each_round_as_gemini_batches_at_half_the_price(
    tmp_path: Path, server: GeminiServer, monkeypatch: pytest.MonkeyPatch, split: bool
) -> None:
    if split:
        # A round past what one batch of inlined requests may carry goes as several batches.
        monkeypatch.setattr(google_module, "INLINE_BATCH_BYTES", 4_000)
    # One request of the first batch fails (503): sent again in a later one, as a 5xx is.
    server.script(Fault(503, "The model is overloaded."))
    dataset = write_dataset(tmp_path / "docs.jsonl", 4)

    done = run_app(
        tmp_path / "run",
        *google_run(server.base_url, dataset, *BATCH),
        env={"GEMINI_API_KEY": GEMINI_KEY},
    )

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    assert len(items) == 4
    assert (items["status"] == "scored").all()
    # Every request went through a batch: none was sent to generateContent itself.
    batched = [line for batch in server.batches.values() for line in batch["requests"]]
    assert len(server.requests) == len(batched)
    rounds = {batch["operation"]["metadata"]["displayName"] for batch in server.batches.values()}
    if split:
        assert len(server.batches) > len(rounds)  # a round in several parts
    else:
        assert len(server.batches) == len(rounds)
    for line in batched:
        config = line["request"]["generationConfig"]
        assert config["responseMimeType"] == "application/json"
        assert config["responseJsonSchema"] in STEP_SCHEMAS
    known = price_of("gemini-2.5-flash", provider="google", base_url=server.base_url, given=None)
    assert known is not None
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    full = sum(p * known.price.input + (c + t) * known.price.output for p, c, t in server.usage)
    assert manifest["cost"]["judge"] == pytest.approx(full / 1e6 / 2)
    assert_nowhere([GEMINI_KEY], tmp_path / "run", done.stdout, done.stderr)


@pytest.mark.usefixtures("gemini_env")
def test_a_blocked_reply_in_a_batch_is_the_items_error(
    tmp_path: Path, server: GeminiServer
) -> None:
    server.script(Finish("SAFETY"))
    dataset = write_dataset(tmp_path / "docs.jsonl", 1)

    run_app(
        tmp_path / "run",
        *google_run(server.base_url, dataset, *BATCH),
        env={"GEMINI_API_KEY": GEMINI_KEY},
    )

    items = table(tmp_path / "run", "items")
    assert list(items["status"]) == ["error"]
    assert "Gemini blocked it (finishReason SAFETY)" in items["error_message"].iloc[0]
    assert len(server.requests) == 1  # a 400: not sent again


@pytest.mark.usefixtures("gemini_env")
def test_the_estimate_prices_a_google_run_from_the_table_and_calls_nothing(
    tmp_path: Path, server: GeminiServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 4)

    done = run_app(
        tmp_path / "run",
        *google_run(server.base_url, dataset, "runner.estimate=true"),
        env={"GEMINI_API_KEY": GEMINI_KEY},
    )

    assert done.returncode == 0, done.stderr
    assert "genai-prices" in done.stdout
    assert "gemini-2.5-flash" in done.stdout
    assert server.requests == []


@pytest.mark.usefixtures("gemini_env")
def test_keys_variables_and_settings(server: GeminiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # GOOGLE_API_KEY, the SDK's other variable, wins when both are set, as in the SDK.
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-google-variable-key")
    server.key = "AIza-google-variable-key"
    result = create_summarization_scorer(judge(server)).run_sync(input=SOURCE, output=SUMMARY)
    assert result.status == "scored"
    assert {r.headers["x-goog-api-key"] for r in server.requests} == {"AIza-google-variable-key"}

    monkeypatch.delenv("GOOGLE_API_KEY")
    monkeypatch.delenv("GEMINI_API_KEY")
    with pytest.raises(MissingAPIKeyError, match="GOOGLE_API_KEY or GEMINI_API_KEY"):
        create_summarization_scorer("google/gemini-2.5-flash")
    with pytest.raises(ConfigError, match="api_key_env") as raised:
        create_summarization_scorer({"provider": "google", "name": "g", "api_key": "AIza-x"})
    assert "AIza-x" not in str(raised.value)
    with pytest.raises(ConfigError, match="model name"):
        create_summarization_scorer("google")
    with pytest.raises(ConfigError, match="unknown setting 'reasoning_effort'"):
        create_summarization_scorer(
            {"provider": "google", "name": "g", "reasoning_effort": "low", "api_key_env": "K"}
        )


def agent_on_google(server: GeminiServer, chat_server: ChatServer, dataset: Path) -> list[str]:
    """A run whose summaries Gemini writes (the LLM summarizer on Google), judged by OpenAI's
    judge at the chat server."""
    return [
        *openai_run(chat_server.base_url, dataset),
        "target=llm_summarizer",
        "target.provider=google",
        "target.name=gemini-2.5-flash",
        f"target.base_url={server.base_url}",
    ]


def test_an_agent_on_google_is_judged_by_an_openai_judge(
    tmp_path: Path, server: GeminiServer, chat_server: ChatServer, gemini_env: None
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 5)

    done = run_app(
        tmp_path / "run",
        *agent_on_google(server, chat_server, dataset),
        env={**ENV, "GEMINI_API_KEY": GEMINI_KEY},
    )

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    assert (items["status"] == "scored").all()
    # Each summary is Gemini's, written from the source; the judge saw it.
    assert items["summary"].tolist() == [SUMMARY_REPLY] * 5
    assert len(server.requests) == 5
    for request in server.requests:
        assert request.body["systemInstruction"]["parts"][0]["text"].startswith("Summarize")
        assert [turn["role"] for turn in request.body["contents"]] == ["user"]
        assert request.body["generationConfig"]["maxOutputTokens"] == 300
        # Plain text: no JSON asked of a summarizer.
        assert "responseMimeType" not in request.body["generationConfig"]
        assert request.headers["x-goog-api-key"] == GEMINI_KEY
    judged = [r for r in chat_server.requests if r.step == "preprocess"]
    assert judged
    assert all(SUMMARY_REPLY in r.text for r in judged)
    # The agent's tokens and cost counted apart from the judge's, at the price table's price.
    # (In the order the items finished, which is not the order the requests arrived in.)
    assert sorted(items["target_input_tokens"]) == sorted(p for p, _, _ in server.usage)
    known = price_of("gemini-2.5-flash", provider="google", base_url=server.base_url, given=None)
    assert known is not None
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    expected = sum(p * known.price.input + c * known.price.output for p, c, _ in server.usage)
    assert manifest["cost"]["target"] == pytest.approx(expected / 1e6)
    assert_nowhere([GEMINI_KEY, SECRET], tmp_path / "run", done.stdout, done.stderr)


def test_an_agent_on_google_blocked_or_refused_is_the_agents_error(
    tmp_path: Path, server: GeminiServer, chat_server: ChatServer, gemini_env: None
) -> None:
    server.script(Finish("SAFETY"))
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    done = run_app(
        tmp_path / "blocked",
        *agent_on_google(server, chat_server, dataset),
        "runner.max_target_calls_in_flight=1",
        env={**ENV, "GEMINI_API_KEY": GEMINI_KEY},
    )

    items = table(tmp_path / "blocked", "items")
    assert sorted(items["status"]) == ["error", "scored"], done.stderr
    failed = items[items["status"] == "error"].iloc[0]
    assert "Gemini blocked it (finishReason SAFETY)" in failed["error_message"]
    assert failed["error_step"] == "target"

    # A thinking model whose thoughts took target.max_tokens whole: no summary, and why.
    server.thoughts_tokens = 300
    server.script(Finish("MAX_TOKENS", kept=0))
    thought = run_app(
        tmp_path / "thought",
        *agent_on_google(server, chat_server, dataset),
        "runner.max_target_calls_in_flight=1",
        env={**ENV, "GEMINI_API_KEY": GEMINI_KEY},
    )
    items = table(tmp_path / "thought", "items")
    assert sorted(items["status"]) == ["error", "scored"], thought.stderr
    failed = items[items["status"] == "error"].iloc[0]
    assert (
        "wrote no summary within target.max_tokens (300; 300 of them thoughts)"
        in (failed["error_message"])
    )
    server.thoughts_tokens = 0

    refused = run_app(
        tmp_path / "refused",
        *agent_on_google(server, chat_server, dataset),
        env={**ENV, "GEMINI_API_KEY": "AIza-revoked-agent-key"},
    )

    assert refused.returncode != 0
    assert "the agent's model at" in refused.stderr
    assert "refused the credentials (HTTP 400 API_KEY_INVALID)" in refused.stderr


def test_an_agent_on_google_without_the_sdk_is_exit_2_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gemini_env: None
) -> None:
    monkeypatch.setitem(sys.modules, "google.genai", None)
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    done = run_app(
        tmp_path / "run",
        f"dataset.path={dataset}",
        "target=llm_summarizer",
        "target.provider=google",
        "target.name=gemini-2.5-flash",
        env={"GEMINI_API_KEY": GEMINI_KEY},
    )

    assert done.returncode == 2
    assert "the agent's model on Google needs the google-genai SDK" in done.stderr
    assert "pip install 'summeval_runner[google]'" in done.stderr


def test_the_sdk_is_imported_only_when_a_google_judge_is_built(tmp_path: Path) -> None:
    script = (
        "import sys, summeval_runner\n"
        "from summeval_runner import create_summarization_scorer\n"
        "create_summarization_scorer('offline')\n"
        "assert 'google.genai' not in sys.modules, 'imported early'\n"
    )

    done = run_process([sys.executable, "-c", script], cwd=tmp_path)

    assert done.returncode == 0, done.stderr


@pytest.mark.usefixtures("gemini_env")
def test_a_rounds_batch_in_parts_is_found_by_its_tags_as_one(
    server: GeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(google_module, "INLINE_BATCH_BYTES", 1)  # one request a part
    google = judge(server)
    body = google.request_body(a_request())
    lines = b"".join(
        json.dumps({"custom_id": key, "body": body}).encode() + b"\n" for key in ("a", "b", "c")
    )

    async def lost_and_found() -> tuple[list[str], list[str], list[str]]:
        made = await google.submit_batch(lines, {"summeval_run": "run-1", "summeval_round": "r1"})
        first = lines.splitlines(keepends=True)[0]
        await google.submit_batch(first, {"summeval_run": "run-2", "summeval_round": "r9"})
        found = await google.tagged_batches("run-1", since=0)
        ended = await google.batch_state(made.id)
        assert ended.output_file_id is not None
        output = await google.batch_file(ended.output_file_id)
        await google.aclose()
        keys = [json.loads(line)["custom_id"] for line in output.splitlines()]
        return [state.id for state in found], [made.id, ended.status, found[0].round], keys

    found, (made, status, round_), keys = asyncio.run(lost_and_found())

    assert len(server.batches) == 4
    assert found == [made]  # the round's three parts, as the one batch the run made
    assert made.count("+") == 2
    assert (status, round_) == ("completed", "r1")
    assert sorted(keys) == ["a", "b", "c"]


@pytest.mark.usefixtures("gemini_env")
def test_a_rerun_is_answered_by_the_cache_and_another_thinking_budget_is_not(
    tmp_path: Path, server: GeminiServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    env = {"GEMINI_API_KEY": GEMINI_KEY}
    first = run_app(tmp_path / "first", *google_run(server.base_url, dataset), env=env)
    sent = len(server.requests)

    again = run_app(tmp_path / "again", *google_run(server.base_url, dataset), env=env)
    sent_again = len(server.requests)
    other = run_app(
        tmp_path / "other",
        *google_run(server.base_url, dataset, "model.thinking_budget=0"),
        env=env,
    )

    assert first.returncode == again.returncode == other.returncode == 0, other.stderr
    scores = {name: table(tmp_path / name, "items").set_index("item_id")["score"] for name in
              ("first", "again")}  # fmt: skip
    assert scores["again"].sort_index().tolist() == scores["first"].sort_index().tolist()
    # The rerun sent nothing; a judge with another thinking budget is another judge. (Not
    # exactly as many requests as the first run: the items' reason requests are alike, and how
    # many the run's own cache answers depends on how the items overlap in time.)
    assert sent_again == sent
    assert len(server.requests) > sent
    assert all("thinkingConfig" in r.body["generationConfig"] for r in server.requests[sent:])
    assert (table(tmp_path / "other", "items")["status"] == "scored").all()


@pytest.mark.usefixtures("gemini_env")
def test_a_key_echoed_in_an_error_or_a_reply_is_scrubbed_from_every_file(
    tmp_path: Path, server: GeminiServer
) -> None:
    # As a careless gateway: the key quoted in an error's message and in a reply's reason.
    verdict = valid_content({"response_format": {"json_schema": {"name": "preprocess"}}})
    verdict["alignment"][0]["reason"] = f"checked with key {GEMINI_KEY}"
    server.script(
        Fault(400, f"API key {GEMINI_KEY} is not allowed for this model"),
        Reply(json.dumps(verdict)),
    )
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    done = run_app(
        tmp_path / "run",
        *google_run(server.base_url, dataset, "runner.max_items_in_flight=1"),
        "runner.transcripts=true",
        env={"GEMINI_API_KEY": GEMINI_KEY},
    )

    items = table(tmp_path / "run", "items")
    assert sorted(items["status"]) == ["error", "scored"], done.stderr
    assert "is not allowed for this model" in " ".join(items["error_message"].dropna())
    assert_nowhere([GEMINI_KEY], tmp_path / "run", done.stdout, done.stderr)


@pytest.mark.usefixtures("gemini_env")
def test_schema_format_openapi_sends_the_steps_schema_as_response_schema(
    server: GeminiServer,
) -> None:
    google = judge(server, schema_format="openapi")

    result = create_summarization_scorer(google).run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    for request in server.requests:
        config = request.body["generationConfig"]
        assert "responseJsonSchema" not in config
        schema = config["responseSchema"]
        # The OpenAPI subset, as the SDK's Schema writes it: no additionalProperties.
        assert schema["type"] == "OBJECT"
        assert "additionalProperties" not in json.dumps(schema)
    assert google.cache_identity()["schema_format"] == "openapi"
