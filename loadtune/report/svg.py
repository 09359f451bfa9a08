"""Charts as inline SVG for the HTML page (``report.page``): drawn as text, with no script, font or image
to fetch, so the page stays one file that a strict Content-Security-Policy lets render. Two charts:
ratios with their intervals on a log scale around 1.0 (``ratio_chart``), and samples/s against
num_workers (``workers_chart``: the lines ``plot.plot_data`` computes for ``--plot``, on its axes).

Text is never measured here: widths are estimated from a monospace font's advance (``CHAR_W``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from loadtune.report.plot import PlotData, log_workers, worker_ticks, y_limit
from loadtune.report.text import rate

WIDTH = 760  # px: the page's content width
CHAR_W = 7.3  # px per character of the 12 px monospace text the charts write
FONT = "font-family=\"ui-monospace,'DejaVu Sans Mono',Menlo,Consolas,monospace\" font-size=\"12\""
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")  # tab10, as --plot
INK, MUTED, GRID, BAR, MARK = "#24292f", "#6e7781", "#d0d7de", "#54aeff", "#cf222e"
RATIO_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0)
ROW = 26  # px per bar of a ratio chart


@dataclass(frozen=True)
class Interval:
    """One row of a ratio chart: a ratio and its 95% interval (``high`` None: unbounded above; ``low`` None:
    a point with no interval, such as the pick itself), or none (``value`` None), and ``text``, the figure
    as the table writes it, at the row's right."""

    label: str
    value: float | None
    low: float | None = None
    high: float | None = None
    text: str = ""


def svg(width: float, height: float, label: str, body: list[str]) -> str:
    """The ``<svg>`` element (no namespace attribute: inline in HTML it needs none), scaling down with the page."""
    return (f'<svg viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" role="img" '
            f'aria-label="{escape(label)}" {FONT}>' + "".join(body) + "</svg>")


def text(x: float, y: float, content: str, anchor: str = "start", fill: str = INK, extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="{fill}"{extra}>{escape(content)}</text>'


def line(x1: float, y1: float, x2: float, y2: float, stroke: str = INK, extra: str = "", title: str = "") -> str:
    """A line; with a ``title``, named on hover."""
    attributes = f'x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"{extra}'
    return f"<line {attributes}>{tooltip(title)}</line>" if title else f"<line {attributes}/>"


def tooltip(content: str) -> str:
    """A ``<title>``: what a browser shows when the pointer rests on the element holding it."""
    return f"<title>{escape(content)}</title>"


def star(x: float, y: float, r: float = 9.0) -> str:
    """The recommendation's mark, as ``--plot`` draws it: a gold five-pointed star."""
    points = []
    for i in range(10):
        radius = r if i % 2 == 0 else r * 0.45
        angle = -math.pi / 2 + i * math.pi / 5
        points.append(f"{x + radius * math.cos(angle):.1f},{y + radius * math.sin(angle):.1f}")
    return f'<polygon points="{" ".join(points)}" fill="gold" stroke="black" stroke-width="0.8"/>'


# --- ratios on a log scale around 1.0 ------------------------------------------------------------------


def log_span(bars: list[Interval], marks: list[tuple[float, str]]) -> float:
    """Half the axis in natural log units: every figure inside it, 1.0 in the middle, at least ±10%."""
    figures = [v for b in bars for v in (b.value, b.low, b.high) if v is not None and v > 0] + [m for m, _ in marks]
    return max([abs(math.log(v)) for v in figures] + [math.log(1.1)]) * 1.12


def ratio_ticks(span: float, to_x, min_gap: float = 40.0) -> list[float]:
    """Round ratios inside the axis, 1.0 first and the others outwards, none closer than ``min_gap`` px."""
    inside = sorted((t for t in RATIO_TICKS if abs(math.log(t)) <= span), key=lambda t: abs(math.log(t)))
    kept: list[float] = []
    for tick in inside:
        if all(abs(to_x(tick) - to_x(k)) >= min_gap for k in kept):
            kept.append(tick)
    return sorted(kept)


def tick_label(value: float) -> str:
    return f"{value:g}×"


def ratio_chart(bars: list[Interval], reference: str, marks: list[tuple[float, str]] | None = None) -> str:
    """Each row's ratio (a dot) and interval (a bar) on a log axis centred on 1.0, the line of ``reference``
    (``1 = pick``); ``marks``: other lines to draw, such as a tolerance (``(0.9, "tolerance −10%")``)."""
    marks = marks or []
    label_w = min(max((len(b.label) for b in bars), default=4) * CHAR_W + 14, 330)
    text_w = max((len(b.text) for b in bars), default=0) * CHAR_W + 14
    x0, x1 = label_w, WIDTH - text_w
    top = 48 if marks else 34  # the marks' names on a line of their own, under the reference's
    height = top + ROW * len(bars) + 30
    span = log_span(bars, marks)
    to_x = lambda v: x0 + (math.log(v) + span) / (2 * span) * (x1 - x0)  # noqa: E731
    body = []
    for tick in ratio_ticks(span, to_x):
        x = to_x(tick)
        body += [line(x, top - 6, x, height - 26, GRID), text(x, height - 10, tick_label(tick), "middle", MUTED)]
    for value, name in marks:
        x = to_x(value)
        body += [line(x, top - 6, x, height - 26, MARK, ' stroke-dasharray="5 4"'), text(x, 32, name, "middle", MARK)]
    x = to_x(1.0)
    body += [line(x, top - 6, x, height - 26, INK, ' stroke-width="1.5"'), text(x, 14, f"1 = {reference}", "middle")]
    for i, bar in enumerate(bars):
        body.append(ratio_row(bar, top + i * ROW + ROW / 2, to_x, x0, x1))
    return svg(WIDTH, height, f"ratios to the {reference} with their 95% intervals, log scale", body)


def ratio_row(bar: Interval, y: float, to_x, x0: float, x1: float) -> str:
    """One row: its label, the interval as a bar (open to the right edge when unbounded), the ratio as a dot, its text."""
    parts = [text(x0 - 10, y + 4, bar.label, "end")]
    if bar.value is None:
        parts.append(text(x0 + 6, y + 4, bar.text, fill=MUTED))
        return "<g>" + "".join(parts) + "</g>"
    clamp = lambda v: min(max(v, x0), x1)  # noqa: E731
    if bar.low is not None:
        left, right = clamp(to_x(bar.low)), clamp(to_x(bar.high)) if bar.high is not None else x1
        parts.append(f'<rect x="{left:.1f}" y="{y - 5:.1f}" width="{max(right - left, 1.5):.1f}" height="10" rx="3" fill="{BAR}"/>')
    parts.append(f'<circle cx="{clamp(to_x(bar.value)):.1f}" cy="{y:.1f}" r="4.5" fill="{INK}"/>')
    parts.append(text(x1 + 8, y + 4, bar.text))
    return "<g>" + tooltip(f"{bar.label}: {bar.text}") + "".join(parts) + "</g>"


# --- samples/s against num_workers ---------------------------------------------------------------------


def worker_position(workers: int, log: bool) -> float:
    """Where a worker count sits on the axis: linear, or past 8 workers matplotlib's symlog (base 2,
    linear up to 1) that ``--plot`` uses."""
    return float(workers) if not log or workers <= 1 else 1.0 + math.log2(workers)


def nice_step(top: float, ticks: int = 5) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about ``ticks`` gridlines up to ``top``."""
    raw = top / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)


PLOT_LEFT, PLOT_TOP, PLOT_H = 78, 14, 300


def workers_chart(data: PlotData) -> str:
    """``--plot``'s figure as SVG: one line per series with its error bars, the pick starred, failed worker
    counts crossed at zero, the bound dashed; the legend below."""
    log = log_workers(data)
    ticks = worker_ticks(data) or [0]
    positions = [worker_position(w, log) for w in ticks]
    pad = max((max(positions) - min(positions)) * 0.05, 0.5)
    lo, hi = min(positions) - pad, max(positions) + pad
    right, top_y = WIDTH - 16, y_limit(data)
    bottom = PLOT_TOP + PLOT_H
    to_x = lambda w: PLOT_LEFT + (worker_position(w, log) - lo) / (hi - lo) * (right - PLOT_LEFT)  # noqa: E731
    to_y = lambda v: bottom - v / top_y * PLOT_H  # noqa: E731
    body = axes(data, ticks, to_x, to_y, right, bottom, top_y)
    for i, series in enumerate(data.lines):
        body.append(series_svg(series, PALETTE[i % len(PALETTE)], to_x, to_y))
    body += marks_svg(data, to_x, to_y, right)
    legend = legend_entries(data)
    for i, (kind, colour, name) in enumerate(legend):
        body.append(legend_svg(kind, colour, name, PLOT_LEFT + 8, bottom + 58 + i * 18))
    height = bottom + 58 + len(legend) * 18
    return svg(WIDTH, height, data.title, body)


def axes(data: PlotData, ticks: list[int], to_x, to_y, right: float, bottom: float, top_y: float) -> list[str]:
    """The frame, the gridlines and their labels, the axes' names."""
    body = [f'<rect x="{PLOT_LEFT}" y="{PLOT_TOP}" width="{right - PLOT_LEFT:.1f}" height="{PLOT_H}" fill="none" stroke="{MUTED}"/>']
    step = nice_step(top_y)
    for k in range(int(top_y / step) + 1):
        y = to_y(k * step)
        body += [line(PLOT_LEFT, y, right, y, GRID), text(PLOT_LEFT - 6, y + 4, rate(k * step) if k else "0", "end", MUTED)]
    for w in ticks:
        x = to_x(w)
        body += [line(x, PLOT_TOP, x, bottom, GRID), text(x, bottom + 16, str(w), "middle", MUTED)]
    middle = PLOT_TOP + PLOT_H / 2
    body += [text((PLOT_LEFT + right) / 2, bottom + 34, "num_workers", "middle"),
             text(14, middle, "samples/s (median)", "middle", extra=f' transform="rotate(-90 14 {middle:.1f})"')]
    return body


def series_svg(series, colour: str, to_x, to_y) -> str:
    """One line: its path, and per point the error bar with caps and a dot that names its figures on hover."""
    path = " ".join(f"{to_x(p.workers):.1f},{to_y(p.median):.1f}" for p in series.points)
    parts = [f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.8"/>']
    for p in series.points:
        x, low, high = to_x(p.workers), to_y(p.low), to_y(p.high)
        parts += [line(x, low, x, high, colour), line(x - 4, low, x + 4, low, colour), line(x - 4, high, x + 4, high, colour)]
        parts.append(f'<circle cx="{x:.1f}" cy="{to_y(p.median):.1f}" r="3.5" fill="{colour}">'
                     + tooltip(f"{series.label}, num_workers={p.workers}: {rate(p.median)} samples/s ({rate(p.low)}–{rate(p.high)})")
                     + "</circle>")
    return "<g>" + "".join(parts) + "</g>"


def marks_svg(data: PlotData, to_x, to_y, right: float) -> list[str]:
    """The bound (dashed), the recommendation (a star) and the failed worker counts (a red cross at zero)."""
    out = []
    if data.bound is not None:
        y = to_y(data.bound[0])
        out.append(line(PLOT_LEFT, y, right, y, MUTED, ' stroke-dasharray="6 4" stroke-width="1.5"',
                        title=f"{data.bound[1]}: {rate(data.bound[0])} samples/s"))
    if data.recommended is not None:
        r = data.recommended
        pick = tooltip(f"recommended: num_workers={r.workers}, {rate(r.median)} samples/s")
        out.append(f"<g>{pick}{star(to_x(r.workers), to_y(r.median))}</g>")
    for w in data.failed:
        x, y = to_x(w), to_y(0)
        out += [line(x - 5, y - 5, x + 5, y + 5, MARK, ' stroke-width="2"'), line(x - 5, y + 5, x + 5, y - 5, MARK, ' stroke-width="2"')]
    return out


def legend_entries(data: PlotData) -> list[tuple[str, str, str]]:
    """(kind, colour, name) of each legend line, in ``--plot``'s order."""
    entries = [("line", PALETTE[i % len(PALETTE)], series.label) for i, series in enumerate(data.lines)]
    if data.recommended is not None:
        entries.append(("star", "gold", "recommended"))
    if data.failed:
        entries.append(("cross", MARK, "failed"))
    if data.bound is not None:
        entries.append(("dashed", MUTED, data.bound[1]))
    return entries


def legend_svg(kind: str, colour: str, name: str, x: float, y: float) -> str:
    if kind == "star":
        mark = star(x + 11, y - 4, 7)
    elif kind == "cross":
        mark = line(x + 6, y - 9, x + 16, y + 1, colour, ' stroke-width="2"') + line(x + 6, y + 1, x + 16, y - 9, colour, ' stroke-width="2"')
    else:
        dash = ' stroke-dasharray="6 4"' if kind == "dashed" else ""
        mark = line(x, y - 4, x + 22, y - 4, colour, f' stroke-width="2"{dash}')
    return mark + text(x + 30, y, name)
