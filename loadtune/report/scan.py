"""Rendering a scan for people: the ranked table, the diagnosis of where the time goes, the
recommendation panel with its ``DataLoader(...)`` snippet, and the per-node summary of multi-node scans."""

from __future__ import annotations

from dataclasses import replace

from rich.console import Console, Group
from rich.measure import Measurement
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from loadtune.analysis.copyrate import copy_notes
from loadtune.analysis import bound as bound_mod
from loadtune.analysis import footprint
from loadtune.analysis.load import load_summary
from loadtune.analysis.recommend import best_with_workers, noise_floor_of, persistent_saving, snippet
from loadtune.model.results import ConfigResult, ScanResult
from loadtune.model.stages import StageCost
from loadtune.analysis.noise import (NOTHING_LEARNED, RunNoise, alone, gain, long_run, run_noise, spans_runs,
                                     speeds_apart)
from loadtune.analysis.race import relative_to
from loadtune.analysis.view import Row, rows as view_rows
from loadtune.report.text import (BAR_WIDTH, STATUS_STYLES, bar, gbps, load_sentence, ms, rate, short_bytes, spread_text,
                                  status_cell)
from loadtune.analysis.bound import scan_bound
from loadtune.engine.scan import NO_REFERENCE


# Columns a narrow terminal can lose, first dropped first; the rank, config, rate and status stay.
SECONDARY_COLUMNS = ("bar", "start", "mem", "gbps", "wait")
COLUMN_ORDER = ("race", "bar", "start", "mem", "wait", "gbps")  # race: when one ran; wait and GB/s: when a step ran / batches went to a GPU
COLUMN_HEADERS = {"race": "vs pick", "start": "start", "mem": "mem", "wait": "wait", "gbps": "GB/s"}
RACE_CAPTION = ("vs pick: throughput relative to the pick, measured side by side in the race (loaders alive together, "
                "short blocks taking turns), with its 95% interval over the turn pairs; samples/s come from the runs "
                "timed alone")
CAPTION_PARTS = {
    "star": "★ recommended",
    "default": "default: PyTorch's defaults",
    "spread": "±: 95% interval for a long run, from the run-to-run spread of the configs measured more than once",
    "start": "start: time to first batch",
    "mem": "mem: PSS of main process + workers",
    "runs": "×N: runs measured, a race's legs included",
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
    top = max((alone(c).estimate.median for c in result.configs if c.ok), default=0.0)  # bars relative to the whole scan
    table = Table(title="DataLoader configs, fastest first", title_justify="left", header_style="bold", pad_edge=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("config", ratio=1, min_width=12)
    table.add_column("samples/s", justify="right", no_wrap=True)
    relative = relative_to(result.trials, rec.config) if rec else {}
    optional = {"race": bool(relative), "wait": has_consumer(result), "gbps": any(c.h2d_gbps is not None for c in result.configs)}
    shown = [c for c in COLUMN_ORDER if c not in dropped and optional.get(c, True)]
    for name in shown:
        if name == "bar":
            table.add_column("", no_wrap=True, width=BAR_WIDTH)  # relative bar
        else:
            table.add_column(COLUMN_HEADERS[name], justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    noise = run_noise(result.configs)
    varying = result.varying_batches
    for row in rows:
        cells = row_cells(row, rec, top, noise, result.settings.current, varying.label if varying else None)
        cells["race"] = race_cell(row, rec, relative)
        table.add_row(*[cells[name] for name in ("rank", "config", "rate", *shown, "status")])
    spanning = [c.config.label() for c in result.configs if spans_runs(c)]
    parts = [spread_caption(noise, spanning) if key == "spread" else text
             for key, text in CAPTION_PARTS.items() if key not in dropped]
    if result.settings.current is not None:
        parts.insert(2, "current: your settings (--current)")
    if varying is not None:
        parts.append(f"bs{varying.label}: the loader's own batches, of varying size: {varying.mean:.1f} samples on average "
                     f"over the batches timed ({varying.smallest}–{varying.largest})")
    if "race" in shown:
        parts.insert(3, RACE_CAPTION)
    if "wait" in shown:
        parts.append("wait: share of the time the step waited for data" + (
            " (the GPU's compute stream idle between steps)" if result.settings.device.startswith("cuda") else ""))
    if "gbps" in shown:
        peak = f", pinned peak {result.h2d_peak_gbps:.1f}" if result.h2d_peak_gbps else ""
        parts.append(f"GB/s: batches copied to the GPU per second{peak}")
    table.caption = " · ".join(parts)
    table.caption_justify = "left"
    return table


def race_cell(row: Row, rec, relative: dict) -> str:
    """``0.85× (0.83–0.87)`` for a config raced beside the pick; ``pick`` for the pick; empty otherwise."""
    if row.config is None or rec is None:
        return ""
    if row.config.config == rec.config:
        return "pick" if relative else ""
    r = relative.get(row.config.config)
    return f"{r.value:.2f}× ({r.low:.2f}–{r.high:.2f})" if r else ""


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


def notes(result: ScanResult) -> list[Text]:
    """One paragraph per failed trial and per skipped knob: the full reason the table has no room for."""
    configs = result.configs
    failed = [c for c in configs if not c.ok and c.error]
    same = {(c.error.kind, c.error.exception_type, c.error.index) for c in failed}
    if len(failed) > 1 and len(failed) == len(configs) and len(same) == 1:  # say it once, plainly
        out = [Text(f"• Every trial failed the same way: {failed[0].error.message}", style="red")]
    else:
        out = [Text(f"• {result.label(c.config)} failed: {c.error.message}", style="red") for c in failed]
    for t in configs:
        out += [Text(f"• {result.label(t.config)}: {w}", style="yellow") for w in t.warnings]
    out += [Text(f"• {note}", style="cyan") for note in result.notes]
    if result.stages is not None:
        out += [Text(f"• stage profile: {note}", style="cyan") for note in result.stages.notes]
    out += [Text(f"• {note}", style="cyan") for note in step_notes(result) + copy_notes(result) + gpu_notes(result)]
    for memory_note in (footprint.copy_on_write(configs), footprint.fresh_pages(configs)):
        if memory_note:
            out.append(Text(f"• {memory_note}.", style="yellow"))
    out += [Text(f"• {s.what} skipped: {s.why}", style="yellow") for s in result.skipped]
    return out


def has_consumer(result: ScanResult) -> bool:
    """A step consumed the batches (the spec's or ``--step-ms``'s): only then is waiting for data idle time."""
    return bool(result.spec.has_step or result.settings.step)


def step_notes(result: ScanResult) -> list[str]:
    step = result.settings.step
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
        estimated = " (estimate: batch bytes × batches in flight)" if usage.pinned_estimated else ""
        parts.append(f"pinned host memory {short_bytes(usage.pinned_bytes)}{estimated}")
    return [f"{pick.config.label()}: " + "; ".join(parts)] if parts else []


def recommendation_panel(result: ScanResult) -> Panel:
    rec = result.recommendation
    if rec is None:
        if footprint.all_over_limit(result):
            return Panel(f"Every measured config exceeds the {footprint.size_text(footprint.memory_limit(result))} memory limit "
                         "(--max-memory): raise it, or try fewer workers or a smaller batch size.",
                         title="No recommendation", border_style="red")
        return Panel("No config could be measured: see the failures above.", title="No recommendation", border_style="red")
    pick = result.config_result(rec.config)
    noise = run_noise(result.configs)
    est = long_run(pick, noise)
    lines = Text()
    lines.append(result.label(rec.config), style="bold")
    runs = sum(1 for t in alone(pick).trials if t.ok)
    lines.append(f"  {rate(est.median)} samples/s ±{est.rel_spread:.1%} "
                 + (f"(median of {est.n} blocks pooled from {runs} runs" if runs > 1 else f"(median of {est.n} blocks")
                 + ("; ± for a long run)\n" if noise.learned else "; ± of the blocks)\n"))
    lines.append(gain_text(result, rec, pick, noise))
    lines.append(f"Why: {rec.reason}.\n")
    lines.append(load_text(result))
    n = ranks_of(result)
    if n > 1 and pick.aggregate_rate:
        lines.append(f"Per rank: num_workers={rec.config.num_workers} on each of {n} ranks ({rec.config.num_workers * n} "
                     f"workers on the node); the slowest rank delivers {rate(pick.slowest_rank_rate)} samples/s, "
                     f"all ranks together {rate(pick.aggregate_rate)} samples/s when none waits.\n")
    lines.append(persistent_text(result, rec.config))
    if len(rec.tied) > 1:
        lines.append("Tied within the noise: " + ", ".join(result.label(c) for c in rec.tied if c != rec.config) + "\n")
    lines.append(bound_text(result))
    lines.append(memory_text(result, pick))
    if result.state != "complete":
        lines.append(f"Partial scan ({result.state}): {len(result.trials)} trials finished.\n", style="yellow")
    opts = result.settings.options
    spec = result.spec
    code = snippet(rec.config, opts.shuffle and not spec.iterable, opts.drop_last, spec.has_collate_fn,
                   distributed=result.settings.distributed and not spec.iterable, loader=spec.loader,
                   loader_name=spec.loader_name, loader_args=tuple(spec.loader_args),
                   batch_size=not any(s.what == "batch_size" for s in result.skipped))
    return Panel(Group(lines, Syntax(code, "python", theme="ansi_dark", background_color="default")), title="Recommendation", border_style="green")


def gain_text(result: ScanResult, rec, pick: ConfigResult, noise: RunNoise) -> str:
    """The panel's line on what the pick gains: over the user's own settings (``--current``), else
    over PyTorch's defaults, or why the defaults themselves win."""
    if result.settings.current is not None:
        return current_text(result, rec, noise)
    if rec.speedup is not None and rec.baseline != rec.config:
        defaults = result.config_result(rec.baseline)
        base = alone(defaults).estimate
        return (f"{rec.speedup:.2f}× PyTorch's defaults (num_workers=0, pin_memory=False: {rate(base.median)} samples/s "
                f"at batch size {rec.baseline.batch_size}), {speedup_how(rec)}, 95% interval {rec.speedup_low:.2f}×–"
                + (f"{rec.speedup_high:.2f}×" if rec.speedup_high is not None else "unbounded")
                + two_speeds(defaults, "PyTorch's defaults", noise) + "\n")
    if rec.baseline != rec.config:
        return "PyTorch's defaults were not measured at this batch size.\n"
    raced = {c: r for c, r in relative_to(result.trials, rec.config).items() if c.num_workers}
    if raced:  # the fastest config with workers that raced beside the defaults: their ratio side by side
        runner, r = max(raced.items(), key=lambda item: item[1].value)
        low, value, high = 1 / r.high, 1 / r.value, 1 / r.low
        label, side = result.label(runner), f", side by side in the race ({r.pairs} turn pairs)"
    else:
        runner_up = best_with_workers(result.configs)
        times = gain(pick, runner_up, noise) if runner_up is not None else None
        if times is None:
            return "PyTorch's defaults (num_workers=0) are the only config measured.\n"
        low, value, high = times.ratio.low, times.ratio.value, times.ratio.high
        label = result.label(runner_up.config)
        side = f", side by side in {times.rounds} round{'s' if times.rounds != 1 else ''}" if times.rounds else ""
    return (f"PyTorch's defaults (num_workers=0) win: {value:.2f}× the best config with workers "
            f"({label}{side}, 95% interval {low:.2f}×–{high:.2f}×); "
            "handing samples between processes costs more than producing them here.\n")


def load_text(result: ScanResult) -> Text:
    """The figures taken under outside load (``analysis.load``): how much, and whose."""
    summary = load_summary(result.trials, noise_floor_of(result), result.remeasured)
    out = Text()
    if summary is None:
        return out
    if summary.disturbed:
        rec = result.recommendation
        base = "your current settings'" if result.settings.current else "PyTorch's defaults'"
        whose = ["the pick's"] if rec.config in summary.configs else []
        if rec.baseline not in (None, rec.config) and rec.baseline in summary.configs:
            whose.append(base)
        among = f", {' and '.join(whose)} among them" if whose else ""
        out.append(f"Measured under load: {load_sentence(summary)}{among}. Those figures, and any gain built on them, "
                   "are less certain than their intervals say; scan again on a quiet machine to trust them.\n", style="yellow")
    if summary.remeasured:
        runs = f"{summary.remeasured} run{'s' if summary.remeasured != 1 else ''}"
        out.append(f"{runs} taken under outside load measured again; the quieter run of each is kept.\n", style="dim")
    return out


def speedup_how(rec) -> str:
    """How the gain was measured: side by side in closing rounds, or from trials taken apart."""
    if rec.speedup_pairs:
        return f"measured side by side in the race ({rec.speedup_pairs} turn pairs)"
    return (f"measured side by side in {rec.speedup_rounds} round{'s' if rec.speedup_rounds != 1 else ''}"
            if rec.speedup_rounds else "from figures measured at different times")


def current_text(result: ScanResult, rec, noise: RunNoise) -> str:
    """The panel's line against the user's own settings (``--current``): the gain over them, measured
    as the gain over PyTorch's defaults is, or "keep what you have"."""
    mine = next((c for c in result.configs if c.config.key == result.settings.current), None)
    if mine is None or not mine.ok:
        return "Your current settings could not be measured (see their row): no gain over them is stated.\n"
    label = mine.config.label()
    if rec.config == mine.config:
        return (f"Keep what you have: your current settings ({label}) are as fast as any config measured, "
                "within the noise.\n")
    if rec.speedup is None:
        return f"Your current settings: {label}.\n"
    how = speedup_how(rec)
    return (f"{rec.speedup:.2f}× your current settings ({label}: {rate(alone(mine).estimate.median)} samples/s), {how}, "
            f"95% interval {rec.speedup_low:.2f}×–" + (f"{rec.speedup_high:.2f}×" if rec.speedup_high is not None else "unbounded")
            + two_speeds(mine, "Your current settings", noise) + "\n")


def two_speeds(config: ConfigResult, who: str, noise: RunNoise) -> str:
    """A sentence where the config the gain is over ran at separate speeds by its allocator's state
    (``noise.speeds_apart``): the gain is the race's, at the speed its legs had."""
    apart = speeds_apart(config, noise)
    if apart is None:
        return ""
    return (f". {who} ran at {rate(apart[0])}–{rate(apart[1])} samples/s in this scan's runs: their speed rests on "
            "their allocator's state (see the notes), and so does the gain over them")


def print_report(console: Console, result: ScanResult, rows: list[Row] | None = None) -> None:
    """The table (``rows``: a selection from ``view.select``; default all), notes, recommendation."""
    if result.settings.distributed:
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


def reference_line(result: ScanResult) -> str | None:
    """Whether the reference ``check`` compares with was recorded (None without a recommendation, or
    when none was asked for: nothing to say)."""
    ref = result.reference
    if result.recommendation is None or (ref is None and not result.settings.options.reference_rounds):
        return None
    if ref is not None:
        return f"Reference for check: {ref.measured} paired rounds of {ref.config.label()} and its shaped calibration"
    why = [n for n in result.notes if n.startswith(NO_REFERENCE)]
    return f"{why[-1][0].upper()}{why[-1][1:]}" if why else None


def print_recommendation(console: Console, result: ScanResult) -> None:
    """The notes (failures, warnings, what was skipped) and the recommendation with its snippet:
    all that ``--quiet`` prints."""
    for note in notes(result):
        console.print(note)
    console.print(recommendation_panel(result))


def cost_row(name: str, cost: StageCost | None, per_batch: float | None, note: str = "") -> list | None:
    if cost is None or per_batch is None:
        return None
    spread = f"±{cost.rel_spread:.0%}" if cost.rel_spread < 0.995 else "noisy"
    return [name, ms(per_batch), spread, note]


def diagnosis_table(result: ScanResult) -> Table | None:
    """Where the time goes: each stage's cost per batch (measured alone), then the ceilings they set."""
    st, bound = result.stages, scan_bound(result)
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
    bound = scan_bound(result)
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
    """How the pick's long-run rate sits against the bound and its interval, as the end of a sentence."""
    where = bound_mod.pick_against_bound(result)
    fraction, interval = where.fraction, where.interval
    if where.verdict == "not compared":
        return "; the recommended batch size differs, so it is not compared."
    if where.verdict == "unknown":
        return "."
    if where.verdict == "over":
        return (f"; this config measured {fraction:.0%} of it, so the profile overstated a stage's cost and the bound "
                "is not a ceiling here.")
    if where.verdict == "within spread":
        return f"; this config is at the bound within its spread ({fraction:.0%} of it)."
    if where.verdict == "at":
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
            parts.append(f"grew {footprint.size_text(grown.bytes)} during the trial" if grown.significant
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
