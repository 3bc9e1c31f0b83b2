"""``summeval-compare``'s options: the parser, its help's examples and exit codes, and the rules
its options must keep together (checked before any run is read)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from summeval_runner._scorers._result import METRICS

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2
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


def build_parser() -> argparse.ArgumentParser:
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


def options_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the options given together, said as the error line will say it; None
    when nothing is."""
    if args.fail_if_drop is not None and not (
        math.isfinite(args.fail_if_drop) and args.fail_if_drop >= 0
    ):
        return f"--fail-if-drop must be a finite number >= 0, got {args.fail_if_drop}"
    if not 0 < args.alpha < 1:
        return f"--alpha must be between 0 and 1, got {args.alpha}"
    if args.max_error_rate is not None and not 0 <= args.max_error_rate <= 1:
        return f"--max-error-rate must be between 0 and 1, got {args.max_error_rate}"
    floors = dict(args.fail_if_below)
    if len(floors) < len(args.fail_if_below):
        # Which one would win is the order of the options: a gate looser than meant, unsaid.
        twice = sorted(
            {d for d, _ in args.fail_if_below if sum(e == d for e, _ in args.fail_if_below) > 1}
        )
        return (
            f"--fail-if-below gives {', '.join(twice)} more than once "
            "(" + ", ".join(f"{d}={v:g}" for d, v in args.fail_if_below if d in twice) + "): "
            "give each dimension one floor"
        )
    gating = args.fail_if_drop is not None or bool(floors) or args.fail_if_flagged
    if args.max_error_rate is not None and not gating:
        return (
            "--max-error-rate is a rule of the gate: give --fail-if-drop "
            "or --fail-if-below too (--fail-if-drop 0 fails on any significant drop)"
        )
    return None
