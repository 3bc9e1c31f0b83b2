"""The HTML report: one self-contained file for a run or a comparison of runs.

No script, no external resource: styles are inline, plots are inline SVG, and an item's claims,
questions and verdicts open with ``<details>``. Every text that comes from data (summaries,
sources, reasons, labels, ids) is escaped, and a Content-Security-Policy forbids scripts as a
second guard, so a summary holding ``<script>`` is shown as text and never runs.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from summeval_runner._io._agreement import AGREEMENT, agreement_rows, figure_note
from summeval_runner._io._compare import Run, compare_loaded, load_runs, run_counts
from summeval_runner._scorers._result import METRICS, SUMMARIZATION_SCORER_ID

# Beyond this many items a run's table lists the lowest scores and says what it left out.
MAX_ITEMS_LISTED = 2000
_CHANGED_LISTED = 10
_BINS = 10
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem; color: #1d232a; max-width: 1200px; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border-bottom: 1px solid #dde2e8; padding: .3rem .6rem; text-align: left;
  vertical-align: top; }
th { background: #f3f5f8; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num, td.ci { white-space: nowrap; }
.worse { color: #b3261e; } .better { color: #1b6e3a; } .muted { color: #66707c; }
details summary { cursor: pointer; } details div { margin: .4rem 0 .6rem 1rem; }
.ok { color: #1b6e3a; } .no { color: #b3261e; }
.plots { display: flex; flex-wrap: wrap; gap: 1rem; }
figure { margin: 0; } figcaption { font-size: 12px; color: #66707c; }
pre { white-space: pre-wrap; background: #f7f8fa; padding: .5rem; margin: .3rem 0; }
"""


def _e(value: Any) -> str:
    """Escape for HTML text and attributes: data never becomes markup."""
    return html.escape("" if value is None else str(value), quote=True)


def _number(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{float(value):.{digits}f}"


def _interval(low: Any, high: Any) -> str:
    if (
        low is None
        or high is None
        or any(isinstance(v, float) and math.isnan(v) for v in (low, high))
    ):
        return ""
    return f"[{float(low):.3f}, {float(high):.3f}]"


def write_report(
    run_dirs: Sequence[Path | str],
    path: Path | str,
    *,
    baseline: Path | str | None = None,
    comparison: pd.DataFrame | None = None,
    title: str | None = None,
    allow_mismatch: bool = False,
) -> Path:
    """Write the report of one run, or of several compared with ``baseline``; return its path.

    Runs that differ in judge, scale, prompt version or dataset are refused as ``compare_runs``
    refuses them, unless ``allow_mismatch``. The file is written under a temporary name and
    renamed, so a reader never sees half of it.
    """
    runs, base = load_runs(run_dirs, baseline)
    if comparison is None:
        comparison = compare_loaded(runs, base, allow_mismatch=allow_mismatch)
    return render_report(runs, base, comparison, Path(path), title=title)


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
    heading = title or (
        f"Run {runs[0].variant}" if len(runs) == 1 else f"Comparison of {len(runs)} runs"
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        f"<title>{_e(heading)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(heading)}</h1>",
        f'<p class="muted">summeval_runner report, written '
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC.</p>",
        _runs_section(runs, base),
        _agreement_section(runs),
        _summary_section(comparison, base is not None),
        _plots_section(runs),
    ]
    if base is not None:
        parts.append(_changed_section(runs, base))
    parts.extend(_items_section(run) for run in runs)
    parts.append("</body></html>")
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text("\n".join(parts), encoding="utf-8")
    partial.replace(path)
    return path


def _runs_section(runs: list[Run], base: Run | None) -> str:
    rows = []
    for run in runs:
        judge = run.manifest.judge.name if run.manifest.judge else ""
        role = "baseline" if run is base else ""
        counts = run_counts(run)
        rows.append(
            f"<tr><td>{_e(run.variant)}</td><td>{_e(role)}</td><td>{_e(run.path)}</td>"
            f"<td>{_e(run.run_id)}</td><td>{_e(judge)}</td>"
            f"<td>{_e(run.manifest.prompt_version or '')}</td>"
            + "".join(
                f'<td class="num">{counts[name]}</td>'
                for name in ("items", "scored", "unscorable", "errors")
            )
            + f"<td>{_e(run.started_at.isoformat())}</td></tr>"
        )
    return (
        "<h2>Runs</h2><table><tr><th>variant</th><th></th><th>directory</th><th>run id</th>"
        "<th>judge</th><th>prompts</th><th>items</th><th>scored</th><th>unscorable</th>"
        "<th>errors</th><th>started</th></tr>" + "".join(rows) + "</table>"
    )


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


def _histogram(values: list[float], upper: float, caption: str) -> str:
    width, height, pad = 240, 110, 18
    counts = [0] * _BINS
    for value in values:
        index = min(_BINS - 1, max(0, int(value / upper * _BINS))) if upper > 0 else 0
        counts[index] += 1
    tallest = max(counts) or 1
    bar = (width - 2 * pad) / _BINS
    bars = []
    for index, count in enumerate(counts):
        h = (height - 2 * pad) * count / tallest
        x, y = pad + index * bar, height - pad - h
        bars.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
            f'fill="#3d6fb6"><title>{count}</title></rect>'
        )
    axis = (
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        'stroke="#66707c"/>'
        f'<text x="{pad}" y="{height - 4}" font-size="10">0</text>'
        f'<text x="{width - pad}" y="{height - 4}" font-size="10" text-anchor="end">'
        f"{upper:g}</text>"
    )
    return (
        f'<figure><svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="{_e(caption)}">{"".join(bars)}{axis}</svg>'
        f"<figcaption>{_e(caption)}</figcaption></figure>"
    )


def _plots_section(runs: list[Run]) -> str:
    figures = []
    for dimension, column in METRICS.items():
        for run in runs:
            scored = run.items[run.items["status"] == "scored"]
            values = [float(v) for v in scored[column].dropna()]
            upper = float(scored["scale"].max()) if dimension == "score" and len(scored) else 1.0
            caption = f"{dimension} · {run.variant} · n = {len(values)}"
            figures.append(_histogram(values, upper or 1.0, caption))
    return f'<h2>Distributions</h2><div class="plots">{"".join(figures)}</div>'


def _changed_section(runs: list[Run], base: Run) -> str:
    blocks = []
    for run in runs:
        if run is base:
            continue
        ours = run.items[run.items["status"] == "scored"]["score"]
        theirs = base.items[base.items["status"] == "scored"]["score"]
        shared = sorted(set(ours.index) & set(theirs.index))
        if not shared:
            continue
        diffs = (ours.loc[shared] - theirs.loc[shared]).astype(float)
        top = diffs.abs().sort_values(ascending=False, kind="stable").index[:_CHANGED_LISTED]
        rows = []
        for item_id in top:
            diff = float(diffs.loc[item_id])
            tone = "worse" if diff < 0 else "better"
            rows.append(
                f"<tr><td>{_e(item_id)}</td><td class='num'>{_number(theirs.loc[item_id])}</td>"
                f"<td class='num'>{_number(ours.loc[item_id])}</td>"
                f'<td class="num {tone}">{diff:+.3f}</td><td><details><summary>summaries'
                f"</summary><div><b>{_e(base.variant)}</b><pre>"
                f"{_e(base.items.loc[item_id, 'summary'])}</pre><b>{_e(run.variant)}</b><pre>"
                f"{_e(run.items.loc[item_id, 'summary'])}</pre></div></details></td></tr>"
            )
        blocks.append(
            f"<h3>{_e(run.variant)} against {_e(base.variant)}</h3><table><tr><th>item</th>"
            "<th>baseline</th><th>variant</th><th>change</th><th></th></tr>"
            + "".join(rows)
            + "</table>"
        )
    return "<h2>Items that changed most</h2>" + ("".join(blocks) or "<p>No item in common.</p>")


def _verdicts(run: Run) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    claims: dict[str, list[dict[str, Any]]] = {}
    questions: dict[str, list[dict[str, Any]]] = {}
    for name, target in (("alignment", claims), ("coverage", questions)):
        table_path = run.path / f"{name}.parquet"
        if not table_path.exists():
            continue
        frame = pd.read_parquet(table_path)
        frame = frame[frame["scorer_id"] == SUMMARIZATION_SCORER_ID].sort_values(
            ["item_id", "position"]
        )
        for row in frame.to_dict("records"):
            target.setdefault(row["item_id"], []).append(row)
    return claims, questions


def _items_section(run: Run) -> str:
    claims, questions = _verdicts(run)
    items = run.items
    note = ""
    if len(items) > MAX_ITEMS_LISTED:
        items = items.sort_values("score", na_position="first", kind="stable").head(
            MAX_ITEMS_LISTED
        )
        note = (
            f'<p class="muted">The {MAX_ITEMS_LISTED} lowest-scoring of {len(run.items)} items '
            "(errors first); every item is in items.parquet.</p>"
        )
    rows = [
        _item_row(row, claims.get(row["item_id"], []), questions.get(row["item_id"], []))
        for row in items.to_dict("records")
    ]
    return (
        f"<h2>Items: {_e(run.variant)}</h2>{note}<table><tr><th>item</th><th>status</th>"
        "<th>score</th><th>alignment</th><th>coverage</th><th>reason and verdicts</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _item_row(
    row: Mapping[Any, Any], claims: list[dict[str, Any]], questions: list[dict[str, Any]]
) -> str:
    claim_lines = "".join(
        f"<li><span class='{'ok' if c['supported'] else 'no'}'>"
        f"{'supported' if c['supported'] else 'unsupported'}</span>: {_e(c['claim'])} "
        f"<span class='muted'>({_e(c['reason'])})</span></li>"
        for c in claims
    )
    question_lines = "".join(
        f"<li><span class='{'ok' if q['answered'] else 'no'}'>"
        f"{'answered' if q['answered'] else 'not answered'}</span>: {_e(q['question'])} "
        f"<span class='muted'>({_e(q['reason'] or 'no verdict')})</span></li>"
        for q in questions
    )
    error = (
        f"<p class='no'>{_e(row['error_type'])} in {_e(row['error_step'])}: "
        f"{_e(row['error_message'])}</p>"
        if row.get("error_type")
        else ""
    )
    details = (
        f"<details><summary>{_e(row['reason'] or row.get('error_message') or '')}</summary><div>"
        f"{error}<b>Summary</b><pre>{_e(row['summary'])}</pre>"
        f"<b>Claims</b><ul>{claim_lines or '<li>none</li>'}</ul>"
        f"<b>Questions</b><ul>{question_lines or '<li>none</li>'}</ul></div></details>"
    )
    return (
        f"<tr><td>{_e(row['item_id'])}</td><td>{_e(row['status'])}</td>"
        f"<td class='num'>{_number(row['score'])}</td>"
        f"<td class='num'>{_number(row['alignment_score'])}</td>"
        f"<td class='num'>{_number(row['coverage_score'])}</td><td>{details}</td></tr>"
    )
