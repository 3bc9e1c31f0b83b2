"""``runs.parquet``: one row a run, written with its final manifest, and ``load_history``, which
reads every run under a folder as such rows. (The trend a nightly comparison draws from them is
``_analysis/_history.py``.)

Every run directory gets a ``runs.parquet`` where its final manifest is written (a run, a run
that failed, a merge of shards): the run's id, label, config hash, judge, prompts and dataset,
its times and status, counts, tokens, cost, and each dimension's mean with its interval. The
rows of many runs concatenate into one table of a benchmark's history, for pandas, DuckDB
(``SELECT * FROM 'outputs/**/runs.parquet'``) or ``load_history(folder)``, which also reads the
runs that have no such file (older runs, runs still going or killed) from their manifests.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from summeval_runner._errors import InputError
from summeval_runner._rundir._manifest import MANIFEST, Manifest, deciding_config, read_manifest
from summeval_runner._rundir._parquet import described, frame_of, typed_frame, write_typed
from summeval_runner._scorers._result import METRICS, SUMMARIZATION_SCORER_ID

logger = logging.getLogger("summeval_runner")
RUNS = "runs.parquet"
TIME = pa.timestamp("us", tz="UTC")


def _dimension_fields(dimension: str) -> list[pa.Field]:
    return [
        described(
            f"{dimension}_n",
            pa.int64(),
            f"items that count (scored, blank summaries) with a {dimension} value",
        ),
        described(
            f"{dimension}_mean",
            pa.float64(),
            f"mean {dimension} over the scored items and blank summaries (0)",
        ),
        described(
            f"{dimension}_ci95_low",
            pa.float64(),
            f"lower end of the {dimension} mean's 95% interval",
        ),
        described(
            f"{dimension}_ci95_high",
            pa.float64(),
            f"upper end of the {dimension} mean's 95% interval",
        ),
    ]


RUNS_SCHEMA = pa.schema(
    [
        described("run_id", pa.string(), "the run's id (its manifest's run_id)", nullable=False),
        described("variant", pa.string(), "the run's label (runner.variant)", nullable=False),
        described(
            "config_hash",
            pa.string(),
            "SHA-256 of what decides the results: the config's dataset, target, model and scorer "
            "sections (less dataset.path) and the run's setup (judge, prompts, settings as "
            "resolved); equal for runs that measure alike",
            nullable=False,
        ),
        described(
            "benchmark_id",
            pa.string(),
            "SHA-256 of the config that decides the results (less dataset.path and prices) and "
            "the label: equal for a benchmark's runs night after night (what summeval-compare "
            "--history groups by)",
            nullable=False,
        ),
        described("judge", pa.string(), "the judge (provider/model, or offline)"),
        described("prompt_version", pa.string(), "the scorer's prompt version"),
        described(
            "coverage_basis",
            pa.string(),
            "what its items' coverage was measured on: source_questions, key_facts, questions "
            "or reference (the manifest's coverage_bases counts each), mixed when its items "
            "differ; null when no item was judged",
        ),
        described(
            "dataset_fingerprint",
            pa.string(),
            "SHA-256 of the dataset's inputs (dataset.inputs_sha256), else of its file",
        ),
        described("started_at", TIME, "when the run started (UTC)", nullable=False),
        described("finished_at", TIME, "when the run ended (UTC); null: it did not end"),
        described(
            "duration_s",
            pa.float64(),
            "seconds of work, every part of a resumed run's (a merge: its shards' summed)",
        ),
        described(
            "status",
            pa.string(),
            "completed, interrupted, aborted, failed, partial (a merge lacking shards) or running "
            "(in progress, or killed)",
            nullable=False,
        ),
        described("items", pa.int64(), "items finished; null: none recorded"),
        described("scored", pa.int64(), "items scored (judged)"),
        described("blank_summaries", pa.int64(), "items whose summary is blank: 0 in every figure"),
        described("unscorable", pa.int64(), "items unscorable (a blank source)"),
        described("errors", pa.int64(), "items that ended in error"),
        described("unfinished", pa.int64(), "items the run was to finish and did not"),
        described("input_tokens", pa.int64(), "the judge's input tokens, every request's"),
        described("output_tokens", pa.int64(), "the judge's output tokens, every request's"),
        described("cost_usd", pa.float64(), "the run's cost in USD; null: not known"),
        *(field for dimension in METRICS for field in _dimension_fields(dimension)),
    ]
)


def benchmark_id(manifest: Manifest) -> str:
    """What makes two runs the same benchmark, night after night: the SHA-256 of the config
    that decides results (``deciding_config``: not where the data lies, not a price) and the
    run's label. ``summeval-compare --history`` takes a run's earlier nights by it, and
    ``runs.parquet`` holds it, so both group runs alike. (It leaves out the ``setup``, which an
    upgrade may change: a prompt version that differs then stops the comparison loudly, as
    runs that do not measure alike, instead of starting a new history with no night before.)"""
    same = {"config": deciding_config(manifest.config), "variant": manifest.variant}
    text = json.dumps(same, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def config_hash(manifest: Manifest) -> str:
    """The SHA-256 of what decides a run's results: its config's dataset, target, model and
    scorer sections (without the dataset's path) and its ``setup``, as canonical JSON."""
    deciding = {"config": deciding_config(manifest.config), "setup": manifest.setup}
    text = json.dumps(deciding, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cost(manifest: Manifest) -> float | None:
    """The run's total cost in USD, where the manifest records one (``cost.total``)."""
    cost = getattr(manifest, "cost", None)
    total = cost.get("total") if isinstance(cost, Mapping) else getattr(cost, "total", None)
    if isinstance(total, bool) or not isinstance(total, int | float):
        return None
    return float(total)


def _dimensions(run_dir: Path, manifest: Manifest) -> dict[str, Any]:
    """Each dimension's n, mean and interval, from the aggregates table the manifest names
    (none for a run that wrote no tables: still going, killed, or failed before them)."""
    values: dict[str, Any] = {}
    name = manifest.tables.get("aggregates")
    if name is None or not (run_dir / name).is_file():
        return values
    for row in pq.read_table(run_dir / name).to_pylist():
        if row["scorer_id"] != SUMMARIZATION_SCORER_ID or row["metric"] not in METRICS:
            continue
        for stat in ("n", "mean", "ci95_low", "ci95_high"):
            values[f"{row['metric']}_{stat}"] = row[stat]
    return values


def run_row(run_dir: Path, manifest: Manifest) -> dict[str, Any]:
    """A run's row of ``runs.parquet``, from its manifest and its aggregates table."""
    dataset, counts, tokens = manifest.dataset, manifest.counts, manifest.tokens
    return {
        "run_id": manifest.run_id,
        "variant": manifest.variant,
        "config_hash": config_hash(manifest),
        "benchmark_id": benchmark_id(manifest),
        "judge": manifest.judge.name if manifest.judge is not None else None,
        "prompt_version": manifest.prompt_version,
        "coverage_basis": manifest.coverage_basis,
        "dataset_fingerprint": (
            (dataset.inputs_sha256 or dataset.sha256) if dataset is not None else None
        ),
        "started_at": manifest.started_at,
        "finished_at": manifest.finished_at,
        "duration_s": manifest.duration_s,
        "status": manifest.status,
        "items": counts.total if counts is not None else None,
        "scored": counts.scored if counts is not None else None,
        "blank_summaries": counts.blank_summaries if counts is not None else None,
        "unscorable": counts.unscorable if counts is not None else None,
        "errors": counts.errors if counts is not None else None,
        "unfinished": manifest.unfinished,
        "input_tokens": tokens.input if tokens is not None else None,
        "output_tokens": tokens.output if tokens is not None else None,
        "cost_usd": _cost(manifest),
        **_dimensions(run_dir, manifest),
    }


def write_runs_table(run_dir: Path, manifest: Manifest) -> Path | None:
    """Write ``runs.parquet`` (the run's one row) beside the manifest just written.

    A shard writes none: its merged run's row stands for the whole run, so that the rows under
    a folder count each run once. Never raises: the row is derived from the manifest and the
    aggregates, so a file that cannot be written (a full disk) is warned about, and
    ``load_history`` reads the run from its manifest instead.
    """
    if manifest.shard is not None:
        return None
    try:
        return write_typed(
            typed_frame([run_row(run_dir, manifest)], RUNS_SCHEMA), RUNS_SCHEMA, run_dir / RUNS
        )
    except (OSError, ValueError, pa.ArrowException) as error:
        logger.warning(
            "%s could not be written (%s); load_history reads the run from its %s instead",
            run_dir / RUNS,
            error,
            MANIFEST,
        )
        return None


def _stored(run_dir: Path, manifest: Manifest) -> pa.Table | None:
    """The run's ``runs.parquet``, where it is there, readable, and of the run as its manifest
    now says (a run resumed since it was written has another status, or no end yet)."""
    path = run_dir / RUNS
    if not path.is_file():
        return None
    try:
        table = pq.read_table(path)
        table = table.select(RUNS_SCHEMA.names).cast(RUNS_SCHEMA)
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None  # damaged, or written by a version with other columns: rebuilt
    rows = table.select(["run_id", "status", "finished_at"]).to_pylist()
    now = {
        "run_id": manifest.run_id,
        "status": manifest.status,
        "finished_at": manifest.finished_at,
    }
    return table if rows == [now] else None


def load_history(folder: Path | str) -> pd.DataFrame:
    """Every run under ``folder``, oldest first: one row a run, the columns of
    ``runs.parquet`` and ``run_dir`` (where the run was found).

    Runs whose ``runs.parquet`` is missing or out of date (older runs, runs still going or
    killed, runs resumed since) are read from their manifest and aggregates. Shards are left
    out: their merged run stands for them. Timestamps are timezone-aware (UTC); counts and
    tokens are pandas' nullable ``Int64``, so a run that recorded none shows ``<NA>``.
    ``InputError`` if ``folder`` is not a folder.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{root} is not a folder of runs")
    tables, where = [], []
    for path in sorted(root.rglob(MANIFEST)):
        run_dir = path.parent
        try:
            manifest = read_manifest(run_dir)
        except InputError as error:
            logger.warning("left out of the history: %s", error)
            continue
        if manifest.shard is not None:
            continue  # its merged run stands for it
        table = _stored(run_dir, manifest)
        if table is None:
            table = pa.Table.from_pylist([run_row(run_dir, manifest)], schema=RUNS_SCHEMA)
        tables.append(table)
        where.append(str(run_dir))
    runs = pa.concat_tables(tables) if tables else RUNS_SCHEMA.empty_table()
    runs = runs.append_column(described("run_dir", pa.string(), "the run directory"), [where])
    ordered = frame_of(runs).sort_values(["started_at", "run_id"], kind="stable")
    history: pd.DataFrame = ordered.reset_index(drop=True)
    return history
