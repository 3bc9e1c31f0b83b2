"""``summeval-compare``: compare runs item by item, gate a nightly job on regressions, report.

Exit codes: 0 compared (and no regression beyond ``--fail-if-drop``); 1 a variant dropped below
the baseline by more than the threshold, significantly; 2 bad input (a directory that is not a
finished run, an option out of range).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from summeval_runner._errors import SummevalError
from summeval_runner._io._compare import compare_loaded, history, load_runs, regressions
from summeval_runner._io._report import render_report

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2
_LISTED = 10
_WIDEST_LABEL = 60


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="summeval-compare",
        description="Compare summeval-run runs: means with 95% intervals and, against a "
        "baseline, paired differences on the items both scored.",
    )
    parser.add_argument("runs", nargs="*", type=Path, help="run directories (outputs/...)")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="the run the others are compared with (default: the first run given)",
    )
    parser.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="FOLDER",
        help="compare the newest run under FOLDER with the earlier runs of the same config",
    )
    parser.add_argument(
        "--fail-if-drop",
        type=float,
        default=None,
        metavar="X",
        help="exit 1 when a variant is below the baseline by more than X on any dimension, "
        "and the drop is significant",
    )
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("."),
        help="folder for comparison.parquet and report.html (default: the current folder)",
    )
    parser.add_argument("--no-report", action="store_true", help="write no HTML report")
    return parser


def _fmt(value: Any, digits: int = 3, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{float(value):{'+' if sign else ''}.{digits}f}"


def print_comparison(comparison: pd.DataFrame) -> None:
    width = min(_WIDEST_LABEL, max([7, *(len(str(v)) for v in comparison["variant"])]))
    header = (
        f"{'dimension':<10} {'variant':<{width}} {'n':>5} {'mean':>6} {'95% CI':<16} "
        f"{'diff':>7} {'paired 95% CI':<17} {'p':>7} {'+/-/=':<11} {'only here/base':<14}"
    )
    print(header)
    for row in comparison.sort_values(["dimension", "variant"], kind="stable").to_dict("records"):
        ci = f"[{_fmt(row['ci95_low'])}, {_fmt(row['ci95_high'])}]" if _fmt(row["ci95_low"]) else ""
        paired = row["mean_diff"] is not None and not (
            isinstance(row["mean_diff"], float) and math.isnan(row["mean_diff"])
        )
        diff_ci = (
            f"[{_fmt(row['diff_ci95_low'], sign=True)}, {_fmt(row['diff_ci95_high'], sign=True)}]"
            if paired and row["diff_ci95_low"] is not None
            else ""
        )
        counts = f"{int(row['better'])}/{int(row['worse'])}/{int(row['tied'])}" if paired else ""
        unmatched = (
            f"{len(row['items_only_here'])}/{len(row['items_only_in_baseline'])}" if paired else ""
        )
        # No baseline named: this run is the baseline; else no item was scored in both.
        role = "base" if pd.isna(row["baseline"]) else "n/a"
        variant = str(row["variant"])
        if len(variant) > width:
            # Cut the middle: a label's start and its end (where duplicates differ) both count.
            variant = f"{variant[: width // 2 - 1]}…{variant[-(width - width // 2) :]}"
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


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.fail_if_drop is not None and args.fail_if_drop < 0:
        print(
            f"summeval-compare: error: --fail-if-drop must be >= 0, got {args.fail_if_drop}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if not 0 < args.alpha < 1:
        print(
            f"summeval-compare: error: --alpha must be between 0 and 1, got {args.alpha}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        if args.history is not None:
            trend, same = history(args.history)
            print(f"history of {same[-1].variant} under {args.history} ({len(same)} runs):")
            print(trend.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
            if len(same) < 2:
                return EXIT_OK
            runs: list[Path] = [same[-1].path]
            baseline: Path | None = same[-2].path
        elif not args.runs:
            print(
                "summeval-compare: error: give run directories, or --history FOLDER",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        else:
            runs = list(args.runs)
            baseline = args.baseline or (runs[0] if len(runs) > 1 else None)
        loaded, base = load_runs(runs, baseline)
        comparison = compare_loaded(loaded, base, alpha=args.alpha)
    except SummevalError as error:
        print(f"summeval-compare: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args.out.mkdir(parents=True, exist_ok=True)
    table_path = args.out / "comparison.parquet"
    comparison.to_parquet(table_path, index=False)
    print_comparison(comparison)
    print(f"comparison: {table_path}")
    if not args.no_report:
        report = render_report(loaded, base, comparison, args.out / "report.html")
        print(f"report: {report}")
    if args.fail_if_drop is not None:
        found = regressions(comparison, args.fail_if_drop)
        for regression in found:
            print(f"summeval-compare: regression: {regression.describe()}", file=sys.stderr)
        if found:
            return EXIT_REGRESSION
    return EXIT_OK


def main() -> None:
    """The ``summeval-compare`` entry point."""
    if hasattr(signal, "SIGPIPE"):
        # `summeval-compare ... | head`: stop quietly when the reader goes away.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(run())
