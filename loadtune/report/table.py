"""A scan's tables: one row per config (``trial_table``), per config on several ranks (``rank_table``),
and node 0's summary of a multi-node scan (``print_nodes``)."""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from loadtune.analysis.noise import NOTHING_LEARNED, RunNoise, long_run, run_noise, spans_runs
from loadtune.analysis.race import by_rounds, relative_to, unsettled_configs
from loadtune.analysis.race import verdict as race_verdict
from loadtune.analysis.recommend import noise_floor_of
from loadtune.analysis.view import Row, rows as view_rows, too_wide
from loadtune.model.results import ScanResult
from loadtune.report.text import BAR_WIDTH, STATUS_STYLES, bar, gbps, rate, short_bytes, speed_text, spread_text, status_cell


# Columns a narrow terminal can lose, first dropped first; the rank, config, rate and status stay.
SECONDARY_COLUMNS = ("bar", "start", "mem", "gbps", "wait")


COLUMN_ORDER = ("race", "bar", "start", "mem", "wait", "gbps")  # race: when one ran; wait and GB/s: when a step ran / batches went to a GPU


COLUMN_HEADERS = {"race": "vs pick", "start": "start", "mem": "mem", "wait": "wait", "gbps": "GB/s"}


RACE_CAPTION = ("vs pick: throughput relative to the pick, measured side by side in the race (loaders alive together, "
                "short blocks taking turns), with its 95% interval over the turn pairs; a raced row's samples/s is the "
                "pick's times that ratio, the others' come from their runs timed alone (\"timed alone\": not raced, and faster than a raced row "
                "above it, which it never met side by side)")
RULED_CAPTION = ("†: the race and the runs alone disagreed, so the two were timed again alone, back to back in fresh "
                 "processes; the ratio is those rounds' (see the notes)")
SHORT_RULED = "†: the race and the runs alone disagreed: the ratio of rounds timed alone"
WIDE_CAPTION = ("a–b runs: the slowest and fastest of its runs, where a long run's 95% interval spans more than 2× (or ±50%): "
                "too wide for a figure to decide anything")
SHORT_PARTS = {  # the short report's legend, part by part: only those of what is shown
    "race": "vs pick: side by side in the race, 95% interval; raced rows: the pick's speed × it",
    "spread": "±: 95% for a long run",
    "wide": "a–b runs: its runs (interval over 2×)",
    "start": "start: first batch",
    "mem": "mem: PSS",
}


CAPTION_PARTS = {
    "star": "★ recommended",
    "default": "default: PyTorch's defaults",
    "spread": "±: 95% interval for a long run, from the run-to-run spread of the configs measured more than once",
    "start": "start: time to first batch",
    "mem": "mem: PSS of main process + workers",
    "runs": "×N: runs measured, a race's legs included",
}


def trial_table(result: ScanResult, rows: list[Row] | None = None, width: int | None = None, short: bool = False) -> Table:
    """One row per config (default: all, fastest first). Given a ``width``, secondary columns are
    dropped (bar, start, mem, GB/s, wait, in that order) until every config label fits unwrapped; only the config
    column ever wraps, never a figure. ``short``: the two-line legend of the short report."""
    rows = view_rows(result) if rows is None else rows
    dropped: list[str] = []
    figures = race_figures(result)  # read from the race once, for every width tried
    table = build_table(result, rows, dropped, short, figures)
    if width is None:
        return table
    console = Console(width=width)
    unbounded = console.options.update_width(10_000)  # the natural width, not one clamped to ``width``
    for column in SECONDARY_COLUMNS:
        if Measurement.get(console, unbounded, table).maximum <= width:
            break
        dropped.append(column)
        table = build_table(result, rows, dropped, short, figures)
    return table


def build_table(result: ScanResult, rows: list[Row], dropped: list[str], short: bool = False,
                figures: tuple[dict, frozenset, frozenset] | None = None) -> Table:
    """The table without the ``dropped`` columns; the optional ones only where the scan measured them.
    ``figures``: ``race_figures(result)``, where the caller has them."""
    rec = result.recommendation
    top = max((r.speed.median for r in rows if r.speed is not None), default=0.0)  # bars relative to the top row
    relative, apart, ruled = figures if figures is not None else race_figures(result)
    shown = shown_columns(result, bool(relative), dropped)
    table = empty_table(shown)
    noise = run_noise(result.configs)
    varying = result.varying_batches
    for row in rows:
        cells = row_cells(row, rec, top, noise, result.settings.current, varying.label if varying else None)
        cells["race"] = race_cell(row, rec, relative, apart, ruled)
        table.add_row(*[cells[name] for name in ("rank", "config", "rate", *shown, "status")])
    table.caption = short_caption(result, rows, shown) if short else table_caption(result, noise, shown, dropped, rows)
    if ruled and "race" in shown:
        table.caption += " · " + (SHORT_RULED if short else RULED_CAPTION)
    table.caption_justify = "left"
    return table


def short_caption(result: ScanResult, rows: list[Row], shown: list[str]) -> str:
    """The short report's legend: what the marks and the figures shown mean, in two lines at 80 columns
    (more only for the columns a GPU or a step adds)."""
    printed = {"spread": any(r.speed is not None and not r.speed.wide and r.speed.ratio is None for r in rows),
               "wide": any(r.speed is not None and r.speed.wide for r in rows)}
    parts = ["★ pick"] + (["current: your settings (--current)"] if result.settings.current is not None else [])
    parts += [text for key, text in SHORT_PARTS.items() if key in shown or printed.get(key)]
    return " · ".join(parts + column_parts(result, shown, short=True))


def column_parts(result: ScanResult, shown: list[str], short: bool = False) -> list[str]:
    """The legend's parts for what only some scans show: a loader's own batches of varying size, the step's
    wait and the copy's GB/s (``short``: without the GPU's aside)."""
    parts = []
    varying = result.varying_batches
    if varying is not None:
        parts.append(f"bs{varying.label}: the loader's own batches, of varying size: {varying.mean:.1f} samples on average "
                     f"over the batches timed ({varying.smallest}–{varying.largest})")
    if "wait" in shown:
        gpu = " (the GPU's compute stream idle between steps)" if result.settings.device.startswith("cuda") and not short else ""
        parts.append(f"wait: share of the time the step waited for data{gpu}")
    if "gbps" in shown:
        peak = f", pinned peak {result.h2d_peak_gbps:.1f}" if result.h2d_peak_gbps else ""
        parts.append(f"GB/s: {'' if short else 'batches '}copied to the GPU per second{peak}")
    return parts


def race_figures(result: ScanResult) -> tuple[dict, frozenset, frozenset]:
    """Each raced config's ratio to the pick with its interval, the configs whose ratio is unsettled
    (``race_cell``: no interval shown for them), and those whose ratio the referee's rounds alone gave
    (``analysis.race.by_rounds``); all empty without a pick or a race."""
    rec = result.recommendation
    if rec is None:
        return {}, frozenset(), frozenset()
    relative = relative_to(result.trials, rec.config)
    ruled = frozenset(c for c in relative if by_rounds(result.trials, c, rec.config))
    return relative, unsettled_configs(race_verdict(result.trials, noise_floor_of(result))), ruled


def shown_columns(result: ScanResult, raced: bool, dropped: list[str]) -> list[str]:
    """The secondary columns shown, in order: not dropped, and with something to say in this scan."""
    optional = {"race": raced, "wait": has_consumer(result), "gbps": any(c.h2d_gbps is not None for c in result.configs)}
    return [c for c in COLUMN_ORDER if c not in dropped and optional.get(c, True)]


def empty_table(shown: list[str]) -> Table:
    """The titled table with its columns: rank, config and rate, the ``shown`` ones, status."""
    table = Table(title="DataLoader configs, fastest first", title_justify="left", header_style="bold", pad_edge=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("config", ratio=1, min_width=12)
    table.add_column("samples/s", justify="right", no_wrap=True)
    for name in shown:
        if name == "bar":
            table.add_column("", no_wrap=True, width=BAR_WIDTH)  # relative bar
        else:
            table.add_column(COLUMN_HEADERS[name], justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    return table


def table_caption(result: ScanResult, noise: RunNoise, shown: list[str], dropped: list[str],
                  rows: list[Row] = ()) -> str:
    """The legend: what the marks and each shown column mean, in the order they matter."""
    spanning = [c.config.label() for c in result.configs if spans_runs(c)]
    parts = [spread_caption(noise, spanning) if key == "spread" else text
             for key, text in CAPTION_PARTS.items() if key not in dropped]
    if result.settings.current is not None:
        parts.insert(2, "current: your settings (--current)")
    if "race" in shown:
        parts.insert(3, RACE_CAPTION)
    if any(r.speed is not None and r.speed.wide for r in rows):
        parts.insert(3, WIDE_CAPTION)
    return " · ".join(parts + column_parts(result, shown))


def race_cell(row: Row, rec, relative: dict, apart: frozenset = frozenset(), ruled: frozenset = frozenset()) -> str:
    """``0.85× (0.83–0.87)`` for a config raced beside the pick (``†`` after it where the referee's rounds
    alone gave it: ``ruled``); ``pick`` for the pick; ``unsettled`` for one whose ratio rests on a state the
    scan did not set (``apart``: the notes give its range); empty otherwise."""
    if row.config is None or rec is None:
        return ""
    if row.config.config == rec.config:
        return "pick" if relative else ""
    if row.config.config in apart:
        return "unsettled"
    r = relative.get(row.config.config)
    if r is not None and too_wide(r.low, r.high):  # an interval past 2x: its ends are no figure to act on
        return "slower" if r.high < 1 else ("faster" if r.low > 1 else "undecided")
    if r is None and row.speed is not None and row.speed.apart:
        return "timed alone"
    mark = "†" if row.config.config in ruled else ""
    return f"{r.value:.2f}× ({r.low:.2f}–{r.high:.2f}){mark}" if r else ""


def spread_caption(noise: RunNoise, spanning: list[str] | None = None) -> str:
    """What the ± means: an interval for a long run once the scan repeated a config, else the blocks' own;
    ``spanning``: the configs whose ± also spans their runs (``noise.spans_runs``)."""
    if noise.learned:
        between = (f"{noise.between:.1%} between runs" if noise.between >= 0.0005
                   else "the runs agreed within their blocks' own noise, which the ± holds")
        text = CAPTION_PARTS["spread"] + f" ({between})"
    else:
        text = "±: 95% interval of the median block of the runs measured (no config was repeated: run-to-run noise unknown)"
    if spanning:
        text += (f"; {', '.join(spanning)}: its speed rests on its allocator's state (see the notes), "
                 "its ± spans every run of it measured too")
    return text


def row_cells(row: Row, rec, top: float, noise: RunNoise = NOTHING_LEARNED, current: str | None = None,
              batch: str | None = None) -> dict:
    """Every cell a row can have, by column name; ``noise`` widens the ± into a long run's interval;
    ``current``: the key of the user's own settings (``--current``), marked; ``batch``: the batch
    size's label when the batches vary (``~31``)."""
    if row.config is None:  # a knob value that was never run
        return {"rank": "", "config": Text(row.skip.what, style="dim"), "rate": "-", "bar": "", "start": "-",
                "mem": "-", "wait": "-", "gbps": "-", "status": status_cell(row.status)}
    trial = row.config
    est = long_run(trial, noise)
    label = Text(trial.config.label(batch))
    if rec and trial.config == rec.config:
        label.append(" ★", style="bold yellow")
    if trial.config.is_pytorch_default:
        label.append(" default", style="dim")
    if current is not None and trial.config.key == current:
        label.append(" current", style="bold cyan")
    return {
        "rank": str(row.rank) if row.rank is not None else "",
        "config": label,
        "rate": speed_text(row.speed) if row.speed else (spread_text(est) if est else "-"),
        "bar": bar((row.speed.median if row.speed else est.median) / top) if est and top else "",
        "start": f"{trial.startup_s:.2f}s" if trial.startup_s is not None else "-",
        "mem": short_bytes(trial.memory.peak_bytes if trial.memory else None),
        "wait": f"{trial.wait_fraction:.0%}" if trial.wait_fraction is not None else "-",
        "gbps": gbps(trial.h2d_gbps),
        "status": (Text(f"excluded: {short_bytes(trial.memory.peak_bytes)} > limit", style=STATUS_STYLES["excluded"])
                   if row.status == "excluded" and trial.memory else status_cell(row.status, sum(1 for t in trial.trials if t.ok))),
    }


def has_consumer(result: ScanResult) -> bool:
    """A step consumed the batches (the spec's or ``--step-ms``'s): only then is waiting for data idle time."""
    return bool(result.spec.has_step or result.settings.step)


def ranks_of(result: ScanResult) -> int:
    """Ranks per trial of this scan (1: a single loader)."""
    return result.settings.ranks_per_trial


def rank_table(result: ScanResult, rows: list[Row] | None = None) -> Table:
    """The table of a scan with several ranks per trial: the node in step, the ranks' sum, the slowest
    rank. ``rows`` as for ``trial_table`` (default: all, fastest first)."""
    rec = result.recommendation
    n = ranks_of(result)
    top = max((c.estimate.median for c in result.configs if c.ok), default=0.0)
    table = Table(title=f"DataLoader configs on {n} ranks, fastest first", title_justify="left", header_style="bold", pad_edge=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("config (per rank)", ratio=1, min_width=12)
    table.add_column("samples/s", justify="right", no_wrap=True)
    for name in ("sum", "slowest", "wk", "start", "mem"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    noise = run_noise(result.configs)
    for row in view_rows(result) if rows is None else rows:
        cells = row_cells(row, rec, top, noise, result.settings.current)
        config = row.config
        total = config.aggregate_rate if config else None
        slowest = config.slowest_rank_rate if config else None
        table.add_row(
            cells["rank"], cells["config"], cells["rate"],
            rate(total) if total else "-",
            rate(slowest) if slowest else "-",
            str(config.config.num_workers * n) if config else "-",
            cells["start"], cells["mem"], cells["status"],
        )
    table.caption = (f"★ recommended · samples/s: the node in step, {n} × the slowest rank (±: 95% interval) · sum: "
                     "all ranks' own rates over the same window · slowest: the slowest rank · wk: workers on the node · "
                     "start: until every rank had its first batch · mem: PSS of the agent, all ranks and their workers")
    table.caption_justify = "left"
    return table


def print_nodes(console: Console, nodes: list[dict]) -> None:
    """Node 0's summary of a multi-node scan: each node's own pick."""
    table = Table(title="Per node", title_justify="left", header_style="bold", pad_edge=False)
    for name in ("node", "host", "cores", "pick (per rank)", "samples/s", "sum", "wk"):
        table.add_column(name, justify="left" if name in ("host", "pick (per rank)") else "right")
    for node in nodes:
        table.add_row(str(node["node_rank"]), node["host"], str(node["cores"]), node["pick"] or "none",
                      rate(node["samples_per_s"]) if node["samples_per_s"] else "-",
                      rate(node["sum_per_s"]) if node["sum_per_s"] else "-", str(node["workers"] or "-"))
    console.print(table)
