"""Issue 28's tests that cross providers: a panel of an OpenAI and an Anthropic judge, an agent on
one vendor under a judge of another (and a sweep over the agent's vendor), every provider's
errors behaving alike through the run, and a missing extra.

Each provider's loopback server speaks its wire format (tests/chat_server.py for OpenAI and
Azure, tests/anthropic_server.py for Anthropic, tests/gemini_server.py for Gemini) and is driven
by the provider's official SDK;
Hydra runs as a user runs it (tests/app.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from summeval_runner._judges._prices import price_of
from tests.anthropic_server import AnthropicServer, CutOff, Fault
from tests.app import FAST_RETRIES, SECRET, openai_run, run_app, run_sweep, table
from tests.chat_server import SUMMARY_REPLY, ChatServer, Reply, unfenced, valid_content
from tests.chat_server import Fault as ChatFault
from tests.documents import write_dataset
from tests.gemini_server import Fault as GeminiFault
from tests.gemini_server import Finish, GeminiServer
from tests.test_panel import judges_figures, manifest_of
from tests.test_secrets import assert_nowhere

ITEMS = 20
ANTHROPIC_KEY = "sk-ant-test-SECRET-5e8a1f03cd"
GEMINI_KEY = "AIza-test-SECRET-77c1e04b2a"
CLAUDE = "anthropic/claude-haiku-4-5"
GPT = "openai/gpt-4.1-mini"
KEYS = {"OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}


@pytest.fixture
def provider_env(no_openai_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider setting from the machine the tests run on (run_app clears OPENAI_* only)."""
    for name in (
        "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE",
        "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "OPENAI_API_VERSION",
        "GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GENAI_API_VERSION",
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def anthropic_server() -> Iterator[AnthropicServer]:
    started = AnthropicServer(keys=(ANTHROPIC_KEY,)).start()
    yield started
    started.stop()


@pytest.fixture
def gemini_server() -> Iterator[GeminiServer]:
    started = GeminiServer(key=GEMINI_KEY).start()
    yield started
    started.stop()


def seen(body: dict[str, Any]) -> int:
    """A number that follows what a request shows (its messages, fence markers aside)."""
    shown = unfenced(json.dumps(body["messages"], sort_keys=True)).encode()
    return int(hashlib.sha256(shown).hexdigest(), 16)


def claude_sees_otherwise(
    tool: str, body: dict[str, Any], answer: dict[str, Any]
) -> dict[str, Any]:
    """Claude's verdicts differ from the OpenAI server's on some items, as what it is shown
    decides: every claim supported on about a third, every question answered on about half."""
    if "alignment" in answer and seen(body) % 3 == 0:
        answer["alignment"] = [claim | {"supported": True} for claim in answer["alignment"]]
    if "coverage" in answer and seen(body) % 2 == 0:
        answer["coverage"] = [answer_ | {"answered": True} for answer_ in answer["coverage"]]
    return answer


def two_vendor_panel(
    chat_server: ChatServer, anthropic_server: AnthropicServer, dataset: Path, *overrides: str
) -> tuple[str, ...]:
    judges = (
        f"{{name: {GPT}, base_url: '{chat_server.base_url}'}}",
        f"{{name: {CLAUDE}, base_url: '{anthropic_server.base_url}'}}",
    )
    return (
        "model=panel",
        f"model.judges=[{','.join(judges)}]",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        *FAST_RETRIES,
        *overrides,
    )


@pytest.mark.usefixtures("provider_env")
def test_a_panel_of_an_openai_and_an_anthropic_judge_through_hydra(
    tmp_path: Path, chat_server: ChatServer, anthropic_server: AnthropicServer
) -> None:
    anthropic_server.edit_answer = claude_sees_otherwise
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)
    overrides = two_vendor_panel(
        chat_server, anthropic_server, dataset, f"runner.cache_path={tmp_path / 'cache'}"
    )
    run_dir = tmp_path / "run"

    done = run_app(run_dir, *overrides, env=KEYS)

    assert done.returncode == 0, done.stderr
    items = table(run_dir, "items")
    assert len(items) == ITEMS
    assert (items["status"] == "scored").all()
    assert set(items["judge"]) == {f"panel(mean): {GPT}, {CLAUDE}"}
    assert (items["judge_calls"] == 6).all()
    for name in ("alignment", "coverage"):
        rows = table(run_dir, name)
        assert set(rows["judge"]) == {GPT, CLAUDE}
        assert (rows.groupby("item_id")["judge"].nunique() == 2).all()
    # Each server got its judge's steps of every item: OpenAI drew the questions (a full
    # preprocess), Claude was asked for the claims only; both answered the same questions. (A
    # reason request identical to an earlier item's is the cache's.)
    steps = Counter(r.step for r in chat_server.requests)
    tools = Counter(str(r.tool).removeprefix("summarization_") for r in anthropic_server.requests)
    drawn = (steps["preprocess"], steps["analyze"], tools["claims"], tools["analyze"])
    assert drawn == (ITEMS,) * 4
    assert set(steps) == {"preprocess", "analyze", "reason"}
    assert set(tools) == {"claims", "analyze", "reason"}
    hits = manifest_of(run_dir)["judge"]["cache"]["hits"]
    assert len(chat_server.requests) + len(anthropic_server.requests) + hits == 6 * ITEMS
    answers = table(run_dir, "coverage")
    for item_id, rows in answers.groupby("item_id"):
        asked = {
            judge: list(zip(part["position"], part["question"], strict=True))
            for judge, part in rows.sort_values("position").groupby("judge")
        }
        assert asked[GPT] == asked[CLAUDE], item_id
        assert asked[GPT]
    assert set(table(run_dir, "questions")["judge"]) == {GPT}

    # The item's figures are the mean of each judge's own, as the verdict tables give them.
    figures = judges_figures(run_dir)
    mean = figures.groupby("item_id")[["alignment", "coverage", "score"]].mean()
    by_item = items.set_index("item_id")
    for column, figure in (
        ("alignment_score", "alignment"),
        ("coverage_score", "coverage"),
        ("score", "score"),
    ):
        assert by_item[column].to_numpy() == pytest.approx(mean.loc[by_item.index, figure])

    # The disagreement, computed here from the tables, as the manifest and the summary say it.
    spreads = figures.groupby("item_id")["score"].agg(lambda s: s.max() - s.min())
    assert 0 < spreads.mean() < spreads.max()  # the judges differ, and not on every item alike
    split = answers.groupby(["item_id", "position"])["answered"].nunique()
    panel = manifest_of(run_dir)["judge_panel"]
    assert panel["judges"] == [GPT, CLAUDE]
    assert panel["items"] == ITEMS
    assert panel["score_spread_mean"] == pytest.approx(spreads.mean())
    assert panel["score_spread_max"] == pytest.approx(spreads.max())
    assert panel["questions_compared"] == len(split)
    assert panel["questions_split"] == int((split > 1).sum()) > 0
    assert panel["judge_means"] == pytest.approx(figures.groupby("judge")["score"].mean().to_dict())
    assert (
        f"panel of 2 judges (mean): score spread {spreads.mean():.3f} per item "
        f"(at most {spreads.max():.3f}) over {ITEMS} items; questions answered differently "
        f"{int((split > 1).sum())} of {len(split)}"
    ) in done.stdout

    # A rerun is the cache's: no request to either server, the same scores.
    sent = (len(chat_server.requests), len(anthropic_server.requests))
    again = run_app(tmp_path / "again", *overrides, env=KEYS)

    assert again.returncode == 0, again.stderr
    assert (len(chat_server.requests), len(anthropic_server.requests)) == sent
    assert manifest_of(tmp_path / "again")["judge"]["cache"]["hits"] == 6 * ITEMS
    pd.testing.assert_series_equal(table(tmp_path / "again", "items")["score"], items["score"])

    # Neither key anywhere in either run's directory, nor on screen.
    for folder, run in ((run_dir, done), (tmp_path / "again", again)):
        assert_nowhere([SECRET, ANTHROPIC_KEY], folder, run.stdout, run.stderr)


@pytest.mark.usefixtures("provider_env")
def test_a_two_vendor_panels_estimate_counts_each_judge_at_its_own_price(
    tmp_path: Path, chat_server: ChatServer, anthropic_server: AnthropicServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)

    shown = run_app(
        tmp_path / "estimate",
        *two_vendor_panel(chat_server, anthropic_server, dataset, "runner.estimate=true"),
        env=KEYS,
    )

    assert shown.returncode == 0, shown.stderr
    assert chat_server.requests == []
    assert anthropic_server.requests == []
    costs = {}
    for judge, provider, base_url in (
        (GPT, "openai", chat_server.base_url),
        (CLAUDE, "anthropic", anthropic_server.base_url),
    ):
        line = re.search(
            rf"^    {re.escape(judge)}: (\d+) to send \(([\d,]+) tokens in, ([\d,]+) out\), "
            r"0 cached, \$([\d.]+)$",
            shown.stdout,
            re.MULTILINE,
        )
        assert line is not None, shown.stdout
        requests, tokens_in, tokens_out = (int(g.replace(",", "")) for g in line.groups()[:3])
        assert requests == 3 * ITEMS
        known = price_of(judge.split("/")[1], provider=provider, base_url=base_url, given=None)
        assert known is not None, judge
        expected = (tokens_in * known.price.input + tokens_out * known.price.output) / 1e6
        assert float(line.group(4)) == pytest.approx(expected, abs=1e-4)
        costs[judge] = expected
    # Claude's price is not GPT's: each judge counted at its own.
    assert costs[CLAUDE] != pytest.approx(costs[GPT])
    total = re.search(r"judge cost      \$([\d.]+) \(each judge at its own price\)", shown.stdout)
    assert total is not None, shown.stdout
    assert float(total.group(1)) == pytest.approx(sum(costs.values()), abs=1e-4)


def base_urls(chat_server: ChatServer, anthropic_server: AnthropicServer) -> dict[str, str]:
    """The variables each provider's SDK reads its base URL from, at the loopback servers."""
    return {
        "OPENAI_BASE_URL": chat_server.base_url,
        "ANTHROPIC_BASE_URL": anthropic_server.base_url,
    }


CLAUDES_SUMMARY = "Claude's summary of the text."


@pytest.mark.usefixtures("provider_env")
def test_a_sweep_compares_two_vendors_summarizers_under_one_openai_judge(
    tmp_path: Path, chat_server: ChatServer, anthropic_server: AnthropicServer
) -> None:
    anthropic_server.summary_reply = CLAUDES_SUMMARY
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)
    sweep = tmp_path / "sweep"

    done = run_sweep(
        sweep,
        *openai_run(chat_server.base_url, dataset),
        "target=llm_summarizer",
        "target.provider=openai,anthropic",
        # Each provider's SDK reads its own base URL variable: one sweep reaches both servers
        # (the judge's model.base_url is its own).
        env=KEYS | base_urls(chat_server, anthropic_server),
    )

    assert done.returncode == 0, done.stderr
    # Each vendor was sent its own model (target.name left null: the provider's default).
    summarized = [r for r in chat_server.requests if r.step == "summarize"]
    assert [r.body["model"] for r in summarized] == ["gpt-4o-mini"] * ITEMS
    assert [r.body["model"] for r in anthropic_server.requests] == ["claude-haiku-4-5"] * ITEMS
    assert all(r.tool is None for r in anthropic_server.requests)
    # The one judge judged both vendors' summaries, every item of each (the second job's
    # questions were the first's, drawn per source: its first call asks for the claims only).
    drawn = [r for r in chat_server.requests if r.step in ("preprocess", "claims")]
    assert sum(SUMMARY_REPLY in r.text for r in drawn) == ITEMS
    assert sum(CLAUDES_SUMMARY in r.text for r in drawn) == ITEMS
    mapped = json.loads((sweep / "variants.json").read_text(encoding="utf-8"))
    labels = {entry["label"]: name for name, entry in mapped.items()}
    assert set(labels) == {"target.provider=openai", "target.provider=anthropic"}
    for label, summary in (
        ("target.provider=openai", SUMMARY_REPLY),
        ("target.provider=anthropic", CLAUDES_SUMMARY),
    ):
        run = sweep / labels[label]
        items = table(run, "items")
        assert len(items) == ITEMS
        assert (items["status"] == "scored").all()
        assert set(items["summary"]) == {summary}
        assert set(items["judge"]) == {"openai/gpt-4o-mini"}
        # Both summarizers priced by the price table: the agent's cost is known for each.
        assert manifest_of(run)["cost"]["target"] > 0
    comparison = pd.read_parquet(sweep / "comparison.parquet")
    assert set(comparison["variant"]) == set(labels)
    scores = comparison[comparison["dimension"] == "score"].set_index("variant")
    assert scores["scored"].to_dict() == scores["n"].to_dict() == dict.fromkeys(labels, ITEMS)
    assert scores.loc["target.provider=anthropic", "n_paired"] == ITEMS  # paired item by item
    assert set(comparison["baseline"].dropna()) == {"target.provider=openai"}
    assert_nowhere([SECRET, ANTHROPIC_KEY], sweep, done.stdout, done.stderr)


AZURE_KEY = "azure-test-SECRET-0b7d52e1a9"


@dataclass(frozen=True)
class Servers:
    """The loopback servers of every provider, one of which a test drives."""

    chat: ChatServer
    claude: AnthropicServer
    gemini: GeminiServer

    def sent(self) -> int:
        return len(self.chat.requests) + len(self.claude.requests) + len(self.gemini.requests)


@dataclass(frozen=True)
class Provider:
    """One provider's judge, as the error test drives it: its overrides, its key, how its
    server is made to answer a 429 with a wait, a 5xx, a refused key and a reply cut at the
    bound, and the words a refused key is reported in. Adding a provider is one entry of
    PROVIDERS."""

    name: str
    overrides: Callable[[Servers], tuple[str, ...]]
    key: tuple[str, str]
    fault: Callable[[Servers, str], None]
    refused: str = "refused the credentials (HTTP 401)"


def _chat_fault(servers: Servers, kind: str) -> None:
    chat = servers.chat
    claims = valid_content({"response_format": {"json_schema": {"name": "preprocess"}}})
    claims["alignment"] = claims["alignment"][:1]  # parses, as a list closed early would
    faults = {
        "429": [ChatFault(429, "Rate limit reached", headers={"retry-after": "0"})],
        "5xx": [ChatFault(500), ChatFault(503), ChatFault(502)],
        "cut": [Reply(json.dumps(claims), finish_reason="length")] * 3,
    }
    if kind == "401":
        chat.fail_every_request(
            ChatFault(401, "Incorrect API key provided", code="invalid_api_key")
        )
    else:
        chat.script(*faults[kind])


def _anthropic_fault(servers: Servers, kind: str) -> None:
    claude = servers.claude
    faults = {
        "429": [Fault(429, "rate_limit_error", "slow down", headers={"retry-after": "0"})],
        "5xx": [Fault(500, "api_error"), Fault(529, "overloaded_error"), Fault(502)],
        "cut": [CutOff()] * 3,
        "401": [],
    }
    if kind == "401":
        claude.fail_every_request(Fault(401, "authentication_error", "invalid x-api-key"))
    claude.script(*faults[kind])


def _gemini_fault(servers: Servers, kind: str) -> None:
    gemini = servers.gemini
    faults = {
        # Gemini says how long to wait in the error's RetryInfo, not in a header.
        "429": [GeminiFault(429, "Resource has been exhausted", retry_delay="0s")],
        "5xx": [GeminiFault(500), GeminiFault(503), GeminiFault(502)],
        # Cut where the text still parses (kept whole), as a list closed early would.
        "cut": [Finish("MAX_TOKENS", kept=1.0)] * 3,
    }
    if kind == "401":
        # A key Google does not know: HTTP 400 with the reason API_KEY_INVALID, not a 401.
        gemini.fail_every_request(
            GeminiFault(400, "API key not valid. Please pass a valid API key.",
                        reason="API_KEY_INVALID")
        )  # fmt: skip
    else:
        gemini.script(*faults[kind])


PROVIDERS = [
    Provider(
        "openai",
        lambda servers: ("model=openai", f"model.base_url={servers.chat.base_url}"),
        ("OPENAI_API_KEY", SECRET),
        _chat_fault,
    ),
    Provider(
        "azure",
        lambda servers: (
            "model=azure",
            "model.name=judge-deployment",
            f"model.base_url={servers.chat.azure_endpoint}",
            "model.api_version=2024-10-21",
        ),
        ("AZURE_OPENAI_API_KEY", AZURE_KEY),
        _chat_fault,
    ),
    Provider(
        "anthropic",
        lambda servers: ("model=anthropic", f"model.base_url={servers.claude.base_url}"),
        ("ANTHROPIC_API_KEY", ANTHROPIC_KEY),
        _anthropic_fault,
    ),
    Provider(
        "gemini",
        lambda servers: ("model=google", f"model.base_url={servers.gemini.base_url}"),
        ("GEMINI_API_KEY", GEMINI_KEY),
        _gemini_fault,
        refused="refused the credentials (HTTP 400 API_KEY_INVALID)",
    ),
]


@pytest.mark.usefixtures("provider_env")
@pytest.mark.parametrize("kind", ["429", "5xx", "401", "cut"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_every_providers_errors_behave_alike_through_the_run(
    tmp_path: Path,
    chat_server: ChatServer,
    anthropic_server: AnthropicServer,
    gemini_server: GeminiServer,
    provider: Provider,
    kind: str,
) -> None:
    servers = Servers(chat_server, anthropic_server, gemini_server)
    chat_server.azure_deployments = {"judge-deployment"}
    dataset = write_dataset(tmp_path / "docs.jsonl", 3 if kind != "401" else 10)
    provider.fault(servers, kind)
    run_dir = tmp_path / "run"

    done = run_app(
        run_dir,
        *provider.overrides(servers),
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        "runner.max_judge_requests_in_flight=1",
        "runner.max_items_in_flight=1",
        "runner.cache=off",
        # An item error (the cut reply's) is the outcome looked at, not a failed gate.
        "runner.max_error_rate=1",
        *FAST_RETRIES,
        env=dict([provider.key]),
    )

    sent = servers.sent()
    if kind == "401":
        # The first refusal stops the run: exit 1, no item judged, not one refusal per item.
        assert done.returncode == 1, done.stderr
        assert provider.refused in done.stderr
        assert sent <= 3
        assert "10 unfinished" in done.stdout
    else:
        assert done.returncode == 0, done.stderr
        items = table(run_dir, "items")
    if kind in ("429", "5xx"):
        # Retried by the run's policy: no item lost, each retry counted.
        assert (items["status"] == "scored").all()
        retries = {"429": 1, "5xx": 3}[kind]
        assert manifest_of(run_dir)["judge"]["retries"] == retries
        assert items["judge_retries"].sum() == retries
    if kind == "cut":
        # Cut at every ask: never read as a verdict, the first item's error names the bound.
        first = items.sort_values("item_id").iloc[0]
        assert first["status"] == "error"
        assert first["error_type"] == "JudgeOutputError"
        assert "max_output_tokens" in first["error_raw_reply"]
        assert (items["status"].iloc[1:] == "scored").all()
    assert_nowhere([provider.key[1]], run_dir, done.stdout, done.stderr)


@pytest.mark.usefixtures("provider_env")
@pytest.mark.parametrize(
    "where",
    [
        ("model=anthropic",),
        ("model=offline", "target=llm_summarizer", "target.provider=anthropic"),
        ("model=panel", f"model.judges=[offline,{CLAUDE}]"),
    ],
    ids=["judge", "agent", "panel member"],
)
def test_a_missing_anthropic_extra_is_exit_2_naming_its_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: tuple[str, ...]
) -> None:
    # As on a machine without the extra: importing the SDK fails.
    monkeypatch.setitem(sys.modules, "anthropic", None)
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    done = run_app(
        tmp_path / "run",
        *where,
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        env={"ANTHROPIC_API_KEY": ANTHROPIC_KEY},
    )

    assert done.returncode == 2, done.stderr
    assert "pip install 'summeval_runner[anthropic]'" in done.stderr
    assert not (tmp_path / "run" / "items.parquet").exists()
