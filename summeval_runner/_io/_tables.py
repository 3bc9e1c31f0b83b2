"""Results out: explicit Parquet schemas, a journal written as items complete, and aggregates.

Each completed item is appended to ``journal.jsonl`` at once (one line, flushed), so finished
work is on disk while the run goes on. ``finish`` then compacts the journal into the Parquet
tables and computes the aggregates from the item rows.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; one writer per run directory is up to you
    fcntl = None  # type: ignore[assignment]

from summeval_runner._errors import ConfigError
from summeval_runner._io._manifest import environment_secrets, scrub
from summeval_runner._scorers._result import (
    ErrorInfo,
    SummarizationResult,
    number_of,
    status_of,
)

# Every row says which run, variant, item and scorer it belongs to.
_KEY_FIELDS = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("variant", pa.string(), nullable=False),
    pa.field("item_id", pa.string(), nullable=False),
    pa.field("scorer_id", pa.string(), nullable=False),
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
        pa.field("judge_latency_s", pa.float64()),
        pa.field("target_latency_s", pa.float64()),
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
TABLES: Mapping[str, pa.Schema] = {
    "items": ITEMS_SCHEMA,
    "alignment": ALIGNMENT_SCHEMA,
    "coverage": COVERAGE_SCHEMA,
    "aggregates": AGGREGATES_SCHEMA,
}
JOURNAL = "journal.jsonl"
METRICS = (("score", "score"), ("alignment", "alignment_score"), ("coverage", "coverage_score"))
_COMPACT_BATCH = 2000
_SYNC_INTERVAL_S = 1.0
# A journal line starts with its position and item id (json.dumps keeps the order they were
# given in), so indexing the journal needs no full parse of each line.
_HEAD = re.compile(rb'^\{"position": (\d+), "item_id": ("(?:[^"\\]|\\.)*")')


def scorer_rows(
    *,
    run_id: str,
    variant: str,
    item_id: str,
    scorer_id: str,
    result: Any,
    source: str | None,
    summary: str | None,
    target_latency_s: float | None,
    metadata: Mapping[str, Any],
) -> dict[str, list[dict[str, Any]]]:
    """The rows one scorer's outcome for one item adds to each table.

    ``result`` is a ``SummarizationResult``, an ``ErrorInfo`` (the target or the scorer failed),
    or any other scorer's result (its ``score``, ``status`` and ``reason`` are read when present).
    """
    keys = {"run_id": run_id, "variant": variant, "item_id": item_id, "scorer_id": scorer_id}
    row: dict[str, Any] = dict.fromkeys(ITEMS_SCHEMA.names) | keys
    row |= {
        "source": source,
        "summary": summary,
        "target_latency_s": target_latency_s,
        "metadata": json.dumps(dict(metadata), ensure_ascii=False, default=str),
    }
    alignment: list[dict[str, Any]] = []
    coverage: list[dict[str, Any]] = []
    if isinstance(result, ErrorInfo):
        row |= {"status": "error", **_error_columns(result)}
    elif isinstance(result, SummarizationResult):
        row |= _summarization_columns(result)
        if result.error is not None:
            row |= _error_columns(result.error)
        if result.preprocess_step_result is not None:
            pre = result.preprocess_step_result
            alignment = [
                keys
                | {"position": i, "claim": v.claim, "supported": v.supported, "reason": v.reason}
                for i, v in enumerate(pre.alignment)
            ]
            if result.analyze_step_result is not None:
                verdicts = result.analyze_step_result.coverage
                for i, question in enumerate(pre.questions[: result.max_questions]):
                    verdict = verdicts[i] if i < len(verdicts) else None
                    coverage.append(
                        keys
                        | {
                            "position": i,
                            "question": question,
                            "answered": bool(verdict and verdict.answered),
                            "reason": verdict.reason if verdict else None,
                            "verdict_missing": verdict is None,
                        }
                    )
    else:
        status = status_of(result)
        row |= {
            "status": status,
            "score": number_of(result) if status != "error" else None,
            "reason": getattr(result, "reason", None),
        }
    return {"items": [row], "alignment": alignment, "coverage": coverage}


def _error_columns(error: ErrorInfo) -> dict[str, Any]:
    return {
        "error_type": error.type,
        "error_message": error.message,
        "error_step": error.step,
        "error_attempts": error.attempts,
        "error_raw_reply": error.raw_reply,
    }


def _summarization_columns(result: SummarizationResult) -> dict[str, Any]:
    pre, ana = result.preprocess_step_result, result.analyze_step_result
    asked = min(len(pre.questions), result.max_questions) if pre else None
    return {
        "status": result.status,
        "score": result.score,
        "alignment_score": result.alignment_score,
        "coverage_score": result.coverage_score,
        "claims": len(pre.alignment) if pre else None,
        "supported_claims": sum(v.supported for v in pre.alignment) if pre else None,
        "questions": asked,
        "answered_questions": sum(v.answered for v in ana.coverage[:asked]) if ana else None,
        "reason": result.reason,
        "judge": result.judge,
        "prompt_version": result.prompt_version,
        "max_questions": result.max_questions,
        "scale": result.scale,
        "judge_calls": result.usage.calls,
        "judge_retries": result.usage.retries,
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "judge_latency_s": (
            result.usage.preprocess.latency_s
            + result.usage.analyze.latency_s
            + result.usage.reason.latency_s
        ),
    }


class RunWriter:
    """Writes a run's tables into ``run_dir``: the journal as items complete, Parquet at the end.

    Each journal line is one item: its dataset position, its id and its rows. A line is flushed
    as soon as it is written, so a killed process loses no finished item, and synced to the disk
    at least every second, so a power cut loses at most the last second. ``resume=True`` opens
    an existing journal to append to it, dropping a last line cut short by a crash.

    The journal is locked while the writer holds it: a second process writing the same run
    directory (an overlapping nightly job, a resume of a run still going) is refused with
    ``ConfigError`` instead of interleaving its lines.
    """

    def __init__(self, run_dir: Path, *, resume: bool = False) -> None:
        self.run_dir = run_dir
        self.journal_path = run_dir / JOURNAL
        run_dir.mkdir(parents=True, exist_ok=True)
        self._journal: TextIO = self.journal_path.open("a", encoding="utf-8")
        try:
            _lock(self._journal)
        except OSError:
            self._journal.close()
            raise ConfigError(
                f"{run_dir} is being written by another summeval-run; wait for it to finish "
                "(or stop it) before resuming it"
            ) from None
        if resume:
            _drop_cut_line(self.journal_path)
        self._secrets = environment_secrets()
        self._synced = time.monotonic()

    def write(self, position: int, item_id: str, rows: Mapping[str, list[dict[str, Any]]]) -> None:
        """Append one item's rows to the journal, flushed so that a crash cannot lose them.

        Values of secret environment variables are scrubbed first: an error message that
        quoted a key must not carry it to disk.
        """
        entry = {"position": position, "item_id": item_id, **rows}
        line = json.dumps(entry, ensure_ascii=False, default=str)
        self._journal.write(scrub(line, self._secrets) + "\n")
        self._journal.flush()
        now = time.monotonic()
        if now - self._synced >= _SYNC_INTERVAL_S:
            os.fsync(self._journal.fileno())
            self._synced = now

    def close(self) -> None:
        if not self._journal.closed:
            self._journal.flush()
            os.fsync(self._journal.fileno())
            self._journal.close()

    def finish(self) -> dict[str, Path]:
        """Compact the journal into Parquet tables and write the aggregates; return the paths.

        Rows come out in dataset order whatever order items finished in, and an item journaled
        twice (tried again on resume) keeps its last entry, so the tables of a resumed run equal
        those of an uninterrupted one.
        """
        self.close()
        paths = {name: self.run_dir / f"{name}.parquet" for name in TABLES}
        writers = {
            name: pq.ParquetWriter(_partial(paths[name]), TABLES[name])
            for name in ("items", "alignment", "coverage")
        }
        # Per (run_id, variant, scorer_id): every item's status, and each metric's values.
        statuses: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        scales: dict[tuple[str, str, str], float | None] = {}
        values: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(
            lambda: {metric: [] for metric, _ in METRICS}
        )
        try:
            for batch in _batches(self.journal_path):
                for name, writer in writers.items():
                    writer.write_table(pa.Table.from_pylist(batch[name], schema=TABLES[name]))
                for row in batch["items"]:
                    key = (row["run_id"], row["variant"], row["scorer_id"])
                    statuses[key].append(row["status"])
                    scales[key] = row["scale"]
                    if row["status"] == "scored":
                        for metric, column in METRICS:
                            if row[column] is not None:
                                values[key][metric].append(row[column])
        finally:
            for writer in writers.values():
                writer.close()
        aggregates = [
            _aggregate(
                *key,
                metric,
                values[key][metric],
                seen,
                upper=(scales[key] if metric == "score" else 1.0) if scales[key] else None,
            )
            for key, seen in statuses.items()
            for metric, _ in METRICS
        ]
        pq.write_table(
            pa.Table.from_pylist(aggregates, schema=AGGREGATES_SCHEMA),
            _partial(paths["aggregates"]),
        )
        for path in paths.values():
            os.replace(_partial(path), path)
        return paths


def score_totals(aggregates: Path, scorer_id: str) -> tuple[dict[str, int], float | None]:
    """A run's item counts (total, scored, unscorable, errors) and mean score, from its tables."""
    for row in pq.read_table(aggregates).to_pylist():
        if row["scorer_id"] == scorer_id and row["metric"] == "score":
            counts = {name: row[name] for name in ("scored", "unscorable", "errors")}
            return {"total": row["items"], **counts}, row["mean"]
    return {"total": 0, "scored": 0, "unscorable": 0, "errors": 0}, None


def token_totals(items: Path) -> dict[str, int]:
    """The judge tokens a run's items used, summed from its items table."""
    table = pq.read_table(items, columns=["input_tokens", "output_tokens"])
    return {
        "input": int(pc.sum(table["input_tokens"]).as_py() or 0),
        "output": int(pc.sum(table["output_tokens"]).as_py() or 0),
    }


def journaled_statuses(run_dir: Path) -> dict[str, str]:
    """Each journaled item's id and status (its last entry's; ``error`` if any scorer failed)."""
    statuses: dict[str, str] = {}
    journal = run_dir / JOURNAL
    if not journal.exists():
        return statuses
    with journal.open(encoding="utf-8") as lines:
        for line in lines:
            if not line.endswith("\n"):
                break
            entry = json.loads(line)
            found = {row["status"] for row in entry["items"]}
            statuses[entry["item_id"]] = next(
                (status for status in ("error", "unscorable") if status in found), "scored"
            )
    return statuses


def _lock(file: TextIO) -> None:
    """An exclusive lock on an open file, released when it is closed (POSIX; elsewhere none)."""
    if fcntl is not None:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def _drop_cut_line(journal: Path) -> None:
    """Truncate the journal after its last complete line: a crash may have cut the one after."""
    if not journal.exists():
        return
    with journal.open("rb+") as file:
        data = file.read()
        end = data.rfind(b"\n") + 1
        if end != len(data):
            file.truncate(end)


def _partial(path: Path) -> Path:
    # Tables appear under their real name only when complete: a reader never sees half a file.
    return path.with_name(f".{path.name}.partial")


def journaled_ids(run_dir: Path) -> frozenset[str]:
    """The ids of the items in a run's journal, read from each line's head only."""
    return frozenset(_latest_entries(run_dir / JOURNAL))


def _journal_index(journal: Path) -> list[int]:
    """Byte offsets of the lines to compact: the last entry of each item, in dataset order."""
    return [offset for _, offset in sorted(_latest_entries(journal).values())]


def _latest_entries(journal: Path) -> dict[str, tuple[int, int]]:
    """Each journaled item's id: the dataset position and byte offset of its last entry."""
    latest: dict[str, tuple[int, int]] = {}
    offset = 0
    with journal.open("rb") as lines:
        for line in lines:
            if not line.endswith(b"\n"):
                break  # a line cut short by a crash was never acknowledged
            head = _HEAD.match(line)
            if head is not None:
                position, item_id = int(head[1]), json.loads(head[2])
            else:
                entry = json.loads(line)
                position, item_id = entry["position"], entry["item_id"]
            latest[item_id] = (position, offset)
            offset += len(line)
    return latest


def _batches(journal: Path) -> Iterator[dict[str, list[dict[str, Any]]]]:
    batch: dict[str, list[dict[str, Any]]] = {"items": [], "alignment": [], "coverage": []}
    count = 0
    with journal.open("rb") as lines:
        for offset in _journal_index(journal):
            lines.seek(offset)
            rows = json.loads(lines.readline())
            for name in batch:
                batch[name].extend(rows[name])
            count += 1
            if count == _COMPACT_BATCH:
                yield batch
                batch = {name: [] for name in batch}
                count = 0
    yield batch


def _aggregate(
    run_id: str,
    variant: str,
    scorer_id: str,
    metric: str,
    values: list[float],
    statuses: list[str],
    *,
    upper: float | None,
) -> dict[str, Any]:
    """n, mean, spread and the t-interval of the mean, clipped to [0, upper] when bounded."""
    n = len(values)
    ordered = sorted(values)
    mean, low, high = mean_interval(values, upper=upper)
    std = statistics.stdev(values) if n > 1 else (0.0 if n == 1 else None)
    return {
        "run_id": run_id,
        "variant": variant,
        "scorer_id": scorer_id,
        "metric": metric,
        "items": len(statuses),
        "scored": statuses.count("scored"),
        "unscorable": statuses.count("unscorable"),
        "errors": statuses.count("error"),
        "n": n,
        "mean": mean,
        "std": std,
        "min": ordered[0] if ordered else None,
        "p25": _quantile(ordered, 0.25),
        "median": _quantile(ordered, 0.5),
        "p75": _quantile(ordered, 0.75),
        "max": ordered[-1] if ordered else None,
        "ci95_low": low,
        "ci95_high": high,
    }


def mean_interval(
    values: Sequence[float], *, upper: float | None
) -> tuple[float | None, float | None, float | None]:
    """The mean and its two-sided 95% Student's t interval, clipped to [0, upper] when bounded.

    The interval needs two values; the mean needs one.

    >>> mean_interval([0.0, 1.0], upper=1.0)  # t(1 df) is wide: clipped to the range
    (0.5, 0.0, 1.0)
    >>> mean_interval([0.7], upper=None)
    (0.7, None, None)
    """
    n = len(values)
    if n == 0:
        return None, None, None
    mean = statistics.fmean(values)
    if n == 1:
        return mean, None, None
    half_width = t_critical_95(n - 1) * statistics.stdev(values) / math.sqrt(n)
    low, high = mean - half_width, mean + half_width
    if upper is not None:
        low, high = max(0.0, low), min(upper, high)
    return mean, low, high


def _quantile(ordered: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks, as pandas and numpy do by default."""
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# Two-sided 95% critical values of Student's t for 1-30 degrees of freedom; beyond 30 the
# normal value (1.96) is within 4% and shrinking.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_critical_95(degrees_of_freedom: int) -> float:
    """The t value that bounds a two-sided 95% interval of the mean."""
    if degrees_of_freedom < 1:
        raise ValueError(f"degrees_of_freedom must be >= 1, got {degrees_of_freedom}")
    if degrees_of_freedom <= len(_T95):
        return _T95[degrees_of_freedom - 1]
    return 1.96 + 2.4 / degrees_of_freedom  # matches the table at 30 and tends to 1.96
