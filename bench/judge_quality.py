"""How well the offline judge agrees with human ratings of summaries (SummEval-style data).

Two figures per dimension (alignment vs consistency, coverage vs relevance, the score vs the
mean of the two), both summary-level Spearman (per article over its summaries, then the mean):

- all rows: the judge as shipped, through ``judge_agreement`` (with its 95% interval, Kendall's
  tau-b and the pooled figures). Its rules and thresholds were chosen on the development rows,
  so on those rows this figure is optimistic.
- held out: the rows cut into five folds by article; for each fold, the thresholds of
  ``OfflineSettings`` are chosen from a small grid on the other four folds and the figure is
  measured on this one. The mean over the five folds is what to expect on other articles.

And items per second on one core (CPU time of the judging).

With ``--rules``, each switch of ``OfflineSettings`` turned the other way from its default, and
what that does to each dimension's figure: the difference on all rows with its paired 95%
interval (the same articles drawn for both), and the difference on each of the five folds. A
rule is kept on by default only where turning it off loses on the folds (a guard that fires on
a handful of summaries is the exception the README names); one that loses when turned on stays
off or is removed.

    python bench/judge_quality.py ../shared/data/summeval_dev.jsonl
    python bench/judge_quality.py ../shared/data/summeval_dev.jsonl --rules
    python bench/judge_quality.py my_ratings.jsonl --max-questions 10 --folds 0

The file holds one JSON object a line with ``doc_id``, ``source``, ``summary``, ``consistency``
and ``relevance`` (any other fields are ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

from summeval_runner import (
    OfflineJudge,
    OfflineSettings,
    SummarizationResult,
    create_summarization_scorer,
    judge_agreement_sync,
)
from summeval_runner._stats import agreement_difference, agreement_statistics

# The targets for the summary-level Spearman correlation.
TARGETS = {"alignment": 0.55, "coverage": 0.45, "score": 0.45}
SPEED_TARGET = 200.0
# The thresholds chosen on four folds: each around its default.
SUPPORT_RECALL = (0.7, 0.8, 0.9)
ANSWER_RECALL = (0.4, 0.5, 0.6)
Row = dict[str, object]


def human(row: Row, dimension: str) -> float:
    consistency, relevance = float(str(row["consistency"])), float(str(row["relevance"]))
    return {"alignment": consistency, "coverage": relevance}.get(
        dimension, (consistency + relevance) / 2
    )


def judged(
    rows: list[Row], settings: OfflineSettings, max_questions: int
) -> dict[str, list[float]]:
    """Each row's alignment, coverage and score under ``settings`` (None, an error, is 0)."""
    scorer = create_summarization_scorer(OfflineJudge(settings), {"max_questions": max_questions})

    async def run_all() -> list[SummarizationResult]:
        return [await scorer.run(input=row["source"], output=row["summary"]) for row in rows]

    results = asyncio.run(run_all())
    return {
        "alignment": [r.alignment_score or 0.0 for r in results],
        "coverage": [r.coverage_score or 0.0 for r in results],
        "score": [r.score or 0.0 for r in results],
    }


def summary_spearman(rows: list[Row], metric: list[float], dimension: str, keep: set[int]) -> float:
    """The summary-level Spearman over the rows whose index is in ``keep``."""
    chosen = sorted(keep)
    (figure,) = [
        s
        for s in agreement_statistics(
            [metric[i] for i in chosen],
            [human(rows[i], dimension) for i in chosen],
            [str(rows[i]["doc_id"]) for i in chosen],
            resamples=0,
        )
        if (s.level, s.statistic) == ("summary", "spearman")
    ]
    return float("nan") if figure.value is None else figure.value


def fold_members(rows: list[Row], folds: int) -> list[set[int]]:
    """The row indices of each fold: articles dealt to the folds in sorted order."""
    articles = sorted({str(row["doc_id"]) for row in rows})
    fold_of = {article: index % folds for index, article in enumerate(articles)}
    return [
        {i for i, row in enumerate(rows) if fold_of[str(row["doc_id"])] == k} for k in range(folds)
    ]


def held_out(rows: list[Row], folds: int, max_questions: int) -> dict[str, list[float]]:
    """Per fold and dimension: the figure with thresholds chosen on the other folds."""
    members = fold_members(rows, folds)
    candidates = [
        OfflineSettings(support_recall=support, answer_recall=answer)
        for support, answer in itertools.product(SUPPORT_RECALL, ANSWER_RECALL)
    ]
    scores = [judged(rows, settings, max_questions) for settings in candidates]
    figures: dict[str, list[float]] = {dimension: [] for dimension in TARGETS}
    for dimension, k in itertools.product(TARGETS, range(folds)):
        train = set().union(*(members[j] for j in range(folds) if j != k))
        best = max(scores, key=lambda s: summary_spearman(rows, s[dimension], dimension, train))
        figures[dimension].append(summary_spearman(rows, best[dimension], dimension, members[k]))
    return figures


def rules(rows: list[Row], folds: int, max_questions: int) -> None:
    """Print what turning each switch the other way from its default does, on all rows (with a
    paired interval) and on each fold."""
    members = fold_members(rows, folds)
    default = OfflineSettings()
    base = judged(rows, default, max_questions)
    everything = set(range(len(rows)))
    articles = [str(row["doc_id"]) for row in rows]
    print("rules: each switch turned the other way from its default; difference from the default")
    print(f"{'switch':<26} {'dimension':<10} {'all rows':>8} {'paired 95%':>17}  per fold")
    for field in fields(OfflineSettings):
        if not isinstance(field.default, bool):
            continue
        flipped = not getattr(default, field.name)
        other = judged(rows, replace(default, **{field.name: flipped}), max_questions)
        label = f"{field.name}={flipped}"
        for dimension in TARGETS:
            if other[dimension] == base[dimension]:
                print(f"{label:<26} {dimension:<10} {'no verdict changed':>8}")
                continue
            (difference,) = [
                s
                for s in agreement_difference(
                    other[dimension],
                    base[dimension],
                    [human(row, dimension) for row in rows],
                    articles,
                    resamples=2000,
                )
                if (s.level, s.statistic) == ("summary", "spearman")
            ]
            per_fold = [
                summary_spearman(rows, other[dimension], dimension, fold)
                - summary_spearman(rows, base[dimension], dimension, fold)
                for fold in members
            ]
            whole = difference.value if difference.value is not None else float("nan")
            interval = f"[{difference.ci_low or 0.0:+.3f}, {difference.ci_high or 0.0:+.3f}]"
            print(
                f"{label:<26} {dimension:<10} {whole:>+8.3f} {interval:>17}  "
                f"{' '.join(f'{v:+.3f}' for v in per_fold)}"
            )
        # Which summaries the rule decides, and whether people found those inconsistent: a
        # guard that fires on a handful of them is measured by this, not by a correlation.
        changed = [i for i in everything if other["alignment"][i] != base["alignment"][i]]
        inconsistent = sum(float(str(rows[i]["consistency"])) < 4 for i in changed)
        print(
            f"{label:<26} {'':<10} alignment of {len(changed)} of {len(rows)} summaries "
            f"changed; people rated {inconsistent} of them below 4 (consistency)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="JSONL with doc_id, source, summary, ratings")
    parser.add_argument("--max-questions", type=int, default=10)
    parser.add_argument("--folds", type=int, default=5, help="0: skip the held-out figure")
    parser.add_argument(
        "--rules", action="store_true", help="also: each rule switch against the default"
    )
    args = parser.parse_args()
    rows: list[Row] = [
        json.loads(line) for line in args.data.read_text("utf-8").splitlines() if line
    ]
    if not rows:
        sys.exit(f"{args.data}: no rows")
    cpu_started = time.process_time()
    judged(rows, OfflineSettings(), args.max_questions)
    rate = len(rows) / (time.process_time() - cpu_started)
    scorer = create_summarization_scorer("offline", {"max_questions": args.max_questions})
    result = judge_agreement_sync(args.data, scorer=scorer)
    folds = held_out(rows, args.folds, args.max_questions) if args.folds >= 2 else {}

    print(f"{len(rows)} summaries of {len({r['doc_id'] for r in rows})} articles ({args.data})")
    print(
        f"{'metric':<10} {'all rows':>8} {'95% interval':>13} {'kendall':>8} {'pooled sp':>9}"
        f" {'held out':>8}  {'per fold':<34} {'target':>6}"
    )
    missed = []
    for dimension, target in TARGETS.items():
        rho = result.figure(dimension)
        tau = result.figure(dimension, "kendall")
        pooled = result.figure(dimension, "spearman", "pooled")
        per_fold = folds.get(dimension, [])
        mean = statistics.fmean(per_fold) if per_fold else float("nan")
        interval = f"{rho.ci_low or float('nan'):.3f}-{rho.ci_high or float('nan'):.3f}"
        print(
            f"{dimension:<10} {rho.value or float('nan'):>8.3f} {interval:>13}"
            f" {tau.value or float('nan'):>8.3f} {pooled.value or float('nan'):>9.3f}"
            f" {mean:>8.3f}  {' '.join(f'{v:.3f}' for v in per_fold):<34} {target:>6.2f}"
        )
        if not (rho.value or 0.0) >= target:
            missed.append(dimension)
    print(
        "held out: mean over folds by article of the figure on a fold, thresholds "
        "(support_recall, answer_recall) chosen on the others; all rows: rules tuned on these rows"
    )
    print(f"speed: {rate:.0f} items/s on one core (CPU time); target {SPEED_TARGET:.0f}")
    if rate < SPEED_TARGET:
        missed.append("speed")
    print("all targets met" if not missed else f"below target: {', '.join(missed)}")
    if args.rules:
        rules(rows, max(args.folds, 2), args.max_questions)


if __name__ == "__main__":
    main()
