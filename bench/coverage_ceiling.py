"""How far can word overlap rank summaries by relevance? Coverage variants side by side.

The offline judge's coverage is a share of yes/no answers found by word overlap. This script
measures, on the same rows as ``judge_quality.py``, the summary-level Spearman correlation with
``relevance`` (and with the mean of ``consistency`` and ``relevance``, which the score is compared
with) of the overlap measures one could build instead: other thresholds, question counts and
question choices, no threshold at all, weighted term recall, the lead. It also prints what
knowing which system wrote each summary would reach (each summary given its system's mean human
rating), when the file has ``system_id``, and how well people's own coherence and consistency
ratings rank relevance, when it has them; then, per system, how many places the judge's coverage
ranks its summaries above or below people's relevance. Beside each measure, its gain over the
judge's coverage against relevance, paired by article, with a 95% interval from resampling the
articles: a gain whose interval holds 0 is not one these rows can show.

    python bench/coverage_ceiling.py ../shared/data/summeval_dev.jsonl

It judges nothing: it reads the texts with the offline judge's own tokeniser and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from summeval_runner import create_summarization_scorer
from summeval_runner._judges._offline import salient_sentences
from summeval_runner._judges._text import Analysed, analyse, split_claims, split_sentences
from summeval_runner._stats import ranks, spearman

Row = dict[str, object]
RESAMPLES = 2000


def per_article(
    groups: dict[str, list[tuple[float, float]]],
    correlation: Callable[[Sequence[float], Sequence[float]], float],
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


def interval(values: Sequence[float], resamples: int = RESAMPLES) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean, resampling articles; seeded."""
    if len(values) < 2:
        return float("nan"), float("nan")
    draw = random.Random(0)
    means = sorted(statistics.fmean(draw.choices(values, k=len(values))) for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def share_answered(
    asked: list[Analysed], summary: frozenset[str], threshold: float | None
) -> float:
    recalls = [len(q.keys & summary) / len(q.keys) for q in asked]
    if not recalls:
        return 0.0
    if threshold is None:
        return statistics.fmean(recalls)
    return statistics.fmean(r >= threshold for r in recalls)


def weighted_recall(sentences: list[Analysed], summary: frozenset[str]) -> float:
    """Share of the source's terms in the summary, each weighted by how often the source uses
    it and how early it first appears."""
    frequency = Counter(key for s in sentences for key in s.keys)
    weight: dict[str, float] = {}
    for index, sentence in enumerate(sentences):
        for key in sentence.keys:
            weight.setdefault(key, math.log1p(frequency[key]) / (1 + 0.15 * index))
    total = sum(weight.values())
    return sum(w for k, w in weight.items() if k in summary) / total if total else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="JSONL with doc_id, source, summary, ratings")
    args = parser.parse_args()
    rows: list[Row] = [
        json.loads(line) for line in args.data.read_text("utf-8").splitlines() if line
    ]

    sources: dict[str, list[Analysed]] = {}
    clauses: dict[str, list[Analysed]] = {}
    for row in rows:
        source = str(row["source"])
        if source not in sources:
            sources[source] = [analyse(s) for s in split_sentences(source)]
            clauses[source] = [analyse(c) for c in split_claims(source)]
    summaries = [analyse(str(row["summary"])).keys for row in rows]

    def variant(pick: Callable[[str], list[Analysed]], threshold: float | None) -> list[float]:
        chosen: dict[str, list[Analysed]] = {}
        values = []
        for row, summary in zip(rows, summaries, strict=True):
            source = str(row["source"])
            if source not in chosen:
                chosen[source] = pick(source)
            values.append(share_answered(chosen[source], summary, threshold))
        return values

    scorer = create_summarization_scorer("offline")
    judged = [
        float(scorer.run_sync(input=row["source"], output=row["summary"]).coverage_score or 0.0)
        for row in rows
    ]
    measures: dict[str, Sequence[float]] = {
        "the offline judge's coverage (10 questions, half their words)": judged,
    }
    for threshold in (None, 0.3, 0.7):
        label = "no threshold (mean share)" if threshold is None else f"threshold {threshold}"
        measures[f"judge's questions, {label}"] = variant(
            lambda s: salient_sentences(sources[s], 10), threshold
        )
    for limit in (5, 20):
        measures[f"{limit} questions"] = variant(
            lambda s, n=limit: salient_sentences(sources[s], n), 0.5
        )
    measures["questions by position only (lead)"] = variant(
        lambda s: [sentence for sentence in sources[s] if len(sentence.keys) >= 4][:10], 0.5
    )
    measures["questions by centrality only"] = variant(
        lambda s: salient_sentences(sources[s], 10, lead_bias=0.0), 0.5
    )
    measures["questions from clauses"] = variant(lambda s: salient_sentences(clauses[s], 10), 0.5)
    measures["weighted term recall (no questions)"] = [
        weighted_recall(sources[str(row["source"])], summary)
        for row, summary in zip(rows, summaries, strict=True)
    ]
    measures["summary length in words"] = [len(str(row["summary"]).split()) for row in rows]
    if all("system_id" in row for row in rows):
        by_system: dict[str, list[float]] = defaultdict(list)
        for row in rows:
            by_system[str(row["system_id"])].append(float(row["relevance"]))  # type: ignore[arg-type]
        means = {system: statistics.fmean(v) for system, v in by_system.items()}
        measures["reference: its system's mean human relevance"] = [
            means[str(row["system_id"])] for row in rows
        ]
    for rating in ("coherence", "consistency"):
        if all(rating in row for row in rows):
            measures[f"reference: people's own {rating} rating"] = [
                float(row[rating])  # type: ignore[arg-type]
                for row in rows
            ]

    def by_article(values: Sequence[float], human: Callable[[Row], float]) -> dict[str, float]:
        groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for row, value in zip(rows, values, strict=True):
            groups[str(row["doc_id"])].append((value, human(row)))
        return per_article(groups, spearman)

    def relevance(row: Row) -> float:
        return float(row["relevance"])  # type: ignore[arg-type]

    def mean_rating(row: Row) -> float:
        return (float(row["relevance"]) + float(row["consistency"])) / 2  # type: ignore[arg-type]

    judge_by_article = by_article(judged, relevance)
    print(f"{len(rows)} summaries ({args.data}); summary-level Spearman")
    print(f"{'measure':<64} {'relevance':>9} {'mean':>6} {'minus the judge (95% interval)':>31}")
    for name, values in measures.items():
        against_relevance = by_article(values, relevance)
        against_mean = statistics.fmean(by_article(values, mean_rating).values())
        paired = ""
        if values is not judged:
            # Paired by article: the same articles' correlations, so their spread cancels out.
            shared = sorted(judge_by_article.keys() & against_relevance.keys())
            differences = [against_relevance[a] - judge_by_article[a] for a in shared]
            low, high = interval(differences)
            paired = f"{statistics.fmean(differences):+.3f} ({low:+.3f} to {high:+.3f})"
        line = (
            f"{name:<64} {statistics.fmean(against_relevance.values()):>9.3f} {against_mean:>6.3f}"
            f" {paired:>31}"
        )
        print(line.rstrip())
    if all("system_id" in row for row in rows):
        print_rank_errors(rows, judged)


def print_rank_errors(rows: list[Row], coverage: Sequence[float]) -> None:
    """Per system, how many places (of an article's summaries) the judge's coverage ranks its
    summaries above (+) or below (-) people's relevance, on average over the articles."""
    by_article: dict[str, list[int]] = defaultdict(list)
    for index, row in enumerate(rows):
        by_article[str(row["doc_id"])].append(index)
    errors: dict[str, list[float]] = defaultdict(list)
    for indexes in by_article.values():
        # ranks() counts from the lowest value; a higher rank is a better place.
        judged = ranks([coverage[i] for i in indexes])
        human = ranks([float(rows[i]["relevance"]) for i in indexes])  # type: ignore[arg-type]
        for i, mine, theirs in zip(indexes, judged, human, strict=True):
            errors[str(rows[i]["system_id"])].append(mine - theirs)
    means = {system: statistics.fmean(values) for system, values in errors.items()}
    print("coverage's rank minus people's, per system (mean over articles; + ranked too high):")
    print(
        "  "
        + ", ".join(f"{system} {means[system]:+.2f}" for system in sorted(means, key=means.get))
    )


if __name__ == "__main__":
    main()
