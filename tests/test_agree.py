"""``summeval-agree`` and ``judge_agreement``: a judge held against people's ratings.

The figures are checked against the same statistics computed here with pandas from the run's
own ``items.parquet`` and the ratings file, so a row paired with another row's rating, or a
figure computed on the wrong rows, fails; the statistics themselves are checked against hand
computed cases in test_agreement_stats.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

from summeval_runner import (
    FakeJudge,
    HumanRatings,
    HumanTarget,
    JudgeRequest,
    RatingsError,
    create_summarization_scorer,
    judge_agreement_sync,
)
from tests.app import SAMPLE, run_agree

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


def _fake_judge() -> FakeJudge:
    """A judge whose alignment is the digit in the summary ("A3": 3 of 4 claims supported)
    and whose coverage is every question answered."""

    def preprocess(request: JudgeRequest) -> dict[str, Any]:
        supported = int(request.payload.summary.split("A")[1][0])  # type: ignore[union-attr]
        return {
            "alignment": [
                {"claim": f"c{i}", "supported": i < supported, "reason": "r"} for i in range(4)
            ],
            "questions": ["q1", "q2"],
        }

    return FakeJudge(
        preprocess=preprocess,
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
