"""OpenAI's current models on their defaults, and prices known without typing them.

The loopback server answers as a reasoning model (o-series, gpt-5.x) when asked: it refuses a
``temperature`` other than 1 and any ``max_tokens`` with the API's own HTTP 400 bodies, and
reports reasoning tokens. The judge learns each refusal once per model and run, and sends every
later request without what was refused; the official SDK drives every request.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from summeval_runner import (
    ConfigError,
    OpenAIJudge,
    OpenAIJudgeConfig,
    create_summarization_scorer,
    run_evals_sync,
)
from summeval_runner._judges._prices import price_of, table_version
from summeval_runner._judges._protocol import JudgeReply, TokenUsage
from summeval_runner._runner._cache import ResponseCache
from tests.app import ENV, SECRET, openai_run, run_app, table
from tests.chat_server import REASONING_TOKENS, ChatServer, Fault
from tests.documents import write_dataset
from tests.test_secrets import assert_nowhere

pytestmark = pytest.mark.usefixtures("no_openai_env")

SOURCE = "The Halvorsen bridge opened on Monday after six years of work. It cost 40 million."
SUMMARY = "A bridge opened on Monday."
# What genai-prices' table says of gpt-5-mini (US dollars per million tokens), as this test
# reads it: the price the runs below must be counted at.
GPT5_MINI = price_of("gpt-5-mini", provider="openai", base_url=None, given=None)


def manifest(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    return loaded


def reasoning_run(server: ChatServer, dataset: Path, *overrides: str) -> tuple[str, ...]:
    return openai_run(
        server.base_url, dataset, "model.name=gpt-5-mini", "model.max_output_tokens=900", *overrides
    )


def test_a_reasoning_model_scores_every_item_on_its_defaults_each_refusal_paid_once(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.reasoning_model = True
    dataset = write_dataset(tmp_path / "docs.jsonl", 20)

    # Requests one at a time: the first refusal of each parameter is the only one.
    done = run_app(
        tmp_path / "run",
        *reasoning_run(chat_server, dataset, "runner.max_judge_requests_in_flight=1"),
        env=ENV,
    )

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    assert len(items) == 20
    assert (items["status"] == "scored").all()
    # One refusal each, on the first request: temperature, then max_tokens (the API refuses
    # one parameter at a time); none ever again.
    assert chat_server.counts["refused temperature"] == 1
    assert chat_server.counts["refused max_tokens"] == 1
    first, second, *rest = chat_server.requests
    assert first.body["temperature"] == 0
    assert first.body["max_tokens"] == 900
    assert "temperature" not in second.body
    assert second.body["max_tokens"] == 900
    assert rest
    for request in rest:
        assert "temperature" not in request.body
        assert "max_tokens" not in request.body
        assert request.body["max_completion_tokens"] == 900
        assert request.body["seed"] >= 42  # what the model takes is still sent
    run = manifest(tmp_path / "run")
    learned = {lesson["param"]: lesson for lesson in run["judge"]["learned"]}
    assert learned["temperature"] == {
        "model": "gpt-5-mini",
        "param": "temperature",
        "action": "dropped",
        "renamed_to": None,
        "code": "unsupported_value",
        "message": (
            "Unsupported value: 'temperature' does not support 0 with this model. Only the "
            "default (1) value is supported."
        ),
        "refused": 1,
    }
    assert learned["max_tokens"]["action"] == "renamed"
    assert learned["max_tokens"]["renamed_to"] == "max_completion_tokens"
    assert learned["max_tokens"]["code"] == "unsupported_parameter"
    # The refused requests are not the run's requests: those are the ones that were answered.
    assert run["judge"]["requests"] == len(rest)
    # Reasoning tokens, counted among the output tokens and shown apart.
    assert run["tokens"]["reasoning"] == REASONING_TOKENS * len(rest)
    assert run["tokens"]["output"] > run["tokens"]["reasoning"]
    assert f"out ({run['tokens']['reasoning']:,} of them reasoning)" in done.stdout
    # Each item's own, in its row: three steps', but for a step answered by a reply another item
    # paid for (the cache's), counted in judge_calls_reused; the rows add up to the run's.
    billed = items["reasoning_tokens"] + REASONING_TOKENS * items["judge_calls_reused"]
    assert (billed == 3 * REASONING_TOKENS).all()
    assert items["reasoning_tokens"].sum() == run["tokens"]["reasoning"]
    # Priced by the table, reasoning tokens as output tokens.
    assert GPT5_MINI is not None
    assert run["judge"]["price"] == {
        "input": GPT5_MINI.price.input,
        "output": GPT5_MINI.price.output,
        "batch": 0.5,
        "source": f"genai-prices {table_version()}",
        "model": "gpt-5-mini",
    }
    expected = sum(
        (chat_server.usage[i][0] * GPT5_MINI.price.input + chat_server.usage[i][1]
         * GPT5_MINI.price.output) / 1e6
        for i in chat_server.usage
    )  # fmt: skip
    assert run["cost"]["judge"] == pytest.approx(expected)
    # Each lesson logged once, in the run's log and (a warning) on the console.
    log = (tmp_path / "run" / "summeval-run.log").read_text(encoding="utf-8")
    console = done.stdout + done.stderr
    for said in (log, console):
        assert said.count("refused temperature (HTTP 400 unsupported_value") == 1
        assert said.count("refused max_tokens (HTTP 400 unsupported_parameter") == 1
    assert "sends max_completion_tokens instead of max_tokens" in log

    # The same run again: every reply from the cache, no request at all, refused or not.
    sent = len(chat_server.requests)
    again = run_app(
        tmp_path / "again",
        *reasoning_run(chat_server, dataset, "runner.max_judge_requests_in_flight=1"),
        env=ENV,
    )
    assert again.returncode == 0, again.stderr
    assert len(chat_server.requests) == sent
    rerun = table(tmp_path / "again", "items")
    assert (rerun["status"] == "scored").all()
    # Every step the cache's, paid by the first run: no reasoning token billed again.
    assert (rerun["reasoning_tokens"] == 0).all()
    assert (rerun["judge_calls_reused"] == 3).all()
    # Every step of every item (20 x 3), the first run's own hits (steps alike) included.
    assert manifest(tmp_path / "again")["judge"]["cache"]["hits"] == 60
    assert manifest(tmp_path / "again")["judge"]["learned"] == []
    # No key in any file of either run, nor in what they printed.
    for name in ("run", "again"):
        assert_nowhere([SECRET], tmp_path / name, done.stdout, done.stderr, again.stdout)


def test_refusals_that_come_together_cost_one_request_each_in_flight_at_most(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.reasoning_model = True
    dataset = write_dataset(tmp_path / "docs.jsonl", 20)

    done = run_app(
        tmp_path / "run",
        *reasoning_run(chat_server, dataset, "runner.max_judge_requests_in_flight=6"),
        env=ENV,
    )

    assert done.returncode == 0, done.stderr
    assert (table(tmp_path / "run", "items")["status"] == "scored").all()
    refused = chat_server.counts["refused temperature"] + chat_server.counts["refused max_tokens"]
    assert 1 <= chat_server.counts["refused temperature"] <= 6
    assert 1 <= chat_server.counts["refused max_tokens"] <= 6
    run = manifest(tmp_path / "run")
    # Every request the server saw was either one the run counts or a refusal the manifest
    # counts: no item paid a refusal twice, none was retried for it.
    assert len(chat_server.requests) == run["judge"]["requests"] + refused
    assert sum(lesson["refused"] for lesson in run["judge"]["learned"]) == refused
    assert run["judge"]["retries"] == 0


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        # A parameter the judge cannot do without.
        (Fault(400, "Invalid value for 'response_format'", code="unsupported_value"), "names"),
        # A 400 that names no parameter.
        (Fault(400, "Something about this request is wrong"), "none"),
    ],
)
def test_a_refusal_of_what_cannot_be_dropped_stays_an_item_error(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch, fault: Fault, why: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    chat_server.script(fault)
    judge = OpenAIJudge(
        OpenAIJudgeConfig(name="gpt-5-mini", base_url=chat_server.base_url, max_retries=0)
    )

    result = create_summarization_scorer(judge).run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "JudgeAPIError"
    assert "HTTP 400" in result.error.message
    assert len(chat_server.requests) == 1
    assert judge.learned_parameters() == ()


def test_a_refused_parameter_is_learned_by_code_and_param_not_by_wording(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The next model family, in words of its own: the code and the param decide.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    chat_server.script(
        Fault(400, "seed is not available here", code="unsupported_parameter", param="seed")
    )
    judge = OpenAIJudge(
        OpenAIJudgeConfig(name="next-model", base_url=chat_server.base_url, max_retries=0)
    )
    scorer = create_summarization_scorer(judge)

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    assert result.usage.calls == 3  # the refused request is not the item's
    refused, *answered = chat_server.requests
    assert refused.body["seed"] == 42
    assert len(answered) == 3
    assert all("seed" not in r.body and r.body["temperature"] == 0 for r in answered)
    (lesson,) = judge.learned_parameters()
    assert (lesson.model, lesson.param, lesson.action) == ("next-model", "seed", "dropped")
    # Learned for that model only: another model's bodies keep their seed.
    other = OpenAIJudge(OpenAIJudgeConfig(name="other", base_url=chat_server.base_url))
    assert "seed" in judge._chat.lessons.applied(other.request_body(a_request()))


def test_the_reasoning_efforts_accepted_are_the_installed_sdks_and_no_sdk_loads_unused() -> None:
    # The judge spells the SDK's ReasoningEffort out so that the SDK (about 33 MB) is loaded
    # only by a process that calls an endpoint: a new effort the SDK takes must not be refused.
    import subprocess
    import sys
    import typing

    from openai.types.shared import ReasoningEffort as SDKReasoningEffort

    from summeval_runner._judges._openai import ReasoningEffort

    assert set(typing.get_args(typing.get_args(ReasoningEffort)[0])) | {None} == set(
        typing.get_args(typing.get_args(SDKReasoningEffort)[0])
    ) | {None}
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, summeval_runner, summeval_runner._cli._compare_command;"
            "print(sorted({'openai', 'aiohttp', 'anthropic', 'google.genai'} & set(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert loaded == "[]"


def test_reasoning_effort_reaches_the_request_and_a_wrong_one_is_refused_by_name(
    tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    judge = OpenAIJudge(
        OpenAIJudgeConfig(name="o4-mini", base_url=chat_server.base_url, reasoning_effort="low")
    )
    assert create_summarization_scorer(judge).run_sync(input=SOURCE, output=SUMMARY).status == (
        "scored"
    )
    assert [r.body["reasoning_effort"] for r in chat_server.requests] == ["low"] * 3
    # It changes the replies: the cache keys on it, and only when it is set.
    assert judge.cache_identity()["reasoning_effort"] == "low"
    unset = OpenAIJudge(OpenAIJudgeConfig(name="o4-mini", base_url=chat_server.base_url))
    assert "reasoning_effort" not in unset.cache_identity()
    assert "reasoning_effort" not in unset.request_body(a_request())
    with pytest.raises(ConfigError, match="reasoning_effort"):
        create_summarization_scorer({"provider": "openai", "name": "o3", "reasoning_effort": "hi"})

    dataset = write_dataset(tmp_path / "docs.jsonl", 1)
    wrong = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset, "model.reasoning_effort=extreme"),
        env=ENV,
    )
    assert wrong.returncode == 2
    said = wrong.stderr + wrong.stdout
    assert "model: invalid openai judge settings: reasoning_effort input should be" in said
    assert "'extreme'" in said
    assert chat_server.counts["ok"] == 3  # none sent for it


def a_request() -> Any:
    """A request as the scorer makes them (its first step's), to build a body from."""
    from summeval_runner._judges._protocol import JudgeRequest, PreprocessInput, PromptMessage

    return JudgeRequest(
        step="preprocess",
        payload=PreprocessInput(summary=SUMMARY, source=SOURCE, max_questions=3),
        messages=(PromptMessage("system", "s"), PromptMessage("user", "u")),
        schema_name="summarization_preprocess",
        json_schema={"type": "object"},
        prompt_version="test",
    )


def test_reasoning_tokens_are_kept_per_step_and_by_the_cache(
    tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    chat_server.reasoning_model = True
    scorer = create_summarization_scorer(
        {"provider": "openai", "name": "gpt-5-mini", "base_url": chat_server.base_url}
    )
    data = [{"id": "a", "input": SOURCE, "output": SUMMARY}]

    first = run_evals_sync(scorers=[scorer], data=data, options={"cache_path": tmp_path / "c"})
    second = run_evals_sync(scorers=[scorer], data=data, options={"cache_path": tmp_path / "c"})

    answered = chat_server.counts["ok"]
    assert answered == 3
    (paid,) = first.items[0].results.values()
    assert paid.usage.preprocess.reasoning_tokens == REASONING_TOKENS
    assert paid.usage.reasoning_tokens == 3 * REASONING_TOKENS
    # The second run's replies are the cache's: paid by the first, so none of their tokens is
    # billed again; each step is counted as reused.
    (cached,) = second.items[0].results.values()
    assert (cached.usage.reasoning_tokens, cached.usage.reused) == (0, 3)
    assert chat_server.counts["ok"] == answered


def test_a_cache_written_before_reasoning_tokens_gains_them_and_keeps_its_entries(
    tmp_path: Path,
) -> None:
    path = tmp_path / "judge-cache.sqlite"
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE replies (key TEXT PRIMARY KEY, content TEXT NOT NULL, input_tokens INTEGER"
        " NOT NULL, output_tokens INTEGER NOT NULL, judge TEXT NOT NULL, created REAL NOT NULL)"
    )
    old.execute("INSERT INTO replies VALUES ('k', '{}', 10, 20, 'j', 0)")
    old.commit()
    old.close()

    cache = ResponseCache(path)

    assert cache.moved_to is None
    kept = cache.lookup("k")
    assert kept is not None
    assert kept.usage == TokenUsage(10, 20, 0)
    cache.store("n", JudgeReply("{}", usage=TokenUsage(5, 80, 64)), "j")
    assert cache.lookup("n") == JudgeReply("{}", usage=TokenUsage(5, 80, 64))
    cache.close()


def test_a_known_model_is_priced_by_the_table_an_unknown_one_stays_unknown(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    known = price_of("gpt-4o-mini", provider="openai", base_url=chat_server.base_url, given=None)
    assert known is not None
    assert known.price.input > 0
    assert known.price.output > 0

    # The default judge (gpt-4o-mini) with no price typed: priced.
    priced = run_app(tmp_path / "known", *openai_run(chat_server.base_url, dataset), env=ENV)
    unknown = run_app(
        tmp_path / "unknown",
        *openai_run(chat_server.base_url, dataset, "model.name=a-model-of-my-own"),
        env=ENV,
    )
    given = run_app(
        tmp_path / "given",
        *openai_run(chat_server.base_url, dataset, "model.price={input:2.5,output:10}"),
        env=ENV,
    )

    assert priced.returncode == unknown.returncode == given.returncode == 0, priced.stderr
    run = manifest(tmp_path / "known")
    assert run["judge"]["price"]["source"] == f"genai-prices {table_version()}"
    assert run["judge"]["price"]["input"] == known.price.input
    assert run["cost"]["judge"] > 0
    assert table(tmp_path / "known", "items")["judge_cost"].notna().all()
    assert "cost: unknown" not in priced.stdout
    # A model the table does not know: unknown, never 0, never a guess.
    assert manifest(tmp_path / "unknown")["cost"]["judge"] is None
    assert manifest(tmp_path / "unknown")["judge"]["price"] is None
    assert "cost: unknown" in unknown.stdout
    # model.price overrides the table.
    assert manifest(tmp_path / "given")["judge"]["price"] == {
        "input": 2.5, "output": 10.0, "batch": 0.5, "source": "given", "model": None,
    }  # fmt: skip


def test_estimates_and_budgets_use_the_tables_price(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)

    estimate = run_app(
        tmp_path / "estimate",
        *openai_run(chat_server.base_url, dataset, "runner.estimate=true"),
        env=ENV,
    )
    assert chat_server.requests == []  # an estimate sends nothing
    stopped = run_app(
        tmp_path / "budget",
        *openai_run(
            chat_server.base_url,
            dataset,
            "runner.max_cost=0.0002",
            "runner.max_items_in_flight=1",
        ),
        env=ENV,
    )

    assert estimate.returncode == 0, estimate.stderr
    known = price_of("gpt-4o-mini", provider="openai", base_url=None, given=None)
    assert known is not None
    at = f"at ${known.price.input:g} in, ${known.price.output:g} out per million tokens"
    assert f"{at} (genai-prices {table_version()}'s price for gpt-4o-mini)" in estimate.stdout
    assert "not known" not in estimate.stdout
    # Without model.price the budget still holds: the run stops before passing it.
    assert stopped.returncode != 0 or "max_cost" in stopped.stdout
    run = manifest(tmp_path / "budget")
    assert run["stopped_because"] is not None
    assert "max_cost" in run["stopped_because"]
    assert run["cost"]["judge"] <= 0.0002


def test_the_llm_summarizer_of_a_known_model_is_priced_by_the_table(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    done = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset, "model.price={input:2.5,output:10}"),
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        env=ENV,
    )

    assert done.returncode == 0, done.stderr
    known = price_of("gpt-4o-mini", provider="openai", base_url=None, given=None)
    assert known is not None
    agent = sum(
        (chat_server.usage[i][0] * known.price.input + chat_server.usage[i][1]
         * known.price.output) / 1e6
        for i, request in enumerate(chat_server.requests)
        if request.step == "summarize"
    )  # fmt: skip
    assert agent > 0
    assert manifest(tmp_path / "run")["cost"]["target"] == pytest.approx(agent)


def test_a_resumed_run_learns_again_at_one_request_and_its_manifest_adds_both_parts(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.reasoning_model = True
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)
    overrides = reasoning_run(
        chat_server,
        dataset,
        "runner.max_items_in_flight=1",
        "runner.max_judge_requests_in_flight=1",
    )

    # Priced by the table: a budget stops the first part halfway.
    stopped = run_app(tmp_path / "run", *overrides, "runner.max_cost=0.002", env=ENV)
    assert stopped.returncode == 4, stopped.stderr
    first = manifest(tmp_path / "run")
    assert 0 < first["counts"]["total"] < 6
    resumed = run_app(
        tmp_path / "run",
        *overrides,
        f"runner.resume={tmp_path / 'run'}",
        "runner.max_cost=1",
        env=ENV,
    )

    assert resumed.returncode == 0, resumed.stderr
    done = manifest(tmp_path / "run")
    assert done["counts"]["scored"] == 6
    # Each part paid one refusal per parameter: the lesson is not carried over, and costs one
    # request to learn again.
    assert chat_server.counts["refused temperature"] == 2
    assert chat_server.counts["refused max_tokens"] == 2
    assert {(lesson["param"], lesson["refused"]) for lesson in done["judge"]["learned"]} == {
        ("temperature", 2),
        ("max_tokens", 2),
    }


def test_in_batch_mode_refused_lines_teach_the_lesson_and_go_in_the_next_batch(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.reasoning_model = True
    dataset = write_dataset(tmp_path / "docs.jsonl", 4)

    done = run_app(
        tmp_path / "run",
        *reasoning_run(chat_server, dataset, "runner.mode=batch", "runner.batch_poll_s=0.02"),
        env=ENV,
    )

    assert done.returncode == 0, done.stderr
    assert (table(tmp_path / "run", "items")["status"] == "scored").all()
    batches = list(chat_server.batches)
    lines = {b: [r.body for r in chat_server.requests if r.batch == b] for b in batches}
    # The first batch's lines are refused for temperature, the next one's for max_tokens, all
    # of them learned from; no later line carries either.
    first, second, *later = batches
    assert all(body["temperature"] == 0 for body in lines[first])
    assert all("temperature" not in body and "max_tokens" in body for body in lines[second])
    assert later
    for batch in later:
        for body in lines[batch]:
            assert "temperature" not in body
            assert "max_tokens" not in body
            assert body["max_completion_tokens"] == 900
    refused = chat_server.counts["refused temperature"] + chat_server.counts["refused max_tokens"]
    assert chat_server.counts["refused temperature"] == len(lines[first])
    run = manifest(tmp_path / "run")
    assert sum(lesson["refused"] for lesson in run["judge"]["learned"]) == refused
    assert {lesson["param"] for lesson in run["judge"]["learned"]} == {"temperature", "max_tokens"}


def test_the_price_table_is_read_from_the_installed_package_with_no_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from summeval_runner._judges import _prices

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the price lookup tried to connect")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    _prices._looked_up.cache_clear()

    known = price_of("o3", provider="openai", base_url="https://api.openai.com/v1", given=None)

    assert known is not None
    assert known.source == f"genai-prices {table_version()}"  # the package's own table
    assert (known.provider, known.model) == ("openai", "o3")
    # A provider the base_url names that does not sell the model: unknown, not OpenAI's price.
    groq = "https://api.groq.com/openai/v1"
    assert price_of("o3", provider="openai", base_url=groq, given=None) is None


def test_the_llm_summarizer_on_a_reasoning_model_learns_its_refusals_too(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.reasoning_model = True
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)

    done = run_app(
        tmp_path / "run",
        *reasoning_run(chat_server, dataset, "runner.max_items_in_flight=1"),
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        "target.name=gpt-5-mini",
        env=ENV,
    )

    assert done.returncode == 0, done.stderr
    assert (table(tmp_path / "run", "items")["status"] == "scored").all()
    calls = [r.body for r in chat_server.requests if r.step == "summarize"]
    # Its first call refused twice (temperature, then max_tokens); the others sent as it takes.
    assert [("temperature" in b, "max_tokens" in b) for b in calls[:3]] == [
        (True, True), (False, True), (False, False),
    ]  # fmt: skip
    assert all(b["max_completion_tokens"] == 300 for b in calls[2:])
    assert len(calls) == 3 + 2
