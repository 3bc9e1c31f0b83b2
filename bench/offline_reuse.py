"""The offline judge on every summary of a development half of human ratings, with the
analyses of recent texts kept (as it runs) and with none kept: seconds each, and whether the
scores are the same. A source is judged once per system's summary, so its analysis comes
back.

    python bench/offline_reuse.py [--data ../shared/data/summeval_dev.jsonl]

Each mode runs in a process of its own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _one(data_path: str, kept: bool) -> None:
    from summeval_runner import create_summarization_scorer, run_evals_sync
    from summeval_runner._judges import _text

    if not kept:
        _text._RECENT.budget_chars = 0  # every text is over the budget: nothing held
    rows = [json.loads(line) for line in Path(data_path).read_text("utf-8").splitlines()]
    data = [
        {"id": f"{r['doc_id']}-{r['system_id']}", "input": r["source"], "output": r["summary"]}
        for r in rows
    ]
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        result = run_evals_sync(
            data=data,
            scorers=[create_summarization_scorer("offline")],
            cache="off",
            progress=False,
            output_dir=Path(scratch) / "run",
        )
        seconds = time.perf_counter() - started
    scores = [item.results["summarization-scorer"].score for item in result.items]
    sources = len({r["source"] for r in rows})
    shown = {"seconds": seconds, "scores": scores, "items": len(rows), "sources": sources}
    print(json.dumps(shown))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/summeval_dev.jsonl"))
    parser.add_argument("--mode", choices=["kept", "none"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        _one(args.data, args.mode == "kept")
        return
    runs = {}
    for mode in ("none", "kept"):
        done = subprocess.run(
            [sys.executable, __file__, "--data", args.data, "--mode", mode],
            capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        runs[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    none, kept = runs["none"], runs["kept"]
    print(
        f"{Path(args.data).name}: {kept['items']} summaries of {kept['sources']} sources; "
        f"nothing kept {none['seconds']:.1f} s, recent analyses kept {kept['seconds']:.1f} s; "
        f"same scores: {none['scores'] == kept['scores']}"
    )


if __name__ == "__main__":
    main()
