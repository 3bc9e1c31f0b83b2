"""The HTML report (issue 19): one self-contained page to read a comparison in.

Most tests open the report in headless Chromium (``tests/browser.py``) and use it as a person
would: they click column names, tick and untick filters, type into the search and the score
range, click an item, and read what the page then shows. Nothing planted in the data may run,
and the page must log no error and ask for nothing but itself.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from summeval_runner import InputError, compare_runs, write_report
from summeval_runner._rundir._tables import ALIGNMENT_SCHEMA, COVERAGE_SCHEMA, ITEMS_SCHEMA
from tests.app import ROOT, run_app, run_sweep
from tests.browser import SKIP_BROWSER_TESTS, Browser, Page, browser, chromium

READY = "document.documentElement.dataset.viewer === 'ready'"
# The items table's rows on screen: each cell's text, keyed by its column (item, variant, ...).
ROWS = """[...document.querySelectorAll('#items-table tbody tr[data-item]')].map((tr) =>
  Object.fromEntries([...tr.cells].map((td, i) =>
    [tr.closest('table').tHead.rows[0].cells[i].dataset.key, td.textContent])))"""
# The items table of a run written before runs recorded costs: no cost columns.
UNCOSTED_SCHEMA = pa.schema(
    [f for f in ITEMS_SCHEMA if f.name not in ("judge_cost", "target_cost")]
)


# --- runs made by hand: exactly the items, verdicts and costs a test needs --------------------


@dataclass(frozen=True)
class Item:
    """One item of a hand-made run: its scores, texts, verdicts and (optionally) costs."""

    id: str
    scores: tuple[float, float, float] | None = None  # score, alignment, coverage
    status: str = "scored"
    summary: str | None = None
    reason: str | None = None
    source: str | None = None
    error: tuple[str, str, str] | None = None  # type, step, message
    claims: tuple[tuple[str, bool, str], ...] = ()
    questions: tuple[tuple[str, bool | None, str | None], ...] = ()  # None: no verdict
    cost: tuple[float | None, float | None] = (None, None)


def write_run(
    path: Path,
    variant: str,
    items: Sequence[Item],
    *,
    started_at: str = "2026-11-30T10:00:00+00:00",
    cost_columns: bool = False,
    manifest: dict[str, Any] | None = None,
) -> Path:
    """A run directory in the layout ``summeval-run`` writes, holding ``items``."""
    path.mkdir(parents=True)
    key = {
        "run_id": f"run-{variant}",
        "variant": variant,
        "scorer_id": "summarization-scorer",
        "trial": 0,
    }
    schema = ITEMS_SCHEMA if cost_columns else UNCOSTED_SCHEMA
    rows, claims, questions = [], [], []
    for item in items:
        row = dict.fromkeys(schema.names) | key | {
            "item_id": item.id, "status": item.status, "reason": item.reason,
            "summary": item.summary, "source": item.source, "scale": 1.0,
        }  # fmt: skip
        if item.scores is not None:
            row |= dict(
                zip(("score", "alignment_score", "coverage_score"), item.scores, strict=True)
            )
        if item.error is not None:
            row |= dict(zip(("error_type", "error_step", "error_message"), item.error, strict=True))
        if cost_columns:
            row |= {"judge_cost": item.cost[0], "target_cost": item.cost[1]}
        rows.append(row)
        where = key | {"item_id": item.id, "judge": "offline"}
        for position, (claim, supported, why) in enumerate(item.claims):
            claims.append(
                where
                | {"position": position, "claim": claim, "supported": supported, "reason": why}
            )
        for position, (question, answered, why) in enumerate(item.questions):
            questions.append(
                where | {"position": position, "question": question, "answered": bool(answered),
                         "reason": why, "verdict_missing": answered is None}
            )  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path / "items.parquet")
    pq.write_table(pa.Table.from_pylist(claims, ALIGNMENT_SCHEMA), path / "alignment.parquet")
    pq.write_table(pa.Table.from_pylist(questions, COVERAGE_SCHEMA), path / "coverage.parquet")
    recorded = {
        "run_id": f"run-{variant}", "variant": variant, "status": "completed", "unfinished": 0,
        "started_at": started_at, "config": {"dataset": {"path": "d"}},
        "judge": {"name": "offline"}, "prompt_version": "p1",
    } | (manifest or {})  # fmt: skip
    (path / "manifest.json").write_text(json.dumps(recorded), encoding="utf-8")
    return path


VARIANTS = ("lead-1", "lead-3", "model")
ITEMS = [f"doc-{i:02d}" for i in range(40)]


def sweep_items(variant: int) -> list[Item]:
    """40 items of one of three variants: scores drawn from a seeded generator, doc-05 an error
    in the third variant, doc-07 unscorable in the first; claim B and question 2 of the even
    items change verdict between the baseline and the others; a few words only one text has."""
    rng = random.Random(variant)
    items = []
    for index, item_id in enumerate(ITEMS):
        changes = variant > 0 and index % 2 == 0
        claims = (
            (f"Claim A of {item_id}.", True, "the source says so"),
            (f"Claim B of {item_id}.", not changes, "the source gives another figure"),
        )
        questions = tuple(
            (f"Does the text say fact {q} of {item_id}?", (q < 2) != (changes and q == 2),
             f"the summary {'mentions' if q < 2 else 'omits'} fact {q}")
            for q in range(4)
        )  # fmt: skip
        coverage = round(rng.uniform(0.2, 1.0), 2)
        summary = f"Summary of {item_id} by {VARIANTS[variant]}."
        if item_id == "doc-12" and variant == 2:
            summary += " A zebra crossed the road."
        reason = f"Reason for {item_id}: coverage set the score."
        if item_id == "doc-20" and variant == 1:
            reason += " The quokka fact is missing."
        item = Item(
            item_id,
            (min(1.0, coverage), 1.0, coverage),
            summary=summary,
            reason=reason,
            source=f"The source text of {item_id}. " * 8,
            claims=claims,
            questions=questions,
            cost=(0.001 * (index + 1), None),
        )
        if item_id == "doc-05" and variant == 2:
            error = ("JudgeOutputError", "analyze", "the reply was not JSON: 'oops'")
            item = Item(item_id, status="error", source=item.source, error=error)
        if item_id == "doc-07" and variant == 0:
            blank = "The summary is blank: nothing to judge."
            item = Item(item_id, (0.0, 1.0, 0.0), "unscorable", "", blank, item.source)
        items.append(item)
    return items


@pytest.fixture
def sweep(tmp_path: Path) -> list[Path]:
    """Three runs of the same 40 items, the first the baseline."""
    return [
        write_run(tmp_path / name, name, sweep_items(index), cost_columns=index == 0,
                  started_at=f"2026-11-30T1{index}:00:00+00:00")
        for index, name in enumerate(VARIANTS)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def chromium_browser() -> Iterator[Browser]:
    with browser() as started:
        yield started


@pytest.fixture
def open_report(chromium_browser: Browser) -> Iterator[Any]:
    """Opens a report in a new tab, ready to use; afterwards, checks that the page logged no
    error and asked for nothing but its own file."""
    pages: list[tuple[Page, str]] = []

    def opened(report: Path, fragment: str = "") -> Page:
        page = chromium_browser.open(report.as_uri() + fragment)
        page.wait_for(READY)
        pages.append((page, report.as_uri()))
        return page

    yield opened
    for page, url in pages:
        assert page.errors() == []
        assert {request.split("#")[0] for request in page.requests} == {url}
        page.close()


def rows(page: Page) -> list[dict[str, str]]:
    """The items table's rows on screen, as a person reads them."""
    return list(page.evaluate(ROWS))


def count_line(page: Page) -> str:
    return str(page.evaluate("document.getElementById('items-count').textContent"))


def report_of(runs: Sequence[Path], tmp_path: Path, **options: Any) -> Path:
    return write_report(runs[1:], tmp_path / "report.html", baseline=runs[0], **options)


# --- the page: self-contained, nothing of the data runs --------------------------------------

ATTACK = (
    "<script>window.pwned = 1; document.title = 'PWNED'</script>"
    "<img src=x onerror=\"window.pwned = 2; document.title = 'PWNED'\">"
    "</script><script>window.pwned = 3</script> \"quoted\" & 'single' \u2028 end"
)


def test_planted_html_in_the_data_shows_as_text_and_nothing_runs(
    tmp_path: Path, open_report: Any
) -> None:
    base = write_run(tmp_path / "base", "base", [Item("doc-1", (0.5, 1.0, 0.5), summary="Fine.")])
    attacked = write_run(
        tmp_path / "attacked",
        f"variant {ATTACK}",
        [
            Item(
                "doc-1", (0.4, 1.0, 0.4), summary=f"A fine summary. {ATTACK}",
                reason=f"Because {ATTACK}", source=f"Source {ATTACK}",
                claims=((f"Claim {ATTACK}", False, f"why {ATTACK}"),),
                questions=((f"Question {ATTACK}?", True, f"answer {ATTACK}"),),
            ),
            Item("doc-2", status="error", error=(f"Type{ATTACK}", "analyze", f"message {ATTACK}")),
        ],
    )  # fmt: skip
    report = write_report([attacked], tmp_path / "report.html", baseline=base)

    page = open_report(report)
    page.type("#item-search", "fine summary")
    page.wait_for("document.getElementById('items-count').textContent.startsWith('1 of')")
    page.click("#items-table tbody tr[data-item]")
    page.wait_for("document.getElementById('item-view').open")

    shown = page.evaluate(
        "[...document.querySelectorAll('#item-view section.variant')].map((s) => ({"
        " summary: s.querySelector('.summary')?.textContent,"
        " reason: s.querySelector('.reason')?.textContent,"
        " claim: s.querySelector('.claim')?.textContent,"
        " why: s.querySelector('.claims .why')?.textContent }))"
    )
    assert shown[1] == {
        "summary": f"A fine summary. {ATTACK}",
        "reason": f"Because {ATTACK}",
        "claim": f"Claim {ATTACK}",
        "why": f"why {ATTACK}",
    }
    assert page.evaluate("document.querySelector('#item-view details.source p').textContent") == (
        f"Source {ATTACK}"
    )
    assert page.evaluate("document.querySelector('#item-view td.question').textContent") == (
        f"Question {ATTACK}?"
    )
    # Nothing ran: no planted code set the title or the global, and no element came of it.
    assert page.evaluate("document.title") == "Comparison of 2 runs"
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.querySelectorAll('script').length") == 2  # data, viewer
    assert (
        page.evaluate(
            "[...document.querySelectorAll('*')].flatMap((n) => [...n.attributes])"
            ".filter((a) => a.name.startsWith('on')).length"
        )
        == 0
    )
    assert page.evaluate(
        "document.querySelector('table.runs tr:nth-child(3) .label').textContent"
    ) == (f"variant {ATTACK}")
    # The error's message, shown from its variant's row.
    page.press("Escape", "Escape", 27)
    page.wait_for("!document.getElementById('item-view').open")
    page.type("#item-search", "doc-2")
    page.wait_for("document.getElementById('items-count').textContent.startsWith('1 of')")
    page.click("#items-table tbody tr[data-item] button.open")
    page.wait_for("document.getElementById('item-view').open")
    assert page.evaluate("document.querySelector('#item-view .error-detail').textContent") == (
        f"Type{ATTACK} in step analyze: message {ATTACK}"
    )


def test_the_page_is_one_file_that_allows_only_its_own_script(
    sweep: list[Path], tmp_path: Path
) -> None:
    text = report_of(sweep, tmp_path).read_text(encoding="utf-8")

    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text)
    assert policy is not None
    directives = dict(d.strip().split(" ", 1) for d in policy[1].split(";"))
    scripts = re.findall(r"<script>(.*?)</script>", text, re.S)
    styles = re.findall(r"<style>(.*?)</style>", text, re.S)
    assert len(scripts) == 1
    assert len(styles) == 1
    # Nothing in the script could end its element early or open an escaped state in it.
    assert "</script" not in scripts[0].lower()
    assert "<!--" not in scripts[0]

    def allowed(body: str) -> str:
        return f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"

    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == allowed(scripts[0])
    assert directives["style-src"] == allowed(styles[0])
    assert " style=" not in text  # the style hash covers no attribute: none may be needed
    assert not re.search(r"(src|href)=\"(?!#|data:)", text)  # nothing to load
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in text
    # The items ride along as data, which decodes to every item of every variant.
    block = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text)
    assert block is not None
    envelope = json.loads(block[1])
    data = json.loads(gzip.decompress(base64.b64decode(envelope["data"])))
    assert [v["label"] for v in data["variants"]] == list(VARIANTS)
    assert [item[0] for item in data["items"]] == ITEMS


# --- the items: sort, filter, search, open ------------------------------------------------------


def test_the_items_table_sorts_by_any_column(
    sweep: list[Path], tmp_path: Path, open_report: Any
) -> None:
    page = open_report(report_of(sweep, tmp_path))
    every_score = sorted(
        float(v) for run in sweep for v in pd.read_parquet(run / "items.parquet")["score"].dropna()
    )

    page.click("th[data-key=score] button")
    page.wait_for("document.querySelector('th[data-key=score]').ariaSort === 'ascending'")
    ascending = rows(page)
    page.click("th[data-key=score] button")
    page.wait_for("document.querySelector('th[data-key=score]').ariaSort === 'descending'")
    descending = rows(page)

    assert [r["score"] for r in ascending] == [f"{s:.3f}" for s in every_score[:100]]
    assert [r["score"] for r in descending] == [f"{s:.3f}" for s in every_score[::-1][:100]]
    assert count_line(page) == "120 rows (items \N{MULTIPLICATION SIGN} variants)"
    # The error's missing score comes last, whichever way: on the second page.
    page.click("#page-next")
    page.wait_for("document.getElementById('page-label').textContent.startsWith('rows 101')")
    assert rows(page)[-1]["status"] == "error"
    assert rows(page)[-1]["score"] == "n/a"

    page.click("th[data-key=change] button")
    page.wait_for("document.querySelector('th[data-key=change]').ariaSort === 'ascending'")
    changes = [
        float(r["change"].replace("\N{MINUS SIGN}", "-"))
        for r in rows(page)
        if r["change"] not in ("base", "")
    ]
    assert changes == sorted(changes)
    page.click("th[data-key=variant] button")
    page.wait_for("document.querySelector('th[data-key=variant]').ariaSort === 'ascending'")
    assert [r["variant"] for r in rows(page)] == ["lead-1"] * 40 + ["lead-3"] * 40 + ["model"] * 20
    page.click("th[data-key=id] button")
    page.click("th[data-key=id] button")
    page.wait_for("document.querySelector('th[data-key=id]').ariaSort === 'descending'")
    assert [r["id"] for r in rows(page)][:4] == ["doc-39"] * 3 + ["doc-38"]


def test_the_items_table_filters_by_status_variant_and_score(
    sweep: list[Path], tmp_path: Path, open_report: Any
) -> None:
    page = open_report(report_of(sweep, tmp_path))

    page.click("#status-scored")
    page.wait_for("document.getElementById('items-count').textContent.startsWith('2 of')")
    assert {(r["id"], r["variant"], r["status"]) for r in rows(page)} == {
        ("doc-05", "model", "error"),
        ("doc-07", "lead-1", "unscorable"),
    }
    page.click("#status-scored")
    page.click("#variant-0")
    page.click("#variant-2")
    page.wait_for("document.getElementById('items-count').textContent.startsWith('40 of')")
    assert {r["variant"] for r in rows(page)} == {"lead-3"}

    page.type("#score-min", "0.5")
    page.type("#score-max", "0.8")
    lead3 = pd.read_parquet(sweep[1] / "items.parquet")
    expected = lead3[(lead3["score"] >= 0.5) & (lead3["score"] <= 0.8)]
    page.wait_for(
        f"document.getElementById('items-count').textContent.startsWith('{len(expected)} of')"
    )
    shown = rows(page)
    assert sorted(r["id"] for r in shown) == sorted(expected["item_id"])
    assert all(0.5 <= float(r["score"]) <= 0.8 for r in shown)


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("doc-3", {(f"doc-3{i}", v) for i in range(10) for v in VARIANTS}),
        ("ZEBRA", {("doc-12", "model")}),  # a word of one summary, in any case
        ("quokka", {("doc-20", "lead-3")}),  # a word of one reason
        ("not json", {("doc-05", "model")}),  # an error's message
        ("nothing has this", set()),
    ],
)  # fmt: skip
def test_search_finds_ids_summaries_and_reasons(
    sweep: list[Path], tmp_path: Path, open_report: Any, query: str, found: set[tuple[str, str]]
) -> None:
    page = open_report(report_of(sweep, tmp_path))

    page.type("#item-search", query)
    page.wait_for(
        f"document.getElementById('items-count').textContent.startsWith('{len(found)} of')"
    )

    assert {(r["id"], r["variant"]) for r in rows(page)} == found


def test_an_item_opens_with_its_variants_side_by_side_and_changed_verdicts_marked(
    sweep: list[Path], tmp_path: Path, open_report: Any
) -> None:
    page = open_report(report_of(sweep, tmp_path))

    page.type("#item-search", "doc-04")
    page.wait_for("document.getElementById('items-count').textContent.startsWith('3 of')")
    page.click("#items-table tbody tr[data-variant=model]")
    page.wait_for("document.getElementById('item-view').open")

    view = page.evaluate(
        "(() => { const v = document.getElementById('item-view'); return {"
        " title: v.querySelector('h3').textContent,"
        " sourceOpen: v.querySelector('details.source').open,"
        " source: v.querySelector('details.source summary').textContent,"
        " variants: [...v.querySelectorAll('section.variant')].map((s) => ({"
        "  label: s.dataset.variant, summary: s.querySelector('.summary').textContent,"
        "  reason: s.querySelector('.reason').textContent,"
        "  cost: s.querySelector('.cost').textContent,"
        "  changed: [...s.querySelectorAll('li.changed .claim')].map((c) => c.textContent),"
        "  badges: [...s.querySelectorAll('li.changed .badge')].map((c) => c.textContent) })),"
        " questions: [...v.querySelectorAll('table.questions tbody tr')].map((tr) =>"
        "  [...tr.cells].map((td) => (td.classList.contains('changed') ? 'CHANGED ' : '')"
        "   + (td.classList.contains('question') ? td.textContent"
        "      : td.querySelector('.verdict').textContent))) }; })()"
    )

    assert view["title"] == "Item doc-04"
    assert view["sourceOpen"] is False  # folded
    assert view["source"] == "Source (40 words)"
    assert [v["label"] for v in view["variants"]] == list(VARIANTS)  # the baseline first
    assert [v["summary"] for v in view["variants"]] == [
        f"Summary of doc-04 by {v}." for v in VARIANTS
    ]
    assert {v["reason"] for v in view["variants"]} == {"Reason for doc-04: coverage set the score."}
    assert [v["changed"] for v in view["variants"]] == [
        [],
        ["Claim B of doc-04."],
        ["Claim B of doc-04."],
    ]
    assert view["variants"][1]["badges"] == ["changed: supported in the baseline"]
    assert [v["cost"] for v in view["variants"]] == [
        "cost: judge $0.0050, target unknown",
        "cost: judge unknown, target unknown",
        "cost: judge unknown, target unknown",
    ]
    assert view["questions"][2] == [
        "Does the text say fact 2 of doc-04?",
        "✗ not answered",
        "CHANGED ✓ answered",
        "CHANGED ✓ answered",
    ]
    assert view["questions"][0] == [
        "Does the text say fact 0 of doc-04?", "✓ answered", "✓ answered", "✓ answered",
    ]  # fmt: skip

    page.press("Escape", "Escape", 27)
    page.wait_for("!document.getElementById('item-view').open")


def test_an_address_with_an_item_opens_it(
    sweep: list[Path], tmp_path: Path, open_report: Any
) -> None:
    page = open_report(report_of(sweep, tmp_path), fragment="#item=doc-05")

    page.wait_for("document.getElementById('item-view').open")

    assert page.evaluate("document.querySelector('#item-view .error-detail').textContent") == (
        "JudgeOutputError in step analyze: the reply was not JSON: 'oops'"
    )
    assert page.evaluate("document.querySelector('#item-view h3').textContent") == "Item doc-05"


# --- what the runs cost, their errors, their distributions ----------------------------------------


class Cells(HTMLParser):
    """The text of each cell of a page's tables, row by row (what a person reads)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join(" ".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def runs_table(report: Path) -> dict[str, dict[str, str]]:
    """The runs table's rows, each keyed by its variant's label."""
    text = report.read_text(encoding="utf-8")
    cells = Cells()
    cells.feed(text.split('<section id="runs">', 1)[1].split("</table>", 1)[0])
    labels = re.findall(r'<span class="label">(.*?)</span>', text)
    head, *body = cells.rows
    return {
        label: dict(zip(head, row, strict=True)) for label, row in zip(labels, body, strict=True)
    }


def test_each_variant_shows_its_counts_unfinished_items_and_cost(tmp_path: Path) -> None:
    items = [Item(f"doc-{i}", (0.5, 0.5, 0.5), cost=(0.002, 0.001)) for i in range(3)]
    failing = [*items[:2], Item("doc-2", status="error", error=("TimeoutError", "target", "slow"))]
    runs = [
        write_run(tmp_path / "priced", "priced", items, manifest={
            "cost": {"judge": 0.0123, "target": 2.5, "total": 2.5123, "currency": "USD"}}),
        write_run(tmp_path / "unpriced", "unpriced", items, manifest={
            "cost": {"judge": None, "target": 0.5, "total": None, "currency": "USD"}}),
        write_run(tmp_path / "older", "older", items),  # written before costs were recorded
        write_run(tmp_path / "columns", "columns", items, cost_columns=True),
        write_run(tmp_path / "interrupted", "interrupted", failing, cost_columns=True,
                  manifest={"status": "interrupted", "unfinished": 4}),
    ]  # fmt: skip

    shown = runs_table(report_of(runs, tmp_path, allow_mismatch=True))

    assert shown["priced"]["cost"] == "$2.51 judge $0.0123, target $2.50"
    assert shown["unpriced"]["cost"] == "unknown judge unknown, target $0.50"
    assert shown["older"]["cost"] == "unknown judge unknown, target unknown"
    assert shown["columns"]["cost"] == "$0.0090 judge $0.0060, target $0.0030"
    assert (
        shown["interrupted"]["cost"] == "unknown judge unknown, target unknown"
    )  # an item unpriced
    counts = ("status", "items", "scored", "unscorable", "errors", "unfinished")
    assert [shown["interrupted"][c] for c in counts] == [
        "interrupted", "3", "2", "0", "1", "4"
    ]  # fmt: skip
    assert "nan" not in json.dumps(shown).lower()


def test_a_killed_run_shows_the_same_unfinished_items_in_the_report_as_in_the_comparison(
    tmp_path: Path,
) -> None:
    # Killed: its manifest is the one written at its start (still "running", unfinished not
    # yet known); its dataset had 26 items, of which its tables hold 3.
    items = [Item(f"doc-{i}", (0.5, 0.5, 0.5)) for i in range(3)]
    base = write_run(tmp_path / "base", "base", items)
    killed = write_run(
        tmp_path / "killed",
        "killed",
        items,
        manifest={"status": "running", "unfinished": None, "dataset": {"path": "d", "items": 26}},
    )

    shown = runs_table(report_of([base, killed], tmp_path))
    compared = compare_runs([base, killed], baseline=base).query("dimension == 'score'")

    assert (shown["killed"]["status"], shown["killed"]["unfinished"]) == ("running", "23")
    assert compared.set_index("variant").loc["killed", "unfinished"] == 23


def test_errors_are_counted_per_variant_by_kind_and_step(sweep: list[Path], tmp_path: Path) -> None:
    text = report_of(sweep, tmp_path).read_text(encoding="utf-8")

    cells = Cells()
    cells.feed(text.split("<h3>Errors by kind</h3>", 1)[1].split("</table>", 1)[0])
    assert cells.rows == [
        ["variant", "error", "step", "items"],
        ["model", "JudgeOutputError", "analyze", "1"],
    ]


def svg_elements(text: str, kind: str) -> list[list[tuple[str, dict[str, str | None]]]]:
    """Each ``<svg class=kind>`` of a page as its elements (tag, attributes), text as "#text"."""

    class Svgs(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.found: list[list[tuple[str, dict[str, str | None]]]] = []
            self.inside = False

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "svg" and dict(attrs).get("class") == kind:
                self.inside = True
                self.found.append([])
            if self.inside:
                self.found[-1].append((tag, dict(attrs)))

        def handle_endtag(self, tag: str) -> None:
            if tag == "svg":
                self.inside = False

        def handle_data(self, data: str) -> None:
            if self.inside:
                self.found[-1].append(("#text", {"text": data}))

    parser = Svgs()
    parser.feed(text)
    return parser.found


def texts(elements: list[tuple[str, dict[str, str | None]]]) -> list[str]:
    return [str(attrs["text"]) for tag, attrs in elements if tag == "#text"]


def test_each_dimension_has_one_shared_axis_with_every_variant_overlaid(
    sweep: list[Path], tmp_path: Path
) -> None:
    text = report_of(sweep, tmp_path).read_text(encoding="utf-8")

    plots = svg_elements(text, "distribution")
    assert [dict(p[0][1])["data-dimension"] for p in plots] == ["score", "alignment", "coverage"]
    for plot, dimension in zip(plots, ("score", "alignment", "coverage"), strict=True):
        outlines = [attrs for tag, attrs in plot if tag == "path"]
        means = [attrs for tag, attrs in plot if tag == "circle"]
        assert len({a["stroke"] for a in outlines}) == 3  # one colour per variant, overlaid
        assert [a["fill"] for a in means] == [a["stroke"] for a in outlines]
        labels = texts(plot)
        assert f"{dimension} (0 to 1)" in labels
        assert "items" in labels
        assert {"0", "0.2", "0.4", "0.6", "0.8", "1"} <= set(labels)
        tips = [t for t in labels if ": mean " in t]
        assert [t.split(":")[0] for t in tips] == list(VARIANTS)
        assert all("95% CI [" in t for t in tips)
    legend = text.split('<section id="distributions">', 1)[1].split("</ul>", 1)[0]
    assert [re.sub(r"<[^>]+>", "", li) for li in legend.split("<li>")[1:]] == list(VARIANTS)


def test_a_score_axis_runs_to_the_scale(tmp_path: Path) -> None:
    run = write_run(tmp_path / "five", "five", [Item("doc-1", (4.0, 0.8, 0.9))])
    items = pd.read_parquet(run / "items.parquet").assign(scale=5.0)
    items.to_parquet(run / "items.parquet")

    text = write_report([run], tmp_path / "report.html").read_text(encoding="utf-8")

    score = svg_elements(text, "distribution")[0]
    assert "score (0 to 5)" in texts(score)
    assert "5" in texts(score)


# --- trends over a history of runs ----------------------------------------------------------


def history_table() -> pd.DataFrame:
    """Four nightly runs, listed out of order; the score and coverage of the third dropped."""

    def mean(day: int, dimension: str) -> float:
        dropped = day == 3 and dimension != "alignment"
        return {"score": 0.6, "alignment": 0.9, "coverage": 0.6}[dimension] - 0.2 * dropped

    rows = []
    for day in (3, 1, 4, 2):
        for dimension in ("score", "alignment", "coverage"):
            value = mean(day, dimension)
            rows.append({
                "run_id": f"night-{day}", "variant": "nightly",
                "run_dir": f"outputs/2026-11-0{day}/03-00-00", "status": "completed",
                "started_at": pd.Timestamp(f"2026-11-0{day}T03:00:00", tz="UTC"),
                "dimension": dimension, "n": 60, "mean": value,
                "ci95_low": value - 0.05, "ci95_high": value + 0.05,
                "mean_diff": None if day == 1 else value - mean(day - 1, dimension),
                "regression": value < mean(day - 1, dimension),
            })  # fmt: skip
    return pd.DataFrame(rows)


def test_trends_draw_each_dimension_per_run_over_time_with_regressions_marked(
    sweep: list[Path], tmp_path: Path
) -> None:
    text = report_of(sweep, tmp_path, history=history_table()).read_text(encoding="utf-8")

    plots = svg_elements(text, "trend")
    assert [dict(p[0][1])["data-dimension"] for p in plots] == ["score", "alignment", "coverage"]
    for plot in plots:
        dates = [t for t in texts(plot) if t.startswith("2026-")]
        assert dates == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]  # in time order
        points = [t for t in texts(plot) if ": mean " in t]
        assert [p.split(", run ")[1].split(" ")[0] for p in points] == [
            f"night-{d}" for d in (1, 2, 3, 4)
        ]
        assert all("95% CI [" in p for p in points)
    marked = {
        dict(p[0][1])["data-dimension"]: [t for t in texts(p) if t.startswith("regression: ")]
        for p in plots
    }
    assert marked["alignment"] == []
    assert marked["score"] == [
        "regression: nightly, run night-3 (completed), 2026-11-03 03:00 UTC: mean 0.400, "
        "95% CI [0.350, 0.450], -0.200 against the previous run, n = 60"
    ]
    assert len(marked["coverage"]) == 1
    listed = text.split('<ul class="regressions">', 1)[1].split("</ul>", 1)[0]
    assert re.sub(r"<[^>]+>", "", listed) == (
        "score of nightly, run night-3 started 2026-11-03 03:00 UTC: -0.200 against the previous "
        "runcoverage of nightly, run night-3 started 2026-11-03 03:00 UTC: -0.200 against the "
        "previous run"
    )


def test_a_history_without_the_columns_it_needs_is_refused(
    sweep: list[Path], tmp_path: Path
) -> None:
    history = history_table().drop(columns=["regression", "mean_diff"])

    with pytest.raises(InputError, match=r"it lacks mean_diff, regression \(got columns: run_id, "):
        report_of(sweep, tmp_path, history=history)
    assert not (tmp_path / "report.html").exists()


# --- real runs: the app's tables under today's pandas, the README's sweep --------------------


NAN_ANYWHERE = """(() => {
  const nan = /\\bnan\\b/i;
  const found = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement.tagName;
    if (parent !== "SCRIPT" && nan.test(node.textContent)) found.push(node.textContent);
  }
  for (const element of document.querySelectorAll("*")) {
    for (const attribute of element.attributes) {
      if (nan.test(attribute.value)) found.push(`${element.tagName} ${attribute.name}`);
    }
  }
  return found;
})()"""


def test_no_nan_shows_anywhere_in_a_report_of_the_apps_runs(
    tmp_path: Path, open_report: Any
) -> None:
    # Under pandas 3 the app's missing strings read back as NaN, which once showed as "nan".
    run_dir = tmp_path / "run"
    assert run_app(run_dir, "dataset.limit=4", "runner.progress=false").returncode == 0
    # The app's own tables, with an error and an unscorable item written as the app writes them.
    items = pd.read_parquet(run_dir / "items.parquet")
    first, second = items.index[:2]
    items.loc[first, ["status", "score", "reason", "error_type", "error_step", "error_message"]] = [
        "error",
        None,
        None,
        "JudgeOutputError",
        "reason",
        "the reply was not JSON",
    ]
    items.loc[second, ["status", "score"]] = ["unscorable", 0.0]
    schema = pq.read_schema(run_dir / "items.parquet")  # its metadata struct: the sample's fields
    pq.write_table(pa.Table.from_pandas(items, schema=schema, preserve_index=False),
                   run_dir / "items.parquet")  # fmt: skip
    report = write_report([run_dir], tmp_path / "report.html", history=history_table())

    page = open_report(report)
    for position in range(1, len(items) + 1):  # every item opened, each status's view drawn
        page.click(f"#items-table tbody tr:nth-child({position})")
        page.wait_for("document.getElementById('item-view').open")
        page.click("#item-close")
        page.wait_for("!document.getElementById('item-view').open")
    page.click(f"#items-table tbody tr:nth-child({len(items)})")
    page.wait_for("document.getElementById('item-view').open")

    assert page.evaluate(NAN_ANYWHERE) == []
    html_without_data = re.sub(r"<script.*?</script>", "", report.read_text("utf-8"), flags=re.S)
    assert not re.search(r"\bnan\b", html_without_data, re.I)
    assert {row["status"] for row in rows(page)} == {"scored", "unscorable", "error"}


def test_the_readme_sweep_report_opens_with_an_item_side_by_side(
    tmp_path: Path, open_report: Any
) -> None:
    """The README's sweep through the app, its report opened in Chromium with an item side by
    side; the screenshot is the README's picture (docs/report.png)."""
    sweep = tmp_path / "multirun"
    completed = run_sweep(sweep, "target.k=1,3", "runner.progress=false")
    assert completed.returncode == 0, completed.stderr

    page = open_report(sweep / "report.html")
    page.resize(1280, 1360)  # tall enough for the item's summaries, claims and questions
    variants = page.evaluate(
        "[...document.querySelectorAll('#variant-filter label')].map((l) => l.textContent)"
    )
    assert len(variants) == 2
    assert variants[0].endswith("(baseline)")
    assert count_line(page).startswith(f"{2 * 26} rows")
    page.click("th[data-key=change] button")
    page.click("th[data-key=change] button")
    page.wait_for("document.querySelector('th[data-key=change]').ariaSort === 'descending'")
    page.click("#items-table tbody tr:first-child")  # the item the second variant improved most
    page.wait_for("document.getElementById('item-view').open")
    assert page.evaluate("document.querySelectorAll('#item-view section.variant').length") == 2
    assert page.evaluate("document.querySelectorAll('#item-view td.changed').length") > 0

    shot = page.screenshot(ROOT / "docs" / "report.png")
    assert shot.stat().st_size > 50_000


def test_a_report_of_one_run_has_every_item_and_its_verdicts(
    tmp_path: Path, open_report: Any
) -> None:
    run_dir = tmp_path / "run"
    assert run_app(run_dir, "dataset.limit=3", "runner.progress=false").returncode == 0
    items = pd.read_parquet(run_dir / "items.parquet")
    claims = pd.read_parquet(run_dir / "alignment.parquet")
    first = items["item_id"].iloc[0]

    page = open_report(write_report([run_dir], tmp_path / "one.html"))
    assert [r["id"] for r in rows(page)] == list(items["item_id"])
    page.click(f"#items-table tbody tr[data-item='{first}']")
    page.wait_for("document.getElementById('item-view').open")

    shown = page.evaluate(
        "[...document.querySelectorAll('#item-view .claim')].map((c) => c.textContent)"
    )
    assert shown == list(claims[claims["item_id"] == first]["claim"])
    questions = page.evaluate(
        "[...document.querySelectorAll('#item-view td.question')].map((c) => c.textContent)"
    )
    assert questions
    assert all(q.startswith("Does the text say that") for q in questions)


def test_a_browser_test_fails_without_chromium_unless_told_to_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no chromium here
    monkeypatch.delenv(SKIP_BROWSER_TESTS, raising=False)

    with pytest.raises(pytest.fail.Exception, match=r"apt-get install chromium"):
        chromium()

    monkeypatch.setenv(SKIP_BROWSER_TESTS, "1")
    with pytest.raises(pytest.skip.Exception):
        chromium()
