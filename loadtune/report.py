"""Rendering a ScanResult for people (SPEC §7): progress, ranked table, recommendation, snippet."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .plan import TrialConfig
from .check import PASS, REGRESSION, CheckResult, summary_line
from .recommend import persistent_saving, snippet
from .results import ConfigResult, ScanResult, Trial

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


def status_text(config: ConfigResult) -> Text:
    runs = sum(1 for t in config.trials if t.ok)
    if config.ok:
        return Text("ok" if runs == 1 else f"ok ×{runs}", style="green")
    return Text("failed", style="bold red")


def ranked(result: ScanResult) -> list[ConfigResult]:
    """Measured configs fastest first, then failed ones in run order."""
    configs = result.configs
    ok = sorted((c for c in configs if c.ok), key=lambda c: -c.estimate.median)
    return ok + [c for c in configs if not c.ok]


def short_bytes(n: int | None) -> str:
    """Compact memory figure for a narrow column: 412M, 1.3G."""
    if not n:
        return "-"
    mib = n / 2**20
    return f"{mib:.0f}M" if mib < 1000 else f"{mib / 1024:.1f}G"


def trial_table(result: ScanResult) -> Table:
    """One row per trial, fastest first; fits 80 columns (the config column wraps, never the figures)."""
    rec = result.recommendation
    top = max((t.estimate.median for t in result.configs if t.ok), default=0.0)
    table = Table(title="DataLoader configs, fastest first", title_justify="left", header_style="bold", pad_edge=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("config", ratio=1, min_width=12)
    table.add_column("samples/s", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True, width=BAR_WIDTH)  # relative bar
    table.add_column("start", justify="right", no_wrap=True)
    table.add_column("mem", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for rank, trial in enumerate(ranked(result), 1):
        est = trial.estimate
        label = Text(trial.config.label())
        if rec and trial.config == rec.config:
            label.append(" ★", style="bold yellow")
        if trial.config.is_pytorch_default:
            label.append(" default", style="dim")
        table.add_row(
            str(rank) if est else "",
            label,
            spread_text(est) if est else "-",
            bar(est.median / top) if est and top else "",
            f"{trial.startup_s:.2f}s" if trial.startup_s is not None else "-",
            short_bytes(trial.memory.peak_bytes if trial.memory else None),
            status_text(trial),
        )
    for skip in result.skipped:
        table.add_row("", Text(skip.what, style="dim"), "-", "", "-", "-", Text("skipped", style="yellow"))
    table.caption = "★ recommended · default: PyTorch's defaults · ±: 95% interval of the median · start: time to first batch · mem: PSS of main process + workers · ×N: runs pooled"
    table.caption_justify = "left"
    return table


def ranks_of(result: ScanResult) -> int:
    """Ranks per trial of this scan (1: a single loader)."""
    return int(result.settings.get("ranks", {}).get("nproc_per_node", 1))


def rank_table(result: ScanResult) -> Table:
    """The table of a scan with several ranks per trial: the node in step, the ranks' sum, the slowest rank."""
    rec = result.recommendation
    n = ranks_of(result)
    table = Table(title=f"DataLoader configs on {n} ranks, fastest first", title_justify="left", header_style="bold", pad_edge=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("config (per rank)", ratio=1, min_width=12)
    table.add_column("samples/s", justify="right", no_wrap=True)
    table.add_column("sum", justify="right", no_wrap=True)
    table.add_column("slowest", justify="right", no_wrap=True)
    table.add_column("wk", justify="right", no_wrap=True)
    table.add_column("start", justify="right", no_wrap=True)
    table.add_column("mem", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for rank, config in enumerate(ranked(result), 1):
        est = config.estimate
        label = Text(config.config.label())
        if rec and config.config == rec.config:
            label.append(" ★", style="bold yellow")
        if config.config.is_pytorch_default:
            label.append(" default", style="dim")
        total = config.aggregate_rate
        slowest = config.slowest_rank_rate
        table.add_row(
            str(rank) if est else "",
            label,
            spread_text(est) if est else "-",
            rate(total) if total else "-",
            rate(slowest) if slowest else "-",
            str(config.config.num_workers * n),
            f"{config.startup_s:.2f}s" if config.startup_s is not None else "-",
            short_bytes(config.memory.peak_bytes if config.memory else None),
            status_text(config),
        )
    for skip in result.skipped:
        table.add_row("", Text(skip.what, style="dim"), "-", "", "", "", "-", "-", Text("skipped", style="yellow"))
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
    out += [Text(f"• {s.what} skipped: {s.why}", style="yellow") for s in result.skipped]
    return out


def recommendation_panel(result: ScanResult) -> Panel:
    rec = result.recommendation
    if rec is None:
        return Panel("No config could be measured: see the failures above.", title="No recommendation", border_style="red")
    pick = result.config_result(rec.config)
    est = pick.estimate
    lines = Text()
    lines.append(f"{rec.config.label()}", style="bold")
    runs = sum(1 for t in pick.trials if t.ok)
    lines.append(f"  {rate(est.median)} samples/s ±{est.rel_spread:.1%} "
                 + (f"(median of {runs} runs' medians, {est.n} blocks in all)\n" if runs > 1 else f"(median of {est.n} blocks)\n"))
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
    saving = persistent_saving(result.configs, rec.config, result.spec.length)
    if saving is not None:
        lines.append(
            f"persistent_workers=True saves {saving:.3f} s per epoch of {result.spec.length} samples here "
            "(worker start-up at every epoch's end, measured with and without it).\n"
        )
    if len(rec.tied) > 1:
        lines.append("Tied within the noise: " + ", ".join(c.label() for c in rec.tied if c != rec.config) + "\n")
    if result.state != "complete":
        lines.append(f"Partial scan ({result.state}): {len(result.trials)} trials finished.\n", style="yellow")
    opts = result.settings["options"]
    code = snippet(rec.config, opts["shuffle"] and not result.spec.iterable, opts["drop_last"], result.spec.has_collate_fn,
                   distributed="ranks" in result.settings and not result.spec.iterable)
    return Panel(Group(lines, Syntax(code, "python", theme="ansi_dark", background_color="default")), title="Recommendation", border_style="green")


def print_report(console: Console, result: ScanResult) -> None:
    console.print(rank_table(result) if "ranks" in result.settings else trial_table(result))
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
