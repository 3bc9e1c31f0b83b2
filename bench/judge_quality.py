"""How well the offline judge agrees with human ratings of summaries (SummEval-style data).

Scores every row with the offline judge through the public scorer API and prints, for
alignment vs consistency, coverage vs relevance and the score vs the mean of the two: the
summary-level Spearman and Kendall correlations (per article, over its summaries; articles where
either list is constant are skipped; the plain mean over articles), the pooled correlations over
all rows, and items per second.

    python bench/judge_quality.py ../shared/data/summeval_dev.jsonl
    python bench/judge_quality.py my_ratings.jsonl --max-questions 10

The file holds one JSON object a line with ``doc_id``, ``source``, ``summary``, ``consistency``
and ``relevance`` (any other fields are ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from summeval_runner import create_summarization_scorer

# The targets for the summary-level Spearman correlation.
TARGETS = {"alignment": 0.55, "coverage": 0.45, "score": 0.45}
SPEED_TARGET = 200.0
RESAMPLES = 2000


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    result = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for index in order[start : end + 1]:
            result[index] = (start + end) / 2 + 1
        start = end + 1
    return result


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    return pearson(ranks(x), ranks(y))


def kendall(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b, which corrects for ties (as scipy's default)."""
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denominator if denominator else float("nan")


Correlation = Callable[[Sequence[float], Sequence[float]], float]


def per_article(
    groups: dict[str, list[tuple[float, float]]], correlation: Correlation
) -> dict[str, float]:
    """The correlation within each group; groups where either list is constant are skipped."""
    values = {}
    for group, pairs in groups.items():
        metric = [m for m, _ in pairs]
        human = [h for _, h in pairs]
        if len(set(metric)) < 2 or len(set(human)) < 2:
            continue
        values[group] = correlation(metric, human)
    return values


def summary_level(
    groups: dict[str, list[tuple[float, float]]], correlation: Correlation
) -> tuple[float, int]:
    """Mean over groups of the correlation within each; groups with a constant list skipped."""
    values = list(per_article(groups, correlation).values())
    return (statistics.fmean(values) if values else float("nan")), len(values)


def interval(values: Sequence[float], resamples: int = RESAMPLES) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean, resampling articles with replacement.

    Articles are the unit that varies: another 50 articles would give another mean. Seeded, so
    the bench prints the same interval on every run.
    """
    if len(values) < 2:
        return float("nan"), float("nan")
    draw = random.Random(0)
    means = sorted(statistics.fmean(draw.choices(values, k=len(values))) for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


async def score_all(rows: list[dict[str, object]], max_questions: int) -> list[object]:
    scorer = create_summarization_scorer("offline", {"max_questions": max_questions})
    return [await scorer.run(input=row["source"], output=row["summary"]) for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="JSONL with doc_id, source, summary, ratings")
    parser.add_argument("--max-questions", type=int, default=10)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.data.read_text("utf-8").splitlines() if line]
    if not rows:
        sys.exit(f"{args.data}: no rows")
    started = time.perf_counter()
    cpu_started = time.process_time()
    results = asyncio.run(score_all(rows, args.max_questions))
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    words = statistics.fmean(len(str(row["source"]).split()) for row in rows)

    comparisons = {
        "alignment": ("alignment_score", lambda r: r["consistency"], "consistency"),
        "coverage": ("coverage_score", lambda r: r["relevance"], "relevance"),
        "score": ("score", lambda r: (r["consistency"] + r["relevance"]) / 2, "mean of the two"),
    }
    print(f"{len(rows)} summaries of {len({r['doc_id'] for r in rows})} articles ({args.data})")
    print(
        f"{'metric':<10} {'human rating':<16} {'spearman':>8} {'95% interval':>13} {'kendall':>8}"
        f" {'articles':>8}"
        f" {'pooled sp':>9} {'pooled kt':>9} {'target':>7}"
    )
    missed: list[str] = []
    within: list[str] = []
    for name, (attribute, human_of, label) in comparisons.items():
        groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
        metric_all, human_all = [], []
        for row, result in zip(rows, results, strict=True):
            value = getattr(result, attribute)
            value = 0.0 if value is None else float(value)
            human = float(human_of(row))
            groups[str(row["doc_id"])].append((value, human))
            metric_all.append(value)
            human_all.append(human)
        # One Spearman per article gives the mean, the article count and the interval.
        per_article_rho = list(per_article(groups, spearman).values())
        rho = statistics.fmean(per_article_rho) if per_article_rho else float("nan")
        articles = len(per_article_rho)
        low, high = interval(per_article_rho)
        tau, _ = summary_level(groups, kendall)
        target = TARGETS[name]
        if not rho >= target:
            missed.append(name)
            if low <= target <= high:
                within.append(name)
        print(
            f"{name:<10} {label:<16} {rho:>8.3f} {f'{low:.3f}-{high:.3f}':>13} {tau:>8.3f}"
            f" {articles:>8}"
            f" {spearman(metric_all, human_all):>9.3f} {kendall(metric_all, human_all):>9.3f}"
            f" {target:>7.2f}"
        )
    statuses = [getattr(r, "status", "") for r in results]
    rate = len(rows) / cpu
    print(
        f"speed: {rate:.0f} items/s on one core (CPU time; {len(rows) / wall:.0f} items/s wall), "
        f"sources of {words:.0f} words on average; target {SPEED_TARGET:.0f}"
    )
    print(f"statuses: {', '.join(f'{s} {statuses.count(s)}' for s in sorted(set(statuses)))}")
    if rate < SPEED_TARGET:
        missed.append("speed")
    print("all targets met" if not missed else f"below target: {', '.join(missed)}")
    if within:
        print(
            "within the 95% interval, so not distinguishable from the target on these articles:"
            f" {', '.join(within)}"
        )


if __name__ == "__main__":
    main()
