"""The report's plots, as inline SVG built here: nothing to load, nothing to run.

Distributions: one plot per dimension on one shared axis (0 to the scale for the score, 0 to 1
for alignment and coverage), every variant's histogram overlaid in its own colour, each
variant's mean and 95% interval marked above the bars. Trends: each dimension's mean and
interval per run in the order the runs started, regressions (a significant drop against the
previous run) in red.

Every text from the data (variant labels, run ids) is escaped; colours and coordinates are the
module's own numbers.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from summeval_runner._errors import InputError
from summeval_runner._report._data import present
from summeval_runner._scorers._result import METRICS

# Okabe and Ito's palette, which people with any common colour-vision deficiency tell apart; a
# ninth variant starts it again.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000", "#999999")
REGRESSION_COLOUR = "#c62828"
_BINS = 10
# Plot geometry in SVG user units.
_WIDTH, _HEIGHT = 380, 270
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 14, 14, 40
HISTORY_COLUMNS = (
    "run_id", "variant", "run_dir", "started_at", "status", "dimension", "n", "mean",
    "ci95_low", "ci95_high", "mean_diff", "regression",
)  # fmt: skip


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def colours(count: int) -> list[str]:
    return [PALETTE[index % len(PALETTE)] for index in range(count)]


def _nice_step(span: float, ticks: int = 5) -> float:
    """A round step (1, 2 or 5 times a power of ten) that cuts ``span`` into about ``ticks``."""
    raw = span / max(ticks, 1)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(step * power for step in (1, 2, 5, 10) if step * power >= raw)


def _nice_upper(value: float) -> float:
    """The smallest multiple of a round step that is at least ``value``."""
    step = _nice_step(value)
    return math.ceil(value / step - 1e-9) * step


def _ticks(upper: float, ticks: int = 5) -> list[float]:
    step = _nice_step(upper, ticks)
    count = math.floor(upper / step + 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def _label(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Series:
    """One variant's values of a dimension, and its mean and interval as the summary has them."""

    label: str
    colour: str
    values: Sequence[float]
    mean: float | None
    low: float | None
    high: float | None


def _histogram_counts(values: Sequence[float], upper: float) -> list[int]:
    counts = [0] * _BINS
    for value in values:
        # A hair over the bin edge: 0.3 / 0.1 is 2.9999999999999996 in floating point.
        index = int(value / upper * _BINS + 1e-9) if upper > 0 else 0
        counts[min(_BINS - 1, max(0, index))] += 1
    return counts


def distribution_svg(dimension: str, upper: float, series: Sequence[Series]) -> str:
    """One dimension's overlaid histograms on a shared axis, with each mean and interval."""
    whisker_rows = len(series)
    top = _TOP + 12 * whisker_rows + 6  # room above the bars for one interval line per variant
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - top - _BOTTOM
    counts = [_histogram_counts(s.values, upper) for s in series]
    tallest = max((max(c) for c in counts), default=0)
    y_upper = _nice_upper(max(tallest, 1))

    def x(value: float) -> float:
        return _LEFT + plot_w * (value / upper if upper > 0 else 0)

    def y(count: float) -> float:
        return top + plot_h * (1 - count / y_upper)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" class="distribution" '
        f'data-dimension="{_e(dimension)}" aria-label="{_e(dimension)}: items per value, '
        f'{len(series)} variant(s) overlaid">'
    ]
    for tick in _ticks(y_upper):
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y(tick):.1f}" '
            f'y2="{y(tick):.1f}"/><text x="{_LEFT - 6}" y="{y(tick) + 4:.1f}" '
            f'text-anchor="end">{_label(tick)}</text>'
        )
    for tick in _ticks(upper):
        parts.append(
            f'<line class="axis" x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top + plot_h}" '
            f'y2="{top + plot_h + 4}"/><text x="{x(tick):.1f}" y="{top + plot_h + 16}" '
            f'text-anchor="middle">{_label(tick)}</text>'
        )
    bin_w = plot_w / _BINS
    for s, bins in zip(series, counts, strict=True):
        # Each variant's histogram as a filled outline: overlaid outlines stay readable where
        # overlaid solid bars would hide each other.
        path = [f"M{_LEFT:.1f},{y(0):.1f}"]
        for index, count in enumerate(bins):
            left = _LEFT + index * bin_w
            path.append(f"V{y(count):.1f}H{left + bin_w:.1f}")
        path.append(f"V{y(0):.1f}Z")
        parts.append(
            f'<path d="{"".join(path)}" fill="{s.colour}" fill-opacity="0.16" '
            f'stroke="{s.colour}" stroke-width="1.6"/>'
        )
    for index in range(_BINS):
        low, high = upper * index / _BINS, upper * (index + 1) / _BINS
        closing = "]" if index == _BINS - 1 else ")"
        tip = "; ".join(f"{s.label}: {c[index]}" for s, c in zip(series, counts, strict=True))
        parts.append(
            f'<rect x="{_LEFT + index * bin_w:.1f}" y="{top}" width="{bin_w:.1f}" '
            f'height="{plot_h}" fill="transparent"><title>{_e(dimension)} in '
            f"[{_label(low)}, {_label(high)}{closing}: {_e(tip)} items</title></rect>"
        )
    for row, s in enumerate(series):
        if s.mean is None:
            continue
        level = _TOP + 12 * row + 6
        parts.append(
            f'<line x1="{x(s.mean):.1f}" x2="{x(s.mean):.1f}" y1="{level}" y2="{top + plot_h}" '
            f'stroke="{s.colour}" stroke-width="1.2" stroke-dasharray="4 3"/>'
        )
        interval = ""
        if s.low is not None and s.high is not None:
            interval = f", 95% CI [{s.low:.3f}, {s.high:.3f}]"
            parts.append(
                f'<line x1="{x(s.low):.1f}" x2="{x(s.high):.1f}" y1="{level}" y2="{level}" '
                f'stroke="{s.colour}" stroke-width="2.4"/>'
                f'<line x1="{x(s.low):.1f}" x2="{x(s.low):.1f}" y1="{level - 4}" '
                f'y2="{level + 4}" stroke="{s.colour}" stroke-width="1.6"/>'
                f'<line x1="{x(s.high):.1f}" x2="{x(s.high):.1f}" y1="{level - 4}" '
                f'y2="{level + 4}" stroke="{s.colour}" stroke-width="1.6"/>'
            )
        parts.append(
            f'<circle class="mean" cx="{x(s.mean):.1f}" cy="{level}" r="3.6" '
            f'fill="{s.colour}"><title>{_e(s.label)}: mean {s.mean:.3f}{interval}, '
            f"n = {len(s.values)}</title></circle>"
        )
    parts.append(
        f'<line class="axis" x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{top + plot_h}" '
        f'y2="{top + plot_h}"/><line class="axis" x1="{_LEFT}" x2="{_LEFT}" y1="{top}" '
        f'y2="{top + plot_h}"/>'
        f'<text class="x-label" x="{_LEFT + plot_w / 2:.1f}" y="{_HEIGHT - 6}" '
        f'text-anchor="middle">{_e(dimension)} (0 to {_label(upper)})</text>'
        f'<text class="y-label" transform="translate(12,{top + plot_h / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">items</text></svg>'
    )
    return "".join(parts)


def swatch(colour: str, shape: str = "square") -> str:
    """A small coloured mark for a legend (an inline SVG, so no style attribute is needed)."""
    mark = (
        f'<rect width="10" height="10" rx="2" fill="{colour}"/>'
        if shape == "square"
        else f'<path d="M0,1 L10,1 L5,10 Z" fill="{colour}"/>'
    )
    return (
        f'<svg class="mark" width="10" height="10" viewBox="0 0 10 10" aria-hidden="true">'
        f"{mark}</svg>"
    )


def _legend(entries: Sequence[tuple[str, str]]) -> str:
    return (
        '<ul class="legend">'
        + "".join(f"<li>{mark}{_e(label)}</li>" for mark, label in entries)
        + "</ul>"
    )


def distributions_section(
    dimensions: Mapping[str, tuple[float, Sequence[Series]]],
) -> str:
    """The distributions section: ``dimensions`` maps each dimension to its axis's upper end
    and its variants' series (the baseline first)."""
    if not dimensions:
        return ""
    first = next(iter(dimensions.values()))[1]
    legend = _legend([(swatch(s.colour), s.label) for s in first])
    figures = []
    for dimension, (upper, series) in dimensions.items():
        counted = ", ".join(f"{s.label}: n = {len(s.values)}" for s in series)
        figures.append(
            f"<figure>{distribution_svg(dimension, upper, series)}<figcaption>"
            f"{_e(dimension)} of the scored items ({_e(counted)}), {_BINS} bins. The dashed "
            "line and the dot mark each variant's mean; the bar above, its 95% interval."
            "</figcaption></figure>"
        )
    return (
        '<section id="distributions"><h2>Distributions</h2>'
        f'{legend}<div class="plots">{"".join(figures)}</div></section>'
    )


def check_history(history: pd.DataFrame) -> None:
    """``InputError`` unless ``history`` has the columns the trends are drawn from."""
    missing = [column for column in HISTORY_COLUMNS if column not in history.columns]
    if missing:
        raise InputError(
            "a history table needs the columns " + ", ".join(HISTORY_COLUMNS) + "; it lacks "
            + ", ".join(missing) + f" (got columns: {', '.join(map(str, history.columns))})"
        )  # fmt: skip


def _number(value: Any) -> float | None:
    value = present(value)
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _when(value: Any) -> str:
    moment = present(value)
    if moment is None:
        return "unknown time"
    return str(pd.Timestamp(moment).strftime("%Y-%m-%d %H:%M"))


def axis_labels(started: Sequence[Any]) -> list[tuple[str, str | None]]:
    """Each run's label under a trend's axis, runs in the order they started: its UTC date,
    and where another run shares that date, its time of day (``03:00``, with seconds where the
    minute is shared too, and the run's place, ``#3``, where even those are): no two runs share
    a label.

    >>> axis_labels(["2026-11-30T03:00:00Z", "2026-12-01T03:00:00Z"])
    [('2026-11-30', None), ('2026-12-01', None)]
    >>> axis_labels(["2026-11-30T03:00:00Z", "2026-11-30T09:30:00Z", "2026-11-30T09:30:00Z"])
    [('2026-11-30', '03:00'), ('2026-11-30', '09:30 #2'), ('2026-11-30', '09:30 #3')]
    """
    whens = [_when(moment) for moment in started]
    seconds = [
        "" if present(moment) is None else str(pd.Timestamp(moment).strftime(":%S"))
        for moment in started
    ]
    dates = [when[:10] for when in whens]
    labels: list[tuple[str, str | None]] = []
    for index, (date, when, second) in enumerate(zip(dates, whens, seconds, strict=True)):
        if dates.count(date) == 1:
            labels.append((date, None))
            continue
        time = when[11:] or "?"
        if whens.count(when) > 1:
            time += second
            if sum(w == when and s == second for w, s in zip(whens, seconds, strict=True)) > 1:
                time = f"{when[11:]} #{index + 1}"
        labels.append((date, time))
    return labels


def trend_svg(
    dimension: str, rows: pd.DataFrame, runs: Sequence[str], variants: Sequence[str]
) -> str:
    """One dimension's mean and interval per run (``runs`` in the order they started)."""
    values = [
        v for column in ("mean", "ci95_low", "ci95_high")
        for v in (_number(x) for x in rows[column]) if v is not None
    ]  # fmt: skip
    # Alignment and coverage are fractions; a score runs to its scale, which the history
    # does not record, so its axis reaches the highest value drawn.
    upper = _nice_upper(max([1.0, *values])) if dimension == "score" else 1.0
    top = _TOP + 6
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - top - _BOTTOM - 14

    def x(position: int) -> float:
        return _LEFT + plot_w * ((position + 0.5) / max(len(runs), 1))

    def y(value: float) -> float:
        return top + plot_h * (1 - value / upper)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" class="trend" '
        f'data-dimension="{_e(dimension)}" aria-label="{_e(dimension)}: mean per run over time">'
    ]
    for tick in _ticks(upper):
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y(tick):.1f}" '
            f'y2="{y(tick):.1f}"/><text x="{_LEFT - 6}" y="{y(tick) + 4:.1f}" '
            f'text-anchor="end">{_label(tick)}</text>'
        )
    every = max(1, math.ceil(len(runs) / 6))  # at most about six dates under the axis
    position = {run_id: index for index, run_id in enumerate(runs)}
    started = rows.drop_duplicates("run_id").set_index("run_id")["started_at"]
    for index, (date, time) in enumerate(axis_labels([started.get(r) for r in runs])):
        if index % every and index != len(runs) - 1:
            continue
        # Runs of one day get their time of day on a second line: one label, one run.
        second = f'<tspan x="{x(index):.1f}" dy="12">{_e(time)}</tspan>' if time is not None else ""
        parts.append(
            f'<text x="{x(index):.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
            f"{_e(date)}{second}</text>"
        )
    lines: list[str] = []  # drawn under the marks: inserted where the marks begin
    marks_start = len(parts)
    for variant_index, variant in enumerate(variants):
        colour = PALETTE[variant_index % len(PALETTE)]
        mine = rows[rows["variant"] == variant]
        points: list[tuple[float, float] | None] = []
        for record in mine.to_dict("records"):
            mean = _number(record["mean"])
            at = x(position[str(record["run_id"])])
            if mean is None:
                points.append(None)  # a run that scored nothing: a gap in the line
                continue
            points.append((at, y(mean)))
            low, high = _number(record["ci95_low"]), _number(record["ci95_high"])
            if low is not None and high is not None:
                parts.append(
                    f'<line x1="{at:.1f}" x2="{at:.1f}" y1="{y(low):.1f}" y2="{y(high):.1f}" '
                    f'stroke="{colour}" stroke-width="1.4"/>'
                )
            diff = _number(record["mean_diff"])
            tip = (
                f"{record['variant']}, run {record['run_id']} ({record['status']}), "
                f"{_when(record['started_at'])} UTC: mean {mean:.3f}"
                + (
                    f", 95% CI [{low:.3f}, {high:.3f}]"
                    if low is not None and high is not None
                    else ""
                )
                + (f", {diff:+.3f} against the previous run" if diff is not None else "")
                + f", n = {int(present(record['n']) or 0)}"
            )
            if bool(present(record["regression"])):
                parts.append(
                    f'<path class="regression" d="M{at - 6:.1f},{y(mean) - 5:.1f} '
                    f'L{at + 6:.1f},{y(mean) - 5:.1f} L{at:.1f},{y(mean) + 6:.1f} Z" '
                    f'fill="{REGRESSION_COLOUR}" stroke="#ffffff" stroke-width="0.8">'
                    f"<title>regression: {_e(tip)}</title></path>"
                )
            else:
                parts.append(
                    f'<circle cx="{at:.1f}" cy="{y(mean):.1f}" r="3.4" fill="{colour}">'
                    f"<title>{_e(tip)}</title></circle>"
                )
        segments: list[list[tuple[float, float]]] = [[]]
        for point in points:
            if point is None:
                segments.append([])
            else:
                segments[-1].append(point)
        for segment in segments:
            if len(segment) > 1:
                line = " ".join(f"{px:.1f},{py:.1f}" for px, py in segment)
                lines.append(
                    f'<polyline points="{line}" fill="none" stroke="{colour}" '
                    'stroke-width="1.2" stroke-opacity="0.7"/>'
                )
    parts[marks_start:marks_start] = lines
    parts.append(
        f'<line class="axis" x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{top + plot_h}" '
        f'y2="{top + plot_h}"/><line class="axis" x1="{_LEFT}" x2="{_LEFT}" y1="{top}" '
        f'y2="{top + plot_h}"/>'
        f'<text class="x-label" x="{_LEFT + plot_w / 2:.1f}" y="{_HEIGHT - 6}" '
        f'text-anchor="middle">run, in the order they started (UTC)</text>'
        f'<text class="y-label" transform="translate(12,{top + plot_h / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">mean {_e(dimension)}</text></svg>'
    )
    return "".join(parts)


def trends_section(history: pd.DataFrame) -> str:
    """The trends section of a history table (one row per run and dimension)."""
    check_history(history)
    if history.empty:
        return (
            '<section id="trends"><h2>Trends</h2>'
            '<p class="muted">The history holds no run.</p></section>'
        )
    table = history.copy()
    table["started_at"] = pd.to_datetime(table["started_at"], utc=True)
    table = table.sort_values(["started_at", "run_id"], kind="stable")
    runs = list(dict.fromkeys(str(run_id) for run_id in table["run_id"]))
    variants = list(dict.fromkeys(str(variant) for variant in table["variant"]))
    figures = []
    dimensions = [d for d in METRICS if d in set(table["dimension"])]
    for dimension in dimensions:
        rows = table[table["dimension"] == dimension]
        figures.append(
            f"<figure>{trend_svg(dimension, rows, runs, variants)}<figcaption>{_e(dimension)}: "
            "each run's mean (dot) and 95% interval (line); a red triangle marks a "
            "regression, a significant drop against the previous run.</figcaption></figure>"
        )
    legend = _legend(
        [(swatch(PALETTE[i % len(PALETTE)]), variant) for i, variant in enumerate(variants)]
        + [(swatch(REGRESSION_COLOUR, "triangle"), "regression (significant drop)")]
    )
    regressions = table[table["regression"].map(lambda v: bool(present(v)))]
    listed = "".join(
        f"<li><b>{_e(r['dimension'])}</b> of {_e(r['variant'])}, run {_e(r['run_id'])} "
        f"started {_e(_when(r['started_at']))} UTC: {_e(_signed(r['mean_diff']))} against "
        "the previous run</li>"
        for r in regressions.to_dict("records")
    )
    found = (
        f'<p class="worse">Regressions:</p><ul class="regressions">{listed}</ul>'
        if listed
        else '<p class="muted">No regression: no run dropped significantly against the one '
        "before it.</p>"
    )
    return (
        f'<section id="trends"><h2>Trends</h2><p class="muted">{len(runs)} runs, from '
        f"{_e(_when(table['started_at'].iloc[0]))} to {_e(_when(table['started_at'].iloc[-1]))}"
        f' UTC.</p>{legend}<div class="plots">{"".join(figures)}</div>{found}'
        + _history_table(table)
        + "</section>"
    )


def _signed(value: Any) -> str:
    number = _number(value)
    return "n/a" if number is None else f"{number:+.3f}"


def _history_table(table: pd.DataFrame) -> str:
    rows = []
    for r in table.to_dict("records"):
        low, high = _number(r["ci95_low"]), _number(r["ci95_high"])
        mean = _number(r["mean"])
        regression = bool(present(r["regression"]))
        interval = "" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"
        diff = "" if _number(r["mean_diff"]) is None else _signed(r["mean_diff"])
        rows.append(
            f"<tr><td>{_e(_when(r['started_at']))}</td><td>{_e(r['run_id'])}</td>"
            f"<td>{_e(r['variant'])}</td><td>{_e(r['status'])}</td><td>{_e(r['dimension'])}</td>"
            f"<td class='num'>{int(present(r['n']) or 0)}</td>"
            f"<td class='num'>{'n/a' if mean is None else f'{mean:.3f}'}</td>"
            f"<td class='ci'>{interval}</td><td class='num'>{diff}</td>"
            + ("<td class='worse'>regression</td></tr>" if regression else "<td></td></tr>")
        )
    return (
        "<details><summary>Every run of the history, as a table</summary><table>"
        "<tr><th>started (UTC)</th><th>run</th><th>variant</th><th>status</th><th>dimension</th>"
        "<th>n</th><th>mean</th><th>95% CI</th><th>vs previous</th><th></th></tr>"
        + "".join(rows)
        + "</table></details>"
    )
