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

The development rows are the ones the figures may be read on while building; the judge's rules
are not tuned to them (a rule tuned to these rows shows up as a gap on the held-out half).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from summeval_runner import create_summarization_scorer, run_evals_sync
from summeval_runner._stats import agreement_difference, agreement_statistics

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ratings", type=Path)
    parser.add_argument("--max-questions", type=int, default=10)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--judge", default="offline", help='"offline", or JSON settings')
    args = parser.parse_args()
    judge: Any = args.judge if args.judge == "offline" else json.loads(args.judge)
    rows = [json.loads(line) for line in args.ratings.read_text(encoding="utf-8").splitlines()]
    human = [float(row["litepyramid_recall"]) for row in rows]
    groups = [str(row["doc_id"]) for row in rows]
    systems = [str(row["system_id"]) for row in rows]
    articles = len(set(groups))
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
