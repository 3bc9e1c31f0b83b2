"""The regression gate's verdict on a comparison, and that verdict in CI's languages.

``gate_comparison`` applies the gate's rules to a comparison (``compare_runs``' table) once:
runs the gate cannot pass whatever their scores (``broken_runs``), runs with nothing paired
with the baseline (``unpaired_runs``), significant drops (``regressions``) and means below an
absolute floor (``below_thresholds``). ``summeval-compare`` prints the verdict and exits on it;
``GateVerdict.markdown()`` writes it as GitHub-flavoured Markdown (for ``$GITHUB_STEP_SUMMARY``
or a pull-request comment) and ``GateVerdict.junit_xml()`` as JUnit XML, one test case per run
and dimension and one for each run's health, failing exactly where the gate fails. One verdict
feeds all three, so the exit code, the page and the test report cannot disagree.

Labels and item ids come from the runs (an id is the dataset's own): the Markdown escapes them,
so an id cannot add a link, an image or a table cell to the page.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from summeval_runner._analysis._compare import ComparedRow, compared_rows, runs_of
from summeval_runner._analysis._findings import (
    BelowThreshold,
    BrokenRun,
    FlaggedRun,
    Regression,
    UnpairedRun,
    below_thresholds,
    broken_runs,
    flagged_runs,
    regressions,
    unpaired_runs,
)
from summeval_runner._errors import ConfigError
from summeval_runner._scorers._result import METRICS

# A run's own health: its test case's name beside the dimensions' in the JUnit XML.
HEALTH = "run health"
# A cell with no figure (GitHub renders an empty cell as a gap that reads like a rendering fault).
NONE = "n/a"
# Items listed per run as those that dropped most (the comparison keeps up to this many).
_WORST_SHOWN = 5


@dataclass(frozen=True, eq=False)
class GateVerdict:
    """What the gate found in a comparison: each rule's findings, and whether it passed.

    ``gated`` is False when no rule was given (no ``fail_if_drop``, no ``fail_if_below``, no
    ``fail_if_flagged``):
    nothing was checked, and the verdict passes, as ``summeval-compare`` exits 0 without a gate.
    ``comparison`` is the table the verdict was made on; ``rows``, its rows as typed values
    (read from it once, on first use), are what the findings and the writers read.
    """

    comparison: pd.DataFrame = field(repr=False)
    gated: bool
    fail_if_drop: float | None
    max_error_rate: float
    fail_if_below: Mapping[str, float]
    broken: tuple[BrokenRun, ...] = ()
    unpaired: tuple[UnpairedRun, ...] = ()
    regressions: tuple[Regression, ...] = ()
    below: tuple[BelowThreshold, ...] = ()
    fail_if_flagged: bool = False
    flagged: tuple[FlaggedRun, ...] = ()

    @functools.cached_property
    def rows(self) -> tuple[ComparedRow, ...]:
        """The comparison's rows as typed values."""
        return tuple(compared_rows(self.comparison))

    @property
    def passed(self) -> bool:
        return not (self.broken or self.unpaired or self.regressions or self.below or self.flagged)

    def markdown(self) -> str:
        """The comparison and the verdict as GitHub-flavoured Markdown."""
        return _markdown(self)

    def junit_xml(self) -> str:
        """The verdict as JUnit XML: a test case per run and dimension, and one per run for its
        health, each failing exactly where the gate fails, with the reason as its message."""
        return _junit(self)


def gate_comparison(
    comparison: pd.DataFrame,
    *,
    fail_if_drop: float | None = None,
    max_error_rate: float = 0.0,
    fail_if_below: Mapping[str, float] | None = None,
    exclude: Sequence[str] = (),
    fail_if_flagged: bool = False,
) -> GateVerdict:
    """The gate's verdict on ``comparison``: fail on a variant below the baseline by more than
    ``fail_if_drop`` on any dimension, significantly; on a mean below ``fail_if_below``
    (``{"score": 0.7}``) in any run but those in ``exclude`` (run directories: with a history,
    the earlier run is the yardstick, not a run to gate); and, with either rule, on a run that
    did not complete, scored nothing, errored more than ``max_error_rate``, or (with
    ``fail_if_drop``) shares no scored item with the baseline. ``fail_if_flagged``: fail on a
    run (but those in ``exclude``) with an item that tripped a manipulation check, or made
    before the checks.

    >>> import pandas as pd
    >>> gate_comparison(pd.DataFrame()).gated
    False
    """
    floors = dict(fail_if_below or {})
    # A NaN threshold compares False with every drop: a gate that could never fail, unsaid.
    if fail_if_drop is not None and not (math.isfinite(fail_if_drop) and fail_if_drop >= 0):
        raise ConfigError(f"fail_if_drop must be a finite number >= 0, got {fail_if_drop!r}")
    for dimension, floor in floors.items():
        if not (math.isfinite(floor) and floor >= 0):
            raise ConfigError(
                f"fail_if_below[{dimension!r}] must be a finite number >= 0, got {floor!r}"
            )
    if not (math.isfinite(max_error_rate) and 0 <= max_error_rate <= 1):
        raise ConfigError(f"max_error_rate must be between 0 and 1, got {max_error_rate!r}")
    gated = fail_if_drop is not None or bool(floors) or fail_if_flagged
    verdict = GateVerdict(
        comparison, gated, fail_if_drop, max_error_rate, floors, fail_if_flagged=fail_if_flagged
    )
    if not gated:
        return verdict
    rows = verdict.rows
    broken = tuple(broken_runs(rows, max_error_rate))
    unpaired: tuple[UnpairedRun, ...] = ()
    dropped: tuple[Regression, ...] = ()
    if fail_if_drop is not None:
        # A broken run is said once, as broken, not again as unpaired.
        gone = {run.run_dir for run in broken}
        unpaired = tuple(run for run in unpaired_runs(rows) if run.run_dir not in gone)
        dropped = tuple(regressions(rows, fail_if_drop))
    below = tuple(below_thresholds(rows, floors, exclude=exclude)) if floors else ()
    flagged = tuple(flagged_runs(rows, exclude=exclude)) if fail_if_flagged else ()
    return dataclasses.replace(
        verdict,
        broken=broken,
        unpaired=unpaired,
        regressions=dropped,
        below=below,
        flagged=flagged,
    )


# ---------------------------------------------------------------------------------------------
# What each case of the verdict is: a run's health, and each run's dimensions.


@dataclass(frozen=True)
class _Case:
    run: str  # the run's label (its variant, told apart from others of the same variant)
    run_dir: str
    name: str  # a dimension, or HEALTH
    failures: tuple[tuple[str, str], ...]  # (kind, reason)


def _cases(verdict: GateVerdict) -> list[_Case]:
    cases = []
    for run in runs_of(verdict.rows):
        label, where = run.variant, run.run_dir
        health = [("broken", b.describe()) for b in verdict.broken if b.run_dir == where]
        health += [("unpaired", u.describe()) for u in verdict.unpaired if u.run_dir == where]
        health += [("flagged", f.describe()) for f in verdict.flagged if f.run_dir == where]
        cases.append(_Case(label, where, HEALTH, tuple(health)))
        for dimension in METRICS:
            failures = [
                ("regression", r.describe())
                for r in verdict.regressions
                if r.variant == label and r.dimension == dimension
            ]
            failures += [
                ("below_threshold", b.describe())
                for b in verdict.below
                if b.run_dir == where and b.dimension == dimension
            ]
            cases.append(_Case(label, where, dimension, tuple(failures)))
    return cases


# ---------------------------------------------------------------------------------------------
# JUnit XML.


def _junit(verdict: GateVerdict) -> str:
    cases = _cases(verdict)
    failed = sum(1 for case in cases if case.failures)
    suites = ET.Element("testsuites", name="summeval-compare")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="summeval-compare",
        tests=str(len(cases)),
        failures=str(failed),
        errors="0",
        skipped="0",
    )
    ET.SubElement(
        ET.SubElement(suite, "properties"), "property", name="gate", value=_rules(verdict)
    )
    for case in cases:
        element = ET.SubElement(suite, "testcase", classname=case.run, name=case.name)
        if case.failures:
            kinds = sorted({kind for kind, _ in case.failures})
            failure = ET.SubElement(
                element,
                "failure",
                message="; ".join(reason for _, reason in case.failures),
                type=",".join(kinds),
            )
            failure.text = "\n".join(reason for _, reason in case.failures)
        elif case.name != HEALTH:
            row = _row(verdict.rows, case.run_dir, case.name)
            if row is not None:
                ET.SubElement(element, "system-out").text = _figures(row)
    ET.indent(suites)
    body: str = ET.tostring(suites, encoding="unicode")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n"


def _row(rows: Sequence[ComparedRow], run_dir: str, dimension: str) -> ComparedRow | None:
    return next((r for r in rows if r.run_dir == run_dir and r.dimension == dimension), None)


def _figures(row: ComparedRow) -> str:
    """One line of a dimension's figures: its mean and, against a baseline, the difference."""
    text = f"mean {_number(row.mean)} over {row.n} scored items"
    if row.paired:
        text += (
            f"; difference {_number(row.mean_diff, sign=True)} "
            f"[{_number(row.diff_ci95_low, sign=True)}, "
            f"{_number(row.diff_ci95_high, sign=True)}] over {row.n_paired} paired "
            f"items against {row.baseline}, p = {_number(row.p_value, 4)}"
        )
    return text


def _rules(verdict: GateVerdict) -> str:
    if not verdict.gated:
        return (
            "none (no --fail-if-drop, no --fail-if-below, no --fail-if-flagged): nothing is checked"
        )
    rules = []
    if verdict.fail_if_drop is not None:
        rules.append(f"fail if a significant drop exceeds {verdict.fail_if_drop:g}")
    rules += [f"fail if {dim} mean < {floor:g}" for dim, floor in verdict.fail_if_below.items()]
    if verdict.fail_if_flagged:
        rules.append("fail if an item tripped a manipulation check")
    rules.append(f"errored items allowed: {verdict.max_error_rate:.1%}")
    return "; ".join(rules)


# ---------------------------------------------------------------------------------------------
# Markdown.

# What gives text inside a line a meaning in GitHub's Markdown (emphasis, code, links and
# images, HTML, a table's cells, strike-through, entities), so that text from the runs stays
# text. Every line written starts with "- " or "| ", so what means something only at a line's
# start cannot reach one.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


def _md(text: object) -> str:
    """``text`` as literal Markdown: its special characters escaped, its lines joined."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _number(value: float | None, digits: int = 3, sign: bool = False) -> str:
    if value is None:
        return NONE
    return f"{value:{'+' if sign else ''}.{digits}f}"


def _markdown(verdict: GateVerdict) -> str:
    if not verdict.gated:
        headline = "summeval-compare: compared, no gate set"
    elif verdict.passed:
        headline = "summeval-compare: the gate passed"
    else:
        headline = "summeval-compare: **the gate failed**"
    lines = [f"### {headline}", "", f"Gate: {_md(_rules(verdict))}.", ""]
    runs = runs_of(verdict.rows)
    if runs:
        lines += [
            "| run | status | items | scored | blank | unscorable | errors | unfinished | health |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        cases = {(c.run_dir, c.name): c for c in _cases(verdict)}
        baselines = {row.baseline for row in verdict.rows if row.baseline is not None}
        for run in runs:
            health = cases[(run.run_dir, HEALTH)]
            state = "**fail**" if health.failures else ("pass" if verdict.gated else NONE)
            lines.append(
                f"| {_md(run.variant)} | {_md(run.status)} | {run.items} | {run.scored} | "
                f"{run.blank_summaries} | {run.unscorable} | {run.errors} | {run.unfinished} | "
                f"{state} |"
            )
        lines += [
            "",
            "| dimension | run | n | mean | 95% CI | difference | paired 95% CI | p | verdict |",
            "| --- | --- | ---: | ---: | --- | ---: | --- | ---: | --- |",
        ]
        for dimension in METRICS:
            for run in runs:
                row = _row(verdict.rows, run.run_dir, dimension)
                if row is None:
                    continue
                case = cases[(run.run_dir, dimension)]
                is_baseline = run.variant in baselines
                lines.append(_dimension_line(row, case, verdict.gated, is_baseline))
        lines += _dropped_most(verdict.rows)
    failures = [reason for case in _cases(verdict) for _, reason in case.failures]
    if failures:
        lines += ["", "**Why the gate failed:**", ""]
        lines += [f"- {_md(reason)}" for reason in failures]
    return "\n".join(lines) + "\n"


def _dimension_line(row: ComparedRow, case: _Case, gated: bool, is_baseline: bool) -> str:
    paired = row.paired
    interval = (
        f"[{_number(row.ci95_low)}, {_number(row.ci95_high)}]" if row.ci95_low is not None else NONE
    )
    if paired:
        difference = _number(row.mean_diff, sign=True)
    else:
        # The baseline's own row, or a run with no item scored in both it and the baseline.
        difference = "baseline" if is_baseline and row.baseline is None else NONE
    paired_interval = (
        f"[{_number(row.diff_ci95_low, sign=True)}, {_number(row.diff_ci95_high, sign=True)}]"
        if paired and row.diff_ci95_low is not None
        else NONE
    )
    if case.failures:
        verdict = "**" + " and ".join(sorted({kind for kind, _ in case.failures})) + "**"
        verdict = verdict.replace("_", " ")
    else:
        verdict = "pass" if gated else NONE
    return (
        f"| {row.dimension} | {_md(row.variant)} | {row.n} | "
        f"{_number(row.mean)} | {interval} | {difference} | {paired_interval} | "
        f"{_number(row.p_value, 4) if paired else NONE} | {verdict} |"
    )


def _dropped_most(rows: Sequence[ComparedRow]) -> list[str]:
    """Per run compared with a baseline, the items whose score dropped most."""
    lines: list[str] = []
    for row in rows:
        if row.dimension != "score" or row.baseline is None:
            continue
        worst = row.worst_items[:_WORST_SHOWN]
        if not worst:
            continue
        if not lines:
            lines += ["", "**The items whose score dropped most:**", ""]
        ids = ", ".join(_md(item) for item in worst)
        lines.append(f"- {_md(row.variant)} against {_md(row.baseline)}: {ids}")
    return lines
