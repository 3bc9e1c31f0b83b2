"""The statistics a run reports, in one place: means with t-intervals, quantiles, and the paired
bootstrap and permutation test that comparisons use.

Everything here is seeded or exact, so the same values always give the same figures.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np


def mean_interval(
    values: Sequence[float], *, upper: float | None
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


def paired_bootstrap_ci(
    diffs: np.ndarray, *, resamples: int = 5000, seed: int = 0
) -> tuple[float, float]:
    """The 95% percentile interval of the mean difference, resampling items with replacement."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(diffs), size=(resamples, len(diffs)))
    means = diffs[picks].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return float(low), float(high)


def paired_permutation_p(diffs: np.ndarray, *, resamples: int = 10000, seed: int = 0) -> float:
    """Two-sided p-value of a paired sign-flip permutation test of a zero mean difference.

    Under the null hypothesis each item's difference is as likely to have either sign; the
    p-value is the share of random sign flips whose mean is at least as far from zero as the
    observed one (counting the observed one, so it is never 0).
    """
    observed = abs(float(diffs.mean()))
    if observed == 0.0:
        return 1.0
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(resamples, len(diffs)))
    flipped = np.abs((signs * diffs).mean(axis=1))
    extreme = int((flipped >= observed - 1e-12).sum())
    return (extreme + 1) / (resamples + 1)
