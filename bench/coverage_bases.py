"""Coverage against people, for each basis on the same rows (issue 43, SPEC §1.7).

Reads a REALSumm-style ratings file (``../shared/data/realsumm_dev.jsonl``: ``doc_id``,
``system_id``, ``source``, ``summary``, ``reference``, ``key_facts``, ``litepyramid_recall``),
judges every summary's coverage with the offline judge (or ``--judge`` a model judge's settings
as JSON) once per basis:

- ``source_questions``: questions the judge draws from the source (the default);
- ``key_facts``: the human key facts, given as each row's ground truth;
- ``reference``: the reference summary, whose key facts the judge draws;

and prints each basis's agreement of coverage with ``litepyramid_recall`` as the field reports it
on REALSumm (FineSurE: Pearson and Spearman pooled over all summaries), with 95% bootstrap
intervals over articles, and each basis's difference from ``source_questions`` paired on the
same draws. Also the summary level (per article, then the mean) and the system level.

    python bench/coverage_bases.py ../shared/data/realsumm_dev.jsonl [--max-questions 10]
    python bench/coverage_bases.py ../shared/data/realsumm_dev.jsonl --held-out

``--held-out`` measures how the offline judge's key-fact rule generalizes, and the rule before
it on the same folds: the articles cut into five folds (seeded), ``key_fact_recall`` (the share
of a key fact's weighted content words the summary must hold) chosen on four from a grid and the
pooled Pearson measured on the fifth.

The development rows are the ones the figures may be read on while building; the judge's rules
are not tuned to them (a rule tuned to these rows shows up as a gap on the held-out half).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from summeval_runner import create_summarization_scorer, run_evals_sync
from summeval_runner._judges._offline import OfflineJudge, OfflineSettings
from summeval_runner._judges._text import analyse
from summeval_runner._stats import agreement_difference, agreement_statistics, pearson

BASES = ("source_questions", "key_facts", "reference")


def ground_truth(row: dict[str, Any], basis: str) -> Any:
    if basis == "key_facts":
        return {"key_facts": row["key_facts"]}
    if basis == "reference":
        return {"reference": row["reference"]}
    return None


def coverage_scores(
    rows: list[dict[str, Any]], basis: str, judge: Any, max_questions: int
) -> list[float]:
    scorer = create_summarization_scorer(judge, {"max_questions": max_questions})
    data = [
        {
            "id": f"{row['doc_id']}/{row['system_id']}",
            "input": row["source"],
            "output": row["summary"],
            **({"ground_truth": truth} if (truth := ground_truth(row, basis)) else {}),
        }
        for row in rows
    ]
    result = run_evals_sync(data=data, scorers=[scorer])
    by_id = {item.item_id: item.results[scorer.id] for item in result.items}
    scores = []
    for entry in data:
        judged = by_id[entry["id"]]
        if judged.status != "scored" or judged.coverage_score is None:
            raise SystemExit(f"{entry['id']}: {judged.status}: {judged.reason}")
        scores.append(judged.coverage_score)
    return scores


GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
FOLDS = 5


# The rule before the key facts were weighed against their siblings (issue 43's first session):
# every content term alike, anywhere in the summary.
RULES: dict[str, dict[str, Any]] = {
    "siblings weighed, 2 sentences": {},
    "flat, whole summary (before)": {"key_fact_weights": False, "key_fact_window": 10**6},
}


def word_overlap(rows: list[dict[str, Any]]) -> list[float]:
    """The plain reference: the share of each key fact's content words (this judge's stems)
    found anywhere in the summary, averaged over the key facts; no threshold, no rule."""
    scores = []
    for row in rows:
        summary = analyse(row["summary"], lexicon=False).keys
        facts = [keys for fact in row["key_facts"] if (keys := analyse(fact, lexicon=False).keys)]
        scores.append(sum(len(keys & summary) / len(keys) for keys in facts) / len(facts))
    return scores


def held_out(rows: list[dict[str, Any]], human: list[float], max_questions: int) -> None:
    """For each rule, the offline judge's key_fact_recall chosen on four folds of articles from
    ``GRID`` and the rule measured on the fifth (pooled Pearson out of fold)."""
    articles = sorted({str(row["doc_id"]) for row in rows})
    random.Random(0).shuffle(articles)
    folds = [set(articles[i::FOLDS]) for i in range(FOLDS)]
    overlap = word_overlap(rows)
    print(
        "word overlap (each key fact's share of content words in the summary, averaged; "
        f"nothing chosen): pooled pearson per fold "
        f"{[round(pearson(*_on(overlap, human, rows, fold)), 3) for fold in folds]}; "
        f"all rows {pearson(overlap, human):.3f}"
    )
    for rule, settings in RULES.items():
        scores = {
            recall: coverage_scores(
                rows,
                "key_facts",
                OfflineJudge(OfflineSettings(key_fact_recall=recall, **settings)),
                max_questions,
            )
            for recall in GRID
        }
        chosen, figures = [], []
        out_of_fold = [0.0] * len(rows)
        for fold in folds:
            train = [i for i, row in enumerate(rows) if str(row["doc_id"]) not in fold]
            test = [i for i, row in enumerate(rows) if str(row["doc_id"]) in fold]

            def figure(
                recall: float, on: list[int], scores: dict[float, list[float]] = scores
            ) -> float:
                return pearson([scores[recall][i] for i in on], [human[i] for i in on])

            best = max(GRID, key=lambda recall: figure(recall, train))
            chosen.append(best)
            figures.append(figure(best, test))
            for i in test:
                out_of_fold[i] = scores[best][i]
        print(
            f"{rule}: key_fact_recall chosen out of fold ({FOLDS} folds by article, grid "
            f"{GRID}): {chosen}; pooled pearson per fold {[round(f, 3) for f in figures]}; "
            f"out of fold, all rows {pearson(out_of_fold, human):.3f}"
        )
        print(
            "  on all rows: "
            + ", ".join(f"{recall} {pearson(scores[recall], human):.3f}" for recall in GRID)
        )


def _on(
    scores: list[float], human: list[float], rows: list[dict[str, Any]], fold: set[str]
) -> tuple[list[float], list[float]]:
    test = [i for i, row in enumerate(rows) if str(row["doc_id"]) in fold]
    return [scores[i] for i in test], [human[i] for i in test]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ratings", type=Path)
    parser.add_argument("--max-questions", type=int, default=10)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--judge", default="offline", help='"offline", or JSON settings')
    parser.add_argument(
        "--held-out", action="store_true", help="the offline key_fact_recall, chosen out of fold"
    )
    args = parser.parse_args()
    judge: Any = args.judge if args.judge == "offline" else json.loads(args.judge)
    rows = [json.loads(line) for line in args.ratings.read_text(encoding="utf-8").splitlines()]
    human = [float(row["litepyramid_recall"]) for row in rows]
    groups = [str(row["doc_id"]) for row in rows]
    systems = [str(row["system_id"]) for row in rows]
    articles = len(set(groups))
    if args.held_out:
        held_out(rows, human, args.max_questions)
        return
    print(
        f"{len(rows)} summaries of {articles} articles by {len(set(systems))} systems "
        f"({args.ratings}); coverage against litepyramid_recall, judge {args.judge}, "
        f"max_questions {args.max_questions}"
    )
    scores: dict[str, list[float]] = {}
    for basis in BASES:
        started = time.perf_counter()
        scores[basis] = coverage_scores(rows, basis, judge, args.max_questions)
        print(f"  {basis}: judged in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    header = (
        f"{'basis':<17} {'level':<8} {'statistic':<9} {'value':>6}  {'95% interval':<16} "
        f"{'vs source_questions':>19}  {'paired 95%':<16}"
    )
    print(header)
    for basis in BASES:
        figures = agreement_statistics(
            scores[basis], human, groups, systems=systems, resamples=args.resamples
        )
        differences = (
            agreement_difference(
                scores[basis],
                scores["source_questions"],
                human,
                groups,
                systems=systems,
                resamples=args.resamples,
            )
            if basis != "source_questions"
            else ()
        )
        paired = {(d.level, d.statistic): d for d in differences}
        for figure in figures:
            interval = _interval(figure.ci_low, figure.ci_high)
            line = (
                f"{basis:<17} {figure.level:<8} {figure.statistic:<9} {_value(figure.value):>6}  "
                f"{interval:<16}"
            )
            diff = paired.get((figure.level, figure.statistic))
            if diff is not None:
                line += f" {_signed(diff.value):>19}  {_interval(diff.ci_low, diff.ci_high, True)}"
            print(line.rstrip())
    print(
        f"95% intervals: percentiles of {args.resamples} bootstrap draws of the articles (seed 0); "
        "pooled is the level REALSumm's published figures use (FineSurE with GPT-4 and the "
        "human key facts: Pearson 0.688 on the full set)"
    )


def _value(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.3f}"


def _interval(low: float | None, high: float | None, signed: bool = False) -> str:
    if low is None or high is None:
        return ""
    shown = _signed if signed else _value
    return f"[{shown(low)}, {shown(high)}]"


if __name__ == "__main__":
    main()
