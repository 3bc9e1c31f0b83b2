"""A config's runs over time (``summeval-compare --history``).

``history`` takes the newest run under a folder whatever its status (a night that failed is
the night to gate on), and compares it with the earlier completed runs of its config
(``config_history`` has them all); ``history_trend`` draws each run's dimensions against the
previous completed run. (Each run's row, ``runs.parquet``, is ``_rundir/_runs_table.py``.)"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from summeval_runner._analysis._compare import Run, compare_loaded, load_run, scored_values
from summeval_runner._errors import InputError
from summeval_runner._rundir._manifest import MANIFEST
from summeval_runner._rundir._parquet import described, typed_frame
from summeval_runner._rundir._runs_table import TIME, benchmark_id
from summeval_runner._scorers._result import COUNTED, METRICS

TREND_SCHEMA = pa.schema(
    [
        described("run_id", pa.string(), "the run's id", nullable=False),
        described("variant", pa.string(), "the run's label", nullable=False),
        described("run_dir", pa.string(), "the run directory", nullable=False),
        described("started_at", TIME, "when the run started (UTC)", nullable=False),
        described("status", pa.string(), "the run's manifest status", nullable=False),
        described("dimension", pa.string(), "score, alignment or coverage", nullable=False),
        described("n", pa.int64(), "items that count (scored, blank summaries)", nullable=False),
        described(
            "mean", pa.float64(), "the dimension's mean over the scored items and blank summaries"
        ),
        described("ci95_low", pa.float64(), "lower end of the mean's 95% t-interval"),
        described("ci95_high", pa.float64(), "upper end of the mean's 95% t-interval"),
        described(
            "mean_diff",
            pa.float64(),
            "paired mean difference from the previous completed run; null for the first, or "
            "with no item scored in both",
        ),
        described(
            "regression",
            pa.bool_(),
            "a significant drop (p < alpha) larger than the threshold, against the previous "
            "completed run",
            nullable=False,
        ),
    ]
)


def history_trend(
    runs: Sequence[Run], *, alpha: float = 0.05, threshold: float = 0.0, seed: int = 0
) -> pd.DataFrame:
    """Each run's dimensions over a history (``runs`` oldest first, of one config), one row per
    run and dimension: its mean with a 95% interval, and against the previous completed run the
    paired difference (``compare_loaded``) and whether it is a regression: significant
    (p < ``alpha``) and a drop larger than ``threshold``."""
    rows: list[dict[str, Any]] = []
    previous: Run | None = None
    for run in runs:
        compared = [run] if previous is None else [previous, run]
        table = compare_loaded(compared, previous, seed=seed, alpha=alpha, allow_mismatch=True)
        for row in table[table["run_dir"] == str(run.path)].to_dict("records"):
            diff, significant = row["mean_diff"], row["significant"]
            dropped = not pd.isna(diff) and float(diff) < -threshold
            rows.append(
                {
                    "run_id": run.run_id,
                    "variant": run.variant,
                    "run_dir": str(run.path),
                    "started_at": run.started_at,
                    "status": run.manifest.status,
                    "dimension": row["dimension"],
                    "n": row["n"],
                    "mean": None if pd.isna(row["mean"]) else row["mean"],
                    "ci95_low": None if pd.isna(row["ci95_low"]) else row["ci95_low"],
                    "ci95_high": None if pd.isna(row["ci95_high"]) else row["ci95_high"],
                    "mean_diff": None if pd.isna(diff) else float(diff),
                    "regression": bool(dropped and not pd.isna(significant) and significant),
                }
            )
        if run.manifest.status == "completed":
            previous = run
    return typed_frame(rows, TREND_SCHEMA)


def find_runs(folder: Path) -> list[Run]:
    """Every run under ``folder`` (a directory with a manifest), whatever its status and
    whether or not it wrote its tables; shards left out."""
    runs = []
    for manifest in sorted(folder.rglob(MANIFEST)):
        try:
            run = load_run(manifest.parent, items_required=False)
        except (InputError, OSError, ValueError):
            continue
        # A shard holds part of a run's items: its merged run stands for it.
        if run.manifest.shard is None:
            runs.append(run)
    return runs


def config_history(folder: Path | str) -> list[Run]:
    """The newest run under ``folder``, whatever its status, and every earlier run of its config
    (``benchmark_id``), whatever theirs: oldest first, the newest last."""
    runs = find_runs(Path(folder))
    if not runs:
        raise InputError(f"{folder} holds no run (no {MANIFEST} under it)")
    newest = max(runs, key=lambda run: run.started_at)
    benchmark = benchmark_id(newest.manifest)
    family = sorted(
        (run for run in runs if run is not newest and benchmark_id(run.manifest) == benchmark),
        key=lambda run: run.started_at,
    )
    # The newest last, even where an earlier run has the same start time.
    return [*family, newest]


def history_of(family: Sequence[Run]) -> tuple[pd.DataFrame, list[Run]]:
    """Of a config's runs (``config_history``): the newest and the earlier completed ones, one
    row per run, oldest first, with its status and each dimension's mean and n; and those runs,
    oldest first (the newest last).

    The newest run is taken whatever its status: one that failed, was interrupted or aborted,
    or is still ``running`` (or was killed) is the run a nightly gate must not pass over for
    an older one. The runs it is compared with are the earlier ones that completed.
    """
    newest = family[-1]
    same = [run for run in family[:-1] if run.manifest.status == "completed"] + [newest]
    rows = []
    for run in same:
        row: dict[str, Any] = {
            "started_at": run.started_at.isoformat(),
            "status": run.manifest.status,
            "run_dir": str(run.path),
        }
        for dimension, column in METRICS.items():
            values = scored_values(run, column)
            row[dimension] = statistics.fmean(values) if len(values) else None
        row["n"] = int(run.items["status"].isin(COUNTED).sum())
        rows.append(row)
    return pd.DataFrame(rows), same


def history(folder: Path | str) -> tuple[pd.DataFrame, list[Run]]:
    """``history_of`` the runs of the newest run's config under ``folder``."""
    return history_of(config_history(folder))
