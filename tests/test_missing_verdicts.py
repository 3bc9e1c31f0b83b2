"""A judge that leaves verdicts out is asked again, and never silently halves a score (issue 44,
point 2).

A judge that replied ``{"coverage": []}`` to ten questions had every item "scored" with
coverage 0, exit 0. Now an analyze reply with another number of verdicts than questions is asked
again, as a reply that does not fit the step's schema; one still short after the re-asks counts
its missing verdicts as unanswered (SPEC §1.3, ``verdict_missing``); one with no verdict at all
is the judge's error, never a 0. A preprocess reply with no claim for a summary that is not
blank is asked again too; one still without after the re-asks scores alignment 0, as SPEC §1.3
says of no claims, and is counted with the verdicts missing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from summeval_runner import create_summarization_scorer
from tests import chat_server as chat_server_module
from tests.app import ENV, openai_run, run_app, table
from tests.chat_server import ChatServer
from tests.documents import write_dataset

KEY = "sk-test-missing-verdicts-0123456789"
SOURCE = (
    "The city council approved a budget of 1,200 million euros on Tuesday. "
    "Mayor Anna Lindqvist said the money will fund three new schools. "
    "Public transport fares will not rise next year."
)
SUMMARY = "The council approved a budget of 1,200 million euros on Tuesday."


def _judge(server: ChatServer) -> dict[str, object]:
    return {"provider": "openai", "name": "judge-model", "base_url": server.base_url,
            "max_retries": 0}  # fmt: skip


def _analyze_replies(monkeypatch: pytest.MonkeyPatch, *verdict_counts: int) -> None:
    """The server's analyze replies hold these many verdicts, in turn (the last one repeats)."""
    answered = chat_server_module.valid_content
    counts = list(verdict_counts)

    def replying(body: dict[str, Any], follow: bool = False) -> dict[str, Any]:
        content = answered(body, follow)
        if "coverage" in content:
            count = counts.pop(0) if len(counts) > 1 else counts[0]
            content["coverage"] = content["coverage"][:count]
        return content

    monkeypatch.setattr(chat_server_module, "valid_content", replying)


@pytest.fixture
def key(no_openai_env: None, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return KEY


@pytest.mark.usefixtures("key")
def test_a_reply_with_no_verdict_is_the_judges_error_after_its_re_asks(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _analyze_replies(monkeypatch, 0)
    scorer = create_summarization_scorer(_judge(chat_server))

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "error"
    assert result.score is None
    assert result.error is not None
    assert (result.error.step, result.error.attempts) == ("analyze", 3)
    assert result.error.raw_reply == '{"coverage":[]}'
    analyze = [r for r in chat_server.requests if r.step == "analyze"]
    assert len(analyze) == 3
    # Each re-ask says what was wrong with the reply before.
    assert "coverage holds 0 verdicts for 3 questions" in analyze[1].text


@pytest.mark.usefixtures("key")
def test_a_short_reply_is_asked_again_and_a_whole_one_is_scored_whole(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _analyze_replies(monkeypatch, 1, 3)
    scorer = create_summarization_scorer(_judge(chat_server))

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    assert result.analyze_step_result is not None
    assert len(result.analyze_step_result.coverage) == 3
    assert result.usage.analyze.calls == 2


@pytest.mark.usefixtures("key")
def test_a_reply_still_short_after_its_re_asks_counts_the_missing_ones_unanswered(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _analyze_replies(monkeypatch, 2)
    scorer = create_summarization_scorer(_judge(chat_server))

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    assert result.usage.analyze.calls == 3
    # The server answers the first question only: 1 answered of 3, the third verdict missing.
    assert result.coverage_score == pytest.approx(1 / 3)


def test_a_run_whose_judge_writes_no_verdict_fails_instead_of_scoring_coverage_0(
    tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _analyze_replies(monkeypatch, 0)
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)

    done = run_app(tmp_path / "run", *openai_run(chat_server.base_url, dataset), env=ENV)

    assert done.returncode == 1, done.stderr
    items = table(tmp_path / "run", "items")
    assert items["status"].tolist() == ["error"] * 3
    assert items["score"].isna().all()
    assert set(items["error_step"]) == {"analyze"}
    assert "3 items: 0 scored" in done.stdout


def test_items_still_short_after_their_re_asks_are_counted_in_the_summary_and_manifest(
    tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _analyze_replies(monkeypatch, 2)
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)

    done = run_app(tmp_path / "run", *openai_run(chat_server.base_url, dataset), env=ENV)

    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert (
        "0 hook errors; 3 with verdicts missing after re-asks (counted unanswered; no claim: "
        "alignment 0)" in first
    )
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["verdicts_missing"] == 3
    coverage = table(tmp_path / "run", "coverage")
    assert coverage.groupby("item_id")["verdict_missing"].sum().tolist() == [1, 1, 1]


def _preprocess_without_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's preprocess replies list no claim at all, however often asked."""
    answered = chat_server_module.valid_content

    def replying(body: dict[str, Any], follow: bool = False) -> dict[str, Any]:
        content = answered(body, follow)
        if "alignment" in content:
            content["alignment"] = []
        return content

    monkeypatch.setattr(chat_server_module, "valid_content", replying)


@pytest.mark.usefixtures("key")
def test_a_reply_with_no_claim_is_asked_again_then_scored_by_the_specs_rule_and_counted(
    tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: one reply of {"alignment": []} scored the summary 0, asked once, counted nowhere.
    _preprocess_without_claims(monkeypatch)
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)

    done = run_app(tmp_path / "run", *openai_run(chat_server.base_url, dataset), env=ENV)

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    # SPEC §1.3: no claims, score 0; but only after the judge was asked again twice.
    assert items["score"].tolist() == [0.0] * 3
    assert (items["claims"] == 0).all()
    preprocess = [r for r in chat_server.requests if "Task 1, claims" in str(r.body["messages"])]
    assert len(preprocess) == 3 * 3
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["verdicts_missing"] == 3
    assert "3 with verdicts missing after re-asks" in done.stdout.splitlines()[0]
