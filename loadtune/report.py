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
from . import bound as bound_mod
from . import footprint
from .check import PASS, REGRESSION, CheckResult, summary_line
from .recommend import persistent_saving, snippet
from .results import ConfigResult, ScanResult, StageCost, Trial

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


def status_text(config: ConfigResult, excluded: bool = False) -> Text:
    runs = sum(1 for t in config.trials if t.ok)
    if config.ok and excluded:
        return Text(f"excluded: {short_bytes(config.memory.peak_bytes)} > limit", style="magenta")
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
    excluded = {c.config for c in footprint.over_limit(result.configs, memory_limit(result))}
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
            status_text(trial, trial.config in excluded),
        )
    for skip in result.skipped:
        table.add_row("", Text(skip.what, style="dim"), "-", "", "-", "-", Text("skipped", style="yellow"))
    table.caption = "★ recommended · default: PyTorch's defaults · ±: 95% interval of the median · start: time to first batch · mem: PSS of main process + workers · ×N: runs pooled"
    table.caption_justify = "left"
    return table


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
    cow = footprint.copy_on_write(configs)
    if cow:
        out.append(Text(f"• {cow}.", style="yellow"))
    out += [Text(f"• {s.what} skipped: {s.why}", style="yellow") for s in result.skipped]
    return out


def recommendation_panel(result: ScanResult) -> Panel:
    rec = result.recommendation
    if rec is None:
        over = footprint.over_limit(result.configs, memory_limit(result))
        if over and len(over) == len([c for c in result.configs if c.ok]):
            return Panel(f"Every measured config exceeds the {footprint.size_text(memory_limit(result))} memory limit "
                         "(--max-memory): raise it, or try fewer workers or a smaller batch size.",
                         title="No recommendation", border_style="red")
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
    saving = persistent_saving(result.configs, rec.config, result.spec.length)
    if saving is not None:
        lines.append(
            f"persistent_workers=True saves {saving:.3f} s per epoch of {result.spec.length} samples here "
            "(worker start-up at every epoch's end, measured with and without it).\n"
        )
    if len(rec.tied) > 1:
        lines.append("Tied within the noise: " + ", ".join(c.label() for c in rec.tied if c != rec.config) + "\n")
    lines.append(bound_text(result))
    lines.append(memory_text(result, pick))
    if result.state != "complete":
        lines.append(f"Partial scan ({result.state}): {len(result.trials)} trials finished.\n", style="yellow")
    opts = result.settings["options"]
    code = snippet(rec.config, opts["shuffle"] and not result.spec.iterable, opts["drop_last"], result.spec.has_collate_fn)
    return Panel(Group(lines, Syntax(code, "python", theme="ansi_dark", background_color="default")), title="Recommendation", border_style="green")


def print_report(console: Console, result: ScanResult) -> None:
    console.print(trial_table(result))
    for note in notes(result):
        console.print(note)
    diagnosis = diagnosis_table(result)
    if diagnosis is not None:
        console.print(diagnosis)
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


def memory_limit(result: ScanResult) -> int | None:
    return result.settings.get("options", {}).get("max_memory")


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
        mark = " ◀" if ceiling == bound.ceiling else ""
        table.add_row(Text(f"cap: {ceiling.name}{mark}", style="bold" if mark else ""),
                      f"{rate(ceiling.rate)}/s" if ceiling.rate != float("inf") else "-", "", f"{ceiling.stage}: {ceiling.detail}")
    table.caption = ("cap: samples/s that stage allows; ◀ the bound (the better of num_workers=0 and the lowest cap "
                     f"with up to {bound.max_workers} workers)")
    table.caption_justify = "left"
    return table


def bound_text(result: ScanResult) -> Text:
    """The panel's lines on the bound: how close the pick is, what limits it, what would move it."""
    bound = result.bound
    out = Text()
    if bound is None:
        return out
    fraction = bound_mod.pick_fraction(result)
    out.append(f"Bound: {rate(bound.rate)} samples/s at batch size {bound.batch_size}, set by ")
    out.append(bound.stage, style="bold")
    out.append(f" ({bound.ceiling.name}: {bound.ceiling.detail})")
    if fraction is not None:
        reach = "at the bound" if fraction >= 0.995 else f"{fraction:.0%} of it"
        out.append(f"; this config reaches {reach}.\n")
    else:
        out.append(f"; the recommended batch size differs, so it is not compared.\n")
    if bound.workers_needed and bound.stage == bound_mod.IO_WAIT:
        out.append(f"About {bound.workers_needed} workers would lift the workers' cap to the next one; "
                   f"this scan tried up to {bound.max_workers}.\n")
    if bound.advice:
        out.append(f"To move it: {bound.advice}.\n")
    return out


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
        if result.stages is not None and pick.config.pin_memory:
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
