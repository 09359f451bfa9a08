"""The notes under a scan's table: failures, warnings, skipped knobs, and what the table has no column
for (the synthetic step, copies to the GPU, the pick's GPU figures, memory effects)."""

from __future__ import annotations

from rich.text import Text

from loadtune.analysis.storage import pick_readahead, storage_notes
from loadtune.analysis import footprint
from loadtune.analysis.copyrate import copy_notes
from loadtune.analysis.race import REGIME_GAP, allocator_moves
from loadtune.analysis.view import Row
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


def short_notes(result: ScanResult, rows: list[Row], width: int = 80) -> tuple[list[Text], int]:
    """The short report's notes: those that change what the user does (failures, warnings, the page
    cache's state, memory, figures too wide to act on among ``rows``, what was skipped), each once,
    listing the configs it concerns, in at most two lines at ``width``; and how many others
    ``--details`` holds."""
    configs = result.configs
    failed = [c for c in configs if not c.ok and c.error]
    if len(failed) > 1 and len(failed) == len(configs) and len({(c.error.kind, c.error.exception_type, c.error.index)
                                                                for c in failed}) == 1:
        out = [Text(f"• Every trial failed the same way: {failed[0].error.message}", style="red")]
    else:
        out = [Text(f"• {labels} failed: {message}", style="red")
               for message, labels in grouped(((c.error.message, c.config) for c in failed), result.label).items()]
    out += [Text(f"• {labels}: {warning}", style="yellow")
            for warning, labels in grouped(((w, t.config) for t in configs for w in t.warnings), result.label).items()]
    out += [Text(f"• {note}", style="cyan") for note in step_notes(result)]  # what consumed the batches
    cache = storage_notes(result)
    out += [Text(f"• page cache: {note}.", style="cyan") for note in cache[:1]]
    out += [Text(f"• {ahead}.", style="yellow")] if (ahead := pick_readahead(result, short=True)) else []
    out += [Text(f"• {n}.", style="yellow") for n in (footprint.copy_on_write(configs, short=True),
                                                       *allocator_notes(result, short=True)) if n]
    wide = [r for r in rows if r.speed is not None and r.speed.wide and r.speed.ratio is None]  # (a raced row's: the pick's)
    if wide:
        out.append(Text(f"• {', '.join(result.label(r.config.config) for r in wide)}: a long run's 95% interval spans over 2× "
                        "(runs land far apart here): a quieter machine or a longer scan (--budget) narrows it.", style="yellow"))
    out += [Text(f"• {s.what} skipped: {first_clause(s.why)}", style="dim") for s in result.skipped]
    full_ahead = pick_readahead(result)  # shown above in its short form
    others = (result.notes + (result.stages.notes if result.stages is not None else [])
              + copy_notes(result) + gpu_notes(result) + [n for n in cache[1:] if n != full_ahead])
    return [two_lines(note, width) for note in out], len(others)


def grouped(pairs, label=lambda config: config.label()) -> dict[str, str]:
    """Texts said of several configs, once each: text -> the configs' labels (``label``: the result's, which
    shows a varying batch size as it does in the table), comma-separated."""
    out: dict[str, list[str]] = {}
    for text, config in pairs:
        out.setdefault(first_clause(text, ". "), []).append(label(config))
    return {text: ", ".join(labels) for text, labels in out.items()}


def first_clause(text: str, stop: str = ": ") -> str:
    """Up to the first ``stop`` (the rest is the details'), the whole text where there is none."""
    head, sep, _ = text.partition(stop)
    return head if sep and head else text


def two_lines(note: Text, width: int) -> Text:
    """A note cut to two lines at ``width`` (at a word, with "…"); the whole is behind ``--details``."""
    limit = 2 * width - 4
    if len(note.plain) <= limit:
        return note
    cut = note.plain[:limit].rsplit(" ", 1)[0].rstrip(",;:")
    return Text(cut + " …", style=note.style)


def allocator_notes(result: ScanResult, short: bool = False) -> list[str]:
    """The note on the loaders without workers that take their batches' pages fresh
    (``footprint.fresh_pages``: why, and the heap setting), where keeping the heap moves their speed or
    was not measured (``race.allocator_moves``); where it was measured and does not, one line says so
    rather than advise a setting the scan found not worth it (the README's images: ``w0 heap`` 240
    samples/s beside ``w0``'s 318)."""
    by = {c.config: c for c in result.configs}
    takers = [c for _, c in footprint.fresh_page_takers(result.configs)]
    moved = [c for c in takers if allocator_moves(result.trials, by, c)]
    out = [note] if (note := footprint.fresh_pages(moved, short)) else []
    if short:
        return out + [f"{c.config.label()}: keeping the heap (the MALLOC_ variables) ran less than {REGIME_GAP:.0%} faster "
                      "here: not worth setting" for c in takers if c not in moved]
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
