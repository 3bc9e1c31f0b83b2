"""The run's tables: explicit Parquet schemas, and the aggregates computed from the item rows.

Rows are built in ``_rows`` and written by ``_journal`` (journal first, Parquet at the end);
this module only says what each table holds and how a run's items are summarised.
"""

from __future__ import annotations

import statistics
from array import array
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from summeval_runner._scorers._outcome import RunCounts, item_status
from summeval_runner._scorers._result import METRICS, Status
from summeval_runner._stats import mean_interval, quantile

# Every row says which run, variant, item, scorer and trial (RunOptions.trials; 0 for a run of
# one trial) it belongs to.
_KEY_FIELDS = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("variant", pa.string(), nullable=False),
    pa.field("item_id", pa.string(), nullable=False),
    pa.field("scorer_id", pa.string(), nullable=False),
    pa.field("trial", pa.int32(), nullable=False),
]
ITEMS_SCHEMA = pa.schema(
    [
        *_KEY_FIELDS,
        pa.field("status", pa.string(), nullable=False),
        pa.field("score", pa.float64()),
        pa.field("alignment_score", pa.float64()),
        pa.field("coverage_score", pa.float64()),
        pa.field("claims", pa.int32()),
        pa.field("supported_claims", pa.int32()),
        pa.field("questions", pa.int32()),
        pa.field("answered_questions", pa.int32()),
        pa.field("reason", pa.string()),
        pa.field("error_type", pa.string()),
        pa.field("error_message", pa.string()),
        pa.field("error_step", pa.string()),
        pa.field("error_attempts", pa.int32()),
        pa.field("error_raw_reply", pa.string()),
        pa.field("source", pa.string()),
        pa.field("summary", pa.string()),
        pa.field("judge", pa.string()),
        pa.field("prompt_version", pa.string()),
        pa.field("max_questions", pa.int32()),
        pa.field("scale", pa.float64()),
        pa.field("judge_calls", pa.int32()),
        pa.field("judge_retries", pa.int32()),
        pa.field("input_tokens", pa.int64()),
        pa.field("output_tokens", pa.int64()),
        pa.field("judge_cost", pa.float64()),
        pa.field("judge_latency_s", pa.float64()),
        pa.field("target_latency_s", pa.float64()),
        pa.field("target_input_tokens", pa.int64()),
        pa.field("target_output_tokens", pa.int64()),
        pa.field("target_cost", pa.float64()),
        pa.field("metadata", pa.string()),
    ]
)
ALIGNMENT_SCHEMA = pa.schema(
    [
        *_KEY_FIELDS,
        pa.field("position", pa.int32(), nullable=False),
        pa.field("claim", pa.string(), nullable=False),
        pa.field("supported", pa.bool_(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
    ]
)
COVERAGE_SCHEMA = pa.schema(
    [
        *_KEY_FIELDS,
        pa.field("position", pa.int32(), nullable=False),
        pa.field("question", pa.string(), nullable=False),
        pa.field("answered", pa.bool_(), nullable=False),
        pa.field("reason", pa.string()),
        pa.field("verdict_missing", pa.bool_(), nullable=False),
    ]
)
AGGREGATES_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("variant", pa.string(), nullable=False),
        pa.field("scorer_id", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("items", pa.int64(), nullable=False),
        pa.field("scored", pa.int64(), nullable=False),
        pa.field("unscorable", pa.int64(), nullable=False),
        pa.field("errors", pa.int64(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("mean", pa.float64()),
        pa.field("std", pa.float64()),
        pa.field("min", pa.float64()),
        pa.field("p25", pa.float64()),
        pa.field("median", pa.float64()),
        pa.field("p75", pa.float64()),
        pa.field("max", pa.float64()),
        pa.field("ci95_low", pa.float64()),
        pa.field("ci95_high", pa.float64()),
    ]
)
# One row per question of each source's shared question set (questions="per_source"): the
# questions every item of that source was asked.
QUESTIONS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("variant", pa.string(), nullable=False),
        pa.field("judge", pa.string(), nullable=False),
        pa.field("prompt_version", pa.string(), nullable=False),
        pa.field("source_sha256", pa.string(), nullable=False),
        pa.field("max_questions", pa.int32(), nullable=False),
        pa.field("origin", pa.string(), nullable=False),
        pa.field("position", pa.int32(), nullable=False),
        pa.field("question", pa.string(), nullable=False),
    ]
)
TABLES: Mapping[str, pa.Schema] = {
    "items": ITEMS_SCHEMA,
    "alignment": ALIGNMENT_SCHEMA,
    "coverage": COVERAGE_SCHEMA,
    "aggregates": AGGREGATES_SCHEMA,
    "questions": QUESTIONS_SCHEMA,
}


def aggregate(
    run_id: str,
    variant: str,
    scorer_id: str,
    metric: str,
    values: Sequence[float],
    counts: RunCounts,
    *,
    upper: float | None,
) -> dict[str, Any]:
    """One aggregates row: the item counts, and the metric's n, mean, spread and t-interval of
    the mean over the scored items, clipped to [0, upper] when bounded."""
    n = len(values)
    ordered = sorted(values)
    mean, low, high = mean_interval(values, upper=upper)
    std = statistics.stdev(values) if n > 1 else (0.0 if n == 1 else None)
    return {
        "run_id": run_id,
        "variant": variant,
        "scorer_id": scorer_id,
        "metric": metric,
        "items": counts.total,
        "scored": counts.scored,
        "unscorable": counts.unscorable,
        "errors": counts.errors,
        "n": n,
        "mean": mean,
        "std": std,
        "min": ordered[0] if ordered else None,
        "p25": quantile(ordered, 0.25),
        "median": quantile(ordered, 0.5),
        "p75": quantile(ordered, 0.75),
        "max": ordered[-1] if ordered else None,
        "ci95_low": low,
        "ci95_high": high,
    }


class Summary:
    """Gathers each item's rows as they are compacted and makes the aggregates table's rows.

    Every scorer gets a ``score`` row; the dimensions (``alignment``, ``coverage``) only a
    scorer that reports them (the summarization scorer), not a user's own. An item counts once
    whatever its trials: its status is the worst of theirs, and its value of a metric is the
    mean over its trials.
    """

    def __init__(self) -> None:
        # Per (run_id, variant, scorer_id): its items' statuses counted, the scale, and each
        # metric's values over the scored items (8 bytes each: a million items' fit in 24 MB).
        self._statuses: dict[tuple[str, str, str], dict[Status, int]] = {}
        self._scales: dict[tuple[str, str, str], float | None] = {}
        self._values: dict[tuple[str, str, str], dict[str, array[float]]] = {}
        self._with_dimensions: set[tuple[str, str, str]] = set()

    def add_item(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """One item's rows of ``items.parquet``: a row per scorer and trial."""
        by_scorer: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
        for row in rows:
            by_scorer.setdefault((row["run_id"], row["variant"], row["scorer_id"]), []).append(row)
        for key, trials in by_scorer.items():
            self._add(key, trials)

    def _add(self, key: tuple[str, str, str], trials: list[Mapping[str, Any]]) -> None:
        if key not in self._statuses:
            self._statuses[key] = {"scored": 0, "unscorable": 0, "error": 0}
            self._values[key] = {metric: array("d") for metric in METRICS}
            self._scales[key] = None
        status = item_status(row["status"] for row in trials)
        self._statuses[key][status] += 1
        for row in trials:
            # An item that failed before its scorer ran has no scale: the others say it.
            if row["scale"] is not None:
                self._scales[key] = row["scale"]
            if row["prompt_version"] is not None:
                self._with_dimensions.add(key)
        if status == "scored":
            for metric, column in METRICS.items():
                values = [row[column] for row in trials if row[column] is not None]
                if values:
                    self._values[key][metric].append(sum(values) / len(values))

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for key, statuses in self._statuses.items():
            scale = self._scales[key]
            counts = RunCounts(
                total=sum(statuses.values()),
                scored=statuses["scored"],
                unscorable=statuses["unscorable"],
                errors=statuses["error"],
            )
            for metric in METRICS:
                if metric != "score" and key not in self._with_dimensions:
                    continue
                upper = (scale if metric == "score" else 1.0) if scale else None
                rows.append(
                    aggregate(*key, metric, self._values[key][metric], counts, upper=upper)
                )
        return rows


def one_row_per_item(items: pd.DataFrame) -> pd.DataFrame:
    """An ``items`` table (of one scorer) with one row per item: an item judged in several
    trials gets the mean of its scores over them (``None`` unless every trial was scored), the
    worst of their statuses, the sum of their usage and the first trial's texts; ``trials``
    counts them. A table of one trial comes back as it is, with ``trials`` 1."""
    if "trial" not in items.columns or items.empty or not (items["trial"] > 0).any():
        single: pd.DataFrame = items.assign(trials=1)
        return single
    ordered = items.sort_values(["item_id", "trial"], kind="stable")
    first = ordered.drop_duplicates("item_id", keep="first").set_index("item_id", drop=False)
    grouped = ordered.groupby("item_id", sort=False)
    statuses = grouped["status"].agg(lambda s: item_status(s.tolist()))
    collapsed = first.copy()
    collapsed["status"] = statuses
    collapsed["trials"] = grouped.size()
    scored = collapsed["status"] == "scored"
    for column in METRICS.values():
        means = grouped[column].mean()
        collapsed[column] = means.where(scored, None)
    for column in ("judge_calls", "judge_retries", "input_tokens", "output_tokens", "judge_cost"):
        if column in collapsed.columns:
            collapsed[column] = grouped[column].sum(min_count=1)
    result: pd.DataFrame = collapsed.reset_index(drop=True)
    return result


def score_means(aggregates: Path) -> dict[str, float | None]:
    """Each scorer's mean score over its scored items, read from a run's aggregates table."""
    return {
        row["scorer_id"]: row["mean"]
        for row in pq.read_table(aggregates).to_pylist()
        if row["metric"] == "score"
    }
