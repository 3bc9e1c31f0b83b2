"""Trials (``runner.trials=K``): every item judged K times with distinct seeds, each trial
cached apart; tables hold every trial, figures use each item's mean over its trials, and the run
reports how much the judge disagreed with itself."""

from __future__ import annotations

import asyncio
import math
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from summeval_runner import (
    ConfigError,
    FakeJudge,
    JudgeRequest,
    compare_runs,
    create_summarization_scorer,
    report_target_usage,
    run_evals,
)
from tests.app import ENV, openai_run, run_app, table
from tests.chat_server import ChatServer
from tests.documents import write_dataset

SOURCES = (
    "The bridge opened on Monday. It cost 40 million dollars. Traffic fell by half.",
    "The river flooded the town. The mayor was there. A toll was charged on the road.",
)


def varying_judge() -> FakeJudge:
    """A judge whose verdicts move with the trial: claim B is unsupported in trial 1, question
    q1 answered only in trial 2. Scores per item: 0.5, 0.5, 1.0 (trials 0, 1, 2)."""

    def preprocess(request: JudgeRequest) -> dict[str, Any]:
        claims = [
            {"claim": "A", "supported": True, "reason": "r"},
            {"claim": "B", "supported": request.trial != 1, "reason": "r"},
        ]
        if request.schema_name == "summarization_claims":
            return {"alignment": claims}
        return {"alignment": claims, "questions": ["q0?", "q1?"]}

    def analyze(request: JudgeRequest) -> dict[str, Any]:
        return {
            "coverage": [
                {"answered": True, "reason": "r"},
                {"answered": request.trial == 2, "reason": "r"},
            ]
        }

    return FakeJudge(preprocess=preprocess, analyze=analyze)


def test_trials_are_tabled_averaged_per_item_and_their_disagreement_reported(
    tmp_path: Path,
) -> None:
    judge = varying_judge()
    data = [{"id": f"doc{i}", "input": s, "output": "A. B."} for i, s in enumerate(SOURCES)]

    result = asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer(judge)],
            data=data,
            output_dir=tmp_path / "run",
            trials=3,
        )
    )

    assert result.counts.scored == 2  # items, not trials
    assert sorted({request.trial for request in judge.requests}) == [0, 1, 2]
    assert len(judge.requests) == 2 * 3 * 3  # items x trials x calls
    # Each source's questions were drawn once, whatever the trial: the trials of an item are
    # asked the same questions, so a changed verdict is the judge's noise, not another question.
    schemas = [request.schema_name for request in judge.requests_for("preprocess")]
    assert schemas.count("summarization_preprocess") == 2
    items = table(tmp_path / "run", "items")
    assert sorted(items["trial"].tolist()) == [0, 0, 1, 1, 2, 2]
    assert items.groupby("trial")["score"].first().tolist() == [0.5, 0.5, 1.0]
    assert sorted(table(tmp_path / "run", "alignment")["trial"].unique().tolist()) == [0, 1, 2]
    aggregates = table(tmp_path / "run", "aggregates").set_index("metric")
    # The mean over items of each item's mean over its trials (2/3 for both items).
    assert aggregates.loc["score", "mean"] == pytest.approx(2 / 3)
    assert (aggregates.loc["score", "n"], aggregates.loc["score", "items"]) == (2, 2)
    assert result.means["summarization-scorer"] == pytest.approx(2 / 3)

    noise = result.judge_noise
    assert noise is not None
    assert (noise.trials, noise.items) == (3, 2)
    assert noise.score_std_mean == pytest.approx(statistics.stdev([0.5, 0.5, 1.0]))
    assert noise.score_std_mean == pytest.approx(math.sqrt(1 / 12))
    # Per item: claims A (steady) and B (changed); questions q0 (steady) and q1 (changed).
    assert (noise.claims_compared, noise.claims_changed) == (4, 2)
    assert (noise.questions_compared, noise.questions_changed) == (4, 2)
    assert noise.claims_changed_share == 0.5

    # Comparisons take each item's mean over its trials.
    comparison = compare_runs([tmp_path / "run"]).set_index("dimension")
    assert comparison.loc["score", "n"] == 2
    assert comparison.loc["score", "mean"] == pytest.approx(2 / 3)
    assert comparison.loc["coverage", "mean"] == pytest.approx(2 / 3)


def test_a_run_without_a_directory_reports_the_same_noise() -> None:
    data = [{"id": f"doc{i}", "input": s, "output": "A. B."} for i, s in enumerate(SOURCES)]

    result = asyncio.run(
        run_evals(scorers=[create_summarization_scorer(varying_judge())], data=data, trials=3)
    )

    assert result.judge_noise is not None
    assert result.judge_noise.score_std_mean == pytest.approx(math.sqrt(1 / 12))
    assert [len(item.trials) for item in result.items] == [3, 3]
    assert [item.score("summarization-scorer") for item in result.items] == pytest.approx(
        [2 / 3, 2 / 3]
    )


def test_each_trial_has_its_own_seed_and_cache_entry(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    overrides = openai_run(chat_server.base_url, dataset, "runner.trials=2")

    first = run_app(tmp_path / "first", *overrides, env=ENV)

    assert first.returncode == 0, first.stderr
    sent = len(chat_server.requests)
    # Each item's first call, in each trial, with that trial's seed (the reason calls of two
    # items can be alike, and one of them answered by the cache).
    firsts = [r.body["seed"] for r in chat_server.requests if r.step in ("preprocess", "claims")]
    assert sorted(firsts) == [42, 42, 43, 43]
    assert "judge noise over 2 trials" in first.stdout
    manifest = pd.read_json(tmp_path / "first" / "manifest.json", typ="series")
    assert manifest["judge_noise"]["trials"] == 2

    # A rerun: each trial's replies come from the cache, none is sent again.
    again = run_app(tmp_path / "again", *overrides, env=ENV)
    assert again.returncode == 0, again.stderr
    assert len(chat_server.requests) == sent
    assert table(tmp_path / "again", "items")["score"].tolist() == (
        table(tmp_path / "first", "items")["score"].tolist()
    )


def test_trials_must_be_a_positive_whole_number(tmp_path: Path) -> None:
    refused = run_app(tmp_path / "run", "runner.trials=0")

    assert refused.returncode == 2
    assert "runner.trials must be an integer >= 1, got 0" in refused.stderr


def test_the_agents_call_is_on_the_first_trials_row_and_a_resume_keeps_the_trials(
    tmp_path: Path,
) -> None:
    async def agent(text: str) -> str:
        report_target_usage(input_tokens=100, output_tokens=10, cost=0.25)
        return "A. B."

    data = [{"id": f"doc{i}", "input": s} for i, s in enumerate(SOURCES)]

    def run(trials: int, resume: bool = False) -> None:
        asyncio.run(
            run_evals(
                scorers=[create_summarization_scorer(varying_judge())],
                data=data,
                target=agent,
                output_dir=tmp_path / "run",
                trials=trials,
                resume=resume,
            )
        )

    run(trials=3)

    # One call per item, whatever its trials: a sum over the rows counts each call once.
    items = table(tmp_path / "run", "items")
    assert items["target_cost"].sum() == pytest.approx(2 * 0.25)
    assert items["target_input_tokens"].sum() == 2 * 100
    assert items[items["trial"] > 0]["target_cost"].isna().all()
    # A resume judging in another number of trials would mix items that do not measure alike.
    with pytest.raises(ConfigError, match="trials was 3, now 2"):
        run(trials=2, resume=True)
