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
import math
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from summeval_runner._analysis._compare import (
    Run,
    compare_loaded,
    content_pairings,
    labelled,
    load_runs,
    mismatches,
    write_comparison,
)
from summeval_runner._analysis._findings import check_floors, unfinished_runs
from summeval_runner._analysis._gate import gate_comparison
from summeval_runner._analysis._history import config_history, history_of, history_trend
from summeval_runner._cli._allocator import use_system_allocator
from summeval_runner._cli._sweep import MERGED, is_sweep, variants
from summeval_runner._errors import InputError, RunsDiffer, SummevalError
from summeval_runner._report._page import render_report
from summeval_runner._rundir._paths import directory_problem
from summeval_runner._scorers._result import METRICS

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2
_LISTED = 10

_EPILOG = f"""\
examples:
  summeval-compare outputs/baseline outputs/candidate --fail-if-drop 0.02
      the candidate against the baseline, item by item; exit 1 when it dropped by more
      than 0.02 on a dimension, significantly, or did not complete cleanly
  summeval-compare --history outputs/nightly --fail-if-below 0.7 --summary-md summary.md
      the newest nightly run against the earlier ones of its config; exit 1 when its
      mean score is below 0.7; the verdict as Markdown for a CI job's summary

exit codes:
  {EXIT_OK}  compared; with a --fail-if-* option, the gate passed
  {EXIT_REGRESSION}  the gate failed: a significant drop past --fail-if-drop, a mean below
     --fail-if-below, a flagged item with --fail-if-flagged, or a compared run that did not
     complete, scored no item, errored more than --max-error-rate or shares no item with
     the baseline
  {EXIT_BAD_INPUT}  bad input: a directory that is not a finished run, an option out of range,
     runs whose judge, scale, prompt version, coverage basis or dataset differ (without
     --allow-mismatch),
     or a file that could not be written
"""
_WIDEST_LABEL = 60


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="summeval-compare",
        description="Compare summeval-run runs: means with 95% intervals and, against a "
        "baseline, paired differences on the items both scored.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "runs",
        nargs="*",
        type=Path,
        help="run directories (outputs/...), or sweep folders (multirun/...: each variant's run, "
        "in job order; a variant run in shards, its merged run)",
    )
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="RUN",
        help="the run the others are compared with: its directory, or its label (its variant, "
        "as the table shows it); default: the first run given",
    )
    parser.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="FOLDER",
        help="compare the newest run under FOLDER, whatever its status, with the earlier "
        "completed runs of the same config",
    )
    parser.add_argument(
        "--fail-if-drop",
        type=float,
        default=None,
        metavar="X",
        help="exit 1 when a variant is below the baseline by more than X on any dimension, "
        "and the drop is significant; or when a compared run did not complete (interrupted, "
        "items unfinished), scored no item, errored more than --max-error-rate, or has no item "
        "in common with the baseline",
    )
    parser.add_argument(
        "--fail-if-below",
        type=_threshold,
        action="append",
        default=[],
        metavar="[DIMENSION=]X",
        help="exit 1 when a compared run's mean on the dimension (score, alignment, coverage; "
        "score when not named) is below X, whatever the baseline; repeat it for several "
        "dimensions. Like --fail-if-drop, it also fails a run that did not complete, scored no "
        "item or errored more than --max-error-rate (with --history: the newest run only)",
    )
    parser.add_argument(
        "--fail-if-flagged",
        action="store_true",
        help="exit 1 when a compared run has an item that tripped a manipulation check (the "
        "flags column of items.parquet: text addressed to the judge, a forged verdict, fence "
        "or chat-template markers), or was made before the checks; with --history: the newest "
        "run only. Like --fail-if-drop, it also fails a run that did not complete, scored no "
        "item or errored more than --max-error-rate",
    )
    parser.add_argument(
        "--max-error-rate",
        type=float,
        default=None,
        metavar="R",
        help="with --fail-if-drop or --fail-if-below: the share of a run's items that may end "
        "in error (default 0: any errored item fails the gate); a run with no scored item "
        "always fails it",
    )
    parser.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="compare runs whose judge, scale, prompt version, coverage basis or dataset differ "
        "(refused otherwise), with a warning",
    )
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder for comparison.parquet and report.html (default: beside the newest run "
        "compared, in its parent folder; for a sweep folder given, in the sweep folder)",
    )
    parser.add_argument("--no-report", action="store_true", help="write no HTML report")
    parser.add_argument(
        "--summary-md",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the comparison and the gate's verdict as GitHub-flavoured Markdown "
        "(for $GITHUB_STEP_SUMMARY or a pull-request comment)",
    )
    parser.add_argument(
        "--junit",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the gate's verdict as JUnit XML: a test case per run and dimension and "
        "one per run's health, failing exactly where the gate fails",
    )
    return parser


def _threshold(text: str) -> tuple[str, float]:
    """``--fail-if-below``'s value: ``0.7`` (the score) or ``alignment=0.9``."""
    dimension, sep, value = text.rpartition("=")
    dimension = dimension.strip() if sep else "score"
    if dimension not in METRICS:
        raise argparse.ArgumentTypeError(
            f"the dimension must be one of {', '.join(METRICS)}, got {dimension!r} in {text!r}"
        )
    try:
        threshold = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the threshold must be a number, got {value!r} in {text!r}"
        ) from None
    if not math.isfinite(threshold) or threshold < 0:
        raise argparse.ArgumentTypeError(
            f"the threshold must be a finite number >= 0, got {value!r} in {text!r}"
        )
    return dimension, threshold


def _fmt(value: Any, digits: int = 3, sign: bool = False) -> str:
    if value is None or pd.isna(value):
        return ""
    return f"{float(value):{'+' if sign else ''}.{digits}f}"


def _shortened(label: str, width: int) -> str:
    if len(label) <= width:
        return label
    # Cut the middle: a label's start and its end (where duplicates differ) both count.
    return f"{label[: width // 2 - 1]}…{label[-(width - width // 2) :]}"


def print_comparison(comparison: pd.DataFrame) -> None:
    width = min(_WIDEST_LABEL, max([7, *(len(str(v)) for v in comparison["variant"])]))
    print(
        f"{'variant':<{width}} {'status':<11} {'items':>6} {'scored':>6} {'blank':>5} "
        f"{'unscorable':>10} {'errors':>6} {'unfinished':>10}"
    )
    for row in comparison.drop_duplicates(["variant", "run_dir"]).to_dict("records"):
        print(
            f"{_shortened(str(row['variant']), width):<{width}} {row['status']:<11} "
            f"{row['items']:>6} {row['scored']:>6} {row['blank_summaries']:>5} "
            f"{row['unscorable']:>10} {row['errors']:>6} "
            f"{row['unfinished']:>10}"
        )
    print()
    header = (
        f"{'dimension':<10} {'variant':<{width}} {'n':>5} {'mean':>6} {'95% CI':<16} "
        f"{'diff':>7} {'paired 95% CI':<17} {'p':>7} {'+/-/=':<11} {'only here/base':<14}"
    )
    print(header)
    for row in comparison.sort_values(["dimension", "variant"], kind="stable").to_dict("records"):
        ci = f"[{_fmt(row['ci95_low'])}, {_fmt(row['ci95_high'])}]" if _fmt(row["ci95_low"]) else ""
        paired = not pd.isna(row["mean_diff"])
        diff_ci = (
            f"[{_fmt(row['diff_ci95_low'], sign=True)}, {_fmt(row['diff_ci95_high'], sign=True)}]"
            if paired and not pd.isna(row["diff_ci95_low"])
            else ""
        )
        counts = f"{int(row['better'])}/{int(row['worse'])}/{int(row['tied'])}" if paired else ""
        unmatched = (
            f"{len(row['items_only_here'])}/{len(row['items_only_in_baseline'])}" if paired else ""
        )
        # No baseline named: this run is the baseline; else no item was scored in both.
        role = "base" if pd.isna(row["baseline"]) else "n/a"
        variant = _shortened(str(row["variant"]), width)
        mean = _fmt(row["mean"])
        print(
            f"{row['dimension']:<10} {variant:<{width}} {row['n']:>5} {mean:>6} {ci:<16} "
            f"{_fmt(row['mean_diff'], sign=True) if paired else role:>7} {diff_ci:<17} "
            f"{_fmt(row['p_value'], 4) if paired else '':>7} {counts:<11} {unmatched:<14}"
        )
    for row in comparison[comparison["dimension"] == "score"].to_dict("records"):
        for column, where in (
            ("items_only_here", f"only in {row['variant']}"),
            ("items_only_in_baseline", f"only in the baseline {row['baseline']}"),
        ):
            ids = list(row[column])
            if ids:
                more = f" and {len(ids) - _LISTED} more" if len(ids) > _LISTED else ""
                print(f"items {where}: {', '.join(ids[:_LISTED])}{more}")


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


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.fail_if_drop is not None and not (
        math.isfinite(args.fail_if_drop) and args.fail_if_drop >= 0
    ):
        print(
            "summeval-compare: error: --fail-if-drop must be a finite number >= 0, "
            f"got {args.fail_if_drop}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if not 0 < args.alpha < 1:
        print(
            f"summeval-compare: error: --alpha must be between 0 and 1, got {args.alpha}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if args.max_error_rate is not None and not 0 <= args.max_error_rate <= 1:
        print(
            "summeval-compare: error: --max-error-rate must be between 0 and 1, "
            f"got {args.max_error_rate}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    floors = dict(args.fail_if_below)
    if len(floors) < len(args.fail_if_below):
        # Which one would win is the order of the options: a gate looser than meant, unsaid.
        twice = sorted(
            {d for d, _ in args.fail_if_below if sum(e == d for e, _ in args.fail_if_below) > 1}
        )
        print(
            f"summeval-compare: error: --fail-if-below gives {', '.join(twice)} more than once "
            "(" + ", ".join(f"{d}={v:g}" for d, v in args.fail_if_below if d in twice) + "): "
            "give each dimension one floor",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    gating = args.fail_if_drop is not None or bool(floors) or args.fail_if_flagged
    if args.max_error_rate is not None and not gating:
        print(
            "summeval-compare: error: --max-error-rate is a rule of the gate: give --fail-if-drop "
            "or --fail-if-below too (--fail-if-drop 0 fails on any significant drop)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    trend: pd.DataFrame | None = None
    try:
        if args.history is not None:
            family = config_history(args.history)
            table, same = history_of(family)
            print(f"history of {same[-1].variant} under {args.history} ({len(same)} runs):")
            print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
            newest = same[-1]
            # The newest run (read even if it wrote no tables), against the latest earlier
            # completed run; with none (the first night), alone: it still meets the gate, so a
            # first night that errored or scored nothing fails it as any other night would.
            loaded: list[Run] = labelled(same[-2:])
            base = loaded[0] if len(loaded) > 1 else None
            out = args.out or beside(newest.path)
        elif not args.runs:
            print(
                "summeval-compare: error: give run directories or sweep folders, or "
                "--history FOLDER",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        else:
            runs, sweeps = _expand(args.runs)
            baseline = args.baseline or (runs[0] if len(runs) > 1 else None)
            # Without a report, only what the comparison reads of the items is read.
            loaded, base = load_runs(runs, baseline, compared_only=args.no_report)
            newest = max(loaded, key=lambda run: run.started_at)
            out = args.out or sweeps.get(newest.path) or beside(newest.path)
        check_floors(loaded, floors)
        comparison = compare_loaded(
            loaded, base, alpha=args.alpha, allow_mismatch=args.allow_mismatch
        )
        if args.history is not None:
            trend = history_trend(family, alpha=args.alpha, threshold=args.fail_if_drop or 0.0)
    except RunsDiffer as error:
        listed = "".join(f"\n  {mismatch.describe()}" for mismatch in error.mismatches)
        print(
            "summeval-compare: error: these runs differ in what decides their scores, so their "
            f"scores do not compare:{listed}\n"
            "Compare runs of the same judge, scale, prompts, coverage basis and dataset, or pass "
            "--allow-mismatch to compare them anyway.",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    except SummevalError as error:
        print(f"summeval-compare: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for mismatch in mismatches(loaded, base):
        print(
            f"summeval-compare: warning: compared anyway (--allow-mismatch): {mismatch.describe()}",
            file=sys.stderr,
        )
    for pairing in content_pairings(loaded, base):
        print(f"summeval-compare: warning: {pairing.describe()}", file=sys.stderr)
    for each in loaded:
        if each.manifest.question_conflicts:
            # A merge of shards that asked one source different questions: its coverage is
            # not paired question by question with the other run's for those sources.
            print(
                f"summeval-compare: warning: {each.path} was merged from shards that asked "
                f"{each.manifest.question_conflicts} source(s) different coverage questions "
                "(question_conflicts in its manifest): its coverage differences over those "
                "sources carry the noise of the question choice",
                file=sys.stderr,
            )
    # A folder that cannot take the outputs (a file, a folder under one, no permission) is
    # said in one line and exit 2: exit 1 is the gate's, and a CI job would read it as a drop.
    problem = directory_problem(out)
    if problem is not None:
        print(
            f"summeval-compare: error: the comparison cannot be written into {out}: {problem}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        out.mkdir(parents=True, exist_ok=True)
        table_path = write_comparison(comparison, out / "comparison.parquet")
        report = (
            None
            if args.no_report
            else render_report(loaded, base, comparison, out / "report.html", history=trend)
        )
    except OSError as error:
        print(
            f"summeval-compare: error: the comparison cannot be written into {out}: "
            f"{error.strerror or error}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    print_comparison(comparison)
    print(f"comparison: {table_path}")
    if report is not None:
        print(f"report: {report}")
    # With --history the earlier run is only the yardstick: tonight's run is the one gated.
    earlier = [str(base.path)] if args.history is not None and base is not None else []
    verdict = gate_comparison(
        comparison,
        fail_if_drop=args.fail_if_drop,
        max_error_rate=args.max_error_rate or 0.0,
        fail_if_below=floors,
        exclude=earlier,
        fail_if_flagged=args.fail_if_flagged,
    )
    if not verdict.gated:
        for unfinished in unfinished_runs(comparison):
            print(
                f"summeval-compare: note: {unfinished.state}: its figures cover its "
                f"{unfinished.items} finished items only",
                file=sys.stderr,
            )
    # A run that did not finish, measured nothing, or errored has no drop to find (or not
    # yet): the gate fails on it whatever its scores say, as the run's own gate would.
    for broken_run in verdict.broken:
        print(f"summeval-compare: gate: {broken_run.describe()}", file=sys.stderr)
    if any(broken_run.failure == "errors" for broken_run in verdict.broken):
        print(
            "summeval-compare: gate: see error_type and error_message in items.parquet; "
            "--max-error-rate sets the share of errored items allowed",
            file=sys.stderr,
        )
    # Nothing paired, nothing measured against the baseline: no drop could show.
    for unpaired_run in verdict.unpaired:
        print(f"summeval-compare: gate: {unpaired_run.describe()}", file=sys.stderr)
    for regression in verdict.regressions:
        print(f"summeval-compare: regression: {regression.describe()}", file=sys.stderr)
    for low in verdict.below:
        print(f"summeval-compare: below threshold: {low.describe()}", file=sys.stderr)
    for flagged in verdict.flagged:
        print(f"summeval-compare: flagged: {flagged.describe()}", file=sys.stderr)
    for path, text in ((args.summary_md, verdict.markdown), (args.junit, verdict.junit_xml)):
        if path is None:
            continue
        try:
            path.write_text(text(), encoding="utf-8")
        except OSError as error:
            # Exit 2, not the gate's 1: a CI job must not read an unwritable file as a drop.
            print(
                f"summeval-compare: error: {path} cannot be written: {error.strerror or error}",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        print(f"{'summary' if path is args.summary_md else 'junit'}: {path}")
    return EXIT_OK if verdict.passed else EXIT_REGRESSION


def main() -> None:
    """The ``summeval-compare`` entry point."""
    use_system_allocator()
    if hasattr(signal, "SIGPIPE"):
        # `summeval-compare ... | head`: stop quietly when the reader goes away.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(run())
