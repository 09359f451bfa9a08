"""Formatting shared by every renderer: rates, spreads, bars, sizes, ratios, status cells."""

from __future__ import annotations

import math

from rich.text import Text

from loadtune.analysis.footprint import size_text
from loadtune.analysis.load import LoadSummary
from loadtune.model.machine import MachineInfo



BAR_WIDTH = 10


BLOCKS = " ▏▎▍▌▋▊▉█"


def machine_text(m: MachineInfo) -> str:
    """``16 usable cores (32 logical) · AMD EPYC 9454 · 128.0 GiB RAM · 1 GPU: NVIDIA H200``."""
    gpus = f"{len(m.gpus)} GPU{'s' if len(m.gpus) != 1 else ''}: {', '.join(g.name for g in m.gpus)}" if m.gpus else "no GPU"
    return f"{m.usable_cores} usable cores ({m.logical_cores} logical) · {m.cpu_model} · {size_text(m.memory_total_bytes)} RAM · {gpus}"


def rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def spread_text(est) -> str:
    """``1,234 ±2.1%`` (of an ``Estimate`` or a row's ``view.Speed``); a spread past ±99% says nothing a reader can use, so it says "noisy"."""
    spread = f"±{est.rel_spread:.1%}" if est.rel_spread < 0.995 else "noisy"
    return f"{rate(est.median)} {spread}"


def speed_text(speed) -> str:
    """A row's samples/s (``view.Speed``): a raced row's figure side by side (its interval is in the
    ratio beside it); a figure too wide to decide anything as the range its runs spanned; else
    ``spread_text``."""
    if speed.wide and speed.runs is not None:
        return f"{rate(speed.runs[0])}–{rate(speed.runs[1])} runs"
    if speed.ratio is not None:
        return rate(speed.median)
    return spread_text(speed)


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """A relative bar with eighth-block resolution."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, rest = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[rest] if rest else "")).ljust(width)


STATUS_STYLES = {"ok": "green", "failed": "bold red", "skipped": "yellow", "excluded": "magenta"}


STATUS_DEFAULT_STYLE = "yellow"


def status_cell(status: str, runs: int = 1) -> Text:
    """``ok``, ``ok ×2`` (runs pooled), ``failed``, ``skipped``, ``excluded``, …, coloured."""
    word = f"ok ×{runs}" if status == "ok" and runs > 1 else status
    return Text(word, style=STATUS_STYLES.get(status, STATUS_DEFAULT_STYLE))


def short_bytes(n: int | None) -> str:
    """Compact memory figure for a narrow column: 412M, 1.3G."""
    if not n:
        return "-"
    mib = n / 2**20
    return f"{mib:.0f}M" if mib < 1000 else f"{mib / 1024:.1f}G"


def gbps(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def times(value: float) -> str:
    """A ratio readable at any size: 0.0041, 0.52, 12.40, 245."""
    if not math.isfinite(value):
        return "∞"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value >= 0.1 or value == 0 else f"{value:.2g}"


def ratio_text(r, folded: bool = False) -> str:
    """``0.52× (0.50–0.55)``: b/a with its interval; folded onto two lines for a narrow table."""
    if folded:
        return f"{times(r.value)}×\n{times(r.low)}–{times(r.high)}"
    return f"{times(r.value)}× ({times(r.low)}–{times(r.high)})"


def ms(seconds: float) -> str:
    if seconds < 1e-6:
        return "<1 µs"
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.3g} µs"


def load_sentence(summary: LoadSummary, what: str = "trials") -> str:
    """How much outside load there was: ``processes outside loadtune kept up to 0.9 of the 2 usable
    cores busy during 3 of 14 trials (45% of the CPU they could have had)``."""
    return (f"processes outside loadtune kept up to {summary.peak_cores:.1f} of the {summary.usable_cores:g} usable cores busy "
            f"during {summary.disturbed} of {summary.read} {what} ({summary.peak_share:.0%} of the CPU they could have had)")
