"""What a finished run prints: its counts, where its results are, and its aggregates."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

from summeval_runner._io._manifest import JudgeNoise, Manifest
from summeval_runner._scorers._outcome import RunCounts


def counts_line(manifest: Manifest) -> str:
    """The run's items by how they ended. Unfinished items and hook errors are shown even when
    0: a reader of a nightly log should not have to infer that nothing was lost."""
    counts = manifest.counts or RunCounts()
    return (
        f"{counts.total} items: {counts.scored} scored, {counts.unscorable} unscorable, "
        f"{counts.errors} errors; {manifest.unfinished or 0} unfinished; "
        f"{manifest.hook_errors} hook errors"
    )


def print_summary(run_dir: Path, manifest: Manifest) -> None:
    """The counts (unfinished items and hook errors included), the results directory and a
    table of the aggregates, on stdout; why the run stopped, if it did not complete, on
    stderr."""
    if manifest.stopped_because:
        print(f"summeval-run: stopped: {manifest.stopped_because}", file=sys.stderr)
    counts = manifest.counts
    # A merge's duration is its shards' summed work, not a wall time: not shown.
    timed = manifest.duration_s is not None and manifest.merged_from is None
    took = f", in {manifest.duration_s:.1f} s" if timed else ""
    if counts is not None:
        print(counts_line(manifest) + took)
    print(f"results: {run_dir}")
    aggregates = manifest.tables.get("aggregates")
    if aggregates is None:
        return
    rows = pq.read_table(run_dir / aggregates).to_pylist()
    if not rows:
        return
    print(f"{'scorer':<22} {'metric':<10} {'n':>5} {'mean':>7}  {'95% CI':<17}")
    for row in rows:
        mean = f"{row['mean']:.3f}" if row["mean"] is not None else "n/a"
        ci = (
            f"[{row['ci95_low']:.3f}, {row['ci95_high']:.3f}]"
            if row["ci95_low"] is not None
            else ""
        )
        print(f"{row['scorer_id']:<22} {row['metric']:<10} {row['n']:>5} {mean:>7}  {ci:<17}")
    noise = manifest.judge_noise
    if noise is not None:
        print(judge_noise_line(noise))


def judge_noise_line(noise: JudgeNoise) -> str:
    """How much the judge disagreed with itself over the trials of each item."""
    std = "n/a" if noise.score_std_mean is None else f"{noise.score_std_mean:.3f}"
    top = "" if noise.score_std_max is None else f" (at most {noise.score_std_max:.3f})"

    def share(changed: int, compared: int) -> str:
        return f"{changed} of {compared}" + (f" ({changed / compared:.1%})" if compared else "")

    return (
        f"judge noise over {noise.trials} trials: score std {std} per item{top} over "
        f"{noise.items} items; verdicts that changed between trials: claims "
        f"{share(noise.claims_changed, noise.claims_compared)}, questions "
        f"{share(noise.questions_changed, noise.questions_compared)}"
    )
