"""How much sharing a source's questions narrows a coverage comparison's paired interval.

Two variants summarize the same N sources (the lead-2 and the lead-3 sentences of each), judged
by a judge whose choice of coverage questions varies with the summary in view: its preprocess
call ranks the source's 20 most salient sentences as the offline judge does and keeps
``max_questions`` of them, chosen by a generator seeded with the summary (as a model's choice
moves with what it is shown); it answers them from the summary alone, as the offline judge does.
Each variant is run as ``summeval-run`` would run it (``run_evals`` with a run directory and the
response cache), once with ``scorer.questions=per_item`` and once with ``per_source``, and the
two runs of each mode are compared with ``compare_runs`` (the variant against the baseline,
item by item: paired bootstrap 95% interval of the mean difference).

    python bench/question_sharing.py                 # 300 sources, 5 questions of 20
    python bench/question_sharing.py --items 1000 --questions 10

It prints, per mode, the coverage difference (lead-3 minus lead-2) with its paired interval and
the interval's width, the standard deviation of the per-item differences, how many items were
asked the same questions in both variants, and the ratio of the two widths.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from summeval_runner import (  # noqa: E402
    JudgeReply,
    JudgeRequest,
    OfflineJudge,
    PreprocessInput,
    compare_runs,
    create_summarization_scorer,
    run_evals,
)
from summeval_runner._judges._text import split_sentences  # noqa: E402

SAMPLE = ROOT / "data" / "sample_articles.jsonl"
POOL = 20


class VaryingJudge:
    """The offline judge, but choosing its coverage questions by the summary it is shown."""

    name = "varying"

    def __init__(self) -> None:
        self._offline = OfflineJudge()

    def cache_identity(self) -> dict[str, Any]:
        # Cached like a model judge, so that a question set drawn by one variant's run is found
        # by the other's (per_source) through the response cache.
        return {"provider": "bench", "judge": "varying", "pool": POOL}

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        payload = request.payload
        if not isinstance(payload, PreprocessInput) or payload.max_questions == 0:
            return await self._offline.complete(request)
        pool = PreprocessInput(payload.summary, payload.source, POOL)
        reply = await self._offline.complete(replace(request, payload=pool))
        content = dict(reply.content) if not isinstance(reply.content, str) else {}
        questions = list(content.get("questions", []))
        seed = hashlib.sha256(payload.summary.encode()).hexdigest()
        chosen = random.Random(seed).sample(questions, min(payload.max_questions, len(questions)))
        return JudgeReply(content={**content, "questions": chosen}, cost=0.0)


def sources(count: int) -> list[str]:
    articles = [json.loads(line)["text"] for line in SAMPLE.read_text("utf-8").splitlines()]
    made = []
    for index in range(count):
        first, second = articles[index % len(articles)], articles[(index * 7 + 3) % len(articles)]
        made.append(f"Report {index}. {first} {second}")
    return made


def variant(texts: list[str], lead: int) -> list[dict[str, Any]]:
    return [
        {"id": f"doc-{i:05d}", "input": text, "output": " ".join(split_sentences(text)[:lead])}
        for i, text in enumerate(texts)
    ]


async def run_mode(mode: str, texts: list[str], questions: int, work: Path) -> dict[str, Any]:
    cache = work / f"{mode}-cache.sqlite"
    run_dirs = []
    for lead in (2, 3):
        scorer = create_summarization_scorer(
            VaryingJudge(), {"max_questions": questions, "questions": mode}
        )
        run_dir = work / f"{mode}-lead{lead}"
        await run_evals(
            scorers=[scorer],
            data=variant(texts, lead),
            output_dir=run_dir,
            cache_path=cache,
            variant=f"lead-{lead}",
        )
        run_dirs.append(run_dir)
    comparison = compare_runs(run_dirs, baseline=run_dirs[0])
    row = comparison[
        (comparison["dimension"] == "coverage") & (comparison["variant"] == "lead-3")
    ].iloc[0]
    asked = []
    for run_dir in run_dirs:
        coverage = pd.read_parquet(run_dir / "coverage.parquet")
        asked.append(coverage.groupby("item_id")["question"].apply(tuple).to_dict())
    same = sum(asked[0][item] == asked[1].get(item) for item in asked[0])
    items2 = pd.read_parquet(run_dirs[0] / "items.parquet").set_index("item_id")["coverage_score"]
    items3 = pd.read_parquet(run_dirs[1] / "items.parquet").set_index("item_id")["coverage_score"]
    diffs = (items3 - items2.reindex(items3.index)).dropna().tolist()
    return {
        "diff": float(row["mean_diff"]),
        "low": float(row["diff_ci95_low"]),
        "high": float(row["diff_ci95_high"]),
        "sd": statistics.stdev(diffs),
        "same": same,
        "items": len(asked[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--questions", type=int, default=5, help="max_questions (of 20)")
    args = parser.parse_args()
    texts = sources(args.items)
    print(
        f"{args.items} sources, lead-3 against lead-2, coverage on {args.questions} questions "
        f"chosen from the {POOL} most salient sentences by a judge that sees the summary"
    )
    widths = {}
    with tempfile.TemporaryDirectory(prefix="summeval-questions-") as folder:
        for mode in ("per_item", "per_source"):
            found = asyncio.run(run_mode(mode, texts, args.questions, Path(folder)))
            widths[mode] = found["high"] - found["low"]
            print(
                f"  {mode:<10} coverage diff {found['diff']:+.4f}  paired 95% CI "
                f"[{found['low']:+.4f}, {found['high']:+.4f}]  width {widths[mode]:.4f}  "
                f"sd of item diffs {found['sd']:.4f}  same questions {found['same']}/"
                f"{found['items']} items"
            )
    print(
        f"  the per_source interval is {widths['per_source'] / widths['per_item']:.2f} times as "
        f"wide as the per_item one ({1 - widths['per_source'] / widths['per_item']:.0%} narrower)"
    )


if __name__ == "__main__":
    main()
