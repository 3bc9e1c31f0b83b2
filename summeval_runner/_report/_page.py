"""The HTML report: one self-contained file for a run or a comparison of runs.

The page needs nothing from the network and loads nothing: styles and its one script are inline,
plots are inline SVG built here (``_report_plots``), and the items (every item of every run, with
its summary, reason, claims and questions) are embedded as data (``_report_data``) that the
viewer script (``_viewer.js``) turns into a table to sort, filter and search, and an item's
variants side by side. Every text from the data is escaped where this module writes it, and
reaches the page through DOM APIs where the viewer does, so a summary holding ``<script>`` shows
as text. A Content-Security-Policy allows only the page's own script and stylesheet, by their
SHA-256 hashes, as a second guard.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from summeval_runner._analysis._agreement import AGREEMENT, agreement_rows, figure_note
from summeval_runner._analysis._compare import Run, compare_loaded, load_runs, run_counts
from summeval_runner._report._data import (
    COST_COLUMNS,
    embedded,
    present,
    text_or_none,
    viewer_data,
)
from summeval_runner._report._plots import (
    Series,
    check_history,
    colours,
    distributions_section,
    swatch,
    trends_section,
)
from summeval_runner._rundir._manifest import MANIFEST
from summeval_runner._scorers._result import COUNTED, METRICS


@cache
def _asset(name: str) -> str:
    """The text of one of the report's files shipped with the package (script, stylesheet)."""
    return resources.files("summeval_runner._report").joinpath(name).read_text(encoding="utf-8")


def _sha256_source(text: str) -> str:
    """A CSP source that allows exactly the inline element whose text is ``text``."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


def content_security_policy(script: str, style: str) -> str:
    """Nothing but the page's own script and stylesheet (by hash) and data: images; no
    connection, frame, form, plugin or base URL."""
    return (
        f"default-src 'none'; script-src {_sha256_source(script)}; "
        f"style-src {_sha256_source(style)}; img-src data:; base-uri 'none'; form-action 'none'"
    )


def _e(value: Any) -> str:
    """Escape for HTML text and attributes: data never becomes markup."""
    value = present(value)
    return html.escape("" if value is None else str(value), quote=True)


def _number(value: Any, digits: int = 3) -> str:
    value = present(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{float(value):.{digits}f}"


def _interval(low: Any, high: Any) -> str:
    low, high = present(low), present(high)
    if (
        low is None
        or high is None
        or any(isinstance(v, float) and math.isnan(v) for v in (low, high))
    ):
        return ""
    return f"[{float(low):.3f}, {float(high):.3f}]"


@dataclass(frozen=True)
class RunCost:
    """What a run cost, as its manifest (or, without one, its items) recorded it; None where
    a price is unknown."""

    judge: float | None
    target: float | None
    total: float | None
    currency: str = "USD"


def _finite(value: Any) -> float | None:
    value = present(value)
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _manifest_cost(run: Run) -> Mapping[str, Any] | None:
    """The manifest's ``cost``: a field of newer manifests, read as the model has it, or from
    the file where this version's model does not know the field."""
    cost: Any = getattr(run.manifest, "cost", None)
    if cost is None and run.manifest.model_extra:
        cost = run.manifest.model_extra.get("cost")
    if cost is None:
        try:
            cost = json.loads((run.path / MANIFEST).read_text(encoding="utf-8")).get("cost")
        except (OSError, ValueError, AttributeError):
            return None
    if hasattr(cost, "model_dump"):
        cost = cost.model_dump()
    return cost if isinstance(cost, Mapping) else None


def run_cost(run: Run) -> RunCost:
    """The run's cost: the manifest's, else the sum of its items' ``judge_cost`` and
    ``target_cost`` where every item's is known; unknown otherwise."""
    recorded = _manifest_cost(run)
    if recorded is not None:
        judge, target = _finite(recorded.get("judge")), _finite(recorded.get("target"))
        total = (
            _finite(recorded.get("total"))
            if "total" in recorded
            else (judge + target if judge is not None and target is not None else None)
        )
        return RunCost(judge, target, total, str(recorded.get("currency") or "USD"))
    sums: list[float | None] = []
    for column in COST_COLUMNS:
        values = run.items[column] if column in run.items.columns else None
        known = values is not None and len(values) > 0 and not values.isna().any()
        sums.append(float(values.sum()) if known and values is not None else None)
    judge, target = sums
    total = judge + target if judge is not None and target is not None else None
    return RunCost(judge, target, total)


def money(value: float | None, currency: str) -> str:
    """A cost as a person reads it; "unknown" (never 0, never "nan") when it is not known.

    >>> money(0.01234, "USD"), money(1234.5, "USD"), money(None, "USD"), money(2.0, "EUR")
    ('$0.0123', '$1,234.50', 'unknown', '2.00 EUR')
    """
    if value is None or not math.isfinite(value):
        return "unknown"
    if 0 < value < 0.0001:
        shown = "< 0.0001"
    else:
        # Cents from a dime up; below, four decimals (an item's cost is often a fraction of a cent).
        shown = f"{value:,.2f}" if value >= 0.1 or value == 0 else f"{value:.4f}"
    return f"${shown}" if currency == "USD" else f"{shown} {currency}"


def write_report(
    run_dirs: Sequence[Path | str],
    path: Path | str,
    *,
    baseline: Path | str | None = None,
    comparison: pd.DataFrame | None = None,
    title: str | None = None,
    allow_mismatch: bool = False,
    history: pd.DataFrame | None = None,
) -> Path:
    """Write the report of one run, or of several compared with ``baseline``; return its path.

    Runs that differ in judge, scale, prompt version or dataset are refused as ``compare_runs``
    refuses them, unless ``allow_mismatch``. With ``history`` (one row per run and dimension:
    ``run_id``, ``variant``, ``run_dir``, ``started_at``, ``status``, ``dimension``, ``n``,
    ``mean``, ``ci95_low``, ``ci95_high``, ``mean_diff``, ``regression``), the report has a
    trends section. The file is written under a temporary name and renamed, so a reader never
    sees half of it.
    """
    runs, base = load_runs(run_dirs, baseline)
    if comparison is None:
        comparison = compare_loaded(runs, base, allow_mismatch=allow_mismatch)
    return render_report(runs, base, comparison, Path(path), title=title, history=history)


def render_report(
    runs: list[Run],
    base: Run | None,
    comparison: pd.DataFrame,
    path: Path,
    *,
    title: str | None = None,
    history: pd.DataFrame | None = None,
) -> Path:
    """``write_report`` for runs already read by ``load_runs`` and compared."""
    if history is not None:
        check_history(history)
    # The baseline first: the viewer shows each item's variants in this order.
    ordered = [base, *(run for run in runs if run is not base)] if base is not None else runs
    palette = colours(len(ordered))
    costs = [run_cost(run) for run in ordered]
    heading = title or (
        f"Run {runs[0].variant}" if len(runs) == 1 else f"Comparison of {len(runs)} runs"
    )
    script, style = _asset("_viewer.js"), _asset("_page.css")
    data = viewer_data(
        ordered,
        baseline=base is not None,
        colours=palette,
        currency=costs[0].currency if costs else "USD",
    )
    sections = [
        ("runs", "Runs"),
        *([("agreement", "Agreement")] if _has_agreement(runs) else []),
        ("summary", "Summary"),
        ("distributions", "Distributions"),
        *([("trends", "Trends")] if history is not None else []),
        ("items", "Items"),
    ]
    policy = content_security_policy(script, style)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        f"<title>{_e(heading)}</title><style>{style}</style></head><body>",
        f"<h1>{_e(heading)}</h1>",
        f'<p class="muted">summeval_runner report, written '
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
        + (f"; baseline {_e(base.variant)}" if base is not None else "")
        + ".</p>",
        '<nav class="sections">'
        + "".join(f'<a href="#{anchor}">{name}</a>' for anchor, name in sections)
        + "</nav>",
        _runs_section(ordered, base, palette, costs),
        _wrapped("agreement", _agreement_section(runs)),
        f'<section id="summary">{_summary_section(comparison, base is not None)}</section>',
        distributions_section(_distributions(ordered, comparison, palette)),
        trends_section(history) if history is not None else "",
        _items_section(len(ordered)),
        f'<script type="application/json" id="report-data">{embedded(data)}</script>',
        f"<script>{script}</script>",
        "</body></html>",
    ]
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text("\n".join(parts), encoding="utf-8")
    partial.replace(path)
    return path


def _runs_section(
    runs: Sequence[Run], base: Run | None, palette: Sequence[str], costs: Sequence[RunCost]
) -> str:
    rows = []
    for run, colour, cost in zip(runs, palette, costs, strict=True):
        judge = run.manifest.judge.name if run.manifest.judge else ""
        role = ' <span class="badge">baseline</span>' if run is base else ""
        counts = run_counts(run)
        rows.append(
            f'<tr><td>{swatch(colour)}<span class="label">{_e(run.variant)}</span>{role}'
            f'<div class="muted small">run {_e(run.run_id)} in {_e(run.path)}</div></td>'
            f"<td>{_e(run.manifest.status)}</td>"
            + "".join(
                f'<td class="num">{counts[name]}</td>'
                for name in (
                    "items",
                    "scored",
                    "blank_summaries",
                    "unscorable",
                    "errors",
                    "unfinished",
                )
            )
            + f'<td class="num cost">{_e(money(cost.total, cost.currency))}'
            f'<div class="muted small">judge {_e(money(cost.judge, cost.currency))}, '
            f"target {_e(money(cost.target, cost.currency))}</div></td>"
            f"<td>{_e(judge)}<div class='muted small'>prompts "
            f"{_e(run.manifest.prompt_version or 'not recorded')}</div>"
            + (
                f"<div class='muted small panel'>{_e(run.manifest.judge_panel.describe())}</div>"
                if run.manifest.judge_panel is not None
                else ""
            )
            + "</td>"
            f"<td class='when'>{_e(run.started_at.strftime('%Y-%m-%d %H:%M'))} UTC</td></tr>"
        )
    return (
        '<section id="runs"><h2>Runs</h2><div class="wide"><table class="runs"><tr>'
        "<th>variant</th><th>status</th><th>items</th><th>scored</th>"
        "<th title='blank summaries: 0 in every figure'>blank</th><th>unscorable</th>"
        "<th>errors</th><th>unfinished</th><th>cost</th><th>judge</th>"
        "<th>started</th></tr>"
        + "".join(rows)
        + "</table></div>"
        + _errors_table(runs)
        + "</section>"
    )


def _errors_table(runs: Sequence[Run]) -> str:
    """How many items ended in each kind of error, per variant: what to fix first."""
    rows = []
    for run in runs:
        errors = run.items[run.items["status"] == "error"]
        if errors.empty:
            continue
        kinds: dict[tuple[str, str], int] = {}
        for error_type, step in zip(errors["error_type"], errors["error_step"], strict=True):
            key = (text_or_none(error_type) or "unknown", text_or_none(step) or "unknown step")
            kinds[key] = kinds.get(key, 0) + 1
        for (error_type, step), count in sorted(kinds.items(), key=lambda kv: -kv[1]):
            rows.append(
                f"<tr><td>{_e(run.variant)}</td><td>{_e(error_type)}</td><td>{_e(step)}</td>"
                f'<td class="num">{count}</td></tr>'
            )
    if not rows:
        return ""
    return (
        "<h3>Errors by kind</h3><table class='errors'><tr><th>variant</th><th>error</th>"
        "<th>step</th><th>items</th></tr>" + "".join(rows) + "</table>"
    )


def _distributions(
    runs: Sequence[Run], comparison: pd.DataFrame, palette: Sequence[str]
) -> dict[str, tuple[float, list[Series]]]:
    """Each dimension's axis and its variants' scored values, with the summary's mean and
    interval (the figures of the table above, so the plot and the table agree)."""
    figures = {
        (str(row["variant"]), str(row["dimension"])): row for row in comparison.to_dict("records")
    }
    scales = [
        float(scale)
        for run in runs
        for scale in [present(run.items["scale"].max()) if len(run.items) else None]
        if scale is not None
    ]
    dimensions: dict[str, tuple[float, list[Series]]] = {}
    for dimension, column in METRICS.items():
        upper = max(scales, default=1.0) if dimension == "score" else 1.0
        series = []
        for run, colour in zip(runs, palette, strict=True):
            scored = run.items[run.items["status"].isin(COUNTED)][column].dropna()
            row = figures.get((run.variant, dimension), {})
            series.append(
                Series(
                    label=run.variant,
                    colour=colour,
                    values=[float(v) for v in scored],
                    mean=_finite(row.get("mean")),
                    low=_finite(row.get("ci95_low")),
                    high=_finite(row.get("ci95_high")),
                )
            )
        dimensions[dimension] = (upper or 1.0, series)
    return dimensions


def _items_section(variants: int) -> str:
    what = "every item of every variant" if variants > 1 else "every item"
    return (
        '<section id="items"><h2>Items</h2>'
        f'<p class="muted">{what}: sort by a column (click its name), filter by status, variant '
        "and score, search ids, summaries and reasons; click an item to open it, its variants "
        "side by side (Esc closes it).</p>"
        '<div id="items-viewer"><p class="muted">Reading the items\u2026</p>'
        "<noscript><p>The items table needs JavaScript; every item is in items.parquet.</p>"
        "</noscript></div></section>"
    )


def _wrapped(anchor: str, section: str) -> str:
    return f'<section id="{anchor}">{section}</section>' if section else ""


def _has_agreement(runs: Sequence[Run]) -> bool:
    return any((run.path / AGREEMENT).is_file() for run in runs)


def _agreement_section(runs: list[Run]) -> str:
    """For each run of ``summeval-agree``: how its judge agrees with people's ratings."""
    blocks = []
    for run in runs:
        if not (run.path / AGREEMENT).is_file():
            continue
        figures = agreement_rows(run.path)
        compared = next((f["baseline"] for f in figures if f["baseline"]), None)
        head = (
            "<tr><th>dimension</th><th>human rating</th><th>level</th><th>statistic</th>"
            "<th>value</th><th>95% CI</th><th>sources</th><th>rows</th>"
            + (f"<th>vs {_e(compared)}</th><th>paired 95% CI</th>" if compared else "")
            + "<th>note</th></tr>"
        )
        rows = []
        for f in figures:
            cells = (
                f"<td>{_e(f['dimension'])}</td><td>{_e(f['rating'])}</td><td>{_e(f['level'])}</td>"
                f"<td>{_e(f['statistic'])}</td><td class='num'>{_number(f['value'])}</td>"
                f"<td class='ci'>{_interval(f['ci_low'], f['ci_high'])}</td>"
                f"<td class='num'>{int(f['groups'])}</td><td class='num'>{int(f['rows'])}</td>"
            )
            if compared:
                diff = f["difference"]
                shown = "n/a" if diff is None else f"{diff:+.3f}"
                cells += (
                    f"<td class='num'>{shown}</td>"
                    f"<td class='ci'>{_interval(f['difference_ci_low'], f['difference_ci_high'])}"
                    "</td>"
                )
            rows.append(f"<tr>{cells}<td class='muted'>{_e(figure_note(f))}</td></tr>")
        first = figures[0] if figures else {}
        judge = f"Judge {first.get('judge', '')}"
        if compared:
            judge += f" against the baseline judge {compared}"
        draws = "95% bootstrap"
        if first.get("resamples") is not None:
            draws += f", {first['resamples']} draws of the sources (seed {first['seed']})"
        paired = " The paired interval takes the same draws for both judges." if compared else ""
        blocks.append(
            f"<h3>{_e(judge)}</h3>"
            f"<p class='muted'>Run {_e(run.variant)}, held against the ratings in "
            f"{_e(first.get('ratings_path', ''))}. Summary level: within each source, over its "
            f"summaries, then the mean over sources. Intervals: {_e(draws)}.{paired}</p>"
            f"<table>{head}{''.join(rows)}</table>"
        )
    if not blocks:
        return ""
    return "<h2>Agreement with human ratings</h2>" + "".join(blocks)


def _summary_section(comparison: pd.DataFrame, paired: bool) -> str:
    head = (
        "<tr><th>dimension</th><th>variant</th><th>n</th><th>mean</th><th>95% CI</th>"
        + (
            "<th>vs baseline</th><th>paired 95% CI</th><th>p</th><th>better / worse / tied</th>"
            "<th>only here / only in baseline</th>"
            if paired
            else ""
        )
        + "</tr>"
    )
    rows = []
    for row in comparison.sort_values(["dimension", "variant"], kind="stable").to_dict("records"):
        cells = (
            f"<td>{_e(row['dimension'])}</td><td>{_e(row['variant'])}</td>"
            f'<td class="num">{row["n"]}</td><td class="num">{_number(row["mean"])}</td>'
            f"<td class='ci'>{_interval(row['ci95_low'], row['ci95_high'])}</td>"
        )
        if paired:
            diff = row["mean_diff"]
            if diff is None or (isinstance(diff, float) and math.isnan(diff)):
                role = "baseline" if pd.isna(row["baseline"]) else "no item scored in both"
                cells += f'<td class="muted">{role}</td>' + "<td></td>" * 4
            else:
                tone = ("worse" if diff < 0 else "better") if row["significant"] else ""
                cells += (
                    f'<td class="num {tone}">{float(diff):+.3f}</td>'
                    f"<td class='ci'>{_interval(row['diff_ci95_low'], row['diff_ci95_high'])}</td>"
                    f'<td class="num">{_number(row["p_value"], 4)}</td>'
                    f"<td>{int(row['better'])} / {int(row['worse'])} / {int(row['tied'])}</td>"
                    f"<td>{len(row['items_only_here'])} / {len(row['items_only_in_baseline'])}</td>"
                )
        rows.append(f"<tr>{cells}</tr>")
    return f"<h2>Summary</h2><table>{head}{''.join(rows)}</table>"
