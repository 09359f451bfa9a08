"""Rendering a ScanResult for people (SPEC §7): progress, ranked table, recommendation, snippet."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

from rich.console import Console, Group
from rich.measure import Measurement
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .copyrate import copy_notes
from .plan import TrialConfig
from . import bound as bound_mod
from . import footprint
from .check import PASS, REGRESSION, CheckResult, summary_line
from .compare import Comparison, ConfigDiff
from .recommend import noise_floor_of, persistent_saving, snippet
from .results import ConfigResult, ScanResult, StageCost, Trial
from .view import Row, rows as view_rows

BAR_WIDTH = 10
BLOCKS = " ▏▎▍▌▋▊▉█"


def rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def spread_text(est) -> str:
    """``1,234 ±2.1%``; a spread past ±99% says nothing a reader can use, so it says "noisy"."""
    spread = f"±{est.rel_spread:.1%}" if est.rel_spread < 0.995 else "noisy"
    return f"{rate(est.median)} {spread}"


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """A relative bar with eighth-block resolution."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, rest = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[rest] if rest else "")).ljust(width)


# Any status word gets a colour; one this table does not know yet is shown, in the default style.
OVER_BOUND = 1.05  # a pick this far above even the bound's high end shows the profile overstated a cost
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


# Columns a narrow terminal can lose, first dropped first; the rank, config, rate and status stay.
SECONDARY_COLUMNS = ("bar", "start", "mem", "gbps", "wait")
COLUMN_ORDER = ("bar", "start", "mem", "wait", "gbps")  # wait and GB/s only when a step ran / batches went to a GPU
COLUMN_HEADERS = {"start": "start", "mem": "mem", "wait": "wait", "gbps": "GB/s"}
CAPTION_PARTS = {
    "star": "★ recommended",
    "default": "default: PyTorch's defaults",
    "spread": "±: 95% interval of the median",
    "start": "start: time to first batch",
    "mem": "mem: PSS of main process + workers",
    "runs": "×N: runs pooled",
}


def trial_table(result: ScanResult, rows: list[Row] | None = None, width: int | None = None) -> Table:
    """One row per config (default: all, fastest first). Given a ``width``, secondary columns are
    dropped (bar, start, mem, GB/s, wait, in that order) until every config label fits unwrapped; only the config
    column ever wraps, never a figure."""
    rows = view_rows(result) if rows is None else rows
    dropped: list[str] = []
    table = build_table(result, rows, dropped)
    if width is None:
        return table
    console = Console(width=width)
    unbounded = console.options.update_width(10_000)  # the natural width, not one clamped to ``width``
    for column in SECONDARY_COLUMNS:
        if Measurement.get(console, unbounded, table).maximum <= width:
            break
        dropped.append(column)
        table = build_table(result, rows, dropped)
    return table


def build_table(result: ScanResult, rows: list[Row], dropped: list[str]) -> Table:
    rec = result.recommendation
    top = max((c.estimate.median for c in result.configs if c.ok), default=0.0)  # bars relative to the whole scan
    table = Table(title="DataLoader configs, fastest first", title_justify="left", header_style="bold", pad_edge=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("config", ratio=1, min_width=12)
    table.add_column("samples/s", justify="right", no_wrap=True)
    optional = {"wait": has_consumer(result), "gbps": any(c.h2d_gbps is not None for c in result.configs)}
    shown = [c for c in COLUMN_ORDER if c not in dropped and optional.get(c, True)]
    for name in shown:
        if name == "bar":
            table.add_column("", no_wrap=True, width=BAR_WIDTH)  # relative bar
        else:
            table.add_column(COLUMN_HEADERS[name], justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for row in rows:
        cells = row_cells(row, rec, top)
        table.add_row(*[cells[name] for name in ("rank", "config", "rate", *shown, "status")])
    parts = [text for key, text in CAPTION_PARTS.items() if key not in dropped]
    if "wait" in shown:
        parts.append("wait: share of the time the step waited for data" + (
            " (the GPU's compute stream idle between steps)" if result.settings.get("device", "cpu").startswith("cuda") else ""))
    if "gbps" in shown:
        peak = f", pinned peak {result.h2d_peak_gbps:.1f}" if result.h2d_peak_gbps else ""
        parts.append(f"GB/s: batches copied to the GPU per second{peak}")
    table.caption = " · ".join(parts)
    table.caption_justify = "left"
    return table


def row_cells(row: Row, rec, top: float) -> dict:
    """Every cell a row can have, by column name."""
    if row.config is None:  # a knob value that was never run
        return {"rank": "", "config": Text(row.skip.what, style="dim"), "rate": "-", "bar": "", "start": "-",
                "mem": "-", "wait": "-", "gbps": "-", "status": status_cell(row.status)}
    trial = row.config
    est = trial.estimate
    label = Text(trial.config.label())
    if rec and trial.config == rec.config:
        label.append(" ★", style="bold yellow")
    if trial.config.is_pytorch_default:
        label.append(" default", style="dim")
    return {
        "rank": str(row.rank) if row.rank is not None else "",
        "config": label,
        "rate": spread_text(est) if est else "-",
        "bar": bar(est.median / top) if est and top else "",
        "start": f"{trial.startup_s:.2f}s" if trial.startup_s is not None else "-",
        "mem": short_bytes(trial.memory.peak_bytes if trial.memory else None),
        "wait": f"{trial.wait_fraction:.0%}" if trial.wait_fraction is not None else "-",
        "gbps": gbps(trial.h2d_gbps),
        "status": (Text(f"excluded: {short_bytes(trial.memory.peak_bytes)} > limit", style=STATUS_STYLES["excluded"])
                   if row.status == "excluded" and trial.memory else status_cell(row.status, sum(1 for t in trial.trials if t.ok))),
    }


def ranks_of(result: ScanResult) -> int:
    """Ranks per trial of this scan (1: a single loader)."""
    return int(result.settings.get("ranks", {}).get("nproc_per_node", 1))


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
    for row in view_rows(result) if rows is None else rows:
        cells = row_cells(row, rec, top)
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


def notes(result: ScanResult) -> list[Text]:
    """One paragraph per failed trial and per skipped knob: the full reason the table has no room for."""
    configs = result.configs
    failed = [c for c in configs if not c.ok and c.error]
    same = {(c.error.kind, c.error.exception_type, c.error.index) for c in failed}
    if len(failed) > 1 and len(failed) == len(configs) and len(same) == 1:  # say it once, plainly
        out = [Text(f"• Every trial failed the same way: {failed[0].error.message}", style="red")]
    else:
        out = [Text(f"• {c.config.label()} failed: {c.error.message}", style="red") for c in failed]
    for t in configs:
        out += [Text(f"• {t.config.label()}: {w}", style="yellow") for w in t.warnings]
    out += [Text(f"• {note}", style="cyan") for note in result.notes]
    if result.stages is not None:
        out += [Text(f"• stage profile: {note}", style="cyan") for note in result.stages.notes]
    out += [Text(f"• {note}", style="cyan") for note in step_notes(result) + copy_notes(result) + gpu_notes(result)]
    cow = footprint.copy_on_write(configs)
    if cow:
        out.append(Text(f"• {cow}.", style="yellow"))
    out += [Text(f"• {s.what} skipped: {s.why}", style="yellow") for s in result.skipped]
    return out


def has_consumer(result: ScanResult) -> bool:
    """A step consumed the batches (the spec's or ``--step-ms``'s): only then is waiting for data idle time."""
    return bool(result.spec.has_step or result.settings.get("step"))


def step_notes(result: ScanResult) -> list[str]:
    step = result.settings.get("step")
    if not step:
        return []
    where = "the GPU" if step["device_type"] == "cuda" else "the CPU, competing with the workers for cores as a CPU training step does"
    return [f"consumer: a synthetic step of {step['ms']:g} ms per batch ({step['iterations']} matmuls of "
            f"{step['size']}×{step['size']} on {where}; {step['calibrated_ms']:.3g} ms when calibrated on the idle device)"]


def gpu_notes(result: ScanResult) -> list[str]:
    """The recommended config's GPU memory, utilisation and pinned host memory."""
    rec = result.recommendation
    pick = result.config_result(rec.config) if rec else None
    usage = pick.gpu if pick else None
    if usage is None:
        return []
    parts = []
    if usage.peak_allocated_bytes is not None:
        parts.append(f"GPU memory peak {short_bytes(usage.peak_allocated_bytes)} allocated, "
                     f"{short_bytes(usage.peak_reserved_bytes)} reserved")
    if usage.mean_utilisation is not None:
        parts.append(f"GPU utilisation {usage.mean_utilisation:.0f}% (NVML, mean of {len(usage.utilisation)} samples)")
    if usage.pinned_bytes:
        parts.append(f"pinned host memory {short_bytes(usage.pinned_bytes)}" + (" (estimate: batch bytes × batches in flight)" if usage.pinned_estimated else ""))
    return [f"{pick.config.label()}: " + "; ".join(parts)] if parts else []


def recommendation_panel(result: ScanResult) -> Panel:
    rec = result.recommendation
    if rec is None:
        over = footprint.over_limit(result.configs, footprint.memory_limit(result))
        if over and len(over) == len([c for c in result.configs if c.ok]):
            return Panel(f"Every measured config exceeds the {footprint.size_text(footprint.memory_limit(result))} memory limit "
                         "(--max-memory): raise it, or try fewer workers or a smaller batch size.",
                         title="No recommendation", border_style="red")
        return Panel("No config could be measured: see the failures above.", title="No recommendation", border_style="red")
    pick = result.config_result(rec.config)
    est = pick.estimate
    lines = Text()
    lines.append(f"{rec.config.label()}", style="bold")
    runs = sum(1 for t in pick.trials if t.ok)
    lines.append(f"  {rate(est.median)} samples/s ±{est.rel_spread:.1%} "
                 + (f"(median of {est.n} blocks pooled from {runs} runs)\n" if runs > 1 else f"(median of {est.n} blocks)\n"))
    if rec.speedup is not None and rec.baseline != rec.config:
        base = result.config_result(rec.baseline).estimate
        lines.append(
            f"{rec.speedup:.2f}× PyTorch's defaults (num_workers=0, pin_memory=False: {rate(base.median)} samples/s "
            f"at batch size {rec.baseline.batch_size}), interval {rec.speedup_low:.2f}×–"
            + (f"{rec.speedup_high:.2f}×\n" if rec.speedup_high is not None else "unbounded\n")
        )
    elif rec.baseline == rec.config:
        others = [c for c in result.configs if c.ok and c.config.num_workers > 0]
        if others:
            runner_up = max(others, key=lambda c: c.estimate.median)
            times = est.median / runner_up.estimate.median
            lines.append(
                f"PyTorch's defaults (num_workers=0) win: {times:.2f}× the best config with workers ({runner_up.config.label()}); "
                "handing samples between processes costs more than producing them here.\n"
            )
        else:
            lines.append("PyTorch's defaults (num_workers=0) are the only config measured.\n")
    else:
        lines.append("PyTorch's defaults were not measured at this batch size.\n")
    lines.append(f"Why: {rec.reason}.\n")
    n = ranks_of(result)
    if n > 1 and pick.aggregate_rate:
        lines.append(f"Per rank: num_workers={rec.config.num_workers} on each of {n} ranks ({rec.config.num_workers * n} "
                     f"workers on the node); the slowest rank delivers {rate(pick.slowest_rank_rate)} samples/s, "
                     f"all ranks together {rate(pick.aggregate_rate)} samples/s when none waits.\n")
    lines.append(persistent_text(result, rec.config))
    if len(rec.tied) > 1:
        lines.append("Tied within the noise: " + ", ".join(c.label() for c in rec.tied if c != rec.config) + "\n")
    lines.append(bound_text(result))
    lines.append(memory_text(result, pick))
    if result.state != "complete":
        lines.append(f"Partial scan ({result.state}): {len(result.trials)} trials finished.\n", style="yellow")
    opts = result.settings["options"]
    code = snippet(rec.config, opts["shuffle"] and not result.spec.iterable, opts["drop_last"], result.spec.has_collate_fn,
                   distributed="ranks" in result.settings and not result.spec.iterable)
    return Panel(Group(lines, Syntax(code, "python", theme="ansi_dark", background_color="default")), title="Recommendation", border_style="green")


def print_report(console: Console, result: ScanResult, rows: list[Row] | None = None) -> None:
    """The table (``rows``: a selection from ``view.select``; default all), notes, recommendation."""
    if "ranks" in result.settings:
        console.print(rank_table(result, rows))
    else:
        console.print(trial_table(result, rows, console.width))
    total = len(view_rows(result))
    if rows is not None and len(rows) < total:
        console.print(f"showing {len(rows)} of {total} rows; ranks (#) and the recommendation are the whole scan's", style="dim")
    diagnosis = diagnosis_table(result)
    if diagnosis is not None:
        console.print(diagnosis)
    print_recommendation(console, result)


def print_recommendation(console: Console, result: ScanResult) -> None:
    """The notes (failures, warnings, what was skipped) and the recommendation with its snippet:
    all that ``--quiet`` prints."""
    for note in notes(result):
        console.print(note)
    console.print(recommendation_panel(result))


class ProgressDisplay:
    """A ScanObserver that shows trial n of N, elapsed, ETA and the current best."""

    def __init__(self, console: Console):
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[best]}"),
            console=console,
            transient=True,
        )
        self.task = None

    def __enter__(self) -> "ProgressDisplay":
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def scan_started(self, result: ScanResult, planned: int | None, budget: float | None) -> None:
        """Grid: trial n of N. Adaptive: the number of trials is not known ahead, the budget is."""
        self.budget = budget
        total = planned if planned is not None else budget
        self.task = self.progress.add_task("scan", total=total, best="", completed=len(result.trials) if planned else 0)
        self.started = time.monotonic()

    def trial_started(self, index: int, config: TrialConfig, round_: int) -> None:
        what = "confirming" if round_ else "trial"
        self.progress.update(self.task, description=f"{what} {index + 1}: {config.label()}")

    def trial_event(self, kind: str, payload: Any) -> None:
        pass

    def profile_started(self) -> None:
        self.progress.update(self.task, description="profiling the stages")

    def trial_finished(self, index: int, trial: Trial, result: ScanResult) -> None:
        rec = result.recommendation
        best = ""
        if rec is not None:
            best = f"best so far: {rec.best.label()} {rate(result.config_result(rec.best).estimate.median)}/s"
        if self.budget is not None and self.progress.tasks[0].total == self.budget:
            self.progress.update(self.task, completed=min(self.budget, time.monotonic() - self.started), best=best)
        else:
            self.progress.update(self.task, advance=1, best=best)


def print_check(console: Console, outcome: CheckResult) -> None:
    """The check's verdict with its figures, round by round."""
    console.print(summary_line(outcome), highlight=False)
    for i, (rate_, cal) in enumerate(outcome.rounds, 1):
        console.print(f"  round {i}: config {rate_ or 0:,.0f} samples/s, calibration {cal or 0:,.0f} samples/s", style="dim")
    if outcome.default_rate:
        console.print(f"  PyTorch's defaults now: {outcome.default_rate:,.0f} samples/s", style="dim")
    for line in outcome.environment:
        console.print(f"  environment changed: {line}", style="yellow")
    style = {PASS: "bold green", REGRESSION: "bold red"}.get(outcome.status, "bold yellow")
    console.print(Text(outcome.status.upper() + (": " + "; ".join(outcome.reasons) if outcome.reasons else ""), style=style))


def gbps(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def print_doctor(console: Console, report: Any) -> None:
    """``loadtune doctor``: the machine, then each GPU with its link and measured copy rates."""
    m = report.machine
    quota = f", cgroup quota {m.cgroup_cpu_limit:g} CPUs" if m.cgroup_cpu_limit is not None else ""
    lines = [
        ("cores", f"{m.usable_cores} usable (affinity mask {report.affinity_cores}{quota}; {m.logical_cores} logical) · {m.cpu_model}"),
        ("RAM", f"{short_bytes(m.memory_total_bytes)} total, {short_bytes(m.memory_available_bytes)} available"),
        ("/dev/shm", f"{short_bytes(m.shm_total_bytes)} total, {short_bytes(report.shm_free_bytes)} free" if m.shm_total_bytes else "not available"),
        ("python", f"{m.python} · {m.platform}"),
        ("torch", f"{m.torch} · CUDA {m.cuda or 'none (CPU build)'}" + (f" · cuDNN {report.cudnn}" if report.cudnn else "")
         + (f" · driver supports CUDA {report.driver_cuda}" if report.driver_cuda else "")),
        ("start method", f"{m.start_method} (DataLoader workers start this way by default)"),
        ("NVML", "available" if report.nvml_note is None else f"unavailable ({report.nvml_note})"),
    ]
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for name, value in lines:
        table.add_row(name, value)
    console.print(table)
    if report.gpu_note:
        console.print(Text(report.gpu_note, style="yellow"))
        return
    for gpu in report.gpus:
        link = gpu.link
        head = Text.assemble((f"GPU {gpu.index}: {gpu.name}", "bold"), f" · {short_bytes(gpu.memory_bytes)}"
                             + (f" · driver {gpu.driver}" if gpu.driver else ""))
        console.print(head)
        if link is not None:
            console.print(f"  PCIe gen {link.gen_current or '?'} x{link.width_current or '?'} now (read after the copies), "
                          f"gen {link.gen_max or '?'} x{link.width_max or '?'} at most: "
                          f"{gbps(gpu.link_gbps_current)} GB/s now, {gbps(gpu.link_gbps_max)} GB/s at most, each way (theoretical)")
        else:
            console.print("  PCIe link: unknown (NVML unavailable)", style="dim")
        if gpu.copies:
            copies = Table(title="  measured copies, GB/s (median of repeats, CUDA events)", title_justify="left", header_style="bold", pad_edge=False)
            copies.add_column("size", justify="right")
            for col in ("H2D pinned", "H2D pageable", "D2H pinned", "D2H pageable"):
                copies.add_column(col, justify="right")
            for size in dict.fromkeys(c.size_bytes for c in gpu.copies):
                by = {(c.direction, c.memory): c for c in gpu.copies if c.size_bytes == size}
                copies.add_row(f"{size / 2**20:g} MiB", *[
                    f"{by[k].gbps:.1f} ±{(by[k].high - by[k].low) / 2 / by[k].gbps:.0%}" if k in by and by[k].gbps else "-"
                    for k in (("h2d", "pinned"), ("h2d", "pageable"), ("d2h", "pinned"), ("d2h", "pageable"))])
            console.print(copies)
        if gpu.error:
            console.print(Text(f"  copies could not be measured: {gpu.error}", style="red"))


VERDICT_STYLES = {"faster": "bold green", "slower": "bold red", "within noise": "dim", "not measured": "yellow"}


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


def comparison_table(cmp: Comparison, diffs: list[ConfigDiff], width: int | None = None) -> Table:
    """A's and B's figure per config, the ratio B/A with its interval, and the verdict. Given a
    ``width`` too narrow for one line per row, the interval folds under the ratio, then each
    figure's ``±`` under its median; only then does the config column wrap."""
    table = build_comparison_table(cmp, diffs, fold=0)
    if width is not None:
        console = Console(width=width)
        unbounded = console.options.update_width(10_000)
        for fold in (1, 2):
            if Measurement.get(console, unbounded, table).maximum <= width:
                break
            table = build_comparison_table(cmp, diffs, fold)
    return table


def build_comparison_table(cmp: Comparison, diffs: list[ConfigDiff], fold: int) -> Table:
    table = Table(title="Config by config: B against A", title_justify="left", header_style="bold", pad_edge=False)
    unit = "\nsamples/s" if fold >= 2 else " samples/s"
    table.add_column("config", ratio=1, min_width=12)
    table.add_column("A" + unit, justify="right", no_wrap=True)
    table.add_column("B" + unit, justify="right", no_wrap=True)
    table.add_column("B/A", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for d in diffs:
        label = Text(d.config.label())
        for pick, mark in ((cmp.a_pick, " ★A"), (cmp.b_pick, " ★B")):
            if pick == d.config:
                label.append(mark, style="bold yellow")
        table.add_row(
            label,
            side_text(d.a, d.a_status, fold >= 2),
            side_text(d.b, d.b_status, fold >= 2),
            ratio_text(d.ratio, fold >= 1) if d.ratio else "-",
            Text(d.verdict, style=VERDICT_STYLES.get(d.verdict, "yellow")),
        )
    table.caption = ("★A, ★B: each scan's recommendation · ±: 95% interval of the median · B/A: ratio with its interval · "
                     f"within noise: the intervals overlap or the medians are within {cmp.noise_floor:.0%}")
    table.caption_justify = "left"
    return table


def ms(seconds: float) -> str:
    if seconds < 1e-6:
        return "<1 µs"
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.3g} µs"


def cost_row(name: str, cost: StageCost | None, per_batch: float | None, note: str = "") -> list | None:
    if cost is None or per_batch is None:
        return None
    spread = f"±{cost.rel_spread:.0%}" if cost.rel_spread < 0.995 else "noisy"
    return [name, ms(per_batch), spread, note]


def diagnosis_table(result: ScanResult) -> Table | None:
    """Where the time goes: each stage's cost per batch (measured alone), then the ceilings they set."""
    st, bound = result.stages, result.bound
    if st is None or bound is None:
        return None
    c = bound_mod.BatchCosts.of(st)
    b = st.batch_size
    table = Table(title=f"Where the time goes (bs{b}: per batch, each stage measured alone)", title_justify="left",
                  header_style="bold", pad_edge=False)
    table.add_column("stage", ratio=1, min_width=14)
    table.add_column("per batch", justify="right", no_wrap=True)
    table.add_column("±", justify="right", no_wrap=True)
    table.add_column("note", ratio=2)
    wait = c.fetch_wall - c.fetch_cpu
    rows = [
        cost_row(bound_mod.DATASET_CPU, st.fetch_cpu, c.fetch_cpu, f"{ms(st.fetch_cpu.mean)} CPU per sample, one thread"),
        cost_row(bound_mod.IO_WAIT, st.fetch_wall, wait, "dataset wall time less CPU (waiting, not computing)"),
        cost_row(bound_mod.COLLATION, st.collate, c.collate, ""),
        cost_row(bound_mod.HANDOFF, st.handoff, c.handoff - c.collate + c.touch,
                 f"worker CPU to collate into shared memory and send{', first touch of its pages' if c.touch else ''}"),
        cost_row(bound_mod.MAIN, st.receive, c.receive, "main thread CPU to receive a batch"),
        cost_row(bound_mod.PIN, st.pin, c.pin, "pin thread"),
        cost_row(bound_mod.COPY, st.copy, c.copy,
                 f"{st.batch_bytes / (c.copy or 1) / 1e9:.1f} GB/s pinned" if c.copy else ""),
        cost_row(bound_mod.STEP, st.step or st.consumer, c.step if c.cuda else (c.consumer if st.consumer else None),
                 "the spec's step" + (" on the device" if c.cuda else "")),
    ]
    for row in rows:
        if row is not None:
            table.add_row(*row)
    table.add_section()
    for ceiling in sorted(bound.ceilings, key=lambda x: x.rate):
        mark = " ◀" if ceiling == bound.ceiling else (" =" if ceiling in bound.ties else "")
        finite = ceiling.rate != float("inf")
        table.add_row(Text(f"cap: {ceiling.name}{mark}", style="bold" if mark else ""),
                      f"{rate(ceiling.rate)}/s" if finite else "-",
                      f"±{ceiling.rel_halfwidth:.0%}" if finite and ceiling.rel_halfwidth else "",
                      f"{ceiling.stage}: {ceiling.detail}")
    table.caption = ("cap: samples/s that stage allows, ± from the costs' spread; ◀ the bound (the better of num_workers=0 "
                     f"and the lowest cap with up to {bound.max_workers} workers)"
                     + ("; = ties with it within the spread" if bound.ties else ""))
    table.caption_justify = "left"
    return table


def side_text(est, status: str | None, folded: bool = False) -> Text:
    if est is not None:
        return Text(spread_text(est).replace(" ", "\n") if folded else spread_text(est))
    if status is None:
        return Text("-", style="dim")
    return status_cell(status)


def print_comparison(console: Console, cmp: Comparison, diffs: list[ConfigDiff]) -> None:
    """Which files, what differs around the numbers, the table, and the two recommendations."""
    console.print(Text.assemble(("A: ", "bold"), cmp.a_name, "   ", ("B: ", "bold"), cmp.b_name), soft_wrap=True)
    for line in cmp.dataset:
        console.print(Text(f"• dataset: {line}", style="yellow"))
    for line in cmp.settings:
        console.print(Text(f"• {line}", style="yellow"))
    if cmp.calibration is not None:
        console.print(Text(f"• loadtune's calibration workload ran {ratio_text(cmp.calibration)} as fast in B as in A "
                           "(how the machines or their load differ)", style="cyan"))
    if diffs:
        console.print(comparison_table(cmp, diffs, console.width))
    else:
        console.print("No config to show (none in common, or the filters left none).", style="yellow")
    if not any(d.a_status and d.b_status for d in cmp.diffs):
        console.print(Text("• the two scans have no config in common", style="yellow"))
    counts = cmp.counts()
    console.print(", ".join(f"{n} {verdict}" for verdict, n in counts.items()), style="dim")
    for side, pick in (("A", cmp.a_pick), ("B", cmp.b_pick)):
        console.print(Text.assemble((f"{side} recommends ", "bold"), pick.label() if pick else "nothing (no config measured)"))


def persistent_text(result: ScanResult, config) -> str:
    """The panel's line on what ``persistent_workers`` saves per epoch, where a pair was measured."""
    saving = persistent_saving(result.configs, config, result.spec.length, noise_floor_of(result))
    if saving is None:
        return ""
    where = "with and without it" + ("" if saving.at == replace(config, persistent_workers=True)
                                     else f", at {saving.at.label()}")
    if saving.seconds == 0.0:
        return f"persistent_workers makes no difference here beyond the noise (measured {where}).\n"
    if saving.seconds > 0:
        return (f"persistent_workers=True saves {saving.seconds:.3f} s per epoch of {result.spec.length} samples here "
                f"(worker start-up at every epoch's end, measured {where}).\n")
    return (f"persistent_workers=True was slower here, by {-saving.seconds:.3f} s per epoch of {result.spec.length} "
            f"samples (measured {where}).\n")


def bound_text(result: ScanResult) -> Text:
    """The panel's lines on the bound: how close the pick is, what limits it (and what ties with it),
    what would move it."""
    bound = result.bound
    out = Text()
    if bound is None:
        return out
    spread = (f" ({rate(bound.low)}–{rate(bound.high)} from the stage costs' spread)"
              if bound.low is not None and bound.high is not None and bound.high > bound.low else "")
    out.append(f"Bound: {rate(bound.rate)} samples/s{spread} at batch size {bound.batch_size}, set by ")
    out.append(bound.stage, style="bold")
    out.append(f" ({bound.ceiling.name}: {bound.ceiling.detail})")
    for tie in bound.ties:
        out.append("; ")
        out.append(tie.stage, style="bold")
        out.append(f" ({tie.name}: {rate(tie.rate)}/s) ties with it within that spread")
    out.append(pick_against_bound(result) + "\n")
    rec = result.recommendation
    pick = result.config_result(rec.config) if rec else None
    if pick is not None and pick.busy_cores is not None:
        out.append(f"While timed, this config kept {pick.busy_cores:.2f} of {result.machine.usable_cores} usable cores "
                   "busy (its main process and workers).\n")
    if bound.workers_needed and bound.stage == bound_mod.IO_WAIT:
        out.append(f"About {bound.workers_needed} workers would lift the workers' cap to the next one; "
                   f"this scan tried up to {bound.max_workers}.\n")
    for stage in bound.stages:
        if bound_mod.ADVICE.get(stage):
            out.append(f"To move it: {bound_mod.ADVICE[stage]}.\n")
    return out


def pick_against_bound(result: ScanResult) -> str:
    """How the pick's long-run rate sits against the bound and its interval."""
    bound, pick = result.bound, bound_mod.pick_rate(result)
    if pick is None:
        return "; the recommended batch size differs, so it is not compared."
    fraction = bound.fraction(pick)
    if fraction is None:
        return "."
    interval = bound.fraction_interval(pick)
    if fraction > 1 and (interval is None or interval[0] > OVER_BOUND):  # beyond the bound's spread and the pick's noise
        return (f"; this config measured {fraction:.0%} of it, so the profile overstated a stage's cost and the bound "
                "is not a ceiling here.")
    if interval is not None and interval[0] <= 1 <= interval[1]:
        return f"; this config is at the bound within its spread ({fraction:.0%} of it)."
    if fraction >= 0.995:
        return "; this config is at the bound."
    within = f", {interval[0]:.0%}–{interval[1]:.0%} within its spread" if interval and interval[1] > interval[0] else ""
    return f"; this config reaches {fraction:.0%} of it{within}."


def memory_text(result: ScanResult, pick: ConfigResult) -> Text:
    """The panel's memory line for the pick, and what --max-memory left out."""
    out = Text()
    mem = pick.memory
    if mem is not None:
        workers = pick.config.num_workers
        parts = [f"Memory: {footprint.size_text(mem.peak_bytes)} at peak (main process"
                 + (f" + {workers} worker{'s' if workers != 1 else ''}" if workers else "") + f", {mem.method.upper()})"]
        grown = footprint.config_growth(pick)
        if grown is not None:
            parts.append(f"grew {footprint.size_text(grown.bytes)} during the trial" if grown.bytes >= footprint.GROWTH_NOISE
                         else "no growth beyond the noise during the trial")
        if mem.shm_peak_bytes:
            parts.append(f"/dev/shm up to {footprint.size_text(mem.shm_peak_bytes)}")
        counted = any(t.gpu is not None and t.gpu.pinned_bytes for t in pick.trials)  # then the GPU line says it
        if result.stages is not None and pick.config.pin_memory and not counted:
            pinned = footprint.pinned_estimate(pick.config, result.stages.batch_bytes)
            parts.append(f"pinned ≈ {footprint.size_text(pinned)} (estimate: batches in flight × batch bytes)")
        out.append(", ".join(parts) + ".\n")
    rec = result.recommendation
    if rec is not None and rec.excluded:
        over = [result.config_result(c) for c in rec.excluded]
        out.append(f"Excluded by --max-memory {footprint.size_text(rec.max_memory)}: " + ", ".join(
            f"{c.config.label()} ({footprint.size_text(c.memory.peak_bytes)})" for c in over if c and c.memory) + ".\n",
            style="magenta")
    return out
