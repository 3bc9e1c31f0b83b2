"""The statistics a run reports, in one place: means with t-intervals, quantiles, and the paired
bootstrap and permutation test that comparisons use; and how well a judge agrees with human
ratings (rank and linear correlations, ROC AUC, balanced accuracy) with source-level bootstrap
intervals, for ``summeval-agree``.

Everything here is seeded or exact, so the same values always give the same figures.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


def mean_interval(
    values: Sequence[float] | npt.NDArray[np.float64], *, upper: float | None
) -> tuple[float | None, float | None, float | None]:
    """The mean and its two-sided 95% Student's t interval, clipped to [0, upper] when bounded.

    The interval needs two values; the mean needs one.

    >>> mean_interval([0.0, 1.0], upper=1.0)  # t(1 df) is wide: clipped to the range
    (0.5, 0.0, 1.0)
    >>> mean_interval([0.7], upper=None)
    (0.7, None, None)
    """
    n = len(values)
    if n == 0:
        return None, None, None
    mean = statistics.fmean(values)
    if n == 1:
        return mean, None, None
    half_width = t_critical_95(n - 1) * statistics.stdev(values) / math.sqrt(n)
    low, high = mean - half_width, mean + half_width
    if upper is not None:
        low, high = max(0.0, low), min(upper, high)
    return mean, low, high


class RunningMean:
    """A mean kept as values come, in constant memory, compensated (Neumaier) so that a
    million values sum as exactly as ``math.fsum`` would to the last digit or so.

    >>> running = RunningMean()
    >>> for value in (0.1, 0.2, 0.3):
    ...     running.add(value)
    >>> running.count, round(running.mean or 0.0, 12)
    (3, 0.2)
    """

    def __init__(self) -> None:
        self.count = 0
        self._sum = 0.0
        self._compensation = 0.0

    def add(self, value: float) -> None:
        total = self._sum + value
        if abs(self._sum) >= abs(value):
            self._compensation += (self._sum - total) + value
        else:
            self._compensation += (value - total) + self._sum
        self._sum = total
        self.count += 1

    @property
    def mean(self) -> float | None:
        return (self._sum + self._compensation) / self.count if self.count else None


def quantile(ordered: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks, as pandas and numpy do by default.

    >>> quantile([0.0, 1.0, 2.0, 3.0], 0.25)
    0.75
    """
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# Two-sided 95% critical values of Student's t for 1-30 degrees of freedom; beyond 30 the
# normal value (1.96) is within 4% and shrinking.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_critical_95(degrees_of_freedom: int) -> float:
    """The t value that bounds a two-sided 95% interval of the mean."""
    if degrees_of_freedom < 1:
        raise ValueError(f"degrees_of_freedom must be >= 1, got {degrees_of_freedom}")
    if degrees_of_freedom <= len(_T95):
        return _T95[degrees_of_freedom - 1]
    return 1.96 + 2.4 / degrees_of_freedom  # matches the table at 30 and tends to 1.96


# Largest number of cells (resamples x rows) held at once; bounds memory on big inputs: 2**20
# cells of float64 are 8 MB (a block's draws and the values they pick, 16 MB), where two
# 100,000-item runs held whole would take 4 GB (bootstrap) and 8 GB (permutations). Smaller
# blocks cost no time: the draws themselves are the work, whatever their blocks.
_CELLS = 1 << 20


def _row_chunks(resamples: int, rows: int, max_cells: int) -> Iterator[int]:
    """Sizes of consecutive blocks of resamples, each of at most ``max_cells`` cells (at least
    one resample a block). A generator drawn in row blocks gives the very numbers it gives in one
    call, and each resample's mean is taken over its own row, so the figures do not depend on
    the block size."""
    if max_cells < 1:
        raise ValueError(f"max_cells must be >= 1, got {max_cells}")
    chunk = max(1, max_cells // max(rows, 1))
    for start in range(0, resamples, chunk):
        yield min(chunk, resamples - start)


def paired_bootstrap_ci(
    diffs: np.ndarray, *, resamples: int = 5000, seed: int = 0, max_cells: int = _CELLS
) -> tuple[float, float]:
    """The 95% percentile interval of the mean difference, resampling items with replacement.

    Resamples are drawn ``max_cells`` cells (resamples x items) at a time, so memory stays
    bounded whatever the number of items; the figures are those of drawing them all at once.
    """
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    done = 0
    for size in _row_chunks(resamples, len(diffs), max_cells):
        picks = rng.integers(0, len(diffs), size=(size, len(diffs)))
        means[done : done + size] = diffs[picks].mean(axis=1)
        done += size
    low, high = np.quantile(means, [0.025, 0.975])
    return float(low), float(high)


def paired_permutation_p(
    diffs: np.ndarray, *, resamples: int = 10000, seed: int = 0, max_cells: int = _CELLS
) -> float:
    """Two-sided p-value of a paired sign-flip permutation test of a zero mean difference.

    Under the null hypothesis each item's difference is as likely to have either sign; the
    p-value is the share of random sign flips whose mean is at least as far from zero as the
    observed one (counting the observed one, so it is never 0). Flips are drawn ``max_cells``
    cells at a time, with the figures of drawing them all at once.
    """
    observed = abs(float(diffs.mean()))
    if observed == 0.0:
        return 1.0
    rng = np.random.default_rng(seed)
    extreme = 0
    for size in _row_chunks(resamples, len(diffs), max_cells):
        signs = rng.choice(np.array([-1.0, 1.0]), size=(size, len(diffs)))
        flipped = np.abs((signs * diffs).mean(axis=1))
        extreme += int((flipped >= observed - 1e-12).sum())
    return (extreme + 1) / (resamples + 1)


# ---------------------------------------------------------------------------------------------
# Agreement of a judge with human ratings (summeval-agree).
#
# Every figure is computed by one function of "how many times each source was drawn": all ones
# gives the figure itself, a bootstrap draw gives its resampled value. Repeating a row k times is
# the same as weighting it by k, so resamples never copy rows, and the point value and its
# interval can never disagree about what the figure is.

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Values = Sequence[float] | npt.NDArray[Any]


@dataclass(frozen=True)
class AgreementStatistic:
    """One figure of agreement between a judge's scores and human ratings, with its interval.

    ``level`` says what was correlated: ``"summary"`` ranks the summaries of each source against
    each other and averages over sources (can the judge tell a better summary of the same
    document from a worse one?); ``"pooled"`` treats all rows as one sample; ``"system"``
    correlates each system's mean judge score with its mean human rating (does the judge rank
    summarizers the way people do?). ``value`` is None when the figure cannot be computed, and
    ``note`` says why. ``ci_low``/``ci_high`` are a 95% percentile bootstrap interval that
    resamples sources, the unit that varies; None when it cannot be computed (see ``note``).
    ``rows`` and ``groups`` count the rows and sources that entered the figure. ``threshold`` is
    set for balanced accuracy only: the judge predicts "positive" when its score is >= it.
    """

    level: str
    statistic: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    rows: int
    groups: int
    threshold: float | None = None
    note: str = ""


def ranks(values: Values) -> FloatArray:
    """1-based ranks, ties sharing the mean of the ranks they span.

    >>> ranks([10.0, 30.0, 20.0, 20.0]).tolist()
    [1.0, 4.0, 2.5, 2.5]
    """
    x = _finite("values", values)
    return np.asarray(_weighted_ranks(x, np.ones((1, x.size)))[0], dtype=np.float64)


def pearson(x: Values, y: Values) -> float:
    """Pearson's linear correlation in [-1, 1]; nan with fewer than 2 values or a constant side.

    >>> round(pearson([1.0, 2.0, 3.0], [2.0, 4.0, 7.0]), 4)
    0.9934
    """
    a, b = _pair(x, y, ("x", "y"))
    return float(_weighted_pearson(a, b, np.ones((1, a.size)))[0])


def spearman(x: Values, y: Values) -> float:
    """Spearman's rank correlation: Pearson's correlation of the average ranks.

    1 when both order the values alike, -1 when reversed; nan when either side is constant.

    >>> spearman([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])
    0.8
    """
    a, b = _pair(x, y, ("x", "y"))
    weights = np.ones((1, a.size))
    return float(
        _weighted_pearson(_weighted_ranks(a, weights), _weighted_ranks(b, weights), weights)[0]
    )


def kendall_tau_b(x: Values, y: Values) -> float:
    """Kendall's tau-b: (concordant - discordant pairs) / sqrt(pairs untied in x * untied in y).

    The tie-corrected form, as ``scipy.stats.kendalltau`` computes by default; nan when either side
    is constant. Takes O(n^2) time, so it suits per-source groups, not thousands of rows.

    >>> kendall_tau_b([1.0, 2.0, 3.0], [1.0, 3.0, 2.0])  # 2 concordant, 1 discordant of 3
    0.3333333333333333
    """
    a, b = _pair(x, y, ("x", "y"))
    n = a.size
    score = untied_x = untied_y = 0.0
    chunk = max(1, _CELLS // max(n, 1))
    for start in range(0, n, chunk):
        # Ordered pairs count each pair twice on every sum, which cancels in the ratio.
        sign_x = np.sign(a[start : start + chunk, None] - a[None, :])
        sign_y = np.sign(b[start : start + chunk, None] - b[None, :])
        score += float((sign_x * sign_y).sum())
        untied_x += float(np.abs(sign_x).sum())
        untied_y += float(np.abs(sign_y).sum())
    if untied_x == 0.0 or untied_y == 0.0:
        return math.nan
    return score / math.sqrt(untied_x * untied_y)


def roc_auc(scores: Values, labels: Values) -> float:
    """The chance that a random positive scores above a random negative, ties counting half.

    (The Mann-Whitney U statistic over positives x negatives.) 0.5 is chance, 1 a perfect
    separation; nan when one class is absent. Labels must be 0 or 1.

    >>> roc_auc([0.1, 0.4, 0.4, 0.9], [0, 0, 1, 1])  # pairs: win, tie, win, win of 4
    0.875
    """
    s, y = _pair(scores, labels, ("scores", "labels"))
    _require_binary("labels", y)
    return float(_weighted_auc(s, y, np.ones((1, s.size)))[0])


def best_balanced_accuracy(scores: Values, labels: Values) -> tuple[float, float]:
    """The best balanced accuracy over all cut points, and the cut: (accuracy, threshold).

    Predicting "positive" when score >= threshold, balanced accuracy is the mean of the share of
    positives found and the share of negatives rejected, so 0.5 is chance whatever the class
    balance. Thresholds are the observed scores; of equally good ones the highest is returned.
    Being chosen on the same rows, the accuracy is optimistic for new data. (nan, nan) when one
    class is absent. Labels must be 0 or 1.

    >>> best_balanced_accuracy([0.2, 0.6, 0.4, 0.9], [0, 1, 0, 1])
    (1.0, 0.6)
    """
    s, y = _pair(scores, labels, ("scores", "labels"))
    _require_binary("labels", y)
    accuracy, threshold = _weighted_balanced_accuracy(s, y, np.ones((1, s.size)))
    return float(accuracy[0]), float(threshold[0])


def agreement_statistics(
    metric: Sequence[float],
    human: Sequence[float],
    groups: Sequence[str] | None,
    *,
    systems: Sequence[str] | None = None,
    binary: bool = False,
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[AgreementStatistic, ...]:
    """How well a judge's scores agree with human ratings of the same rows, at every level.

    ``groups`` names each row's source document (None: every row has its own source); ``systems``
    names the summarizer that wrote it (None: no system level).

    Scale ratings (``binary=False``):

    - ``summary`` spearman and kendall (with ``groups``): per source, the rank correlation among its
      summaries, then the plain mean over sources. A source whose judge scores or human ratings
      are all equal says nothing about ranking and is skipped (counted in ``note``).
    - ``pooled`` pearson and spearman over all rows.
    - ``system`` pearson and spearman of per-system means (with ``systems``).

    Binary labels (``binary=True``, human values 0 or 1): ``pooled`` roc_auc and balanced_accuracy
    (with its tuned, hence optimistic, threshold), and ``system`` pearson and spearman of each
    system's mean judge score against its share of positives.

    Intervals are 95% percentile bootstrap intervals over ``resamples`` draws of sources with
    replacement (rows when ``groups`` is None), seeded by ``seed``: the same inputs always give
    the same figures. Draws where a figure is undefined are dropped (counted in ``note``). Inputs
    must be finite: dropping or filling missing ratings is the caller's job.

    >>> stats = agreement_statistics([1, 2, 3, 4], [1, 3, 2, 4], ["a", "a", "b", "b"])
    >>> [(s.level, s.statistic, s.value) for s in stats]  # doctest: +NORMALIZE_WHITESPACE
    [('summary', 'spearman', 1.0), ('summary', 'kendall', 1.0),
     ('pooled', 'pearson', 0.8), ('pooled', 'spearman', 0.8)]
    """
    design = _design(metric, human, groups, systems, binary, resamples, seed)
    return tuple(
        _statistic(figure, design) for figure in _figures(_finite("metric", metric), design)
    )


def agreement_difference(
    metric_a: Sequence[float],
    metric_b: Sequence[float],
    human: Sequence[float],
    groups: Sequence[str] | None,
    *,
    systems: Sequence[str] | None = None,
    binary: bool = False,
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[AgreementStatistic, ...]:
    """How much better judge A agrees with the human ratings than judge B, figure by figure.

    Each value is A's figure minus B's, as ``agreement_statistics`` computes them (so > 0 favours
    A). The interval is paired: each bootstrap draw takes the same sources for both judges, so
    what the sources share cancels, and an interval that excludes 0 is a difference that other
    sources would likely show too. ``rows`` and ``groups`` count those that entered either
    figure; ``threshold`` is None (each judge has its own).

    >>> same = agreement_difference([1, 2, 3], [1, 2, 3], [1, 3, 2], None)
    >>> [(s.statistic, s.value, s.ci_low, s.ci_high) for s in same]
    [('pearson', 0.0, 0.0, 0.0), ('spearman', 0.0, 0.0, 0.0)]
    """
    design = _design(metric_a, human, groups, systems, binary, resamples, seed)
    if len(metric_b) != len(metric_a):
        lengths = f"{len(metric_a)} and {len(metric_b)}"
        raise ValueError(f"metric_a and metric_b must have the same length, got {lengths}")
    figures_a = _figures(_finite("metric_a", metric_a), design)
    figures_b = _figures(_finite("metric_b", metric_b), design)
    return tuple(_difference(a, b, design) for a, b in zip(figures_a, figures_b, strict=True))


@dataclass(frozen=True)
class _Design:
    """What the figures are measured on, apart from the judge's scores."""

    human: FloatArray
    binary: bool
    group_of_row: IntArray  # source index of each row; every row its own source when ungrouped
    group_sizes: IntArray
    grouped: bool
    system_of_row: IntArray | None
    system_count: int
    resamples: int
    seed: int

    def draws(self) -> Iterator[FloatArray]:
        """For each bootstrap draw, how many times each source was drawn: (draws, sources) chunks.

        The same seed always gives the same draws, which is what pairs two judges' intervals.
        """
        count = self.group_sizes.size
        rng = np.random.default_rng(self.seed)
        chunk = max(1, _CELLS // max(count, self.human.size))
        for start in range(0, self.resamples, chunk):
            size = min(chunk, self.resamples - start)
            picks = rng.integers(0, count, size=(size, count))
            cells = (picks + count * np.arange(size)[:, None]).ravel()
            yield np.bincount(cells, minlength=size * count).reshape(size, count).astype(np.float64)


# A figure as a function of per-source draw counts (draws, sources) -> one value per draw.
_Measure = Callable[[FloatArray], FloatArray]


@dataclass(frozen=True)
class _Spec:
    """A figure to compute, and what is known of it before any resampling."""

    level: str
    statistic: str
    measure: _Measure  # per-source draw counts (draws, sources) -> the figure, one per draw
    entered: npt.NDArray[np.bool_]  # which sources enter the figure
    threshold: float | None = None
    note: str = ""


@dataclass(frozen=True)
class _Figure:
    spec: _Spec
    value: float  # nan when undefined
    resampled: FloatArray | None  # one value per draw (nan where undefined); None: no interval
    no_interval: str  # why resampled is None


def _design(
    metric: Values,
    human: Values,
    groups: Sequence[str] | None,
    systems: Sequence[str] | None,
    binary: bool,
    resamples: int,
    seed: int,
) -> _Design:
    n = len(metric)
    if len(human) != n:
        raise ValueError(f"metric and human must have the same length, got {n} and {len(human)}")
    if n == 0:
        raise ValueError("metric and human are empty: agreement needs at least one rated row")
    if resamples < 0:
        raise ValueError(f"resamples must be >= 0, got {resamples}")
    ratings = _finite("human", human)
    if binary:
        _require_binary("human", ratings)
    # Ungrouped, every row is its own source.
    group_of_row = np.arange(n, dtype=np.int64) if groups is None else _codes("groups", groups, n)
    system_of_row = None if systems is None else _codes("systems", systems, n)
    return _Design(
        human=ratings,
        binary=binary,
        group_of_row=group_of_row,
        group_sizes=np.bincount(group_of_row).astype(np.int64),
        grouped=groups is not None,
        system_of_row=system_of_row,
        system_count=0 if system_of_row is None else int(system_of_row.max()) + 1,
        resamples=resamples,
        seed=seed,
    )


def _figures(metric: FloatArray, design: _Design) -> list[_Figure]:
    """Every figure the design calls for, each with its resampled values."""
    specs = _specs(metric, design)
    sources = design.group_sizes.size
    can_resample = sources >= 2 and design.resamples > 0
    drawn: list[list[FloatArray]] = [[] for _ in specs]
    if can_resample:
        for counts in design.draws():
            for spec, out in zip(specs, drawn, strict=True):
                out.append(spec.measure(counts))
    figures = []
    for spec, out in zip(specs, drawn, strict=True):
        usable = can_resample and int(spec.entered.sum()) >= 2
        if usable:
            no_interval = ""
        elif design.resamples == 0:
            no_interval = "no interval: resamples=0"
        elif sources < 2:
            no_interval = "no interval: needs at least 2 sources"
        else:
            no_interval = "no interval: needs at least 2 sources with varying ratings"
        figures.append(
            _Figure(
                spec=spec,
                value=float(spec.measure(np.ones((1, sources)))[0]),
                resampled=np.concatenate(out) if usable else None,
                no_interval=no_interval,
            )
        )
    return figures


def _specs(metric: FloatArray, design: _Design) -> list[_Spec]:
    human, rows_group = design.human, design.group_of_row
    everyone = np.ones(design.group_sizes.size, dtype=bool)
    specs: list[_Spec] = []
    if design.grouped and not design.binary:
        specs += _summary_specs(metric, design)
    note = _constant_note(metric, human, design.binary)

    def pooled(statistic: str, measure: _Measure, **more: Any) -> _Spec:
        return _Spec("pooled", statistic, measure, everyone, note=note, **more)

    if design.binary:
        _, best = _weighted_balanced_accuracy(metric, human, np.ones((1, metric.size)))
        threshold = None if math.isnan(best[0]) else float(best[0])
        tuned = (
            "" if threshold is None else "threshold tuned on these rows: expect less on new data"
        )
        specs += [
            pooled("roc_auc", lambda c: _weighted_auc(metric, human, c[:, rows_group])),
            _Spec(  # its own note: the threshold is balanced accuracy's, not the AUC's
                "pooled",
                "balanced_accuracy",
                lambda c: _weighted_balanced_accuracy(metric, human, c[:, rows_group])[0],
                everyone,
                threshold=threshold,
                note=_join(note, tuned),
            ),
        ]
    else:
        specs += [
            pooled("pearson", lambda c: _weighted_pearson(metric, human, c[:, rows_group])),
            pooled("spearman", lambda c: _weighted_spearman(metric, human, c[:, rows_group])),
        ]
    if design.system_of_row is not None:
        specs += _system_specs(metric, design, design.system_of_row)
    return specs


def _summary_specs(metric: FloatArray, design: _Design) -> list[_Spec]:
    """Per-source rank correlations, averaged over the sources where they are defined."""
    order = np.argsort(design.group_of_row, kind="stable")
    members = np.split(order, np.cumsum(design.group_sizes)[:-1])
    per_source = {
        "spearman": np.array([spearman(metric[rows], design.human[rows]) for rows in members]),
        "kendall": np.array([kendall_tau_b(metric[rows], design.human[rows]) for rows in members]),
    }
    entered = ~np.isnan(per_source["spearman"])  # both are nan exactly when a side is constant
    skipped = int((~entered).sum())
    note = ""
    if skipped:
        single = bool((design.group_sizes[~entered] < 2).any())
        note = f"{skipped} of {entered.size} sources skipped: constant judge or human ratings"
        note += " (or a single row)" if single else ""
    return [
        _Spec("summary", statistic, _mean_over(values, entered), entered, note=note)
        for statistic, values in per_source.items()
    ]


def _mean_over(values: FloatArray, entered: npt.NDArray[np.bool_]) -> _Measure:
    filled = np.where(entered, values, 0.0)
    used = entered.astype(np.float64)

    def measure(counts: FloatArray) -> FloatArray:
        weights = counts * used
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray((weights @ filled) / weights.sum(axis=1), dtype=np.float64)

    return measure


def _system_specs(metric: FloatArray, design: _Design, system_of_row: IntArray) -> list[_Spec]:
    """Correlations of per-system means (a positive share for binary labels) over systems."""
    count = design.system_count
    rows_group = design.group_of_row

    def means(counts: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        weights = counts[:, rows_group]
        draws = weights.shape[0]
        cells = (system_of_row + count * np.arange(draws)[:, None]).ravel()

        def total(values: FloatArray) -> FloatArray:
            summed = np.bincount(cells, weights=(weights * values).ravel(), minlength=draws * count)
            return np.asarray(summed, dtype=np.float64).reshape(draws, count)

        size = total(np.ones_like(metric))
        present = (size > 0).astype(np.float64)
        safe = np.maximum(size, 1.0)  # a system absent from a draw has weight 0: its mean is moot
        return total(metric) / safe, total(design.human) / safe, present

    judge_means, human_means, _ = means(np.ones((1, design.group_sizes.size)))
    if count < 2:
        note = f"{count} system: needs at least 2"
    else:
        note = _join(
            f"{count} systems", _constant_note(judge_means[0], human_means[0], False, "means")
        )
    everyone = np.ones(design.group_sizes.size, dtype=bool)
    return [
        _Spec("system", "pearson", lambda c: _weighted_pearson(*means(c)), everyone, note=note),
        _Spec("system", "spearman", lambda c: _weighted_spearman(*means(c)), everyone, note=note),
    ]


def _statistic(figure: _Figure, design: _Design) -> AgreementStatistic:
    spec = figure.spec
    low, high, interval_note = _interval(figure.resampled, figure.value, figure.no_interval)
    return AgreementStatistic(
        level=spec.level,
        statistic=spec.statistic,
        value=None if math.isnan(figure.value) else figure.value,
        ci_low=low,
        ci_high=high,
        rows=int(design.group_sizes[spec.entered].sum()),
        groups=int(spec.entered.sum()),
        threshold=spec.threshold,
        note=_join(spec.note, interval_note),
    )


def _difference(a: _Figure, b: _Figure, design: _Design) -> AgreementStatistic:
    value = a.value - b.value
    resampled = None
    if a.resampled is not None and b.resampled is not None:
        resampled = a.resampled - b.resampled  # paired: row i of each came from the same draw
    low, high, interval_note = _interval(resampled, value, a.no_interval or b.no_interval)
    entered = a.spec.entered | b.spec.entered
    if a.spec.note == b.spec.note:
        notes = [a.spec.note]
    else:
        notes = [f"metric_{side}: {f.spec.note}" for side, f in (("a", a), ("b", b)) if f.spec.note]
    return AgreementStatistic(
        level=a.spec.level,
        statistic=a.spec.statistic,
        value=None if math.isnan(value) else value,
        ci_low=low,
        ci_high=high,
        rows=int(design.group_sizes[entered].sum()),
        groups=int(entered.sum()),
        note=_join(*notes, interval_note),
    )


def _interval(
    resampled: FloatArray | None, value: float, no_interval: str
) -> tuple[float | None, float | None, str]:
    """The 2.5th and 97.5th percentiles of the defined draws, and what was left out."""
    if math.isnan(value):
        return None, None, ""  # the figure's note says why it is undefined
    if resampled is None:
        return None, None, no_interval
    defined = resampled[~np.isnan(resampled)]
    if defined.size == 0:
        return None, None, "no interval: the figure is undefined in every resample"
    low, high = np.quantile(defined, [0.025, 0.975])
    dropped = resampled.size - defined.size
    note = f"{dropped} of {resampled.size} resamples undefined and dropped" if dropped else ""
    return float(low), float(high), note


def _join(*notes: str) -> str:
    return "; ".join(note for note in notes if note)


def _constant_note(
    metric: FloatArray, human: FloatArray, binary: bool, what: str = "ratings"
) -> str:
    if metric.size < 2:
        return "undefined: fewer than 2 rows"
    if binary and np.ptp(human) == 0:
        return f"undefined: every human label is {human[0]:g}"
    if np.ptp(metric) == 0:
        return f"undefined: judge {what} are all {metric[0]:g}"
    if np.ptp(human) == 0:
        return f"undefined: human {what} are all {human[0]:g}"
    return ""


def _codes(name: str, labels: Sequence[str], rows: int) -> IntArray:
    """Each label's index in order of first appearance (deterministic, and no sorting of labels)."""
    if len(labels) != rows:
        raise ValueError(f"{name} must name one entry per row ({rows}), got {len(labels)}")
    index: dict[str, int] = {}
    return np.array([index.setdefault(label, len(index)) for label in labels], dtype=np.int64)


def _finite(name: str, values: Values) -> FloatArray:
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or array.ndim != 1:
        for index, value in enumerate(values):
            if not isinstance(value, (int, float, np.number)) or isinstance(value, bool):
                raise ValueError(f"{name}[{index}] must be a finite number, got {value!r}")
        raise ValueError(f"{name} must be a flat list of numbers, got shape {np.shape(values)}")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        index = int(bad[0])
        value = values[index]
        shown = repr(float(value)) if isinstance(value, (float, np.floating)) else repr(value)
        raise ValueError(
            f"{name}[{index}] must be a finite number, got {shown} "
            "(drop or fill missing ratings before measuring agreement)"
        )
    return array


def _pair(x: Values, y: Values, names: tuple[str, str]) -> tuple[FloatArray, FloatArray]:
    a, b = _finite(names[0], x), _finite(names[1], y)
    if a.size != b.size:
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same length, got {a.size} and {b.size}"
        )
    return a, b


def _require_binary(name: str, labels: FloatArray) -> None:
    bad = np.flatnonzero((labels != 0.0) & (labels != 1.0))
    if bad.size:
        index = int(bad[0])
        raise ValueError(f"{name}[{index}] must be 0 or 1 for binary labels, got {labels[index]:g}")


def _weighted_ranks(values: FloatArray, weights: FloatArray) -> FloatArray:
    """Average ranks in the sample that repeats each value as often as its weight says.

    ``values`` is (m,), shared by every row of ``weights`` (draws, m), or (draws, m) itself.
    Weights are whole numbers; a weight-0 value takes no place and its own rank is moot.
    """
    m = values.shape[-1]
    order = np.argsort(values, axis=-1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=-1)
    if values.ndim == 1:
        ordered_weights = weights[:, order]
    else:
        ordered_weights = np.take_along_axis(weights, order, axis=-1)
    if m == 0:
        return np.zeros(weights.shape)
    position = np.arange(m)
    differs = ordered[..., 1:] != ordered[..., :-1]
    edge = np.ones((*ordered.shape[:-1], 1), dtype=bool)
    first = np.maximum.accumulate(
        np.where(np.concatenate([edge, differs], axis=-1), position, 0), axis=-1
    )
    last_marks = np.where(np.concatenate([differs, edge], axis=-1), position, m - 1)
    last = np.minimum.accumulate(last_marks[..., ::-1], axis=-1)[..., ::-1]
    shape = ordered_weights.shape
    running = np.cumsum(ordered_weights, axis=-1)
    first, last = np.broadcast_to(first, shape), np.broadcast_to(last, shape)
    before = np.take_along_axis(running, first, axis=-1) - np.take_along_axis(
        ordered_weights, first, axis=-1
    )
    tied = np.take_along_axis(running, last, axis=-1) - before
    result = np.empty(shape)
    np.put_along_axis(result, np.broadcast_to(order, shape), before + (tied + 1) / 2, axis=-1)
    return result


def _varies(values: FloatArray, weights: FloatArray) -> npt.NDArray[np.bool_]:
    present = weights > 0
    low = np.where(present, values, np.inf).min(axis=-1, initial=np.inf)
    high = np.where(present, values, -np.inf).max(axis=-1, initial=-np.inf)
    return np.asarray(high > low)


def _weighted_pearson(x: FloatArray, y: FloatArray, weights: FloatArray) -> FloatArray:
    """Pearson's r of the sample that repeats each pair as often as its weight, per row.

    nan where either side does not vary; checked exactly, since a constant side's variance can
    come out a rounding error above 0 and give a meaningless r.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        total = weights.sum(axis=-1, keepdims=True)
        dx = x - (weights * x).sum(axis=-1, keepdims=True) / total
        dy = y - (weights * y).sum(axis=-1, keepdims=True) / total
        r = (weights * dx * dy).sum(axis=-1) / np.sqrt(
            (weights * dx * dx).sum(axis=-1) * (weights * dy * dy).sum(axis=-1)
        )
    defined = _varies(x, weights) & _varies(y, weights)
    return np.where(defined, np.clip(r, -1.0, 1.0), np.nan)


def _weighted_spearman(x: FloatArray, y: FloatArray, weights: FloatArray) -> FloatArray:
    return _weighted_pearson(_weighted_ranks(x, weights), _weighted_ranks(y, weights), weights)


def _weighted_auc(scores: FloatArray, labels: FloatArray, weights: FloatArray) -> FloatArray:
    """Mann-Whitney AUC per row of weights: positives' rank sum less its minimum, over pairs."""
    positives = (weights * labels).sum(axis=-1)
    negatives = (weights * (1.0 - labels)).sum(axis=-1)
    rank_sum = (weights * labels * _weighted_ranks(scores, weights)).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)
    return np.where((positives > 0) & (negatives > 0), auc, np.nan)


def _weighted_balanced_accuracy(
    scores: FloatArray, labels: FloatArray, weights: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Best balanced accuracy over cut points and its threshold, per row of weights."""
    if scores.size == 0:
        undefined = np.full(weights.shape[0], np.nan)
        return undefined, undefined
    order = np.argsort(-scores, kind="stable")
    ordered = scores[order]
    ordered_weights = weights[:, order]
    found = np.cumsum(ordered_weights * labels[order], axis=-1)  # positives at or above each cut
    false = np.cumsum(ordered_weights * (1.0 - labels[order]), axis=-1)
    positives, negatives = found[:, -1:], false[:, -1:]
    cuts = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))  # last of each tie
    # Balanced accuracy scaled by positives * negatives: whole numbers, so equally good cuts
    # compare equal and the first (highest) one wins, rather than rounding picking one.
    gain = found[:, cuts] * negatives - false[:, cuts] * positives
    best = np.argmax(gain, axis=-1)
    top = np.take_along_axis(gain, best[:, None], axis=-1)[:, 0]
    defined = (positives[:, 0] > 0) & (negatives[:, 0] > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = (top / (positives[:, 0] * negatives[:, 0]) + 1.0) / 2.0
    threshold = ordered[cuts][best]
    return np.where(defined, accuracy, np.nan), np.where(defined, threshold, np.nan)
