"""The notes under a scan's table: failures, warnings, skipped knobs, and what the table has no column
for (the synthetic step, copies to the GPU, the pick's GPU figures, memory effects)."""

from __future__ import annotations

from rich.text import Text

from loadtune.analysis.storage import storage_notes
from loadtune.analysis import footprint
from loadtune.analysis.copyrate import copy_notes
from loadtune.analysis.race import REGIME_GAP, allocator_moves
from loadtune.model.results import ScanResult
from loadtune.report.text import short_bytes


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
    out += [Text(f"• page cache: {note}.", style="cyan") for note in storage_notes(result)]
    for memory_note in (footprint.copy_on_write(configs), *allocator_notes(result)):
        if memory_note:
            out.append(Text(f"• {memory_note}.", style="yellow"))
    out += [Text(f"• {s.what} skipped: {s.why}", style="yellow") for s in result.skipped]
    return out


def allocator_notes(result: ScanResult) -> list[str]:
    """The note on the loaders without workers that take their batches' pages fresh
    (``footprint.fresh_pages``: why, and the heap setting), where keeping the heap moves their speed or
    was not measured (``race.allocator_moves``); where it was measured and does not, one line says so
    rather than advise a setting the scan found not worth it (the README's images: ``w0 heap`` 240
    samples/s beside ``w0``'s 318)."""
    by = {c.config: c for c in result.configs}
    takers = [c for _, c in footprint.fresh_page_takers(result.configs)]
    moved = [c for c in takers if allocator_moves(result.trials, by, c)]
    out = [note] if (note := footprint.fresh_pages(moved)) else []
    out += [f"{footprint.fresh_text(c)}, yet the same loader with the heap kept ran less than {REGIME_GAP:.0%} faster here: "
            "the heap setting is not worth setting for it" for c in takers if c not in moved]
    return out


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
