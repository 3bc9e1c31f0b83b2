"""The report's item data: every item of every run, compact, compressed, and inert in a page.

The items viewer (``_viewer.js``) reads one JSON value. Its layout keeps the page small:
one entry per item with the source once (variants of an item judge the same text), then each
variant's entry with statuses and verdicts as one-letter codes and scores rounded for display.
Entries are item-major, so an item's summaries, claims and questions (which repeat each other's
words) sit together, where gzip finds the repeats. The JSON is gzip-compressed and base64-encoded:
5,000 items of three variants with their verdicts and reasons hold some 40 MB of text, and the page
must stay under 15 MB (``bench/report_size.py``). The browser decompresses it
(``DecompressionStream``), so the page needs nothing from the network.

Values of the data never become markup: the embedded block is JSON (with ``<``, ``>``, ``&`` and
U+2028/U+2029 escaped, so no text can close the ``<script>`` element that holds it), and the
viewer puts every text into the page with DOM APIs.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from summeval_runner._analysis._compare import Run
from summeval_runner._scorers._result import SUMMARIZATION_SCORER_ID

# Statuses and coverage verdicts as the viewer reads them.
STATUS_CODES: Mapping[str, str] = {
    "scored": "s",
    "blank_summary": "b",
    "unscorable": "u",
    "error": "e",
}
ANSWERED, NOT_ANSWERED, NO_VERDICT = "a", "n", "m"
# Scores are shown with three decimals; four keep sorting and filtering exact at that precision.
_SCORE_DIGITS = 4
_COST_DIGITS = 6
COST_COLUMNS = ("judge_cost", "target_cost")
# What a script-data block must not hold as such: "</script" or "<!--" would end or confuse the
# element, and U+2028/U+2029 are line ends to older JavaScript parsers.
_INERT = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def present(value: Any) -> Any:
    """``value``, or None where pandas says missing (None, NaN, NA, NaT): under pandas 3 a
    missing string is NaN, which is truthy and prints as "nan"."""
    if value is None or isinstance(value, list | tuple | dict):
        return value
    try:
        return None if pd.isna(value) else value
    except (TypeError, ValueError):
        return value


def text_or_none(value: Any) -> str | None:
    value = present(value)
    return None if value is None else str(value)


def _rounded(value: Any, digits: int) -> float | None:
    value = present(value)
    if value is None:
        return None
    number = float(value)
    return round(number, digits) if math.isfinite(number) else None


def script_json(value: Any) -> str:
    """``value`` as JSON that is inert inside ``<script type="application/json">``.

    >>> script_json({"summary": "</script><b>&"})
    '{"summary":"\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u0026"}'
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.translate(_INERT)


def embedded(data: Mapping[str, Any]) -> str:
    """The text of the page's data block: ``data`` as gzip-compressed JSON, base64-encoded, in
    a small JSON envelope that says so."""
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # mtime=0: the same data makes the same bytes, whenever the report is written.
    packed = gzip.compress(raw.encode("utf-8"), compresslevel=6, mtime=0)
    return script_json({"encoding": "gzip+base64", "data": base64.b64encode(packed).decode()})


def _verdicts(run_dir: Path, table: str, columns: list[str]) -> dict[str, list[list[Any]]]:
    """One run's claim or question verdicts per item, in the judge's order."""
    path = run_dir / f"{table}.parquet"
    if not path.exists():
        return {}
    names = pq.read_schema(path).names
    trials, judged = "trial" in names, "judge" in names
    extra = [*(["trial"] if trials else []), *(["judge"] if judged else [])]
    frame = pq.read_table(path, columns=["item_id", "scorer_id", "position", *columns, *extra])
    frame = frame.filter(pc.equal(frame["scorer_id"], SUMMARIZATION_SCORER_ID))
    if trials:
        # An item judged in several trials shows its first trial's verdicts (its texts and
        # reason are the first trial's too); its scores are the mean over them.
        frame = frame.filter(pc.equal(frame["trial"], 0))
    if judged and frame.num_rows:
        # A panel's item shows its first judge's verdicts (that judge's rows come first, and
        # it drew the questions), as one judged in trials shows its first trial's.
        frame = frame.filter(pc.equal(frame["judge"], frame["judge"][0]))
    frame = frame.sort_by([("item_id", "ascending"), ("position", "ascending")])
    found: dict[str, list[list[Any]]] = {}
    values = [frame[name].to_pylist() for name in columns]
    for item_id, *row in zip(frame["item_id"].to_pylist(), *values, strict=True):
        found.setdefault(item_id, []).append(row)
    return found


def _claims(run: Run) -> dict[str, list[list[Any]]]:
    rows = _verdicts(run.path, "alignment", ["claim", "supported", "reason"])
    return {
        item: [[claim, 1 if supported else 0, reason] for claim, supported, reason in claims]
        for item, claims in rows.items()
    }


def _questions(run: Run) -> dict[str, list[list[Any]]]:
    rows = _verdicts(run.path, "coverage", ["question", "answered", "reason", "verdict_missing"])
    return {
        item: [
            [
                question,
                NO_VERDICT if missing else (ANSWERED if answered else NOT_ANSWERED),
                reason,
            ]
            for question, answered, reason, missing in questions
        ]
        for item, questions in rows.items()
    }


def _flags(spans: Any) -> list[list[str]] | None:
    """An item's flag spans as the viewer reads them; None when it has none."""
    if spans is None or isinstance(spans, float) or not len(spans):
        return None
    return [[str(s["check"]), str(s["text"]), str(s["match"])] for s in spans]


def has_cost_columns(run: Run) -> bool:
    return any(column in run.items.columns for column in COST_COLUMNS)


def viewer_data(
    runs: Sequence[Run], *, baseline: bool, colours: Sequence[str], currency: str
) -> dict[str, Any]:
    """The viewer's data for ``runs`` (the baseline first when ``baseline``).

    ``items``: one ``[item_id, source, entries]`` per item, in the first run's order and then
    the items only later runs have; ``entries``: one per run, null where the run lacks the
    item, else ``[status, score, alignment, coverage, summary, reason, error, claims,
    questions, cost, source, flags, facts]`` (``error``: ``[type, step, message]``; ``claims``:
    ``[text, 1|0, reason]``; ``questions``: ``[text, a|n|m, reason]``; ``cost``:
    ``[judge, target]``; ``source`` only where it differs from the item's; ``flags``: the
    manipulation checks the item tripped, ``[check, text, match]`` each, null when none;
    ``facts``: 1 when the item's coverage was measured on key facts (its own, or drawn from
    its reference summary), which the viewer shows as key facts stated or not).
    """
    order: dict[str, int] = {}
    for run in runs:
        for item_id in run.items["item_id"].tolist():
            order.setdefault(str(item_id), len(order))
    sources: list[str | None] = [None] * len(order)
    entries: list[list[list[Any] | None]] = [[None] * len(runs) for _ in order]
    for position, run in enumerate(runs):
        _fill(run, position, order, sources, entries)
    return {
        "version": 1,
        "baseline": baseline,
        "variants": [
            {"label": run.variant, "baseline": baseline and index == 0, "colour": colours[index]}
            for index, run in enumerate(runs)
        ],
        "has_cost": any(has_cost_columns(run) for run in runs),
        "currency": currency,
        "items": [[item_id, sources[index], entries[index]] for item_id, index in order.items()],
    }


def _fill(
    run: Run,
    position: int,
    order: Mapping[str, int],
    sources: list[str | None],
    entries: list[list[list[Any] | None]],
) -> None:
    """Write ``run``'s entry of each of its items into ``entries`` (and sources not yet known)."""
    claims, questions = _claims(run), _questions(run)
    items = run.items
    columns = {
        name: items[name].tolist() if name in items.columns else [None] * len(items)
        for name in (
            "item_id", "status", "score", "alignment_score", "coverage_score", "summary",
            "reason", "error_type", "error_step", "error_message", "source", "flag_spans",
            "coverage_basis", *COST_COLUMNS,
        )
    }  # fmt: skip
    for row in zip(*columns.values(), strict=True):
        value = dict(zip(columns, row, strict=True))
        item_id = str(value["item_id"])
        index = order[item_id]
        source = text_or_none(value["source"])
        if sources[index] is None:
            sources[index] = source
        error_type = text_or_none(value["error_type"])
        error = (
            None
            if error_type is None
            else [error_type, text_or_none(value["error_step"]) or "unknown step",
                  text_or_none(value["error_message"]) or ""]
        )  # fmt: skip
        costs = [_rounded(value[name], _COST_DIGITS) for name in COST_COLUMNS]
        entries[index][position] = [
            STATUS_CODES.get(str(value["status"]), "e"),
            _rounded(value["score"], _SCORE_DIGITS),
            _rounded(value["alignment_score"], _SCORE_DIGITS),
            _rounded(value["coverage_score"], _SCORE_DIGITS),
            text_or_none(value["summary"]),
            text_or_none(value["reason"]),
            error,
            claims.get(item_id, []),
            questions.get(item_id, []),
            None if costs == [None, None] else costs,
            source if source is not None and source != sources[index] else None,
            _flags(value["flag_spans"]),
            1 if value["coverage_basis"] in ("key_facts", "reference") else 0,
        ]
