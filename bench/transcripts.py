"""What keeping transcripts costs (``runner.transcripts``): time and bytes, against a run without.

The same N items (distinct sources made from the bundled sample, the lead-2 sentences as the
summary) are run by ``run_evals`` with a run directory and the offline judge, so that the
runner's own work is all there is to measure: alternately without and with transcripts,
``--repeats`` times each, in this one process.

    python bench/transcripts.py                  # 2,000 items, 3 runs of each
    python bench/transcripts.py --items 10000 --repeats 1

It prints, per setting, the median seconds per item (wall time of the whole call, journal and
tables included), the journal's and the tables' bytes per item, and the ratios of with to
without.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from summeval_runner import create_summarization_scorer, run_evals  # noqa: E402
from summeval_runner._judges._text import split_sentences  # noqa: E402

SAMPLE = ROOT / "data" / "sample_articles.jsonl"


def items(count: int) -> list[dict[str, str]]:
    docs = [json.loads(line)["text"] for line in SAMPLE.read_text("utf-8").splitlines()]
    made = []
    for index in range(count):
        text = f"{docs[index % len(docs)]} This is copy {index} of the article."
        summary = " ".join(split_sentences(text)[:2])
        made.append({"id": f"doc-{index:06d}", "input": text, "output": summary})
    return made


def run_once(data: list[dict[str, str]], folder: Path, transcripts: bool) -> dict[str, float]:
    started = time.perf_counter()
    result = asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer("offline")],
            data=data,
            output_dir=folder,
            transcripts=transcripts,
            keep_results=False,
        )
    )
    seconds = time.perf_counter() - started
    assert result.counts.scored == len(data), result.counts
    tables = sum(path.stat().st_size for path in result.tables.values())
    return {
        "s_per_item": seconds / len(data),
        "journal": (folder / "journal.jsonl").stat().st_size / len(data),
        "tables": tables / len(data),
        "transcripts": (
            result.tables["transcripts"].stat().st_size / len(data)
            if "transcripts" in result.tables
            else 0.0
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = items(args.items)
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            for transcripts in (False, True):
                folder = Path(scratch) / f"{transcripts}-{repeat}"
                runs[transcripts].append(run_once(data, folder, transcripts))
    medians = {
        setting: {key: statistics.median(r[key] for r in results) for key in results[0]}
        for setting, results in runs.items()
    }
    print(f"{args.items} items, offline judge, {args.repeats} runs of each (medians)")
    for setting, label in ((False, "without"), (True, "with")):
        m = medians[setting]
        print(
            f"  {label:>8} transcripts: {m['s_per_item'] * 1e3:.3f} ms an item; journal "
            f"{m['journal'] / 1e3:.1f} kB an item; tables {m['tables'] / 1e3:.1f} kB an item "
            f"(transcripts.parquet {m['transcripts'] / 1e3:.1f} kB)"
        )
    off, on = medians[False], medians[True]
    print(
        f"  with / without: time x{on['s_per_item'] / off['s_per_item']:.2f}, journal "
        f"x{on['journal'] / off['journal']:.2f}, tables x{on['tables'] / off['tables']:.2f}"
    )


if __name__ == "__main__":
    main()
