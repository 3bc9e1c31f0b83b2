"""How the runner's bounds meet: ``concurrency`` alone, and a paced run under ``item_timeout_s``.

``run_evals`` from Python (the seed's ``concurrency``), the OpenAI provider with the official SDK,
against ``bench/loopback_judge.py`` in its own process answering after a fixed latency L. Prints:

- ``concurrency``: N items with ``concurrency=C`` and nothing else set; ideal = 3 x L x
  ceil(N / C) (three sequential judge calls an item), ratio = ideal / wall, and the most judge
  requests in flight the run allowed;
- ``paced``: 20 items with ``judge_rpm=120`` and ``item_timeout_s=5`` (the pacer alone makes the
  last items wait far longer than 5 s): how many scored, how many timed out.

    python bench/bounds.py                         # both (about a minute)
    python bench/bounds.py --only concurrency --items 500 --concurrency 50 --latency 0.2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import LoopbackJudge, write_items

from summeval_runner import create_summarization_scorer, run_evals


def _scorer(base_url: str) -> object:
    return create_summarization_scorer(
        {"provider": "openai", "name": "bench", "base_url": base_url, "api_key_env": None},
        {"max_questions": 10},
    )


async def _run(base_url: str, dataset: Path, **options: object) -> tuple[float, object]:
    rows = [json.loads(line) for line in dataset.read_text("utf-8").splitlines()]
    items = [{"id": row["id"], "input": row["input"], "output": row["summary"]} for row in rows]
    started = time.perf_counter()
    result = await run_evals(
        scorers=[_scorer(base_url)], data=items, cache="off", **options  # type: ignore[arg-type]
    )
    return time.perf_counter() - started, result


def concurrency(work: Path, items: int, concurrency: int, latency_s: float) -> None:
    dataset = write_items(work / "items.jsonl", items)
    judge = LoopbackJudge(latency_s)
    try:
        wall, result = asyncio.run(_run(judge.base_url, dataset, concurrency=concurrency))
    finally:
        judge.stop()
    ideal = 3 * latency_s * math.ceil(items / concurrency)
    print(
        f"concurrency: N={items} concurrency={concurrency} L={latency_s * 1000:.0f} ms: "
        f"wall {wall:.1f} s, ideal {ideal:.1f} s, ratio {ideal / wall:.2f}; "
        f"scored {result.counts.scored}/{items}"  # type: ignore[attr-defined]
    )


def paced(work: Path, items: int, rpm: float, timeout_s: float) -> None:
    dataset = write_items(work / "paced.jsonl", items)
    judge = LoopbackJudge(0.01)
    try:
        wall, result = asyncio.run(
            _run(judge.base_url, dataset, concurrency=16, judge_rpm=rpm, item_timeout_s=timeout_s)
        )
    finally:
        judge.stop()
    counts = result.counts  # type: ignore[attr-defined]
    print(
        f"paced: N={items} judge_rpm={rpm:g} item_timeout_s={timeout_s:g}: wall {wall:.1f} s; "
        f"scored {counts.scored}, errors {counts.errors}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=("concurrency", "paced"), default=None)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    only = set(args.only or ("concurrency", "paced"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "concurrency" in only:
            concurrency(work, args.items, args.concurrency, args.latency)
        if "paced" in only:
            paced(work, 20, 120.0, 5.0)


if __name__ == "__main__":
    main()
