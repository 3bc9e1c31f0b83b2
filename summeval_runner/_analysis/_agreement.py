"""Agreement with human ratings: the figures, ``agreement.parquet``, and reading a run's back.

A judged run's per-item scores (``items.parquet``) are held against the ratings of the same
rows; each figure (a correlation, an AUC) comes with a 95% bootstrap interval that resamples
sources, and, against a baseline judged on the same ratings, with the paired difference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from summeval_runner._errors import InputError
from summeval_runner._inputs._ratings import HumanTarget, RatedSummary
from summeval_runner._scorers._result import SUMMARIZATION_SCORER_ID
from summeval_runner._stats import AgreementStatistic, agreement_difference, agreement_statistics

AGREEMENT = "agreement.parquet"

# An item's judged value per dimension; an item absent, or a value None, was not judged (the
# evaluation ended in error) and is left out of every figure.
Scores = Mapping[str, Mapping[str, float | None]]


@dataclass(frozen=True)
class AgreementFigure:
    """One figure of agreement: how a judge's ``dimension`` agrees with people's ``rating``.

    ``level``: ``summary`` (within each source, over its summaries, then the mean over
    sources), ``pooled`` (over all rows) or ``system`` (the systems' mean scores). ``statistic``:
    ``spearman``, ``kendall`` (tau-b), ``pearson``, ``roc_auc`` or ``balanced_accuracy`` (at
    the best ``threshold``). ``ci_low``/``ci_high``: the 95% bootstrap interval, resampling
    sources. ``rows``/``groups``: the rated summaries and sources the figure is computed on.
    Against a ``baseline`` judge: ``difference`` (this judge's figure minus the baseline's) and
    its paired interval (both judges on the same resampled sources).
    """

    judge: str
    prompt_version: str
    dimension: str
    rating: str
    kind: Literal["scale", "binary"]
    level: str
    statistic: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    rows: int
    groups: int
    threshold: float | None = None
    note: str = ""
    baseline: str | None = None
    difference: float | None = None
    difference_ci_low: float | None = None
    difference_ci_high: float | None = None
    # What the judge's coverage was measured on (HumanRatings.basis): its figures are of that.
    coverage_basis: str = "source_questions"


def _described(name: str, kind: pa.DataType, description: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, kind, nullable=nullable, metadata={"description": description})


AGREEMENT_SCHEMA = pa.schema(
    [
        _described("judge", pa.string(), "the judge whose scores are held against people's", False),
        _described("prompt_version", pa.string(), "the scorer's PROMPT_VERSION", False),
        _described("dimension", pa.string(), "alignment, coverage or score", False),
        _described("rating", pa.string(), "the rating (or mean of ratings) held against it", False),
        _described("kind", pa.string(), "scale or binary (a 0/1 label)", False),
        _described("level", pa.string(), "summary (mean over sources), pooled, system", False),
        _described("statistic", pa.string(), "spearman, kendall, pearson, roc_auc, ...", False),
        _described("value", pa.float64(), "the figure; null when it cannot be computed (see note)"),
        _described("ci_low", pa.float64(), "95% bootstrap interval, resampling sources: low end"),
        _described("ci_high", pa.float64(), "95% bootstrap interval, resampling sources: high end"),
        _described("rows", pa.int64(), "rated summaries the figure is computed on", False),
        _described("groups", pa.int64(), "sources the figure is computed on", False),
        _described("threshold", pa.float64(), "balanced_accuracy: score >= it is positive"),
        _described("note", pa.string(), "what was left out and why", False),
        _described("baseline", pa.string(), "the judge compared with, if any"),
        _described("difference", pa.float64(), "this judge's figure minus the baseline's"),
        _described("difference_ci_low", pa.float64(), "paired 95% interval: low end"),
        _described("difference_ci_high", pa.float64(), "paired 95% interval: high end"),
        _described("coverage_basis", pa.string(), "what coverage was measured on: "
                   "source_questions, or each row's key_facts, questions or reference", False),
        _described("ratings_path", pa.string(), "the ratings file", False),
        _described("ratings_sha256", pa.string(), "SHA-256 of the ratings file's bytes", False),
        _described("resamples", pa.int64(), "bootstrap draws of the sources per interval", False),
        _described("seed", pa.int64(), "the bootstrap's seed (same seed, same draws)", False),
    ]
)  # fmt: skip


def human_value(row: RatedSummary, target: HumanTarget) -> float:
    """The rating a dimension is held against: one column, or the mean of several."""
    values = [row.ratings[name] for name in target.ratings]
    return sum(values) / len(values)


def agreement_figures(
    rated: Sequence[RatedSummary],
    targets: Sequence[HumanTarget],
    scores: Scores,
    *,
    judge: str,
    prompt_version: str,
    baseline: Scores | None = None,
    baseline_label: str | None = None,
    resamples: int = 1000,
    seed: int = 0,
    coverage_basis: str = "source_questions",
) -> tuple[AgreementFigure, ...]:
    """Every figure for every target: ``rated`` rows whose dimension was judged (in ``scores``,
    and in ``baseline`` when given, so both are computed on the same rows)."""
    figures: list[AgreementFigure] = []
    for target in targets:
        dimension = target.dimension
        used = [
            row
            for row in rated
            if _value(scores, row.id, dimension) is not None
            and (baseline is None or _value(baseline, row.id, dimension) is not None)
        ]
        left_out = len(rated) - len(used)
        metric = [_value(scores, row.id, dimension) or 0.0 for row in used]
        human = [human_value(row, target) for row in used]
        groups = [row.group or "" for row in used] if used and used[0].group is not None else None
        systems = (
            [row.system or "" for row in used] if used and used[0].system is not None else None
        )
        common: dict[str, Any] = {
            "systems": systems,
            "binary": target.binary,
            "resamples": resamples,
            "seed": seed,
        }
        statistics: tuple[AgreementStatistic, ...] = ()
        differences: dict[tuple[str, str], AgreementStatistic] = {}
        # With fewer than two judged rows (every other evaluation failed) there is no figure.
        if len(used) >= 2:
            statistics = agreement_statistics(metric, human, groups, **common)
            if baseline is not None:
                base = [_value(baseline, row.id, dimension) or 0.0 for row in used]
                paired = agreement_difference(metric, base, human, groups, **common)
                differences = {(d.level, d.statistic): d for d in paired}
        for stat in statistics:
            notes = [stat.note] if stat.note else []
            if left_out:
                notes.append(
                    f"{left_out} of {len(rated)} rated summaries left out: not judged (errors)"
                )
            diff = differences.get((stat.level, stat.statistic))
            figures.append(
                AgreementFigure(
                    judge=judge,
                    prompt_version=prompt_version,
                    dimension=dimension,
                    rating=target.label,
                    kind="binary" if target.binary else "scale",
                    level=stat.level,
                    statistic=stat.statistic,
                    value=stat.value,
                    ci_low=stat.ci_low,
                    ci_high=stat.ci_high,
                    rows=stat.rows,
                    groups=stat.groups,
                    threshold=stat.threshold,
                    note="; ".join(notes),
                    baseline=baseline_label if baseline is not None else None,
                    difference=diff.value if diff is not None else None,
                    difference_ci_low=diff.ci_low if diff is not None else None,
                    difference_ci_high=diff.ci_high if diff is not None else None,
                    coverage_basis=coverage_basis,
                )
            )
    return tuple(figures)


def _value(scores: Scores, item_id: str, dimension: str) -> float | None:
    values = scores.get(item_id)
    return None if values is None else values.get(dimension)


def write_agreement(
    run_dir: Path,
    figures: Sequence[AgreementFigure],
    *,
    ratings_path: Path,
    ratings_sha256: str,
    resamples: int,
    seed: int,
) -> Path:
    """``agreement.parquet`` in ``run_dir``, written under a temporary name and renamed."""
    shared = {
        "ratings_path": str(ratings_path),
        "ratings_sha256": ratings_sha256,
        "resamples": resamples,
        "seed": seed,
    }
    rows = [{**asdict(f), **shared} for f in figures]
    table = pa.Table.from_pylist(rows, schema=AGREEMENT_SCHEMA)
    path = run_dir / AGREEMENT
    partial = path.with_name(f".{path.name}.partial")
    pq.write_table(table, partial)
    partial.replace(path)
    return path


def read_agreement(run_dir: Path) -> pd.DataFrame:
    """A run's ``agreement.parquet``; ``InputError`` naming the directory if it has none."""
    frame: pd.DataFrame = _agreement_table(run_dir).to_pandas()
    return frame


def agreement_rows(run_dir: Path) -> list[dict[str, Any]]:
    """A run's figures as plain values (``None`` where a figure has none, never NaN)."""
    rows: list[dict[str, Any]] = _agreement_table(run_dir).to_pylist()
    return rows


def figure_note(figure: Mapping[str, Any]) -> str:
    """A figure's note as a table shows it: balanced accuracy's threshold first (the cut the
    accuracy was read at), then what was left out and why."""
    threshold = figure.get("threshold")
    shown = threshold is not None and not math.isnan(threshold)
    notes = [f"at score >= {threshold:.3f}"] if shown else []
    if figure.get("note"):
        notes.append(str(figure["note"]))
    return "; ".join(notes)


def _agreement_table(run_dir: Path) -> pa.Table:
    path = Path(run_dir) / AGREEMENT
    if not path.is_file():
        raise InputError(
            f"{run_dir} has no {AGREEMENT}: it is not a run of summeval-agree (or it did not "
            "finish)"
        )
    return pq.read_table(path)


def read_scores(run_dir: Path) -> dict[str, dict[str, float | None]]:
    """Each judged item's alignment, coverage and score from a run's ``items.parquet``.

    An item in error has none (``None``); an unscorable one (a blank summary: score 0 by rule,
    no judge call) has 0 on every dimension.
    """
    path = Path(run_dir) / "items.parquet"
    if not path.is_file():
        raise InputError(f"{run_dir} has no items.parquet: it is not a finished run")
    table = pq.read_table(
        path,
        columns=["item_id", "scorer_id", "status", "score", "alignment_score", "coverage_score"],
    )
    scores: dict[str, dict[str, float | None]] = {}
    for row in table.to_pylist():
        if row["scorer_id"] != SUMMARIZATION_SCORER_ID:
            continue
        scores[row["item_id"]] = dimension_scores(
            row["status"],
            {
                "alignment": row["alignment_score"],
                "coverage": row["coverage_score"],
                "score": row["score"],
            },
        )
    return scores


def dimension_scores(status: str, values: Mapping[str, float | None]) -> dict[str, float | None]:
    """An evaluation's value per dimension, as agreement uses them: ``None`` for an error (left
    out), 0 for what an unscorable summary was not judged on (it scores 0 by rule)."""
    if status == "error":
        return dict.fromkeys(values)
    return {name: 0.0 if value is None else float(value) for name, value in values.items()}
