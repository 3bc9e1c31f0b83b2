"""What the gate finds in a comparison (``compare_runs``' table), each finding a typed value.

The gate fails on a significant drop (``regressions``), on a mean below an absolute floor
(``below_thresholds``) and, whatever the scores, on a run that a run's own gate
would not pass (``broken_runs``, by ``gate_failure``): one that did not complete or left items
unfinished, scored nothing, or errored more than allowed. A run whose every item failed has no
drop, and a run stopped early may have had none yet. Nor does a run that shares no item with
the baseline (``unpaired_runs``): nothing of it was compared. ``_gate`` turns the findings
into one verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from summeval_runner._analysis._compare import ComparedRow, Run, named, run_scale, runs_of
from summeval_runner._errors import InputError
from summeval_runner._scorers._outcome import GateFailure, RunCounts, gate_failure
from summeval_runner._scorers._result import METRICS


@dataclass(frozen=True)
class Regression:
    variant: str
    dimension: str
    mean_diff: float
    p_value: float
    worst_items: list[str]

    def describe(self) -> str:
        worst = ", ".join(self.worst_items) or "none"
        return (
            f"{self.variant}: {self.dimension} dropped by {-self.mean_diff:.3f} against the "
            f"baseline (p = {self.p_value:.4f}); the items that dropped most: {worst}"
        )


def regressions(rows: Sequence[ComparedRow], threshold: float) -> list[Regression]:
    """Rows where a variant is below the baseline by more than ``threshold``, significantly."""
    found = []
    for row in rows:
        if row.mean_diff is None or not row.significant or row.p_value is None:
            continue
        if row.mean_diff < -threshold:
            found.append(
                Regression(
                    row.variant, row.dimension, row.mean_diff, row.p_value, list(row.worst_items)
                )
            )
    return found


@dataclass(frozen=True)
class BelowThreshold:
    """A compared run whose mean on a dimension is below the absolute floor the gate was
    given (``--fail-if-below``), or that has no mean there (no item scored)."""

    variant: str
    run_dir: str
    dimension: str
    mean: float | None
    n: int
    threshold: float
    # Of the ``n`` items the mean is over, the blank summaries (0 in every figure, SPEC).
    blank_summaries: int = 0

    def describe(self) -> str:
        where = named(self.variant, self.run_dir)
        if self.mean is None:
            return (
                f"{where}: {self.dimension} has no mean (no item scored), so it cannot be shown "
                f"to be at least {self.threshold:g}"
            )
        over = (
            f"{self.n} items ({self.n - self.blank_summaries} scored, {self.blank_summaries} "
            "blank summaries at 0)"
            if self.blank_summaries
            else f"{self.n} scored items"
        )
        return (
            f"{where}: {self.dimension} mean {self.mean:.3f} over {over} is below "
            f"the threshold {self.threshold:g}"
        )


def below_thresholds(
    rows: Sequence[ComparedRow],
    thresholds: Mapping[str, float],
    *,
    exclude: Sequence[str] = (),
) -> list[BelowThreshold]:
    """The compared runs (baseline included, but for the run directories in ``exclude``) whose
    mean on a dimension of ``thresholds`` (``{"score": 0.7}``) is below it, or undefined.

    A mean is over a run's scored items only: gate with ``broken_runs`` too, or a run with
    errored or unfinished items passes on the mean of fewer items (``summeval-compare`` does).
    An unknown dimension is ``InputError``.
    """
    unknown = sorted(set(thresholds) - set(METRICS))
    if unknown:
        raise InputError(
            f"a threshold's dimension must be one of {', '.join(METRICS)}, got "
            f"{', '.join(repr(name) for name in unknown)}"
        )
    skipped = {str(path) for path in exclude}
    found = []
    for row in rows:
        threshold = thresholds.get(row.dimension)
        if threshold is None or row.run_dir in skipped:
            continue
        if row.mean is None or row.mean < threshold:
            found.append(
                BelowThreshold(
                    row.variant,
                    row.run_dir,
                    row.dimension,
                    row.mean,
                    row.n,
                    float(threshold),
                    row.blank_summaries,
                )
            )
    return found


def check_floors(runs: Sequence[Run], thresholds: Mapping[str, float]) -> None:
    """Refuse (``InputError``) a floor no mean of these runs could be held to: alignment and
    coverage lie in [0, 1], a run's score in [0, its scale]. A floor of 0.7 kept from runs of
    scale 1 would pass nearly any run of scale 10, and one above the scale fail every run."""
    for dimension, floor in thresholds.items():
        if dimension != "score":
            if not 0 <= floor <= 1:
                raise InputError(
                    f"a {dimension} floor must be between 0 and 1 (a {dimension} is a share), "
                    f"got {floor:g}"
                )
            continue
        for run in runs:
            scale = run_scale(run)
            if scale is not None and not 0 <= floor <= scale:
                raise InputError(
                    f"the score floor {floor:g} is outside {run.variant}'s score range [0, "
                    f"{scale:g}] ({run.path}: scorer.scale={scale:g})"
                )
    if "score" in thresholds:
        scales = {scale for scale in (run_scale(run) for run in runs) if scale is not None}
        if len(scales) > 1:
            raise InputError(
                "one score floor cannot hold runs of different scales ("
                + ", ".join(f"{scale:g}" for scale in sorted(scales))
                + "): gate them apart"
            )


@dataclass(frozen=True)
class BrokenRun:
    """A compared run the gate cannot pass, whatever its scores (``gate_failure``): it did not
    complete, or left items unfinished; it scored no item; or more of its items errored than
    allowed."""

    variant: str
    run_dir: str
    status: str
    items: int
    scored: int
    unscorable: int
    errors: int
    unfinished: int
    max_error_rate: float
    failure: GateFailure

    @property
    def state(self) -> str:
        """ "part (<dir>) is interrupted with 24 of 26 items unfinished"."""
        left = (
            f" with {self.unfinished} of {self.items + self.unfinished} items unfinished"
            if self.unfinished
            else ""
        )
        return f"{named(self.variant, self.run_dir)} is {self.status}{left}"

    def describe(self) -> str:
        where = named(self.variant, self.run_dir)
        if self.failure == "unfinished" and self.status == "running":
            # Its manifest is the one written at its start: it never ended, or not yet.
            return (
                f"{self.state}: it is still in progress, or was killed; let it finish, or "
                "resume it, before gating on it"
            )
        if self.failure == "unfinished":
            # A partial merge lacks shards: resuming the merge cannot bring their items.
            remedy = "merge its missing shards" if self.status == "partial" else "resume it"
            return f"{self.state}: {remedy} before gating on it"
        if self.failure == "unscored":
            return (
                f"{where} scored no item ({self.items} items: {self.unscorable} unscorable, "
                f"{self.errors} errors): it measured nothing"
            )
        return (
            f"{where}: {self.errors} of {self.items} items errored "
            f"({self.errors / self.items:.1%}), more than the {self.max_error_rate:.1%} allowed"
        )


def _broken(row: ComparedRow, max_error_rate: float) -> BrokenRun | None:
    counts = RunCounts(
        total=row.items,
        scored=row.scored,
        blank_summaries=row.blank_summaries,
        unscorable=row.unscorable,
        errors=row.errors,
    )
    failure = gate_failure(row.status, row.unfinished, counts, max_error_rate)
    if failure is None:
        return None
    return BrokenRun(
        row.variant,
        row.run_dir,
        row.status,
        counts.total,
        counts.scored,
        counts.unscorable,
        counts.errors,
        row.unfinished,
        max_error_rate,
        failure,
    )


def broken_runs(rows: Sequence[ComparedRow], max_error_rate: float) -> list[BrokenRun]:
    """The compared runs (baseline included) that the gate cannot pass, read from the
    comparison's status and counts: by the rule of a run's own gate (``gate_failure``)."""
    found = (_broken(row, max_error_rate) for row in runs_of(rows))
    return [broken for broken in found if broken is not None]


def unfinished_runs(rows: Sequence[ComparedRow]) -> list[BrokenRun]:
    """The compared runs that did not complete or left items unfinished: their figures cover
    their finished items only."""
    found = (_broken(row, 1.0) for row in runs_of(rows))
    return [broken for broken in found if broken is not None and broken.failure == "unfinished"]


@dataclass(frozen=True)
class FlaggedRun:
    """A compared run with items that tripped a manipulation check (``--fail-if-flagged``), or
    (``flagged`` None) one made before the checks, which cannot say whether it has any."""

    variant: str
    run_dir: str
    flagged: int | None
    items: int

    def describe(self) -> str:
        where = named(self.variant, self.run_dir)
        if self.flagged is None:
            return (
                f"{where} was made before the manipulation checks (its items.parquet has no "
                "flags column): rerun it to gate on its flags"
            )
        return (
            f"{where}: {self.flagged} of {self.items} items tripped a manipulation check (see "
            "flags and flag_spans in its items.parquet)"
        )


def flagged_runs(rows: Sequence[ComparedRow], *, exclude: Sequence[str] = ()) -> list[FlaggedRun]:
    """The compared runs, but those in ``exclude`` (run directories), with a flagged item or
    no flags to check."""
    found = []
    for row in runs_of(rows):
        if row.run_dir in exclude:
            continue
        if row.flagged is None or row.flagged > 0:
            found.append(FlaggedRun(row.variant, row.run_dir, row.flagged, row.items))
    return found


@dataclass(frozen=True)
class UnpairedRun:
    """A compared run with no item scored in both it and the baseline: nothing of it was
    compared, so no drop could be found (shards of one run, files whose generated ids differ).
    Or, ``by_summaries``: a run whose ids, like the baseline's, were generated from each item's
    summary, with items that did not pair (``only_here``, ``only_in_baseline``): those are the
    items whose summaries changed, so the paired figures leave out every change."""

    variant: str
    run_dir: str
    baseline: str
    shares_items: bool
    by_summaries: bool = False
    only_here: int = 0
    only_in_baseline: int = 0

    def describe(self) -> str:
        where = named(self.variant, self.run_dir)
        if self.by_summaries:
            return (
                f"{where}: {self.only_here} of its items and {self.only_in_baseline} of the "
                f"baseline {self.baseline}'s did not pair: both datasets have no id column, so "
                "each item's id was generated from its input and its summary, and an item whose "
                "summary changed (a blank one too) has another id in each run. The changed "
                "items, where a drop would show, were not compared; give the data an id column "
                "(dataset.fields.id) to pair its rows by it"
            )
        if self.shares_items:
            return (
                f"{where} has no item scored in both it and the baseline {self.baseline}: "
                "nothing was compared"
            )
        return (
            f"{where} has no item in common with the baseline {self.baseline}: nothing was compared"
        )


def unpaired_runs(rows: Sequence[ComparedRow]) -> list[UnpairedRun]:
    """The runs compared with a baseline that share no scored item with it; and the runs that,
    like the baseline, were paired by ids generated from their summaries and left items unpaired
    (``UnpairedRun.by_summaries``: exactly the items whose summaries changed). Other runs sharing
    some items are compared on those, the rest listed as only in one run (a benchmark's items
    added or retired, under ids of the data's own)."""
    of_summaries = {row.variant for row in rows if row.baseline is None and row.ids_from_summaries}
    by_run: dict[tuple[str, str], list[ComparedRow]] = {}
    for row in rows:
        by_run.setdefault((row.variant, row.run_dir), []).append(row)
    found = []
    for (variant, run_dir), its in by_run.items():
        first = its[0]
        if first.baseline is None:
            continue  # the baseline itself, or no baseline
        if max(row.n_paired or 0 for row in its) > 0:
            here, there = len(first.items_only_here), len(first.items_only_in_baseline)
            if (
                (here or there)
                and all(row.ids_from_summaries for row in its)
                and first.baseline in of_summaries
            ):
                found.append(UnpairedRun(variant, run_dir, first.baseline, True, True, here, there))
            continue
        shares = len(first.items_only_here) < first.items
        found.append(UnpairedRun(variant, run_dir, first.baseline, shares))
    return found
