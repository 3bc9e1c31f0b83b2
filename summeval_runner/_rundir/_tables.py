"""The run's tables: explicit Parquet schemas, and the aggregates computed from the item rows.

Rows are built in ``_rows`` and written by ``_journal`` (journal first, Parquet at the end);
this module only says what each table holds and how a run's items are summarised.
"""

from __future__ import annotations

import functools
import statistics
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from summeval_runner._inputs._metadata import MetadataTypes
from summeval_runner._rundir._parquet import described, for_pandas
from summeval_runner._scorers._outcome import RunCounts, item_status
from summeval_runner._scorers._result import COUNTED, METRICS, SUMMARIZATION_SCORER_ID, Status
from summeval_runner._stats import mean_interval, quantile

_ERROR_STEPS = "target, preprocess, analyze, reason, or scorer"


def _parquet_list(kind: pa.DataType) -> pa.DataType:
    # Named "element", as Parquet's list layout names it: the schema read back is this one.
    return pa.list_(pa.field("element", kind))


FLAG_SPAN_TYPE = pa.struct(
    [
        pa.field("check", pa.string()),
        pa.field("text", pa.string()),
        pa.field("start", pa.int32()),
        pa.field("end", pa.int32()),
        pa.field("match", pa.string()),
    ]
)


def _key_fields() -> list[pa.Field]:
    """Which run, variant, item, scorer and trial (RunOptions.trials; 0 for a run of one trial)
    every row belongs to."""
    return [
        described("run_id", pa.string(), "this run's id (also in its manifest)", nullable=False),
        described(
            "variant",
            pa.string(),
            "the variant label (runner.variant, or the command line's overrides)",
            nullable=False,
        ),
        described(
            "item_id",
            pa.string(),
            "the dataset's id of the item, or a hash of its input (and output)",
            nullable=False,
        ),
        described("scorer_id", pa.string(), "the scorer: summarization-scorer", nullable=False),
        described(
            "trial",
            pa.int32(),
            "which judgment of the item (runner.trials, from 0); 0 in a run of one trial",
            nullable=False,
        ),
    ]


_NO_METADATA = MetadataTypes()


# Built once for each set of metadata kinds (a schema is immutable): pandas' metadata for it
# is worked out from an empty frame, a measurable share of a short run's own time.
@functools.lru_cache(maxsize=32)
def items_schema(metadata: MetadataTypes = _NO_METADATA) -> pa.Schema:
    """``items.parquet``'s schema for a run whose metadata fields are of ``metadata``'s kinds
    (a struct of them; Arrow's null type when there is none)."""
    return for_pandas(
        pa.schema(
            [
                *_key_fields(),
                described(
                    "status",
                    pa.string(),
                    "scored; blank_summary (the summary is blank: 0, counted in the means); "
                    "unscorable (the source is blank: left out of the means); or error",
                    nullable=False,
                ),
                described(
                    "score",
                    pa.float64(),
                    "min(alignment, coverage) x scale (0 for a blank summary); "
                    "null for an error, never 0",
                ),
                described(
                    "alignment_score",
                    pa.float64(),
                    "supported claims / claims, 0 to 1 (0 for a blank summary)",
                ),
                described(
                    "coverage_score",
                    pa.float64(),
                    "answered questions / questions, 0 to 1 (0 for a blank summary)",
                ),
                described("claims", pa.int32(), "claims the judge found in the summary"),
                described("supported_claims", pa.int32(), "claims the source supports"),
                described("questions", pa.int32(), "coverage questions asked (N)"),
                described("answered_questions", pa.int32(), "questions the summary answers"),
                described("reason", pa.string(), "the judge's explanation of the score"),
                described("error_type", pa.string(), "for an error: the exception's type"),
                described("error_message", pa.string(), "for an error: what went wrong"),
                described(
                    "error_step",
                    pa.string(),
                    f"for an error: where it happened ({_ERROR_STEPS})",
                ),
                described(
                    "error_attempts",
                    pa.int32(),
                    "for an error: calls the failed step made (retries and re-asks included)",
                ),
                described(
                    "error_raw_reply",
                    pa.string(),
                    "the judge's last unusable reply, cut at 2,000 characters",
                ),
                described(
                    "source",
                    pa.string(),
                    "the text the summary was judged against; null when nothing was judged",
                ),
                described(
                    "summary",
                    pa.string(),
                    "the summary that was judged; null when nothing was judged",
                ),
                described(
                    "flags",
                    _parquet_list(pa.string()),
                    "the manipulation checks the texts tripped (addressed_to_judge, "
                    "forged_verdict, fence_or_template_marker); empty when none; not in the score",
                    nullable=False,
                ),
                described(
                    "flag_spans",
                    _parquet_list(FLAG_SPAN_TYPE),
                    "where each flag matched: check, text (summary, source, or the item's "
                    "key_facts, questions or reference), start and end "
                    "characters, and the match (cut at 200 characters)",
                    nullable=False,
                ),
                described(
                    "judge",
                    pa.string(),
                    "the judge that scored the item; a panel's name (panel(mean): a, b), its "
                    "judges' verdicts in alignment and coverage",
                ),
                described("prompt_version", pa.string(), "the version of the judge's prompts"),
                described("max_questions", pa.int32(), "the scorer's max_questions"),
                described(
                    "coverage_basis",
                    pa.string(),
                    "what coverage was measured on: source_questions (drawn by the judge from "
                    "the source), key_facts or questions (the item's own, every one asked), "
                    "reference (key facts the judge drew from the item's reference summary)",
                ),
                described("scale", pa.float64(), "the scorer's scale"),
                described(
                    "judge_calls", pa.int32(), "judge calls for this item (re-asks included)"
                ),
                described(
                    "judge_retries",
                    pa.int32(),
                    "judge requests sent again after a transient failure (429, 5xx, timeout)",
                ),
                described(
                    "judge_calls_reused",
                    pa.int32(),
                    "judge calls answered by a reply paid for elsewhere (the response cache, or "
                    "another item's alike request): their tokens and cost are not on this row",
                ),
                described(
                    "input_tokens",
                    pa.int64(),
                    "the judge's input tokens billed for this item: the items' sum is the run's "
                    "(a reply is counted on the one row that paid for it)",
                ),
                described(
                    "output_tokens", pa.int64(), "the judge's output tokens billed for this item"
                ),
                described(
                    "reasoning_tokens",
                    pa.int64(),
                    "a reasoning model's reasoning tokens for this item, of output_tokens",
                ),
                described(
                    "judge_cost",
                    pa.float64(),
                    "US dollars of this item's judge calls at model.price, else the price "
                    "table's (0 from the cache); null when the price is not known",
                ),
                described("judge_latency_s", pa.float64(), "seconds spent in judge calls"),
                described(
                    "target_latency_s",
                    pa.float64(),
                    "seconds spent in the agent; on trial 0's row only",
                ),
                described(
                    "target_input_tokens",
                    pa.int64(),
                    "the agent's input tokens, as it reported them; null when not known, and on "
                    "rows of trials after 0",
                ),
                described(
                    "target_output_tokens",
                    pa.int64(),
                    "the agent's output tokens, as it reported them; null when not known, and on "
                    "rows of trials after 0",
                ),
                described(
                    "target_cost",
                    pa.float64(),
                    "US dollars of the agent's call at target.price (0 from the cache); null "
                    "when not known, and on rows of trials after 0",
                ),
                described(
                    "metadata",
                    metadata.arrow_type(),
                    "the dataset's metadata fields, each with its type (a struct; "
                    "metadata.<field> in DuckDB); null type when the data has none",
                ),
            ]
        )
    )


# The items table of a run without metadata fields: its columns are every run's.
ITEMS_SCHEMA = items_schema()
ALIGNMENT_SCHEMA = for_pandas(
    pa.schema(
        [
            *_key_fields(),
            described(
                "judge",
                pa.string(),
                "the judge of this verdict (each judge's own in a panel; items names the panel)",
                nullable=False,
            ),
            described(
                "position",
                pa.int32(),
                "the claim's place in the judge's list, from 0",
                nullable=False,
            ),
            described("claim", pa.string(), "an atomic claim of the summary", nullable=False),
            described("supported", pa.bool_(), "whether the source supports it", nullable=False),
            described("reason", pa.string(), "the judge's reason", nullable=False),
        ]
    )
)
COVERAGE_SCHEMA = for_pandas(
    pa.schema(
        [
            *_key_fields(),
            described(
                "judge",
                pa.string(),
                "the judge of this verdict (each judge's own in a panel; items names the panel)",
                nullable=False,
            ),
            described("position", pa.int32(), "the question's place, from 0", nullable=False),
            described(
                "question", pa.string(), "a closed question drawn from the source", nullable=False
            ),
            described(
                "answered",
                pa.bool_(),
                "whether the summary alone answers it; false when the verdict is missing",
                nullable=False,
            ),
            described("reason", pa.string(), "the judge's reason; null when missing"),
            described(
                "verdict_missing",
                pa.bool_(),
                "the judge gave no verdict for this question",
                nullable=False,
            ),
        ]
    )
)
_STAT = "over the scored items and the blank summaries (0)"
AGGREGATES_SCHEMA = for_pandas(
    pa.schema(
        [
            described("run_id", pa.string(), "this run's id", nullable=False),
            described("variant", pa.string(), "the variant label", nullable=False),
            described("scorer_id", pa.string(), "the scorer", nullable=False),
            described("metric", pa.string(), "score, alignment or coverage", nullable=False),
            described("items", pa.int64(), "items finished", nullable=False),
            described("scored", pa.int64(), "items scored (judged)", nullable=False),
            described(
                "blank_summaries",
                pa.int64(),
                "items whose summary is blank: scored 0 and counted in the figures",
                nullable=False,
            ),
            described(
                "unscorable",
                pa.int64(),
                "items unscorable (a blank source): left out of the figures",
                nullable=False,
            ),
            described("errors", pa.int64(), "items in error", nullable=False),
            described(
                "n",
                pa.int64(),
                "values: the scored items and the blank summaries",
                nullable=False,
            ),
            described("mean", pa.float64(), f"the mean {_STAT}"),
            described("std", pa.float64(), f"the sample standard deviation {_STAT}"),
            described("min", pa.float64(), f"the lowest value {_STAT}"),
            described("p25", pa.float64(), f"the 25th percentile (linear, as pandas) {_STAT}"),
            described("median", pa.float64(), f"the median {_STAT}"),
            described("p75", pa.float64(), f"the 75th percentile (linear, as pandas) {_STAT}"),
            described("max", pa.float64(), f"the highest value {_STAT}"),
            described(
                "ci95_low",
                pa.float64(),
                "the 95% Student's t interval of the mean, low end, clipped to the range",
            ),
            described(
                "ci95_high",
                pa.float64(),
                "the 95% Student's t interval of the mean, high end, clipped to the range",
            ),
        ]
    )
)
# One row per question of each source's shared question set (questions="per_source"): the
# questions every item of that source was asked.
QUESTIONS_SCHEMA = for_pandas(
    pa.schema(
        [
            described("run_id", pa.string(), "this run's id", nullable=False),
            described("variant", pa.string(), "the variant label", nullable=False),
            described("judge", pa.string(), "the judge that drew the questions", nullable=False),
            described(
                "prompt_version", pa.string(), "the version of the judge's prompts", nullable=False
            ),
            described(
                "source_sha256", pa.string(), "the SHA-256 of the source's text", nullable=False
            ),
            described("max_questions", pa.int32(), "the scorer's max_questions", nullable=False),
            described(
                "origin",
                pa.string(),
                "drawn by an item of this run, or stored: found in the response cache",
                nullable=False,
            ),
            described("position", pa.int32(), "the question's place, from 0", nullable=False),
            described("question", pa.string(), "the question", nullable=False),
        ]
    )
)
# One row per judge request of each item (RunOptions.transcripts): what was sent and what came
# back, re-asks included. Written only by a run that keeps transcripts.
TRANSCRIPTS_SCHEMA = for_pandas(
    pa.schema(
        [
            *_key_fields(),
            described(
                "request",
                pa.int32(),
                "the request's place among this item's requests (of this scorer and trial), "
                "from 0, in the order they were made",
                nullable=False,
            ),
            described("step", pa.string(), "preprocess, analyze or reason", nullable=False),
            described(
                "attempt",
                pa.int32(),
                "1 for the step's first ask; 2 and on for each re-ask after a reply that did "
                "not fit the step's schema",
                nullable=False,
            ),
            described("judge", pa.string(), "the judge's name, as in items", nullable=False),
            described(
                "model",
                pa.string(),
                "the model the request named; the judge's name for one that sends no request "
                "body (offline)",
                nullable=False,
            ),
            described(
                "messages",
                pa.list_(
                    pa.struct(
                        [
                            pa.field("role", pa.string(), nullable=False),
                            pa.field("content", pa.string(), nullable=False),
                        ]
                    )
                ),
                "the messages as sent, each {role, content}: system, user; a re-ask adds the "
                "previous reply (assistant) and the problem found in it (user)",
                nullable=False,
            ),
            described(
                "settings",
                pa.string(),
                "the rest of the request body as sent, JSON text (temperature, seed, "
                "response_format with its schema, max_tokens); null for a judge that sends none",
            ),
            described(
                "reply",
                pa.string(),
                "the judge's reply text, whole; null when the request failed",
            ),
            described(
                "status",
                pa.string(),
                "ok (the reply fit the step's schema), invalid (it did not: re-asked while a "
                "re-ask was left) or failed (the request raised after the run's retries)",
                nullable=False,
            ),
            described(
                "verdict",
                pa.string(),
                "for ok: the reply as parsed, JSON text; null otherwise",
            ),
            described(
                "error",
                pa.string(),
                "for invalid: what did not fit; for failed: the error; null for ok",
            ),
            described(
                "cached",
                pa.bool_(),
                "the response cache held the reply (stored when the same request was first "
                "answered): no request went out for it",
                nullable=False,
            ),
            described(
                "retries",
                pa.int32(),
                "times the request was sent again after a transient failure (429, 5xx, timeout)",
                nullable=False,
            ),
            described("input_tokens", pa.int64(), "the request's input tokens", nullable=False),
            described("output_tokens", pa.int64(), "the reply's output tokens", nullable=False),
            described(
                "latency_s",
                pa.float64(),
                "seconds from the request to its reply (or its failure)",
                nullable=False,
            ),
        ]
    )
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
    the mean over the items that count (scored, blank summaries), clipped to [0, upper] when
    bounded."""
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
        "blank_summaries": counts.blank_summaries,
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
    scorer that reports them (the summarization scorer, whether or not an item reached it), not
    a user's own. An item counts once whatever its trials: its status is the worst of theirs,
    and its value of a metric is the mean over its trials.
    """

    def __init__(self) -> None:
        # Per (run_id, variant, scorer_id): its items' statuses counted, the scale, and each
        # metric's values over the scored items (8 bytes each: a million items' fit in 24 MB).
        self._statuses: dict[tuple[str, str, str], Counter[Status]] = {}
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
            self._statuses[key] = Counter()
            self._values[key] = {metric: array("d") for metric in METRICS}
            self._scales[key] = None
            if key[2] == SUMMARIZATION_SCORER_ID:
                # Its dimensions are aggregated even when no item reached it (every agent call
                # failed): over no item, rather than missing as if it had none.
                self._with_dimensions.add(key)
        status = item_status(row["status"] for row in trials)
        self._statuses[key][status] += 1
        for row in trials:
            # An item that failed before its scorer ran has no scale: the others say it.
            if row["scale"] is not None:
                self._scales[key] = row["scale"]
            if row["prompt_version"] is not None:
                self._with_dimensions.add(key)
        if status in COUNTED:
            for metric, column in METRICS.items():
                values = [row[column] for row in trials if row[column] is not None]
                if values:
                    self._values[key][metric].append(sum(values) / len(values))

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for key, statuses in self._statuses.items():
            scale = self._scales[key]
            counts = RunCounts.tallied(statuses)
            for metric in METRICS:
                if metric != "score" and key not in self._with_dimensions:
                    continue
                upper = (scale if metric == "score" else 1.0) if scale else None
                rows.append(aggregate(*key, metric, self._values[key][metric], counts, upper=upper))
        return rows


def one_row_per_item(items: pd.DataFrame) -> pd.DataFrame:
    """An ``items`` table (of one scorer) with one row per item: an item judged in several
    trials gets the mean of its scores over them (``None`` unless every trial counts), the
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
    counted = collapsed["status"].isin(COUNTED)
    for column in METRICS.values():
        means = grouped[column].mean()
        collapsed[column] = means.where(counted, None)
    summed = (
        "judge_calls",
        "judge_retries",
        "judge_calls_reused",
        "input_tokens",
        "output_tokens",
        "reasoning_tokens",
    )
    for column in (*summed, "judge_cost"):
        if column in collapsed.columns:
            collapsed[column] = grouped[column].sum(min_count=1)
    result: pd.DataFrame = collapsed.reset_index(drop=True)
    return result


def score_means(aggregates: Path) -> dict[str, float | None]:
    """Each scorer's mean score over its scored items and blank summaries, read from a run's
    aggregates table."""
    return {
        row["scorer_id"]: row["mean"]
        for row in pq.read_table(aggregates).to_pylist()
        if row["metric"] == "score"
    }
