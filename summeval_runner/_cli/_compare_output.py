"""What ``summeval-compare`` prints: the comparison as a table, the warnings on what was
compared, and the gate's verdict, one line a finding."""

from __future__ import annotations

import sys
from typing import Any

import pandas as pd

from summeval_runner._analysis._compare import Run, content_pairings, mismatches
from summeval_runner._analysis._findings import unfinished_runs
from summeval_runner._analysis._gate import GateVerdict

_LISTED = 10
_WIDEST_LABEL = 60


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


def print_warnings(loaded: list[Run], base: Run | None) -> None:
    """What the comparison holds that a reader must know: runs compared although they differ,
    pairings by content, merged runs whose shards asked a source different questions."""
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


def print_verdict(verdict: GateVerdict) -> None:
    """The gate's findings, one line each on stderr (a note on unfinished runs when no gate
    was asked for)."""
    if not verdict.gated:
        for unfinished in unfinished_runs(verdict.rows):
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
