"""The report of a large comparison: how big the file is, and how long Chromium takes to open it.

Writes V run directories of N items each (generated tables in the layout ``summeval-run`` writes,
with the ``judge_cost`` and ``target_cost`` columns and the manifest's ``cost``), renders the
report comparing them with the first as the baseline (``write_report``), and prints:

- **render**: seconds ``write_report`` took (reading the tables, the comparison's bootstrap and
  permutation tests, the page);
- **size**: the file's size, and its ratio to the budget of 15 MB;
- **Chromium**: headless Chromium (driven as the tests drive it, ``tests/browser.py``) opening
  the file: seconds until the load event, and until the items table is drawn (the data decoded
  and the first page of rows built), as the page's own clock and as the wall clock of this
  process; then a search over every row, a sort by score and an item opened, each from the
  input event to the table (or the item) redrawn.

The texts are sized like a careful model's replies on a news article: a 250-word source, a
60-word summary per variant (one lead-based, one of other source sentences, one of new words), a
claim per summary sentence with a one-sentence reason, 10 questions of at most 12 words asked
of every variant with a one-sentence reason per verdict, a two-sentence explanation. Words are
drawn at random (Zipf frequencies) from the bundled sample's vocabulary, so no text repeats
another except where a summary copies its source: they compress no better than prose.

    python bench/report_size.py                          # 5,000 items x 3 variants
    python bench/report_size.py --novel-reasons          # every reason new words: the worst case
    python bench/report_size.py --breakdown              # and the bytes each kind of text takes
    python bench/report_size.py --items 20000 --variants 2 --keep /tmp/big
"""

from __future__ import annotations

import argparse
import base64
import copy
import gzip
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from summeval_runner import write_report  # noqa: E402
from summeval_runner._rundir._tables import ALIGNMENT_SCHEMA, COVERAGE_SCHEMA, ITEMS_SCHEMA  # noqa: E402
from tests.browser import browser  # noqa: E402

BUDGET_BYTES = 15_000_000  # 15 MB, as the sizes are printed
SAMPLE = ROOT / "data" / "sample_articles.jsonl"
ITEMS_WITH_COST = ITEMS_SCHEMA  # judge_cost and target_cost are among its columns
SCORER = "summarization-scorer"


class Words:
    """Random words with Zipf frequencies, from the bundled sample's vocabulary."""

    def __init__(self, rng: random.Random) -> None:
        text = " ".join(json.loads(line)["text"] for line in SAMPLE.read_text("utf-8").splitlines())
        counts: dict[str, int] = {}
        for word in re.findall(r"[A-Za-z][a-z']+|\d+", text):
            counts[word] = counts.get(word, 0) + 1
        self.words = sorted(counts, key=lambda w: -counts[w])
        self.weights = [1 / (rank + 1) for rank in range(len(self.words))]
        self.rng = rng

    def sentence(self, length: int) -> str:
        chosen = self.rng.choices(self.words, self.weights, k=length)
        return " ".join(chosen).capitalize() + "."

    def sentences(self, words: int, per_sentence: int = 20) -> list[str]:
        found = []
        while words > 0:
            length = min(words, max(6, round(self.rng.gauss(per_sentence, 5))))
            found.append(self.sentence(length))
            words -= length
        return found


def _summary(variant: int, source: list[str], words: Words) -> list[str]:
    if variant == 0:  # the lead: the source's first sentences
        return source[:3]
    if variant == 1:  # other sentences of the source
        return words.rng.sample(source, 3)
    return words.sentences(60)  # new words


class Judge:
    """What a judge writes, as ``bench/loopback_judge.py`` sizes it: questions from the source's
    sentences, verdict reasons that quote the claim or the question and add words of their own,
    a two-sentence explanation; with ``novel``, every reason is new words throughout (no text
    to find again: the worst case for the page's size)."""

    def __init__(self, words: Words, novel: bool) -> None:
        self.words, self.novel, self.rng = words, novel, words.rng

    def questions(self, source: list[str]) -> list[str]:
        return [f"Does it say {' '.join(s.split()[:9]).rstrip('.').lower()}?" for s in source[:10]]

    def claim_reason(self, claim: str, supported: bool, source: list[str]) -> str:
        if self.novel:
            return self.words.sentence(self.rng.randint(10, 18))
        if supported:
            return f"The source states this: '{' '.join(claim.split()[:8])}...'"
        return f"The source gives a different figure: {self.rng.choice(source)[:40]}"

    def question_reason(self, question: str, answered: bool) -> str:
        if self.novel:
            return self.words.sentence(self.rng.randint(10, 16))
        own = self.words.sentence(self.rng.randint(4, 8)).lower()
        verb = "states" if answered else "omits"
        return f"The summary {verb} that {' '.join(question.split()[3:9])}; {own}"

    def explanation(self, answered: int, supported: int, claims: int) -> str:
        if self.novel:
            return " ".join(self.words.sentences(40))
        return (
            f"Coverage set the score: the summary answers {answered} of 10 questions and "
            f"{supported} of its {claims} claims are supported. It omits "
            f"{self.words.sentence(self.rng.randint(8, 14)).lower()}"
        )


def write_runs(folder: Path, items: int, variants: int, seed: int, novel: bool) -> list[Path]:
    rng = random.Random(seed)
    words = Words(rng)
    judge = Judge(words, novel)
    sources = [words.sentences(250) for _ in range(items)]
    questions = [judge.questions(source) for source in sources]
    runs = []
    for variant in range(variants):
        label = f"variant-{variant}"
        run_dir = folder / label
        run_dir.mkdir(parents=True)
        item_rows: list[dict[str, Any]] = []
        claim_rows: list[dict[str, Any]] = []
        question_rows: list[dict[str, Any]] = []
        key = {"run_id": f"run-{variant}", "variant": label, "scorer_id": SCORER, "trial": 0}
        for index in range(items):
            item_id = f"article-{index:05d}"
            source = sources[index]
            summary = _summary(variant, source, words)
            draw = rng.random()
            status = "error" if draw < 0.01 else "unscorable" if draw < 0.02 else "scored"
            row = dict.fromkeys(ITEMS_WITH_COST.names) | key | {
                "item_id": item_id, "status": status, "scale": 1.0, "max_questions": 10,
                "source": " ".join(source), "summary": " ".join(summary), "judge": "openai/m",
                "prompt_version": "p1", "judge_cost": round(rng.uniform(0.0004, 0.002), 6),
                "target_cost": round(rng.uniform(0.0001, 0.0008), 6),
            }  # fmt: skip
            if status == "error":
                row |= {
                    "error_type": "JudgeOutputError", "error_step": "analyze", "error_attempts": 3,
                    "error_message": words.sentence(14), "summary": None, "source": None,
                }  # fmt: skip
                item_rows.append(row)
                continue
            if status == "unscorable":
                row |= {"score": 0.0, "reason": "The summary is empty: nothing to judge."}
                item_rows.append(row)
                continue
            asked = questions[index]
            supported = [rng.random() < 0.9 for _ in summary]
            answered = [rng.random() < 0.3 + 0.2 * variant for _ in asked]
            alignment = sum(supported) / len(supported)
            coverage = sum(answered) / len(asked)
            row |= {
                "score": min(alignment, coverage), "alignment_score": alignment,
                "coverage_score": coverage, "claims": len(summary),
                "supported_claims": sum(supported), "questions": len(asked),
                "answered_questions": sum(answered),
                "reason": judge.explanation(sum(answered), sum(supported), len(summary)),
            }  # fmt: skip
            item_rows.append(row)
            for position, (claim, ok) in enumerate(zip(summary, supported, strict=True)):
                claim_rows.append(key | {
                    "item_id": item_id, "position": position, "claim": claim, "supported": ok,
                    "reason": judge.claim_reason(claim, ok, source),
                })  # fmt: skip
            for position, (question, ok) in enumerate(zip(asked, answered, strict=True)):
                question_rows.append(key | {
                    "item_id": item_id, "position": position, "question": question,
                    "answered": ok, "reason": judge.question_reason(question, ok),
                    "verdict_missing": False,
                })  # fmt: skip
        pq.write_table(pa.Table.from_pylist(item_rows, ITEMS_WITH_COST), run_dir / "items.parquet")
        pq.write_table(
            pa.Table.from_pylist(claim_rows, ALIGNMENT_SCHEMA), run_dir / "alignment.parquet"
        )
        pq.write_table(
            pa.Table.from_pylist(question_rows, COVERAGE_SCHEMA), run_dir / "coverage.parquet"
        )
        judge_cost = sum(r["judge_cost"] for r in item_rows)
        target_cost = sum(r["target_cost"] for r in item_rows)
        manifest = {
            "run_id": f"run-{variant}", "variant": label, "status": "completed", "unfinished": 0,
            "started_at": f"2026-11-30T0{variant}:00:00+00:00", "judge": {"name": "openai/m"},
            "prompt_version": "p1", "config": {"dataset": {"path": "d"}},
            "cost": {
                "judge": judge_cost, "target": target_cost, "total": judge_cost + target_cost,
                "currency": "USD",
            },
        }  # fmt: skip
        (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        runs.append(run_dir)
    return runs


def open_in_chromium(report: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    with browser() as chromium:
        started = time.perf_counter()
        page = chromium.open(report.as_uri())
        figures["load event (wall)"] = time.perf_counter() - started
        page.wait_for("document.documentElement.dataset.viewer === 'ready'")
        figures["table drawn (wall)"] = time.perf_counter() - started
        figures["table drawn (page clock)"] = page.evaluate("performance.now()") / 1000
        figures["load event (page clock)"] = (
            page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000
        )
        rows = page.evaluate("document.getElementById('items-count').textContent")
        started = time.perf_counter()
        page.type("#item-search", "article-0420")
        page.wait_for("document.getElementById('items-count').textContent.includes('match')")
        figures["search every row"] = time.perf_counter() - started
        page.type("#item-search", "")
        page.wait_for(f"document.getElementById('items-count').textContent === {json.dumps(rows)}")
        started = time.perf_counter()
        page.click("th[data-key=score] button")
        page.wait_for("document.querySelector('th[data-key=score]').ariaSort === 'ascending'")
        figures["sort by score"] = time.perf_counter() - started
        started = time.perf_counter()
        page.click("#items-table tbody tr:first-child")
        page.wait_for("document.getElementById('item-view').open")
        figures["open an item"] = time.perf_counter() - started
        errors = page.errors()
        if errors:
            raise SystemExit(f"the page logged errors: {errors}")
        figures["rows"] = float(rows.split()[0].replace(",", ""))
    return figures


def breakdown(report: Path) -> dict[str, float]:
    """Megabytes of the page's data (compressed, base64) that each kind of text takes: the
    data compressed again without it, against the whole."""
    html = report.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html)
    assert found is not None
    data = json.loads(gzip.decompress(base64.b64decode(json.loads(found[1])["data"])))

    def size(value: Any) -> float:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return len(gzip.compress(text.encode(), compresslevel=6, mtime=0)) * 4 / 3 / 1e6

    def without(clear: Any) -> float:
        stripped = copy.deepcopy(data)
        for item in stripped["items"]:
            clear(item)
        return whole - size(stripped)

    def entries(field: int, inner: int | None = None) -> Any:
        def clear(item: list[Any]) -> None:
            for entry in (e for e in item[2] if e):
                if inner is None:
                    entry[field] = None
                else:
                    for verdict in entry[field]:
                        verdict[inner] = None

        return clear

    whole = size(data)
    return {
        "sources": without(lambda item: item.__setitem__(1, None)),
        "summaries": without(entries(4)),
        "explanations": without(entries(5)),
        "claims": without(entries(7, 0)),
        "claim reasons": without(entries(7, 2)),
        "questions": without(entries(8, 0)),
        "question reasons": without(entries(8, 2)),
        "all": whole,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--variants", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--novel-reasons",
        action="store_true",
        help="every reason new words throughout (the worst case for the size)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also print how much of the page each kind of text takes (about a minute more)",
    )
    parser.add_argument(
        "--keep", type=Path, help="write the runs and the report here, and keep them"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="report-size-") as scratch:
        folder = args.keep or Path(scratch)
        started = time.perf_counter()
        runs = write_runs(folder, args.items, args.variants, args.seed, args.novel_reasons)
        written_s = time.perf_counter() - started
        print(f"{args.variants} runs of {args.items:,} items written in {written_s:.1f} s")
        started = time.perf_counter()
        report = write_report(runs[1:], folder / "report.html", baseline=runs[0])
        render_s = time.perf_counter() - started
        size = report.stat().st_size
        tables = sum(f.stat().st_size for run in runs for f in run.glob("*.parquet"))
        print(f"render: {render_s:.1f} s (write_report: tables read, compared, page written)")
        print(
            f"size: {size / 1e6:.2f} MB ({size:,} bytes), {size / BUDGET_BYTES:.0%} of the "
            f"15 MB budget; the runs' Parquet tables: {tables / 1e6:.1f} MB"
        )
        if args.breakdown:
            parts = breakdown(report)
            whole = parts.pop("all")
            shown = ", ".join(f"{name} {mb:.2f} MB" for name, mb in parts.items())
            print(f"data: {whole:.2f} MB; without each kind of text, smaller by: {shown}")
        figures = open_in_chromium(report)
        print(f"Chromium: {figures.pop('rows'):,.0f} rows")
        for name, seconds in figures.items():
            print(f"  {name}: {seconds:.2f} s")


if __name__ == "__main__":
    main()
