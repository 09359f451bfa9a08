"""The recommendation panel: the pick, what it gains and why, what bounds it, its memory, and the
``DataLoader(...)`` snippet to paste."""

from __future__ import annotations

from dataclasses import replace

from rich.console import Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from loadtune.analysis import footprint
from loadtune.analysis.load import load_summary
from loadtune.analysis.noise import RunNoise, alone, long_run, run_noise
from loadtune.analysis.recommend import noise_floor_of, persistent_saving, snippet
from loadtune.model.results import ConfigResult, ScanResult
from loadtune.analysis.view import measured_range, too_wide
from loadtune.report.diagnosis import bound_text, short_bound_text
from loadtune.report.gain import gain_text, short_gain_text
from loadtune.report.table import ranks_of
from loadtune.report.text import load_sentence, rate


def recommendation_panel(result: ScanResult, short: bool = False) -> Panel:
    """The pick, what it gains and why, what bounds it, its memory, and the ``DataLoader(...)`` to paste;
    without a pick, why there is none. ``short``: the answer alone (``short_text``)."""
    if result.recommendation is None:
        return Panel(no_recommendation_text(result), title="No recommendation", border_style="red")
    code = Syntax(loader_code(result), "python", theme="ansi_dark", background_color="default", word_wrap=True)
    text = short_text(result) if short else recommendation_text(result)
    return Panel(Group(text, code), title="Recommendation", border_style="green")


def short_text(result: ScanResult) -> Text:
    """The answer in a few lines: the pick and its speed, the gain with its interval, why, the bound in
    one line; load that makes the figures less certain. The rest is ``recommendation_text``'s."""
    rec = result.recommendation
    pick = result.config_result(rec.config)
    noise = run_noise(result.configs)
    lines = Text()
    for piece in (pick_text(result, pick, noise, short=True), short_gain_text(result, rec, noise), f"Why: {rec.reason}.\n",
                  load_text(result, short=True), short_bound_text(result)):
        lines.append(piece)
    if result.state != "complete":
        lines.append(f"Partial scan ({result.state}): {len(result.trials)} trials finished.\n", style="yellow")
    return lines


def recommendation_text(result: ScanResult) -> Text:
    """The panel's text above the snippet: the pick, its gain and why, load, ranks, persistence, ties, the
    bound, memory. A function of its own so the terminal and the HTML page say the same."""
    rec = result.recommendation
    pick = result.config_result(rec.config)
    noise = run_noise(result.configs)
    lines = Text()
    for piece in (pick_text(result, pick, noise), gain_text(result, rec, noise), f"Why: {rec.reason}.\n",
                  load_text(result), ranks_text(result, pick), persistent_text(result, rec.config), tied_text(result),
                  bound_text(result), memory_text(result, pick)):
        lines.append(piece)
    if result.state != "complete":
        lines.append(f"Partial scan ({result.state}): {len(result.trials)} trials finished.\n", style="yellow")
    return lines


def no_recommendation_text(result: ScanResult) -> str:
    """Why nothing is recommended: every config over ``--max-memory``, or none measured."""
    if footprint.all_over_limit(result):
        return (f"Every measured config exceeds the {footprint.size_text(footprint.memory_limit(result))} memory limit "
                "(--max-memory): raise it, or try fewer workers or a smaller batch size.")
    return "No config could be measured: see the failures above."


def pick_text(result: ScanResult, pick: ConfigResult, noise: RunNoise, short: bool = False) -> Text:
    """The pick and its long-run rate, and what its ± covers; a rate known no better than 2× as the
    range its runs spanned (``view.too_wide``)."""
    est = long_run(pick, noise)
    runs = sum(1 for t in alone(pick).trials if t.ok)
    if too_wide(est.low, est.high, est.median):
        seen = measured_range(pick)
        return Text.assemble((result.label(pick.config), "bold"),
                             f"  {rate(seen[0])}–{rate(seen[1])} samples/s over its runs (a long run's 95% interval "
                             "spans more than 2×: no one figure)\n")
    if short:
        return Text.assemble((result.label(pick.config), "bold"), f"  {rate(est.median)} samples/s ±{est.rel_spread:.1%}\n")
    return Text.assemble(
        (result.label(pick.config), "bold"),
        f"  {rate(est.median)} samples/s ±{est.rel_spread:.1%} "
        + (f"(median of {est.n} blocks pooled from {runs} runs" if runs > 1 else f"(median of {est.n} blocks")
        + ("; ± for a long run)\n" if noise.learned else "; ± of the blocks)\n"))


def ranks_text(result: ScanResult, pick: ConfigResult) -> str:
    """With several ranks per trial: the workers per rank and on the node, the slowest rank and the sum."""
    n = ranks_of(result)
    if n <= 1 or not pick.aggregate_rate:
        return ""
    workers = pick.config.num_workers
    return (f"Per rank: num_workers={workers} on each of {n} ranks ({workers * n} "
            f"workers on the node); the slowest rank delivers {rate(pick.slowest_rank_rate)} samples/s, "
            f"all ranks together {rate(pick.aggregate_rate)} samples/s when none waits.\n")


def tied_text(result: ScanResult) -> str:
    """The configs the pick could not be told apart from."""
    rec = result.recommendation
    if len(rec.tied) <= 1:
        return ""
    return "Tied within the noise: " + ", ".join(result.label(c) for c in rec.tied if c != rec.config) + "\n"


def loader_code(result: ScanResult) -> str:
    """The ``DataLoader(...)`` call with the pick's settings and the scan's loader options."""
    opts, spec = result.settings.options, result.spec
    return snippet(result.recommendation.config, opts.shuffle and not spec.iterable, opts.drop_last, spec.has_collate_fn,
                   distributed=result.settings.distributed and not spec.iterable, loader=spec.loader,
                   loader_name=spec.loader_name, loader_args=tuple(spec.loader_args),
                   batch_size=not any(s.what == "batch_size" for s in result.skipped))


def load_text(result: ScanResult, short: bool = False) -> Text:
    """The figures taken under outside load (``analysis.load``): how much, and whose; ``short``: in two lines."""
    summary = load_summary(result.trials, noise_floor_of(result), result.remeasured)
    out = Text()
    if summary is None:
        return out
    if short:
        if summary.disturbed:
            out.append(f"Measured under load (outside processes kept up to {summary.peak_cores:.1f} of {summary.usable_cores:g} "
                       "cores busy): less certain than the intervals say; scan again on a quiet machine.\n", style="yellow")
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


def memory_text(result: ScanResult, pick: ConfigResult) -> Text:
    """The panel's memory line for the pick, and what --max-memory left out."""
    out = Text()
    if pick.memory is not None:
        out.append(", ".join(memory_parts(result, pick)) + ".\n")
    rec = result.recommendation
    if rec is not None and rec.excluded:
        over = [result.config_result(c) for c in rec.excluded]
        out.append(f"Excluded by --max-memory {footprint.size_text(rec.max_memory)}: " + ", ".join(
            f"{c.config.label()} ({footprint.size_text(c.memory.peak_bytes)})" for c in over if c and c.memory) + ".\n",
            style="magenta")
    return out


def memory_parts(result: ScanResult, pick: ConfigResult) -> list[str]:
    """The pick's peak and how it was read, its growth, /dev/shm, and pinned memory where no GPU reading counted it."""
    mem = pick.memory
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
    return parts
