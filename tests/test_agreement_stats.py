"""The statistics of judge agreement with human ratings (summeval-agree), checked by hand and
against independent references: numpy's corrcoef, pandas' ranks, brute-force pair counting, and a
bootstrap that copies rows the slow way."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import pytest

from summeval_runner._stats import (
    AgreementStatistic,
    agreement_difference,
    agreement_statistics,
    best_balanced_accuracy,
    kendall_tau_b,
    pearson,
    ranks,
    roc_auc,
    spearman,
)


def by_key(stats: Sequence[AgreementStatistic]) -> dict[tuple[str, str], AgreementStatistic]:
    return {(s.level, s.statistic): s for s in stats}


def pandas_spearman(x: Sequence[float], y: Sequence[float]) -> float:
    # pandas' own method="spearman" needs scipy; ranking then correlating is the same figure.
    return float(pd.Series(x).rank().corr(pd.Series(y).rank()))


def brute_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Tau-b from its textbook definition: (C - D) / sqrt((n0 - n1)(n0 - n2))."""
    concordant = discordant = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        product = (x[i] - x[j]) * (y[i] - y[j])
        concordant += product > 0
        discordant += product < 0
    n0 = len(x) * (len(x) - 1) / 2
    n1 = sum(t * (t - 1) / 2 for t in Counter(x).values())
    n2 = sum(t * (t - 1) / 2 for t in Counter(y).values())
    return (concordant - discordant) / math.sqrt((n0 - n1) * (n0 - n2))


def brute_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    pos = [s for s, label in zip(scores, labels, strict=True) if label == 1]
    neg = [s for s, label in zip(scores, labels, strict=True) if label == 0]
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def rated(rows: int, groups: int, seed: int) -> tuple[list[float], list[float], list[str]]:
    """Judge scores that follow 1-5 human ratings with noise, rows spread over sources."""
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 6, rows).astype(float)
    metric = np.round(human + rng.normal(0.0, 1.2, rows), 1)  # rounded: ties happen
    return list(metric), list(human), [f"doc{i % groups}" for i in range(rows)]


# --- the figures themselves ---------------------------------------------------------------------


def test_spearman_of_one_swapped_pair_is_0_8() -> None:
    # d = (0, 1, 1, 0): 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)


def test_ranks_share_the_mean_of_tied_places_as_pandas_does() -> None:
    assert ranks([10, 30, 20, 20, 20]).tolist() == [1.0, 5.0, 3.0, 3.0, 3.0]
    values = list(np.random.default_rng(3).integers(0, 6, 40).astype(float))
    assert ranks(values).tolist() == pd.Series(values).rank().tolist()


def test_pearson_matches_numpy_and_is_nan_when_undefined() -> None:
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=30), rng.normal(size=30)
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-12)
    assert math.isnan(pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]))
    assert math.isnan(pearson([1.0], [1.0]))
    assert math.isnan(pearson([], []))


def test_spearman_matches_pandas_ranks_with_ties() -> None:
    metric, human, _ = rated(60, 1, seed=5)
    assert spearman(metric, human) == pytest.approx(pandas_spearman(metric, human), abs=1e-12)


def test_kendall_tau_b_with_ties_worked_by_hand() -> None:
    # Pairs of x=[1,2,2,3], y=[2,1,3,3]: (1,2) discordant; (1,3), (1,4), (2,4) concordant;
    # (2,3) tied in x; (3,4) tied in y. (3 - 1) / sqrt((6 - 1) * (6 - 1)) = 0.4.
    assert kendall_tau_b([1, 2, 2, 3], [2, 1, 3, 3]) == pytest.approx(0.4)
    assert math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))


def test_kendall_tau_b_matches_pair_counting_on_data_with_ties() -> None:
    rng = np.random.default_rng(6)
    x = list(rng.integers(0, 5, 50).astype(float))
    y = list((np.array(x) + rng.integers(-2, 3, 50)).astype(float))
    assert kendall_tau_b(x, y) == pytest.approx(brute_tau_b(x, y), abs=1e-12)


def test_roc_auc_gives_ties_half_credit() -> None:
    # Positives 0.4 and 0.9 against negatives 0.1 and 0.4: win, tie, win, win = 3.5 of 4.
    assert roc_auc([0.1, 0.4, 0.4, 0.9], [0, 0, 1, 1]) == 0.875
    rng = np.random.default_rng(7)
    scores = list(rng.integers(0, 6, 40).astype(float))
    labels = [int(v) for v in rng.integers(0, 2, 40)]
    assert roc_auc(scores, labels) == pytest.approx(brute_auc(scores, labels), abs=1e-12)
    assert math.isnan(roc_auc([0.1, 0.9], [1, 1]))


def test_best_balanced_accuracy_and_its_threshold() -> None:
    # Cut at 0.7: positives found 2 of 3, negatives rejected 2 of 2 -> (2/3 + 1) / 2 = 5/6;
    # every other cut does worse (0.9: 2/3, 0.5: 7/12, 0.3: 3/4, 0.1: 1/2).
    accuracy, threshold = best_balanced_accuracy([0.1, 0.3, 0.5, 0.7, 0.9], [0, 1, 0, 1, 1])
    assert accuracy == pytest.approx(5 / 6)
    assert threshold == 0.7
    # Cuts at 4 and at 2 both give 0.75: the highest is the one reported.
    assert best_balanced_accuracy([1, 2, 3, 4], [0, 1, 0, 1]) == (0.75, 4.0)
    for scores, labels in (([0.3, 0.6], [1, 1]), ([], [])):
        assert all(math.isnan(v) for v in best_balanced_accuracy(scores, labels))


# --- levels, grouping, systems --------------------------------------------------------------


def test_summary_level_skips_constant_sources_and_averages_the_rest() -> None:
    metric = [1, 2, 3, 4, 3, 2, 5, 5, 5, 1, 2, 3]
    human = [1, 3, 2, 4, 1, 2, 1, 2, 3, 1, 1, 2]
    groups = ["a"] * 3 + ["b"] * 3 + ["c"] * 3 + ["d"] * 3  # c: the judge gives all 5s
    stats = by_key(agreement_statistics(metric, human, groups, resamples=50))
    used = [slice(0, 3), slice(3, 6), slice(9, 12)]
    for statistic, function in (("spearman", spearman), ("kendall", kendall_tau_b)):
        figure = stats[("summary", statistic)]
        expected = np.mean([function(metric[rows], human[rows]) for rows in used])
        assert figure.value == pytest.approx(expected, abs=1e-12)
        assert (figure.groups, figure.rows) == (3, 9)
        assert figure.note == "1 of 4 sources skipped: constant judge or human ratings"
    pooled = stats[("pooled", "spearman")]
    assert (pooled.rows, pooled.groups) == (12, 4)
    assert pooled.value == pytest.approx(pandas_spearman(metric, human), abs=1e-12)


def test_levels_present_follow_the_inputs() -> None:
    metric, human, groups = rated(40, 8, seed=8)
    ungrouped = agreement_statistics(metric, human, None, resamples=20)
    assert [(s.level, s.statistic) for s in ungrouped] == [
        ("pooled", "pearson"),
        ("pooled", "spearman"),
    ]
    labels = [float(h >= 4) for h in human]
    binary = agreement_statistics(metric, labels, groups, binary=True, resamples=20)
    assert [(s.level, s.statistic) for s in binary] == [
        ("pooled", "roc_auc"),
        ("pooled", "balanced_accuracy"),
    ]
    auc, accuracy = binary
    assert auc.value == pytest.approx(roc_auc(metric, labels))
    assert (accuracy.value, accuracy.threshold) == best_balanced_accuracy(metric, labels)
    assert "threshold tuned on these rows" in accuracy.note
    assert auc.note == ""  # AUC has no threshold: nothing of it was tuned on these rows


def test_system_level_correlates_per_system_means() -> None:
    metric, human, groups = rated(60, 10, seed=9)
    systems = [f"sys{i % 5}" for i in range(60)]
    judge_means = [float(np.mean(metric[k::5])) for k in range(5)]
    human_means = [float(np.mean(human[k::5])) for k in range(5)]
    stats = by_key(agreement_statistics(metric, human, groups, systems=systems, resamples=50))
    system_pearson = stats[("system", "pearson")]
    assert system_pearson.value == pytest.approx(np.corrcoef(judge_means, human_means)[0, 1])
    assert stats[("system", "spearman")].value == pytest.approx(
        pandas_spearman(judge_means, human_means)
    )
    assert system_pearson.note == "5 systems"

    labels = [float(h >= 3) for h in human]
    shares = [np.mean(labels[k::5]) for k in range(5)]
    binary = by_key(
        agreement_statistics(metric, labels, groups, systems=systems, binary=True, resamples=50)
    )
    assert binary[("system", "pearson")].value == pytest.approx(
        np.corrcoef(judge_means, shares)[0, 1]
    )


def test_an_undefined_figure_is_none_and_says_why() -> None:
    stats = by_key(agreement_statistics([3, 3, 3, 3], [1, 2, 3, 4], ["a", "a", "b", "b"]))
    pooled = stats[("pooled", "pearson")]
    assert (pooled.value, pooled.ci_low, pooled.ci_high) == (None, None, None)
    assert pooled.note == "undefined: judge ratings are all 3"
    summary = stats[("summary", "spearman")]
    assert (summary.value, summary.groups) == (None, 0)
    assert summary.note.startswith("2 of 2 sources skipped")


# --- intervals --------------------------------------------------------------------------------


def test_interval_is_seeded_stable_and_holds_a_clear_value() -> None:
    metric, human, groups = rated(200, 20, seed=10)
    first = agreement_statistics(metric, human, groups, resamples=300, seed=1)
    assert agreement_statistics(metric, human, groups, resamples=300, seed=1) == first
    other = agreement_statistics(metric, human, groups, resamples=300, seed=2)
    assert [s.ci_low for s in other] != [s.ci_low for s in first]
    for figure in first:
        assert figure.value is not None
        assert figure.ci_low is not None
        assert figure.ci_high is not None
        assert figure.ci_low <= figure.value <= figure.ci_high
        assert figure.ci_low > 0.3  # the judge clearly follows the ratings


def test_no_interval_from_a_single_source() -> None:
    stats = agreement_statistics([1, 2, 3, 4], [1, 3, 2, 4], ["a"] * 4)
    for figure in stats:
        assert figure.value is not None
        assert (figure.ci_low, figure.ci_high) == (None, None)
        assert "no interval: needs at least 2 sources" in figure.note


def test_resamples_where_a_figure_is_undefined_are_dropped_and_counted() -> None:
    scores = [0.1 * i for i in range(20)]
    labels = [0] * 19 + [1]  # most resamples of rows draw no positive at all
    auc = agreement_statistics(scores, labels, None, binary=True, resamples=200)[0]
    assert auc.value == 1.0
    assert auc.ci_low is not None
    assert auc.ci_high is not None
    assert 0.5 <= auc.ci_low <= auc.ci_high <= 1.0  # a real interval, not nan
    assert "resamples undefined and dropped" in auc.note


def naive_interval(
    groups: list[str], figure: Callable[[list[str]], float], resamples: int, seed: int
) -> tuple[float, float]:
    """The bootstrap done the slow way: draw sources, compute the figure on them, repeat.

    Sources are numbered in order of first appearance and drawn as the module draws them; this
    pins the draw scheme, since changing it changes every interval users have published.
    """
    sources = list(dict.fromkeys(groups))
    picks = np.random.default_rng(seed).integers(0, len(sources), size=(resamples, len(sources)))
    values = [figure([sources[k] for k in draw]) for draw in picks]
    defined = [v for v in values if not math.isnan(v)]
    low, high = np.quantile(defined, [0.025, 0.975])
    return float(low), float(high)


def test_interval_equals_the_slow_bootstrap_that_copies_rows() -> None:
    metric, human, groups = rated(90, 12, seed=11)
    systems = [f"sys{i % 4}" for i in range(90)]
    m, h = np.array(metric), np.array(human)
    rows_of = {g: [i for i, name in enumerate(groups) if name == g] for g in groups}

    def copied(drawn: list[str]) -> list[int]:
        return [i for source in drawn for i in rows_of[source]]

    def system_means(drawn: list[str]) -> tuple[list[float], list[float]]:
        rows = copied(drawn)
        names = sorted({systems[i] for i in rows})
        mine = {name: [i for i in rows if systems[i] == name] for name in names}
        return (
            [sum(metric[i] for i in mine[name]) / len(mine[name]) for name in names],
            [sum(human[i] for i in mine[name]) / len(mine[name]) for name in names],
        )

    by_source = {g: pandas_spearman(list(m[rows_of[g]]), list(h[rows_of[g]])) for g in rows_of}

    def summary_spearman(drawn: list[str]) -> float:
        defined = [by_source[g] for g in drawn if not math.isnan(by_source[g])]
        return float(np.mean(defined)) if defined else math.nan

    def pooled(function: Callable[[list[float], list[float]], float]) -> Callable[..., float]:
        return lambda drawn: function(list(m[copied(drawn)]), list(h[copied(drawn)]))

    references: dict[tuple[str, str], Callable[[list[str]], float]] = {
        ("summary", "spearman"): summary_spearman,
        ("pooled", "pearson"): pooled(lambda x, y: float(np.corrcoef(x, y)[0, 1])),
        ("pooled", "spearman"): pooled(pandas_spearman),
        ("system", "pearson"): lambda drawn: float(np.corrcoef(*system_means(drawn))[0, 1]),
        ("system", "spearman"): lambda drawn: pandas_spearman(*system_means(drawn)),
    }
    stats = by_key(agreement_statistics(metric, human, groups, systems=systems, resamples=60))
    for key, reference in references.items():
        expected = naive_interval(groups, reference, resamples=60, seed=0)
        assert (stats[key].ci_low, stats[key].ci_high) == pytest.approx(expected, abs=1e-9), key


# --- differences between two judges -----------------------------------------------------------


def test_a_judge_minus_itself_is_exactly_zero() -> None:
    metric, human, groups = rated(80, 10, seed=12)
    systems = [f"sys{i % 4}" for i in range(80)]
    for figure in agreement_difference(metric, metric, human, groups, systems=systems):
        assert (figure.value, figure.ci_low, figure.ci_high) == (0.0, 0.0, 0.0)


def test_a_rank_preserving_rescale_changes_no_rank_figure_in_any_resample() -> None:
    metric, human, groups = rated(80, 10, seed=13)
    rescaled = [2 * v + 7 for v in metric]  # same order, so the same ranks in every resample
    for figure in agreement_difference(metric, rescaled, human, groups):
        if figure.statistic in ("spearman", "kendall"):
            assert (figure.value, figure.ci_low, figure.ci_high) == (0.0, 0.0, 0.0)


def test_paired_interval_is_narrower_than_either_judges_own() -> None:
    # Two judges that differ a little on every row: what the drawn sources share cancels in the
    # difference, so its interval is far narrower than each judge's own.
    metric, human, groups = rated(200, 20, seed=14)
    noise = np.random.default_rng(15).normal(0.0, 0.3, 200)
    other = [v + e for v, e in zip(metric, noise, strict=True)]
    own = by_key(agreement_statistics(metric, human, groups))
    difference = by_key(agreement_difference(metric, other, human, groups))
    for key, figure in difference.items():
        own_low, own_high = own[key].ci_low, own[key].ci_high
        assert None not in (figure.ci_low, figure.ci_high, own_low, own_high)
        width = float(figure.ci_high) - float(figure.ci_low)  # type: ignore[arg-type]
        assert width < (float(own_high) - float(own_low)) / 2, key  # type: ignore[arg-type]


# --- bad input --------------------------------------------------------------------------------


def test_binary_labels_must_be_zero_or_one() -> None:
    with pytest.raises(ValueError, match=r"human\[2\] must be 0 or 1 .* got 2"):
        agreement_statistics([0.1, 0.5, 0.9], [0, 1, 2], None, binary=True)
    with pytest.raises(ValueError, match=r"labels\[0\] must be 0 or 1 .* got 0.5"):
        roc_auc([0.1, 0.9], [0.5, 1])


def test_lengths_must_match() -> None:
    with pytest.raises(ValueError, match="metric and human must have the same length, got 3 and 2"):
        agreement_statistics([1, 2, 3], [1, 2], None)
    with pytest.raises(ValueError, match=r"groups must name one entry per row \(3\), got 2"):
        agreement_statistics([1, 2, 3], [1, 2, 3], ["a", "b"])
    with pytest.raises(ValueError, match=r"metric_a and metric_b .* got 3 and 4"):
        agreement_difference([1, 2, 3], [1, 2, 3, 4], [1, 2, 3], None)
    with pytest.raises(ValueError, match="x and y must have the same length, got 2 and 3"):
        spearman([1, 2], [1, 2, 3])


def test_ratings_must_be_finite_numbers() -> None:
    with pytest.raises(ValueError, match=r"metric\[1\] must be a finite number, got nan \(drop"):
        agreement_statistics([1.0, math.nan, 3.0], [1, 2, 3], None)
    with pytest.raises(ValueError, match=r"metric\[0\] must be a finite number, got inf"):
        agreement_statistics(np.array([np.inf, 1.0]), [1, 2], None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"human\[2\] must be a finite number, got None"):
        agreement_statistics([1, 2, 3], [1, 2, None], None)  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"human\[0\] must be a finite number, got 'good'"):
        agreement_statistics([1, 2], ["good", 2], None)  # type: ignore[list-item]
