"""``summeval-compare``: compare runs item by item, gate a nightly job on regressions, report.

It takes run directories and sweep folders (each variant's run, shards by their merged run), or
``--history FOLDER`` (the newest run against the latest earlier completed run of its config, and
the whole history's trend in the report). ``comparison.parquet`` and ``report.html`` go beside
the newest run compared (a sweep's: in the sweep's folder), or into ``--out``; never silently
into the current folder.

Exit codes: 0 compared (and, with ``--fail-if-drop`` or ``--fail-if-below``, the gate passed); 1
the gate failed: a variant dropped below the baseline by more than the threshold, significantly,
or a compared run's mean on a dimension is below ``--fail-if-below``'s floor, or (with
``--fail-if-flagged``) a compared run has an item that tripped a manipulation check, or a run
did not complete (items unfinished), scored no item, errored more than ``--max-error-rate``, or
has no item in common with the baseline (nothing was compared). With ``--history``, the newest
run is gated whatever its status (failed, interrupted, aborted, still running or killed);
2 bad input (a directory that is not a
finished run, an option out of range, runs that differ in judge, scale, prompt version or
dataset without ``--allow-mismatch``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from summeval_runner._analysis._compare import (
    Run,
    compare_loaded,
    labelled,
    load_runs,
    write_comparison,
)
from summeval_runner._analysis._findings import check_floors
from summeval_runner._analysis._gate import gate_comparison
from summeval_runner._analysis._history import config_history, history_of, history_trend
from summeval_runner._cli._allocator import use_system_allocator
from summeval_runner._cli._compare_options import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_REGRESSION,
    build_parser,
    options_problem,
)
from summeval_runner._cli._compare_output import print_comparison, print_verdict, print_warnings
from summeval_runner._cli._sweep import MERGED, is_sweep, variants
from summeval_runner._errors import InputError, RunsDiffer, SummevalError
from summeval_runner._report._page import render_report
from summeval_runner._rundir._paths import directory_problem


def beside(run_dir: Path) -> Path:
    """Where a comparison whose newest run is ``run_dir`` goes by default: the folder that holds
    the run (for a sweep's merged run, the sweep's folder)."""
    if run_dir.name in ("", ".."):
        # "." or "..": a path with no name of its own, whose folder is found from the whole.
        run_dir = Path(os.path.abspath(run_dir))
    folder = run_dir.parent
    if folder.name == MERGED and is_sweep(folder.parent):
        return folder.parent
    return folder


def _expand(paths: Sequence[Path]) -> tuple[list[Path], dict[Path, Path]]:
    """The run directories to compare, each sweep folder replaced by its variants' runs (in job
    order, shards by their merged run); and the sweep folder each of those came from.

    A variant whose shards were never merged, or whose run wrote no tables, is left out with a
    warning; a sweep with no run left is ``InputError``.
    """
    runs: list[Path] = []
    sweeps: dict[Path, Path] = {}
    for path in paths:
        if not is_sweep(path):
            runs.append(path)
            continue
        found = []
        for variant in variants(path):
            if variant.run_dir is None:
                shards = " ".join(str(shard) for shard in variant.shards)
                print(
                    f"summeval-compare: warning: {path}: the shards of {variant.name} were never "
                    f"merged, so it is left out; merge them with: summeval-merge {shards} --out "
                    f"{path / variant.name}",
                    file=sys.stderr,
                )
            elif not (variant.run_dir / "items.parquet").is_file():
                print(
                    f"summeval-compare: warning: {path}: {variant.name} wrote no tables (it did "
                    "not finish), so it is left out",
                    file=sys.stderr,
                )
            else:
                found.append(variant.run_dir)
                sweeps[variant.run_dir] = path
        if not found:
            raise InputError(f"{path} is a sweep folder with no finished run in it")
        runs.extend(found)
    return runs, sweeps


@dataclass(frozen=True)
class _Compared:
    """The runs read, their baseline, their comparison, where the outputs go, and (with
    ``--history``) the trend."""

    loaded: list[Run]
    base: Run | None
    comparison: pd.DataFrame
    out: Path
    trend: pd.DataFrame | None = None  # with --history only


def _compared(args: argparse.Namespace, floors: dict[str, float]) -> _Compared:
    """Read the runs the options name and compare them; ``SummevalError`` (``RunsDiffer``
    among them) for runs that cannot be."""
    if args.history is not None:
        family = config_history(args.history)
        table, same = history_of(family)
        print(f"history of {same[-1].variant} under {args.history} ({len(same)} runs):")
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        # The newest run (read even if it wrote no tables), against the latest earlier
        # completed run; with none (the first night), alone: it still meets the gate, so a
        # first night that errored or scored nothing fails it as any other night would.
        loaded: list[Run] = labelled(same[-2:])
        base = loaded[0] if len(loaded) > 1 else None
        out = args.out or beside(same[-1].path)
    else:
        runs, sweeps = _expand(args.runs)
        baseline = args.baseline or (runs[0] if len(runs) > 1 else None)
        # Without a report, only what the comparison reads of the items is read.
        loaded, base = load_runs(runs, baseline, compared_only=args.no_report)
        newest = max(loaded, key=lambda run: run.started_at)
        out = args.out or sweeps.get(newest.path) or beside(newest.path)
    check_floors(loaded, floors)
    comparison = compare_loaded(loaded, base, alpha=args.alpha, allow_mismatch=args.allow_mismatch)
    if args.history is None:
        return _Compared(loaded, base, comparison, out)
    trend = history_trend(family, alpha=args.alpha, threshold=args.fail_if_drop or 0.0)
    return _Compared(loaded, base, comparison, out, trend)


def _error(problem: str) -> int:
    print(f"summeval-compare: error: {problem}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _differ(error: RunsDiffer) -> str:
    listed = "".join(f"\n  {mismatch.describe()}" for mismatch in error.mismatches)
    return (
        "these runs differ in what decides their scores, so their scores do not compare:"
        f"{listed}\nCompare runs of the same judge, scale, prompts, coverage basis and dataset, "
        "or pass --allow-mismatch to compare them anyway."
    )


def _write_outputs(args: argparse.Namespace, compared: _Compared) -> str | None:
    """Write ``comparison.parquet`` and (unless ``--no-report``) ``report.html`` and print where
    they are; what went wrong otherwise."""
    out = compared.out
    # A folder that cannot take the outputs (a file, a folder under one, no permission) is
    # said in one line and exit 2: exit 1 is the gate's, and a CI job would read it as a drop.
    problem = directory_problem(out)
    if problem is not None:
        return f"the comparison cannot be written into {out}: {problem}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        table_path = write_comparison(compared.comparison, out / "comparison.parquet")
        report = (
            None
            if args.no_report
            else render_report(
                compared.loaded,
                compared.base,
                compared.comparison,
                out / "report.html",
                history=compared.trend,
            )
        )
    except OSError as error:
        return f"the comparison cannot be written into {out}: {error.strerror or error}"
    print_comparison(compared.comparison)
    print(f"comparison: {table_path}")
    if report is not None:
        print(f"report: {report}")
    return None


def run(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = options_problem(args)
    if problem is None and args.history is None and not args.runs:
        problem = "give run directories or sweep folders, or --history FOLDER"
    if problem is not None:
        return _error(problem)
    floors = dict(args.fail_if_below)
    try:
        compared = _compared(args, floors)
    except RunsDiffer as error:
        return _error(_differ(error))
    except SummevalError as error:
        return _error(str(error))
    print_warnings(compared.loaded, compared.base)
    problem = _write_outputs(args, compared)
    if problem is not None:
        return _error(problem)
    # With --history the earlier run is only the yardstick: tonight's run is the one gated.
    base = compared.base
    earlier = [str(base.path)] if compared.trend is not None and base is not None else []
    verdict = gate_comparison(
        compared.comparison,
        fail_if_drop=args.fail_if_drop,
        max_error_rate=args.max_error_rate or 0.0,
        fail_if_below=floors,
        exclude=earlier,
        fail_if_flagged=args.fail_if_flagged,
    )
    print_verdict(verdict)
    for path, text in ((args.summary_md, verdict.markdown), (args.junit, verdict.junit_xml)):
        if path is None:
            continue
        try:
            path.write_text(text(), encoding="utf-8")
        except OSError as error:
            # Exit 2, not the gate's 1: a CI job must not read an unwritable file as a drop.
            return _error(f"{path} cannot be written: {error.strerror or error}")
        print(f"{'summary' if path is args.summary_md else 'junit'}: {path}")
    return EXIT_OK if verdict.passed else EXIT_REGRESSION


def main() -> None:
    """The ``summeval-compare`` entry point."""
    use_system_allocator()
    if hasattr(signal, "SIGPIPE"):
        # `summeval-compare ... | head`: stop quietly when the reader goes away.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(run())
