"""The Anthropic provider, driven by the official ``anthropic`` SDK against the loopback server
that speaks the Messages API (tests/anthropic_server.py): its wire format (the system prompt
top-level, ``max_tokens`` always sent, the step's schema as a forced tool's input schema), its
errors in this package's tree (429 with ``retry-after``, 529, 5xx, 401, a reply cut at
``max_tokens``), its prices, and the extra that installs it."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from summeval_runner import (
    AnthropicJudge,
    AnthropicJudgeConfig,
    ConfigError,
    create_summarization_scorer,
)
from summeval_runner._errors import JudgeAPIError, JudgeConnectionError, JudgeInputTooLargeError
from summeval_runner._judges._prices import price_of
from summeval_runner._runner._retry import RetryPolicy
from tests.anthropic_server import (
    CACHE_READ_TOKENS,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    AnthropicServer,
    CutOff,
    Fault,
    ProxyPage,
)
from tests.app import ENV, FAST_RETRIES, SECRET, openai_run, run_app, table
from tests.chat_server import SUMMARY_REPLY, ChatServer
from tests.documents import write_dataset
from tests.test_model_families import a_request
from tests.test_secrets import assert_nowhere

SOURCE = "The Halvorsen bridge opened on Monday after six years of work. It cost 40 million."
SUMMARY = "A bridge opened on Monday."
ANTHROPIC_KEY = "sk-ant-test-SECRET-7d41c09a2b"


@pytest.fixture
def anthropic_env(no_openai_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Anthropic setting from the machine the tests run on; the test key in its variable."""
    for name in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    started = AnthropicServer(keys=(ANTHROPIC_KEY,)).start()
    yield started
    started.stop()


def anthropic_run(base_url: str, dataset: Path, *overrides: str) -> tuple[str, ...]:
    """The overrides of a quiet run of ``dataset`` judged by Claude at ``base_url``."""
    return (
        "model=anthropic",
        f"model.base_url={base_url}",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        *FAST_RETRIES,
        *overrides,
    )


def judge(server: AnthropicServer, **settings: object) -> AnthropicJudge:
    return AnthropicJudge(
        AnthropicJudgeConfig.model_validate(
            {"name": "claude-haiku-4-5", "base_url": server.base_url, "max_retries": 0} | settings
        )
    )


@pytest.mark.usefixtures("anthropic_env")
def test_a_twenty_item_run_is_scored_through_the_messages_api_and_no_file_holds_the_key(
    tmp_path: Path, server: AnthropicServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 20)

    done = run_app(
        tmp_path / "run",
        *anthropic_run(server.base_url, dataset),
        env={"ANTHROPIC_API_KEY": ANTHROPIC_KEY},
    )

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    assert len(items) == 20
    assert (items["status"] == "scored").all()
    assert set(items["judge"]) == {"anthropic/claude-haiku-4-5"}
    # Every request answered at its first send (a source's shared questions make fewer than
    # three a item).
    assert server.counts == {"ok": len(server.requests)}
    assert {r.tool for r in server.requests} >= {
        "summarization_preprocess",
        "summarization_analyze",
        "summarization_reason",
    }
    for request in server.requests:
        assert request.path == "/v1/messages"
        assert request.headers["authorization"] == f"Bearer {ANTHROPIC_KEY}"
        body = request.body
        # The system prompt top-level, max_tokens always, the step's schema as a forced tool's.
        assert "summar" in body["system"].lower()
        assert [m["role"] for m in body["messages"]] == ["user"]
        assert body["max_tokens"] == 4096
        assert body["tool_choice"] == {"type": "tool", "name": body["tools"][0]["name"]}
        assert body["tools"][0]["input_schema"]["type"] == "object"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["judge"]["name"] == "anthropic/claude-haiku-4-5"
    # Priced from the genai-prices table (claude-haiku-4-5: $1 in, $5 out a million tokens),
    # the cache reads at a tenth of the input price.
    per_call = (INPUT_TOKENS * 1.0 + CACHE_READ_TOKENS * 0.1 + OUTPUT_TOKENS * 5.0) / 1e6
    assert manifest["cost"]["judge"] == pytest.approx(len(server.requests) * per_call)
    assert_nowhere([ANTHROPIC_KEY], tmp_path / "run", done.stdout, done.stderr)


@pytest.mark.usefixtures("anthropic_env")
def test_429_529_500_and_a_proxy_page_are_retried_by_the_run_and_cost_no_item(
    tmp_path: Path, server: AnthropicServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 4)
    server.script(
        Fault(429, "rate_limit_error", "Number of request tokens has exceeded your rate limit",
              headers={"retry-after": "0"}),
        Fault(529, "overloaded_error", "Overloaded"),
        Fault(500, "api_error", "Internal server error"),
        # An HTTP 200 that is a proxy's page: sent again, not re-asked as a malformed verdict.
        ProxyPage(),
    )  # fmt: skip

    done = run_app(
        tmp_path / "run",
        *anthropic_run(server.base_url, dataset, "runner.max_judge_requests_in_flight=1"),
        env={"ANTHROPIC_API_KEY": ANTHROPIC_KEY},
    )

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    assert (items["status"] == "scored").all()
    assert server.counts["429"] == server.counts["529"] == server.counts["500"] == 1
    assert server.counts["page"] == 1
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["judge"]["retries"] == 4
    assert items["judge_retries"].sum() == 4
    # Each retried request was sent again as it was: no re-ask among them.
    assert all(len(r.body["messages"]) == 1 for r in server.requests)


@pytest.mark.usefixtures("anthropic_env")
def test_the_sdks_errors_are_this_packages_with_status_retry_after_and_words(
    server: AnthropicServer,
) -> None:
    asyncio.run(_errors_of(server))


async def _errors_of(server: AnthropicServer) -> None:
    async with judge(server) as claude:
        request = a_request()
        server.script(Fault(429, "rate_limit_error", "slow down", headers={"retry-after": "7"}))
        with pytest.raises(JudgeAPIError) as limited:
            await claude.complete(request)
        server.script(Fault(529, "overloaded_error", "Overloaded"))
        with pytest.raises(JudgeAPIError) as overloaded:
            await claude.complete(request)
        server.script(Fault(400, "invalid_request_error", "messages: roles must alternate"))
        with pytest.raises(JudgeAPIError) as invalid:
            await claude.complete(request)
        server.script(Fault(400, "invalid_request_error", "prompt is too long: 250000 tokens"))
        with pytest.raises(JudgeInputTooLargeError):
            await claude.complete(request)

    assert limited.value.status_code == 429
    assert limited.value.retry_after_s == 7.0
    assert "slow down" in str(limited.value)
    assert overloaded.value.status_code == 529
    assert RetryPolicy().is_retryable(overloaded.value)
    assert invalid.value.status_code == 400
    assert "roles must alternate" in str(invalid.value)
    assert not RetryPolicy().is_retryable(invalid.value)  # the request is at fault: not resent


@pytest.mark.usefixtures("anthropic_env")
def test_a_refused_key_stops_the_run_at_once(tmp_path: Path, server: AnthropicServer) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 20)

    done = run_app(
        tmp_path / "run",
        *anthropic_run(server.base_url, dataset, "runner.max_judge_requests_in_flight=1"),
        env={"ANTHROPIC_API_KEY": "sk-ant-a-revoked-key"},
    )

    assert done.returncode != 0
    assert "refused the credentials (HTTP 401)" in done.stderr
    assert server.counts["401"] == len(server.requests)
    # Not one refusal per item: the first stops the run, and no item is counted as judged.
    assert len(server.requests) <= 5
    assert "20 unfinished" in done.stdout
    assert_nowhere(["sk-ant-a-revoked-key"], tmp_path / "run", done.stdout, done.stderr)


@pytest.mark.usefixtures("anthropic_env")
def test_a_reply_cut_at_max_tokens_is_never_read_as_a_verdict(server: AnthropicServer) -> None:
    # Cut once: re-asked, and the verdict is the full reply's (two claims, not the cut one's).
    server.script(CutOff())
    scorer = create_summarization_scorer(judge(server, max_output_tokens=64))

    recovered = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert recovered.status == "scored"
    assert recovered.preprocess_step_result is not None
    assert len(recovered.preprocess_step_result.alignment) == 2
    assert recovered.usage.preprocess.calls == 2
    assert recovered.usage.preprocess.input_tokens == 2 * (INPUT_TOKENS + CACHE_READ_TOKENS)

    # Cut at every ask: an item error that names the bound, after the re-asks.
    server.script(CutOff(), CutOff(), CutOff())
    failed = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert failed.status == "error"
    assert failed.error is not None
    assert failed.error.type == "JudgeOutputError"
    assert failed.error.raw_reply is not None
    assert "cut off at 64 tokens" in failed.error.raw_reply
    assert "max_output_tokens" in failed.error.raw_reply
    assert [r.body["max_tokens"] for r in server.requests] == [64] * len(server.requests)


@pytest.mark.usefixtures("anthropic_env")
def test_the_model_string_reads_the_sdks_base_url_variable_and_the_price_table(
    server: AnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    scorer = create_summarization_scorer("anthropic/claude-haiku-4-5")

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    assert server.requests[0].body["model"] == "claude-haiku-4-5"
    known = price_of("claude-haiku-4-5", provider="anthropic", base_url=server.base_url,
                     given=None)  # fmt: skip
    assert known is not None
    assert known.price.input > 0
    assert result.usage.cost is not None
    assert result.usage.cost > 0


def test_a_missing_sdk_is_exit_2_naming_the_extra_that_installs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anthropic_env: None
) -> None:
    # As on a machine without the extra: importing the SDK fails.
    monkeypatch.setitem(sys.modules, "anthropic", None)
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    done = run_app(tmp_path / "run", *anthropic_run("http://127.0.0.1:9", dataset))

    assert done.returncode == 2
    assert "pip install 'summeval_runner[anthropic]'" in done.stderr
    with pytest.raises(ConfigError, match=r"summeval_runner\[anthropic\]"):
        create_summarization_scorer("anthropic/claude-haiku-4-5")


BATCH = ("runner.mode=batch", "runner.batch_poll_s=0.02")


@pytest.mark.usefixtures("anthropic_env")
def test_batch_mode_sends_each_round_as_one_message_batch_at_half_the_price(
    tmp_path: Path, server: AnthropicServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)
    overrides = (*anthropic_run(server.base_url, dataset), "runner.cache=off")

    interactive = run_app(tmp_path / "interactive", *overrides)
    direct = len(server.requests)
    # A request of the first batch fails (HTTP 500 in its result): sent again in a later one.
    server.script(Fault(500, "api_error", "Internal server error"))
    batched = run_app(tmp_path / "batched", *overrides, *BATCH)

    assert interactive.returncode == 0, interactive.stderr
    assert batched.returncode == 0, batched.stderr
    sent = server.requests[direct:]
    # Nothing went to /v1/messages directly: every request was a batch's.
    assert all(request.batch is not None for request in sent)
    rounds = [{r.tool for r in sent if r.batch == b} for b in server.batches]
    assert rounds[0] == {"summarization_preprocess"}  # the first round: one step's requests
    assert set().union(*rounds) == {
        "summarization_preprocess", "summarization_analyze", "summarization_reason"
    }  # fmt: skip
    # Each request answered once (none paid twice); the failed one sent again, and answered.
    answered_ids = [i for b in server.batches.values() for i, status, _ in b if status == 200]
    assert len(answered_ids) == len(set(answered_ids))
    assert server.counts["500"] == 1
    items = table(tmp_path / "batched", "items")
    assert (items["status"] == "scored").all()
    assert items["score"].tolist() == table(tmp_path / "interactive", "items")["score"].tolist()
    answered = len(answered_ids)
    per_call = (INPUT_TOKENS * 1.0 + CACHE_READ_TOKENS * 0.1 + OUTPUT_TOKENS * 5.0) / 1e6
    manifest = json.loads((tmp_path / "batched" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["cost"]["judge"] == pytest.approx(answered * per_call / 2)
    assert_nowhere([ANTHROPIC_KEY], tmp_path / "batched", batched.stdout, batched.stderr)


def test_an_agent_on_anthropic_is_judged_by_an_openai_judge(
    tmp_path: Path, server: AnthropicServer, chat_server: ChatServer, anthropic_env: None
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 5)

    done = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        "target=llm_summarizer",
        "target.provider=anthropic",
        "target.name=claude-haiku-4-5",
        f"target.base_url={server.base_url}",
        env={**ENV, "ANTHROPIC_API_KEY": ANTHROPIC_KEY},
    )

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    assert (items["status"] == "scored").all()
    # Each summary is Claude's, written from the source; the judge saw it.
    assert items["summary"].tolist() == [SUMMARY_REPLY] * 5
    assert len(server.requests) == 5
    for request in server.requests:
        assert request.tool is None
        assert request.body["system"].startswith("Summarize the user's text")
        assert request.body["max_tokens"] == 300
        assert [m["role"] for m in request.body["messages"]] == ["user"]
        assert request.headers["authorization"] == f"Bearer {ANTHROPIC_KEY}"
    judged = [r for r in chat_server.requests if r.step == "preprocess"]
    assert judged
    assert all(SUMMARY_REPLY in r.text for r in judged)
    # The agent's tokens and cost counted apart from the judge's, at the price table's price.
    assert (items["target_input_tokens"] == INPUT_TOKENS + CACHE_READ_TOKENS).all()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    per_call = (INPUT_TOKENS * 1.0 + CACHE_READ_TOKENS * 0.1 + OUTPUT_TOKENS * 5.0) / 1e6
    assert manifest["cost"]["target"] == pytest.approx(5 * per_call)
    assert_nowhere([ANTHROPIC_KEY, SECRET], tmp_path / "run", done.stdout, done.stderr)


def test_an_agent_on_anthropic_refused_its_key_stops_the_run_as_the_agents_error(
    tmp_path: Path, server: AnthropicServer, chat_server: ChatServer, anthropic_env: None
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 5)

    done = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        "target=llm_summarizer",
        "target.provider=anthropic",
        "target.name=claude-haiku-4-5",
        f"target.base_url={server.base_url}",
        env={**ENV, "ANTHROPIC_API_KEY": "sk-ant-revoked"},
    )

    assert done.returncode != 0
    assert "the agent's model at" in done.stderr
    assert "refused the credentials (HTTP 401)" in done.stderr
    assert chat_server.requests == []  # the judge was never asked


def test_an_agent_on_anthropic_without_the_sdk_is_exit_2_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anthropic_env: None
) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    done = run_app(
        tmp_path / "run",
        f"dataset.path={dataset}",
        "target=llm_summarizer",
        "target.provider=anthropic",
        "target.name=claude-haiku-4-5",
    )

    assert done.returncode == 2
    assert "the agent's model on Anthropic needs the anthropic SDK" in done.stderr
    assert "pip install 'summeval_runner[anthropic]'" in done.stderr


@pytest.mark.usefixtures("anthropic_env")
def test_a_refused_connection_is_the_outage_watchs_connection_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
        base_url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        claude = AnthropicJudge(
            AnthropicJudgeConfig(name="claude-haiku-4-5", base_url=base_url, max_retries=0)
        )
        with pytest.raises(JudgeConnectionError, match="connection refused"):
            asyncio.run(claude.complete(a_request()))


def test_the_sdk_is_imported_only_when_an_anthropic_judge_is_built() -> None:
    script = (
        "import sys, summeval_runner\n"
        "from summeval_runner import create_summarization_scorer\n"
        "create_summarization_scorer('offline')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'anthropic'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.usefixtures("anthropic_env")
def test_a_rerun_is_answered_by_the_cache_and_another_bound_is_not(
    tmp_path: Path, server: AnthropicServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    # One item at a time: the server answers every item alike, so items' reason requests are
    # alike, and how many of them the run's own cache answers would depend on how the items
    # overlap in time.
    serial = "runner.max_items_in_flight=1"
    first = run_app(tmp_path / "first", *anthropic_run(server.base_url, dataset, serial))
    sent = len(server.requests)

    again = run_app(tmp_path / "again", *anthropic_run(server.base_url, dataset, serial))
    bounded = run_app(
        tmp_path / "bounded",
        *anthropic_run(server.base_url, dataset, serial, "model.max_output_tokens=2000"),
    )

    assert first.returncode == again.returncode == bounded.returncode == 0, bounded.stderr
    assert table(tmp_path / "again", "items")["score"].tolist() == (
        table(tmp_path / "first", "items")["score"].tolist()
    )
    # The rerun sent nothing; a judge with another max_output_tokens is another judge.
    assert len(server.requests) == 2 * sent
    assert {r.body["max_tokens"] for r in server.requests[sent:]} == {2000}
