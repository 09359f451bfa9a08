"""Throughput against num_workers as a PNG or SVG (``--plot PATH``); matplotlib is an optional extra.

One line per combination of the other knobs (prefetch_factor, pin_memory and the transfer, and
persistent_workers / in_order / start method where they vary) at the recommended batch size, with
error bars from each config's measured interval, the recommendation marked, and the throughput
bound as a horizontal line when the result carries one. What to draw is a pure function
(``plot_data``); only ``write_plot`` touches matplotlib, through its object API and the Agg/SVG
renderers, so no display and no global backend are involved.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path

from loadtune.model.config import DEFAULT_PREFETCH, TrialConfig
from loadtune.model.results import ConfigResult, ScanResult
from loadtune.model.scanfile import check_writable
from loadtune.analysis.bound import scan_bound
from loadtune.analysis.noise import RunNoise, long_run, run_noise

FORMATS = {".png": "png", ".svg": "svg"}
INSTALL_HINT = "pip install matplotlib"  # not 'loadtune[plot]': the PyPI name loadtune is another project's
FIGSIZE = (8.0, 5.0)  # inches
DPI = 100  # a PNG is FIGSIZE x DPI pixels: 800 x 500


class PlotError(ValueError):
    """A plot that cannot be made: wrong extension, matplotlib missing, nothing measured. Exit 2."""


def plot_format(path: str | Path) -> str:
    """"png" or "svg" from the file name; anything else refused (before any work, in ``scan``)."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise PlotError(f"--plot {path}: the file name must end in .png or .svg (got {suffix or 'no extension'!r})")
    return FORMATS[suffix]


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError(f"--plot needs matplotlib, which is not installed here; install it with: {INSTALL_HINT}") from None


def check_plot(path: str | Path) -> None:
    """Everything that can be known before measuring: the extension, matplotlib, a writable place."""
    plot_format(path)
    require_matplotlib()
    check_writable(path)


@dataclass(frozen=True)
class Point:
    workers: int
    median: float
    low: float
    high: float


@dataclass
class Line:
    label: str
    points: list[Point]


@dataclass
class PlotData:
    """What the figure shows, computed without matplotlib (and so testable without it)."""

    batch_size: int
    lines: list[Line]
    recommended: Point | None
    failed: list[int] = field(default_factory=list)  # worker counts whose trials failed at this batch size
    bound: tuple[float, str] | None = None  # (samples/s, what sets it)
    title: str = ""
    subtitle: str = ""


# The knobs a line stands for, other than num_workers and batch_size, with how to name their values.
LINE_KNOBS = {
    "prefetch_factor": lambda v: f"prefetch {v or DEFAULT_PREFETCH}",
    "pin_memory": lambda v: "pin" if v else "no pin",
    "transfer": lambda v: {"none": "on CPU", "sync": ".to()", "non_blocking": "non_blocking"}.get(v, v),
    "persistent_workers": lambda v: "persistent" if v else "not persistent",
    "in_order": lambda v: "in order" if v else "unordered",
    "start_method": lambda v: v or "default start",
}


def line_key(config: TrialConfig) -> tuple:
    return tuple(getattr(config, k) for k in LINE_KNOBS)


def bound_of(result: ScanResult) -> tuple[float, str] | None:
    """The throughput bound from the scan's stage profile (``scan_bound``), and the stage that sets it."""
    bound = scan_bound(result)
    if bound is None or not math.isfinite(bound.rate):
        return None
    if getattr(bound, "batch_size", None) not in (None, plot_batch_size(result)):
        return None  # profiled at another batch size (e.g. a resumed scan changed its pick): not this plot's line
    return float(bound.rate), f"bound: {' + '.join(bound.stages)}"


def plot_batch_size(result: ScanResult) -> int:
    """The recommended batch size; without a recommendation, the one with the most measured configs."""
    if result.recommendation is not None:
        return result.recommendation.config.batch_size
    sizes = [c.config.batch_size for c in result.configs if c.ok]
    if not sizes:
        raise PlotError("nothing was measured, so there is nothing to plot")
    return max(set(sizes), key=sizes.count)


def point(config: ConfigResult, noise: RunNoise) -> Point:
    """A config's median with the interval the table prints for it (for a long run, once learned)."""
    est = long_run(config, noise)
    return Point(config.config.num_workers, est.median, est.low, est.high)


def plot_data(result: ScanResult) -> PlotData:
    """Lines of (num_workers, median, interval) at the plotted batch size. ``num_workers=0`` has no
    prefetch or persistence, so its point starts every line of the same pinning and transfer."""
    bs = plot_batch_size(result)
    noise = run_noise(result.configs)
    configs = [c for c in result.configs if c.config.batch_size == bs]
    ok = [c for c in configs if c.ok]
    order = lambda key: [(v is None, v if isinstance(v, (bool, int)) else str(v)) for v in key]  # noqa: E731  None sorts last
    with_workers = sorted({line_key(c.config) for c in ok if c.config.num_workers > 0}, key=order)
    if not with_workers:
        with_workers = sorted({line_key(c.config) for c in ok}, key=order)
    varying = [i for i, _ in enumerate(LINE_KNOBS) if len({k[i] for k in with_workers}) > 1]
    names = list(LINE_KNOBS.values())
    lines = []
    for key in with_workers:
        members = [c for c in ok if line_key(c.config) == key
                   or (c.config.num_workers == 0 and (c.config.pin_memory, c.config.transfer) == (key[1], key[2]))]
        points = sorted((point(c, noise) for c in members), key=lambda p: p.workers)
        shown = [i for i in range(len(LINE_KNOBS)) if i in varying or i == 0]
        label = ", ".join(names[i](key[i]) for i in shown)
        lines.append(Line(label, points))
    rec = result.recommendation
    pick = result.config_result(rec.config) if rec is not None and rec.config.batch_size == bs else None
    recommended = point(pick, noise) if pick is not None and pick.ok else None
    m = result.machine
    return PlotData(
        batch_size=bs,
        lines=lines,
        recommended=recommended,
        failed=sorted({c.config.num_workers for c in configs if not c.ok}),
        bound=bound_of(result),
        title=f"{result.spec.dataset_type}: samples/s against num_workers, batch size {bs}",
        subtitle=f"{m.usable_cores} usable cores · {result.settings.device} · torch {m.torch} · "
                 f"bars: {'95% interval for a long run' if noise.learned else '95% interval of the median block'} · {result.created}",
    )


def worker_ticks(data: PlotData) -> list[int]:
    """The worker counts on the x axis: every one measured or failed."""
    return sorted({p.workers for line in data.lines for p in line.points} | set(data.failed))


def log_workers(data: PlotData) -> bool:
    """Past 8 workers the axis is log-like (symlog, base 2: 0, 1, 2, 4, … 64 evenly spread)."""
    workers = worker_ticks(data)
    return bool(workers) and max(workers) > 8


def y_limit(data: PlotData) -> float:
    """The top of the y axis, which starts at zero so heights compare: every interval and the bound inside the frame."""
    highs = [p.high for line in data.lines for p in line.points] + ([data.bound[0]] if data.bound else [])
    return max(highs, default=1.0) * 1.08


def write_plot(result: ScanResult, path: str | Path) -> None:
    """Draw ``plot_data(result)`` into ``path`` (PNG or SVG by its extension)."""
    fmt = plot_format(path)
    require_matplotlib()
    from matplotlib.figure import Figure  # the object API: no pyplot, no display, no global backend
    from matplotlib.ticker import StrMethodFormatter

    data = plot_data(result)
    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    for line in data.lines:
        xs = [p.workers for p in line.points]
        ys = [p.median for p in line.points]
        err = [[p.median - p.low for p in line.points], [p.high - p.median for p in line.points]]
        ax.errorbar(xs, ys, yerr=err, marker="o", markersize=4, capsize=3, label=line.label)
    if data.recommended is not None:
        r = data.recommended
        ax.plot([r.workers], [r.median], marker="*", markersize=16, color="gold", markeredgecolor="black",
                linestyle="none", label="recommended", zorder=5)
    if data.failed:
        ax.plot(data.failed, [0] * len(data.failed), marker="x", color="red", linestyle="none", label="failed", zorder=5)
    if data.bound is not None:
        ax.axhline(data.bound[0], color="gray", linestyle="--", label=data.bound[1])
    workers = worker_ticks(data)
    if log_workers(data):
        ax.set_xscale("symlog", base=2, linthresh=1)  # 0, 1, 2, 4, … 64 evenly spread
    ax.set_xticks(workers)
    ax.set_xticklabels([str(w) for w in workers])
    ax.set_ylim(0, y_limit(data))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_xlabel("num_workers")
    ax.set_ylabel("samples/s (median)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.suptitle(data.title, fontsize="medium")
    ax.set_title(data.subtitle, fontsize="x-small", color="dimgray")
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    Path(path).write_bytes(buffer.getvalue())
