"""``summeval-agree`` and ``judge_agreement``: a judge held against people's ratings.

The figures are checked against the same statistics computed here with pandas from the run's
own ``items.parquet`` and the ratings file, so a row paired with another row's rating, or a
figure computed on the wrong rows, fails; the statistics themselves are checked against hand
computed cases in test_agreement_stats.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

import tests.chat_server as chat_server_module
from summeval_runner import (
    FakeJudge,
    HumanRatings,
    HumanTarget,
    JudgeRequest,
    RatingsError,
    create_summarization_scorer,
    judge_agreement_sync,
)
from summeval_runner._scorers._fences import fenced
from tests.app import ENV, FAST_RETRIES, ROOT, SAMPLE, run_agree
from tests.browser import chromium
from tests.chat_server import ChatServer, Fault
from tests.docs_pages import block as readme_block

SYSTEMS = ("copy-two", "copy-one", "wrong-number", "off-topic")


def _sources(count: int = 4) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    return rows[:count]


def _sentences(text: str) -> list[str]:
    return [s.strip() + "." for s in text.split(". ") if s.strip()]


def rated_rows(count: int = 4) -> list[dict[str, Any]]:
    """Four summaries of each of ``count`` sample articles, rated as a person would: two copies
    of its opening (consistent), its opening with a number changed, a sentence about something
    else."""
    rows = []
    for doc in _sources(count):
        first, second = _sentences(doc["text"])[:2]
        summaries = {
            "copy-two": (f"{first} {second}", 5.0, 4.0),
            "copy-one": (first, 5.0, 3.0),
            "wrong-number": (f"{first.rstrip('.')} in 1887, with 4,321 people.", 2.0, 3.0),
            "off-topic": ("The harbour of Valparaiso froze over for the first time.", 1.0, 1.0),
        }
        for system, (summary, consistency, relevance) in summaries.items():
            rows.append(
                {
                    "doc_id": doc["id"],
                    "system_id": system,
                    "source": doc["text"],
                    "summary": summary,
                    "consistency": consistency,
                    "relevance": relevance,
                }
            )
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def summary_level_spearman(frame: pd.DataFrame, metric: str, human: str) -> float:
    """Per doc_id, Spearman (Pearson of average ranks, as pandas ranks them), constant groups
    skipped; the mean over groups."""
    values = []
    for _, group in frame.groupby("doc_id"):
        if group[metric].nunique() < 2 or group[human].nunique() < 2:
            continue
        values.append(group[metric].rank().corr(group[human].rank()))
    return sum(values) / len(values)


@pytest.fixture
def ratings(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "ratings.jsonl", rated_rows())


def test_the_command_judges_every_row_and_its_figures_are_those_of_its_own_rows(
    tmp_path: Path, ratings: Path
) -> None:
    run_dir = tmp_path / "agree"
    done = run_agree(run_dir, f"human.path={ratings}", "runner.progress=false")
    assert done.returncode == 0, done.stderr
    assert "16 items: 16 scored" in done.stdout
    assert "summary  spearman" in done.stdout
    assert "95% interval" in done.stdout

    items = pd.read_parquet(run_dir / "items.parquet")
    assert len(items) == 16
    assert set(items["status"]) == {"scored"}
    # The ratings file's rows, by the summary each item judged: no row paired with another's.
    rated = pd.DataFrame(rated_rows()).merge(
        items[["source", "summary", "alignment_score", "coverage_score", "score"]],
        on=["source", "summary"],
        validate="one_to_one",
    )
    assert len(rated) == 16
    rated["both"] = (rated["consistency"] + rated["relevance"]) / 2

    figures = pq.read_table(run_dir / "agreement.parquet").to_pandas()
    summary = figures[(figures["level"] == "summary") & (figures["statistic"] == "spearman")]
    by_dimension = summary.set_index("dimension")
    for dimension, metric, human in (
        ("alignment", "alignment_score", "consistency"),
        ("coverage", "coverage_score", "relevance"),
        ("score", "score", "both"),
    ):
        assert by_dimension.loc[dimension, "value"] == pytest.approx(
            summary_level_spearman(rated, metric, human)
        )
        assert by_dimension.loc[dimension, "rows"] == 16
    assert by_dimension.loc["score", "rating"] == "mean(consistency, relevance)"
    # A copy of the source is rated consistent and judged supported; the off-topic summary
    # neither: the judge ranks them as the people do.
    assert by_dimension.loc["alignment", "value"] > 0.5
    pooled = figures[(figures["level"] == "pooled") & (figures["statistic"] == "pearson")]
    alignment = pooled.set_index("dimension").loc["alignment"]
    assert alignment["value"] == pytest.approx(rated["alignment_score"].corr(rated["consistency"]))
    assert alignment["ci_low"] <= alignment["value"] <= alignment["ci_high"]
    system = figures[(figures["level"] == "system") & (figures["statistic"] == "pearson")]
    means = rated.groupby("system_id")[["alignment_score", "consistency"]].mean()
    assert system.set_index("dimension").loc["alignment", "value"] == pytest.approx(
        means["alignment_score"].corr(means["consistency"])
    )
    assert system.set_index("dimension").loc["alignment", "groups"] == 4

    # The same table in DuckDB, as a user queries it.
    best = duckdb.sql(
        f"select dimension, value from '{run_dir / 'agreement.parquet'}' "
        "where level = 'summary' and statistic = 'kendall' order by dimension"
    ).fetchall()
    assert [name for name, _ in best] == ["alignment", "coverage", "score"]
    report = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "Agreement with human ratings" in report
    assert "mean(consistency, relevance)" in report


def test_a_second_run_is_compared_with_a_first_by_a_paired_difference(
    tmp_path: Path, ratings: Path
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert run_agree(first, f"human.path={ratings}", "runner.progress=false").returncode == 0
    done = run_agree(
        second,
        f"human.path={ratings}",
        f"agreement.baseline={first}",
        "runner.progress=false",
    )
    assert done.returncode == 0, done.stderr
    assert "vs offline" in done.stdout
    # The difference and its paired interval are signed alike, as the compare table's are.
    assert "+0.000  [+0.000, +0.000]" in done.stdout
    figures = pd.read_parquet(second / "agreement.parquet")
    # The same judge on the same ratings: every difference is 0, its interval too.
    assert (figures["baseline"] == "offline").all()
    computed = figures.dropna(subset=["difference"])
    assert len(computed) == len(figures)
    assert (computed["difference"] == 0).all()
    assert (computed["difference_ci_low"] == 0).all()
    assert (computed["difference_ci_high"] == 0).all()


def test_a_baseline_judged_on_other_ratings_is_refused_before_any_judge_call(
    tmp_path: Path, ratings: Path
) -> None:
    first = tmp_path / "first"
    assert run_agree(first, f"human.path={ratings}", "runner.progress=false").returncode == 0
    other = write_jsonl(tmp_path / "other.jsonl", rated_rows(3))
    second = tmp_path / "second"
    done = run_agree(second, f"human.path={other}", f"agreement.baseline={first}")
    assert done.returncode == 2
    assert "another ratings file" in done.stderr
    assert not (second / "items.parquet").exists()


def test_figures_are_of_every_rated_summary_or_none_before_any_judge_call(
    tmp_path: Path, ratings: Path
) -> None:
    # A baseline that judged only the first rows of the same file, and a shard of the rows,
    # would each leave this judge's figures on part of the rows, with exit 0.
    first = tmp_path / "first"
    limited = run_agree(first, f"human.path={ratings}", "human.limit=8", "runner.progress=false")
    assert limited.returncode == 0

    second = tmp_path / "second"
    done = run_agree(second, f"human.path={ratings}", f"agreement.baseline={first}")
    assert done.returncode == 2
    assert "judged 8 of the 16 rated summaries" in done.stderr
    assert not (second / "items.parquet").exists()

    sharded = tmp_path / "sharded"
    done = run_agree(sharded, f"human.path={ratings}", "runner.shard=0/2")
    assert done.returncode == 2
    assert "shard must be None for agreement, got '0/2'" in done.stderr
    assert not (sharded / "items.parquet").exists()


def test_a_run_that_did_not_complete_returns_no_figure(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "fake.jsonl", _fake_rows())
    ratings = HumanRatings(path, targets=(HumanTarget("alignment", ("consistency",)),))
    stop = asyncio.Event()

    calls: list[str] = []

    def preprocess(request: JudgeRequest) -> dict[str, Any]:
        calls.append(request.step)
        if len(calls) == 4:
            stop.set()  # three items judged (one whole source), the others never finished
        return _fake_judge_preprocess(request)

    stopping = FakeJudge(
        preprocess=preprocess,
        analyze={
            "coverage": [{"answered": True, "reason": "r"}, {"answered": True, "reason": "r"}]
        },
    )

    result = judge_agreement_sync(
        ratings, scorer=create_summarization_scorer(stopping), stop=stop, concurrency=1
    )

    assert result.run.status == "interrupted"
    assert 3 <= result.run.counts.scored < 6
    # Figures of the rows it reached would pass for figures of all six.
    assert result.figures == ()
    with pytest.raises(KeyError):
        result.figure("alignment")


def _fake_judge_preprocess(request: JudgeRequest) -> dict[str, Any]:
    supported = int(request.payload.summary.split("A")[1][0])  # type: ignore[union-attr]
    return {
        "alignment": [
            {"claim": f"c{i}", "supported": i < supported, "reason": "r"} for i in range(4)
        ],
        "questions": ["q1", "q2"],
    }


def _fake_judge() -> FakeJudge:
    """A judge whose alignment is the digit in the summary ("A3": 3 of 4 claims supported)
    and whose coverage is every question answered."""

    return FakeJudge(
        preprocess=_fake_judge_preprocess,
        analyze={
            "coverage": [{"answered": True, "reason": "r"}, {"answered": True, "reason": "r"}]
        },
    )


def _fake_rows() -> list[dict[str, Any]]:
    # Two sources of three summaries; the judge's alignment and people's consistency ordered
    # alike in the first, opposite in the second.
    rows = []
    for doc, digits, ratings in (
        ("d1", (1, 2, 4), (1.0, 2.0, 3.0)),
        ("d2", (1, 3, 4), (3.0, 2.5, 1.0)),
    ):
        for digit, rating in zip(digits, ratings, strict=True):
            rows.append(
                {
                    "doc_id": doc,
                    "source": f"Source {doc}.",
                    "summary": f"Summary A{digit} of {doc}.",
                    "consistency": rating,
                    "label": int(rating >= 2.5),
                }
            )
    return rows


def test_judge_agreement_with_a_fake_judge_in_python(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "fake.jsonl", _fake_rows())
    ratings = HumanRatings(path, targets=(HumanTarget("alignment", ("consistency",)),))
    result = judge_agreement_sync(ratings, scorer=create_summarization_scorer(_fake_judge()))
    assert result.run.counts.scored == 6
    figure = result.figure("alignment")
    # Spearman +1 in d1 and -1 in d2 (ties none): the mean is 0.
    assert figure.value == pytest.approx(0.0)
    assert (figure.groups, figure.rows) == (2, 6)
    assert result.figure("alignment", "kendall").value == pytest.approx(0.0)
    frame = result.to_frame()
    assert set(frame["level"]) == {"summary", "pooled"}  # no system column given

    # Against itself as the baseline: every difference 0.
    again = judge_agreement_sync(
        ratings, scorer=create_summarization_scorer(_fake_judge()), baseline=result
    )
    assert {f.difference for f in again.figures} == {0.0}


def test_binary_labels_give_roc_auc_and_balanced_accuracy(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "labels.jsonl", _fake_rows())
    ratings = HumanRatings(
        path, group=None, targets=(HumanTarget("alignment", ("label",), binary=True),)
    )
    result = judge_agreement_sync(ratings, scorer=create_summarization_scorer(_fake_judge()))
    # Alignment 0.25, 0.5, 1.0 (d1) and 0.25, 0.75, 1.0 (d2); labels 0,0,1 and 1,1,0.
    # Positives 1.0, 0.25, 0.75 against negatives 0.25, 0.5, 1.0: of 9 pairs, 4 won and 2
    # tied (half a win each).
    assert result.figure("alignment", "roc_auc", "pooled").value == pytest.approx(5 / 9)
    balanced = result.figure("alignment", "balanced_accuracy", "pooled")
    assert balanced.value is not None
    assert balanced.threshold is not None


def test_the_binary_config_reads_labels_of_one_summary_per_source(tmp_path: Path) -> None:
    rows = [dict(row, doc_id=f"{row['doc_id']}-{i}") for i, row in enumerate(rated_rows(2))]
    for row in rows:
        row["label"] = int(row["consistency"] >= 4)
    path = write_jsonl(tmp_path / "labels.jsonl", rows)
    run_dir = tmp_path / "run"
    done = run_agree(run_dir, "human=binary", f"human.path={path}", "runner.progress=false")
    assert done.returncode == 0, done.stderr
    figures = pd.read_parquet(run_dir / "agreement.parquet")
    assert set(figures["statistic"]) == {"roc_auc", "balanced_accuracy"}
    assert set(figures["kind"]) == {"binary"}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda rows: rows[5].pop("consistency"),
            "row 6: no rating in field 'consistency' (human.against.alignment)",
        ),
        (
            lambda rows: rows[2].update(relevance="high"),
            "row 3: field 'relevance' (human.against.coverage) must be a number, got str 'high'",
        ),
        (
            lambda rows: rows[7].update(doc_id="alone"),
            "row 8: field 'doc_id' (human.fields.group) is 'alone', a group of one summary",
        ),
        (lambda rows: rows[0].pop("summary"), "row 1: no field 'summary' (human.fields.summary)"),
        (
            lambda rows: [row.pop("doc_id") for row in rows],
            "row 1: no value in field 'doc_id' (human.fields.group); the row has ['consistency', "
            "'relevance', 'source', 'summary', 'system_id']: name the field that holds it (or "
            "human.fields.group=null if the file has none)",
        ),
        (
            lambda rows: rows[4].update(consistency=float("nan")),
            "row 5: field 'consistency' (human.against.alignment) must be a number",
        ),
    ],
)
def test_a_bad_ratings_file_is_refused_with_file_row_and_field_before_any_call(
    tmp_path: Path, change: Any, expected: str
) -> None:
    rows = rated_rows()
    change(rows)
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run_dir = tmp_path / "agree"
    done = run_agree(run_dir, f"human.path={path}")
    assert done.returncode == 2, done.stdout
    assert f"summeval-agree: error: {path} {expected}" in done.stderr
    # Refused before any judge call: no run directory is left behind.
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ("human.against.coverage.ratings=[informativeness]",),
            "row 1: no rating in field 'informativeness' (human.against.coverage)",
        ),
        (
            ("human.fields.system=system",),
            "row 1: no value in field 'system' (human.fields.system)",
        ),
        (
            ("human.limit=5",),  # the second source's first row, and the reading stops
            "row 5: field 'doc_id' (human.fields.group) is 'glacier-survey', a group of one "
            "summary (human.limit=5 stops the reading here",
        ),
    ],
)
def test_a_setting_that_does_not_fit_the_file_is_named_with_its_row(
    tmp_path: Path, ratings: Path, overrides: tuple[str, ...], expected: str
) -> None:
    run_dir = tmp_path / "agree"
    done = run_agree(run_dir, f"human.path={ratings}", *overrides)
    assert done.returncode == 2, done.stdout
    assert f"summeval-agree: error: {ratings} {expected}" in done.stderr
    assert not run_dir.exists()


def test_a_ratings_file_of_unknown_format_names_human_format(tmp_path: Path, ratings: Path) -> None:
    renamed = ratings.rename(tmp_path / "ratings.txt")
    done = run_agree(tmp_path / "agree", f"human.path={renamed}")
    assert done.returncode == 2
    assert "cannot tell the format from the suffix '.txt'; set human.format to jsonl" in (
        done.stderr
    )
    again = run_agree(tmp_path / "agree", f"human.path={renamed}", "human.format=jsonl")
    assert again.returncode == 0, again.stderr


def test_a_parquet_file_of_ratings_gives_the_figures_of_the_same_rows_in_jsonl(
    tmp_path: Path, ratings: Path
) -> None:
    frame = pd.DataFrame(rated_rows())
    parquet = tmp_path / "ratings.parquet"
    frame.to_parquet(parquet, index=False)
    runs = {}
    for name, path in (("jsonl", ratings), ("parquet", parquet)):
        done = run_agree(tmp_path / name, f"human.path={path}", "runner.progress=false")
        assert done.returncode == 0, done.stderr
        runs[name] = pd.read_parquet(tmp_path / name / "agreement.parquet")
    columns = ["dimension", "level", "statistic", "value", "ci_low", "ci_high", "rows", "groups"]
    pd.testing.assert_frame_equal(runs["parquet"][columns], runs["jsonl"][columns])
    # A Parquet column of text where a rating belongs is named by its row (counted from 1).
    frame["relevance"] = frame["relevance"].astype(str)
    frame.loc[6, "relevance"] = "high"
    frame.to_parquet(parquet, index=False)
    done = run_agree(tmp_path / "bad", f"human.path={parquet}")
    assert done.returncode == 2
    assert (
        f"{parquet} row 7: field 'relevance' (human.against.coverage) must be a number, got str "
        "'high'" in done.stderr
    )


def test_a_csv_of_ratings_reads_numbers_and_names_a_bad_cell(tmp_path: Path) -> None:
    frame = pd.DataFrame(rated_rows())
    good = tmp_path / "ratings.csv"
    frame.to_csv(good, index=False)
    assert run_agree(tmp_path / "ok", f"human.path={good}", "runner.progress=false").returncode == 0
    frame["consistency"] = frame["consistency"].astype(object)
    frame.loc[9, "consistency"] = "4,5"
    bad = tmp_path / "bad.csv"
    frame.to_csv(bad, index=False)
    done = run_agree(tmp_path / "bad", f"human.path={bad}")
    assert done.returncode == 2
    # The header is line 1, so the tenth row is row 11, as a spreadsheet shows it.
    assert (
        "row 11: field 'consistency' (human.against.alignment) must be a number, got str '4,5'"
        in done.stderr
    )


def test_a_label_that_is_not_0_or_1_is_refused(tmp_path: Path) -> None:
    rows = _fake_rows()
    rows[3]["label"] = 2
    path = write_jsonl(tmp_path / "labels.jsonl", rows)
    ratings = HumanRatings(
        path, group=None, targets=(HumanTarget("alignment", ("label",), binary=True),)
    )
    with pytest.raises(RatingsError, match=r"row 4: field 'label' .* must be 0 or 1, got 2"):
        ratings.read()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ((), "human.path is not set"),
        (
            ("+human.against.fluency={ratings: [fluency]}",),
            "human.against.fluency is not a dimension",
        ),
        (("agreement.resamples=5",), "agreement.resamples must be >= 100"),
    ],
)
def test_bad_options_are_named(
    tmp_path: Path, ratings: Path, overrides: tuple[str, ...], expected: str
) -> None:
    given = overrides if not overrides else (f"human.path={ratings}", *overrides)
    done = run_agree(tmp_path / "run", *given)
    assert done.returncode == 2
    assert expected in done.stderr


# --- what a user runs next: two judges, a model judge over HTTP, resume, the report ----------


def test_two_judges_on_the_same_ratings_compare_by_a_paired_difference(
    tmp_path: Path, ratings: Path
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert run_agree(first, f"human.path={ratings}", "runner.progress=false").returncode == 0
    done = run_agree(
        second,
        f"human.path={ratings}",
        "+model.fine_claims=true",
        f"agreement.baseline={first}",
        "runner.progress=false",
    )
    assert done.returncode == 0, done.stderr
    assert (
        "agreement of offline(fine_claims=True) with the human ratings in "
        f"{ratings}, against the baseline judge offline" in done.stdout
    )
    base = pd.read_parquet(first / "agreement.parquet")
    figures = pd.read_parquet(second / "agreement.parquet")
    assert set(figures["judge"]) == {"offline(fine_claims=True)"}
    assert set(figures["baseline"]) == {"offline"}
    paired = figures.merge(base, on=["dimension", "level", "statistic"], suffixes=("", "_base"))
    assert len(paired) == len(figures) == len(base)
    defined = paired.dropna(subset=["value", "value_base"])
    assert not defined.empty
    # Each difference is this judge's figure minus the baseline's, as each run printed it.
    for _, row in defined.iterrows():
        assert row["difference"] == pytest.approx(row["value"] - row["value_base"], abs=1e-12)
        assert row["difference_ci_low"] <= row["difference_ci_high"]
    # The variant names what was judged: the baseline's directory is not part of it. (The
    # ratings' path, longer than 48 characters, is shown by its file's name and a hash.)
    items = pd.read_parquet(second / "items.parquet")
    (label,) = set(items["variant"])
    assert re.fullmatch(r"\+model\.fine_claims=true,human\.path=ratings\.jsonl~[0-9a-f]{8}", label)


def test_a_paired_difference_of_two_fake_judges_worked_by_hand(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "fake.jsonl", _fake_rows())
    ratings = HumanRatings(path, targets=(HumanTarget("alignment", ("consistency",)),))

    def follows_people(request: JudgeRequest) -> dict[str, Any]:
        summary = request.payload.summary  # type: ignore[union-attr]
        digit = int(summary.split("A")[1][0])
        supported = digit if "d1" in summary else 5 - digit  # d2's people rate lower digits up
        return {
            "alignment": [
                {"claim": f"c{i}", "supported": i < supported, "reason": "r"} for i in range(4)
            ],
            "questions": ["q1", "q2"],
        }

    every_question = [{"answered": True, "reason": "r"}, {"answered": True, "reason": "r"}]
    judge = FakeJudge(preprocess=follows_people, analyze={"coverage": every_question})
    baseline = judge_agreement_sync(ratings, scorer=create_summarization_scorer(judge))
    assert baseline.figure("alignment").value == pytest.approx(1.0)  # +1 in d1 and in d2
    result = judge_agreement_sync(
        ratings, scorer=create_summarization_scorer(_fake_judge()), baseline=baseline
    )
    figure = result.figure("alignment")
    # Per source, the first judge's Spearman minus the baseline's: d1 1 - 1 = 0, d2 -1 - 1 = -2.
    # A draw of the two sources averages two of those: -2 (both d2, 1 in 4 draws), -1 or 0 (both
    # d1, 1 in 4): so the paired 95% interval runs from -2 to 0, the difference -1 in its middle.
    assert figure.difference == pytest.approx(-1.0)
    assert (figure.difference_ci_low, figure.difference_ci_high) == (-2.0, 0.0)
    assert figure.baseline == "fake"


_VALID_CONTENT = chat_server_module.valid_content


def _http_judge_content(
    body: dict[str, Any], questions_follow_summary: bool = False
) -> dict[str, Any]:
    """The loopback server as a model judge: in each preprocess reply (claims and questions, or
    claims only), the digit in the summary says how many of its four claims are supported
    (``Summary A3 of d1``: 3 of 4)."""
    content = _VALID_CONTENT(body, questions_follow_summary)
    if chat_server_module.step_of(body) in ("preprocess", "claims"):
        summary = fenced(str(body["messages"][1]["content"]), "summary") or ""
        supported = int(summary.split("A", 1)[1][0])
        content["alignment"] = [
            {"claim": f"c{i}", "supported": i < supported, "reason": "r"} for i in range(4)
        ]
    return content


@pytest.fixture
def http_judge(chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> ChatServer:
    monkeypatch.setattr(chat_server_module, "valid_content", _http_judge_content)
    return chat_server


def _http_overrides(server: ChatServer, path: Path, *more: str) -> tuple[str, ...]:
    return (
        "model=openai",
        f"model.base_url={server.base_url}",
        f"human.path={path}",
        "human.fields.system=null",
        "human.against.coverage=null",
        "human.against.score=null",
        "runner.progress=false",
        *FAST_RETRIES,
        *more,
    )


def test_the_command_with_a_model_judge_over_http_retries_caches_and_agrees(
    tmp_path: Path, http_judge: ChatServer
) -> None:
    path = write_jsonl(tmp_path / "fake.jsonl", _fake_rows())
    http_judge.script(Fault(500, "oops"))  # the first request fails, and is retried
    run_dir = tmp_path / "run"
    done = run_agree(run_dir, *_http_overrides(http_judge, path), env=ENV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agreement of openai/gpt-4o-mini with the human ratings" in done.stdout
    figures = pd.read_parquet(run_dir / "agreement.parquet").set_index(["level", "statistic"])
    # The same figures as the fake judge's in Python: +1 in d1, -1 in d2.
    assert figures.loc[("summary", "spearman"), "value"] == pytest.approx(0.0)
    assert figures.loc[("summary", "kendall"), "value"] == pytest.approx(0.0)
    assert set(figures["judge"]) == {"openai/gpt-4o-mini"}
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["judge"]["retries"] == 1
    sent = len(http_judge.requests)
    assert manifest["judge"]["requests"] == sent
    # A rerun of the same config is answered from the cache: no request reaches the server.
    again = run_agree(tmp_path / "again", *_http_overrides(http_judge, path), env=ENV)
    assert again.returncode == 0, again.stderr
    assert len(http_judge.requests) == sent
    assert pd.read_parquet(tmp_path / "again" / "agreement.parquet")["value"].tolist() == (
        figures["value"].tolist()
    )


def test_a_killed_run_resumes_to_the_figures_of_an_uninterrupted_one(
    tmp_path: Path, http_judge: ChatServer
) -> None:
    path = write_jsonl(tmp_path / "fake.jsonl", _fake_rows())
    overrides = _http_overrides(
        http_judge, path, "runner.cache=off", "runner.max_items_in_flight=1"
    )
    whole = tmp_path / "whole"
    assert run_agree(whole, *overrides, env=ENV).returncode == 0
    answered = len(http_judge.requests)
    http_judge.hold_after(answered + 7)  # two items judged, the third's first request held
    run_dir = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, "-c", "from summeval_runner._cli._agree import main; main()",
         f"hydra.run.dir={run_dir}", *overrides],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ENV, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )  # fmt: skip
    deadline = time.monotonic() + 120  # turns a hung run into a failure; not a timing check
    while http_judge.arrivals < answered + 8:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    http_judge.release()
    assert not (run_dir / "agreement.parquet").exists()  # no figure from part of the rows

    resumed = run_agree(run_dir, *overrides, f"runner.resume={run_dir}", env=ENV)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "6 items: 6 scored" in resumed.stdout
    columns = ["dimension", "level", "statistic", "value", "ci_low", "ci_high", "rows", "groups"]
    expected = pd.read_parquet(whole / "agreement.parquet")[columns]
    pd.testing.assert_frame_equal(pd.read_parquet(run_dir / "agreement.parquet")[columns], expected)


def test_the_report_shows_the_agreement_figures_in_a_browser(tmp_path: Path, ratings: Path) -> None:
    labels = [dict(row, label=int(row["consistency"] >= 4)) for row in rated_rows()]
    path = write_jsonl(tmp_path / "labels.jsonl", labels)
    run_dir = tmp_path / "run"
    done = run_agree(
        run_dir,
        f"human.path={path}",
        "human.against.alignment.ratings=[label]",
        "human.against.alignment.binary=true",
        "human.against.score=null",
        "runner.progress=false",
    )
    assert done.returncode == 0, done.stderr
    # The balanced accuracy's threshold is shown; the AUC has none, and no note of one.
    figures = pd.read_parquet(run_dir / "agreement.parquet").set_index("statistic")
    threshold = figures.loc["balanced_accuracy", "threshold"]
    assert f"alignment pooled balanced_accuracy: at score >= {threshold:.3f}" in done.stdout
    assert "roc_auc: " not in done.stdout

    dom = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
         (run_dir / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    section = dom.split("<h2>Agreement with human ratings</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<h3>Judge offline</h3>" in section
    assert "1000 draws of the sources (seed 0)" in section
    head, *cells = _cells(section)
    shown = pd.DataFrame(cells, columns=head).set_index(["dimension", "level", "statistic"])
    assert shown.loc[("alignment", "pooled", "roc_auc"), "value"] == (
        f"{figures.loc['roc_auc', 'value']:.3f}"
    )
    assert shown.loc[("alignment", "pooled", "balanced_accuracy"), "note"].startswith(
        f"at score >= {threshold:.3f}"
    )
    assert shown.loc[("coverage", "summary", "spearman"), "human rating"] == "relevance"


def _cells(page: str) -> list[list[str]]:
    """The text of each row's cells (th or td) of the tables in ``page``, as a person reads
    them."""

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.rows: list[list[str]] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag == "tr":
                self.rows.append([])
            elif tag in ("td", "th"):
                self.cell = []

        def handle_endtag(self, tag: str) -> None:
            if tag in ("td", "th") and self.cell is not None:
                self.rows[-1].append(" ".join("".join(self.cell).split()))
                self.cell = None

        def handle_data(self, data: str) -> None:
            if self.cell is not None:
                self.cell.append(data)

    parser = Cells()
    parser.feed(page)
    return parser.rows


def test_a_relative_ratings_path_is_shown_from_where_the_command_ran(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "work").mkdir()
    path = write_jsonl(tmp_path / "data" / "ratings.jsonl", rated_rows(2))
    run_dir = tmp_path / "run"
    # run_agree runs the command from run_dir's parent, tmp_path.
    done = run_agree(run_dir, "human.path=work/../data/ratings.jsonl", "runner.progress=false")
    assert done.returncode == 0, done.stderr
    assert f"agreement of offline with the human ratings in {path}\n" in done.stdout
    assert set(pd.read_parquet(run_dir / "agreement.parquet")["ratings_path"]) == {str(path)}


# --- the agreement page's examples run as shown-------------------------------------------------

DEV_DATA = "../shared/data/summeval_dev.jsonl"


def test_the_readme_agreement_example_in_python_runs_and_prints_as_shown(
    tmp_path: Path, ratings: Path
) -> None:
    code = readme_block("python", "HumanRatings(")
    assert DEV_DATA in code
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace(DEV_DATA, str(ratings)), "docs/guides/agreement.md", "exec"), {})
    lines = printed.getvalue().splitlines()
    shown = readme_block("text", "summary-level spearman").splitlines()
    assert len(lines) == len(shown)
    pattern = (
        r"^\w+ +summary-level spearman -?\d\.\d{3} \[-?\d\.\d{3}, -?\d\.\d{3}\] over \d+ articles$"
    )
    for line, example in zip(lines[:-1], shown[:-1], strict=True):
        assert re.match(pattern, line), line
        assert re.match(pattern, example), example
    assert lines[-1] == shown[-1] == "(18, 19)"  # 6 figures x 3 dimensions, 19 fields each


def test_the_readme_model_judge_example_runs_against_an_openai_compatible_server(
    tmp_path: Path, http_judge: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [dict(row, relevance=row["consistency"]) for row in _fake_rows()]
    ratings = write_jsonl(tmp_path / "ratings.jsonl", rows)
    code = readme_block("python", "http://localhost:8000/v1")
    assert '"provider": "openai"' in code
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(
            compile(
                code.replace(DEV_DATA, str(ratings)).replace(
                    "http://localhost:8000/v1", http_judge.base_url
                ),
                "docs/guides/agreement.md",
                "exec",
            ),
            {},
        )
    # Alignment +1 in d1 and -1 in d2, as in the fake judge's test; no summary in error.
    assert printed.getvalue() == "openai/qwen2.5-7b-instruct 0.0 0\n"
    assert (tmp_path / "outputs" / "agree-qwen" / "agreement.parquet").is_file()


def test_the_readme_agreement_query_runs_on_a_real_run(tmp_path: Path, ratings: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_agree(run_dir, f"human.path={ratings}", "runner.progress=false").returncode == 0
    code = readme_block("python", "agreement.parquet' where")
    example = re.search(r"'(outputs/agree/[^']+)/agreement.parquet'", code)
    assert example is not None
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(
            compile(code.replace(example[1], str(run_dir)), "docs/guides/agreement.md", "exec"), {}
        )
    assert "spearman" in printed.getvalue()
    assert "kendall" in printed.getvalue()
