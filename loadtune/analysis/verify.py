"""The decisions of ``loadtune doctor --verify``: pure functions from what the GPU child measured to a
``Check`` that passed or failed, with one line of figures for people. What each check exercises,
and why these thresholds, is in docs/cli.md (``loadtune doctor --verify``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from loadtune.model.verify import Check

IDLE_TOLERANCE = 0.10  # the event-timed idle share may differ from the wall clock's by 10 points
HIDDEN_TARGET = 0.90  # the stream strategy hides at least 90% of a copy as long as the step
CLOCKS_AGREE = 0.15  # a copy rate timed by CUDA events and by the wall clock differ by at most 15%
ABOVE_LINK = 1.05  # a pinned rate past the link's theoretical one: the copy does not use that link

COPY, PREFETCH, NON_BLOCKING, SYNC, IDLE, OVERLAP, RANKS = (
    "copy rates", "prefetch values", "non_blocking values", "no hidden sync", "idle share", "stream overlap", "ranks")
CHECK_NAMES = (COPY, PREFETCH, NON_BLOCKING, SYNC, IDLE, OVERLAP, RANKS)  # in the order they run


def finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) and v > 0 for v in values)


def unfinished(name: str, why: str) -> Check:
    """A check that never produced its figures (the GPU process died or ran out of time): a failure."""
    return Check(name, False, f"did not finish: {why}")


# --- copy rates ------------------------------------------------------------------------------------


def copy_check(pinned: float | None, pageable: float | None, wall: float | None, link_now: float | None,
               link_max: float | None, link: str | None, size_mib: float) -> Check:
    """Host-to-device GB/s from pinned and pageable memory (CUDA events), the pinned one cross-timed
    on the wall clock, beside the link's theoretical rate. Passes when the rates are real numbers and
    the two clocks agree: a rate only the events see is a timing fault, not a fast link."""
    figures = {"size_mib": size_mib, "pinned_gbps": pinned, "pageable_gbps": pageable, "pinned_wall_gbps": wall,
               "link": link, "link_now_gbps": link_now, "link_max_gbps": link_max}
    if not finite(pinned, pageable, wall):
        return Check(COPY, False, f"no usable copy rate (pinned {pinned}, pageable {pageable}, wall clock {wall} GB/s)", figures)
    gap = abs(pinned - wall) / pinned
    figures["clock_gap"] = round(gap, 4)
    link_text = f"; link {link}: {link_now:.1f} GB/s now, {link_max:.1f} at most (theoretical)" if link and link_now and link_max else \
        "; link unknown (NVML unavailable)"
    summary = (f"host→device {size_mib:g} MiB: pinned {pinned:.1f} GB/s, pageable {pageable:.1f} GB/s (CUDA events); "
               f"pinned on the wall clock {wall:.1f} GB/s ({gap:.0%} apart){link_text}")
    notes = []
    if gap > CLOCKS_AGREE:
        notes.append(f"CUDA events and the wall clock disagree by more than {CLOCKS_AGREE:.0%}: copy rates and GPU idle "
                     "times loadtune reports cannot be trusted on this machine")
    if link_max and pinned > ABOVE_LINK * link_max:
        notes.append("pinned copies ran faster than the PCIe link's theoretical rate: this GPU reaches the host through "
                     "another link (NVLink-C2C, for example), so compare copy rates with this measurement, not the link")
    elif link_now and pinned < 0.5 * link_now:
        notes.append(f"pinned copies reach only {pinned / link_now:.0%} of the link's current rate (another device on the "
                     "link, a CPU far from the GPU, a virtualised link?)")
    if pinned < pageable:
        notes.append("pinned copies were no faster than pageable ones: pin_memory=True cannot speed the copy here")
    return Check(COPY, gap <= CLOCKS_AGREE, summary, figures, "; ".join(notes) or None)


# --- values through the copies --------------------------------------------------------------------


def corrupted(seen: Sequence[Sequence[int]], first: int = 1) -> int:
    """Batches whose (min, max) on the device is not their value: batch i holds ``first + i`` throughout."""
    return sum(1 for i, (low, high) in enumerate(seen) if low != first + i or high != first + i)


def values_check(name: str, runs: Sequence[tuple[str, int, int]], controls: Sequence[tuple[str, int, int]]) -> Check:
    """``runs``: (how, batches, corrupted) through loadtune's own path, which must keep every value.
    ``controls``: the same load without the guard the path relies on; corruption there shows the
    check can see the fault on this GPU, and none means it could not have."""
    figures = {"runs": [list(r) for r in runs], "controls": [list(c) for c in controls]}
    passed = bool(runs) and all(batches > 0 and bad == 0 for _, batches, bad in runs)
    said = "; ".join(f"{how}: {batches - bad}/{batches} intact" for how, batches, bad in runs)
    seen = ", ".join(f"{how}: {bad}/{batches} corrupted" for how, batches, bad in controls)
    summary = said + (f" (control{'s' if len(controls) > 1 else ''} {seen})" if controls else "")
    blind = [how for how, _, bad in controls if bad == 0]
    note = (f"no control corrupted a batch ({', '.join(blind)}): on this GPU the check could not have seen that fault"
            if blind else None)
    if not passed:
        note = ("values changed on their way to the GPU: the step would train on wrong data; please report it with "
                "the JSON (--json)") + (f"; {note}" if note else "")
    return Check(name, passed, summary, figures, note)


# --- synchronisation -------------------------------------------------------------------------------


def sync_check(loops: dict[str, tuple[int, str | None]]) -> Check:
    """``loops``: strategy -> (batches consumed, the synchronising call torch's sync debug mode raised
    on, or None). The timed loop of a trial must never wait for the device."""
    figures = {"loops": {k: {"batches": n, "raised": why} for k, (n, why) in loops.items()}}
    raised = {k: why for k, (_, why) in loops.items() if why}
    if raised:
        name, why = next(iter(raised.items()))
        return Check(SYNC, False, f"{name}: a synchronising call in the timed loop: {why}", figures,
                     "a hidden synchronisation serialises the copy and the step, and the figures of that strategy "
                     "understate it; please report it with the JSON (--json)")
    said = ", ".join(f"{k} ({n} batches)" for k, (n, _) in loops.items())
    return Check(SYNC, bool(loops), f"no synchronising call in the timed loop of {said} (torch's sync debug mode: error)",
                 figures, "sync copies synchronise by design and are not checked; torch's sync debug mode sees most, "
                          "not all, synchronising calls")


# --- the GPU's idle share --------------------------------------------------------------------------


def wall_idle_share(batches: int, step_s: float, seconds: float) -> float:
    """Share of ``seconds`` the GPU was not running the step, from the wall clock alone: what
    ``batches`` steps of ``step_s`` each leave over."""
    return max(0.0, 1.0 - batches * step_s / seconds) if seconds > 0 else 0.0


def idle_agrees(event_share: float, wall_share: float, tolerance: float = IDLE_TOLERANCE) -> bool:
    return abs(event_share - wall_share) <= tolerance


def idle_check(points: Sequence[tuple[str, float, float]], step_ms: float) -> Check:
    """``points``: (the loader's pace, idle share by CUDA events, idle share by the wall clock). The
    events' figure is loadtune's "wait %" on a GPU; it must agree with the wall clock's."""
    figures = {"step_ms": step_ms, "points": [{"loader": how, "events": round(e, 4), "wall": round(w, 4)} for how, e, w in points]}
    passed = bool(points) and all(idle_agrees(e, w) for _, e, w in points)
    said = "; ".join(f"{how}: {e:.1%} by CUDA events, {w:.1%} by the wall clock" for how, e, w in points)
    note = None if passed else (f"the GPU's idle share by CUDA events is more than {IDLE_TOLERANCE * 100:.0f} points from the wall "
                                "clock's: loadtune's wait % on this GPU cannot be trusted; please report it with the JSON (--json)")
    return Check(IDLE, passed, f"GPU idle share with a {step_ms:.3g} ms step: {said}", figures, note)


# --- overlap -----------------------------------------------------------------------------------------


def hidden_fraction(copy_s: float, step_s: float, both_s: float) -> float:
    """Share of the time that copy and step could overlap (the shorter of the two) that they did:
    1 when both together take as long as the longer alone, 0 when they take their sum."""
    hideable = min(copy_s, step_s)
    return (copy_s + step_s - both_s) / hideable if hideable > 0 else 0.0


def overlap_check(copy_s: float, step_s: float, stream_s: float, non_blocking_s: float, batches: int) -> Check:
    """Seconds per batch of the copy alone, the step alone, both with the ``stream`` strategy and
    both with ``non_blocking`` (the copy on the step's own stream: nothing to hide it under)."""
    hidden = hidden_fraction(copy_s, step_s, stream_s)
    plain = hidden_fraction(copy_s, step_s, non_blocking_s)
    ceiling = (batches - 1) / batches if batches else 0.0
    figures = {"copy_ms": copy_s * 1e3, "step_ms": step_s * 1e3, "stream_ms": stream_s * 1e3,
               "non_blocking_ms": non_blocking_s * 1e3, "hidden": round(hidden, 4), "non_blocking_hidden": round(plain, 4),
               "batches": batches, "ceiling": round(ceiling, 4)}
    summary = (f"stream hides {hidden:.0%} of a {copy_s * 1e3:.2f} ms copy under a {step_s * 1e3:.2f} ms step "
               f"(target {HIDDEN_TARGET:.0%}, ceiling {ceiling:.0%} over {batches} batches); non_blocking hides {max(0.0, plain):.0%}")
    note = None if hidden >= HIDDEN_TARGET else (
        "the side stream's copy did not run under the step: the stream strategy cannot beat non_blocking on this "
        "GPU (a busy copy engine, or a driver that serialises streams?)")
    return Check(OVERLAP, hidden >= HIDDEN_TARGET, summary, figures, note)


# --- ranks -----------------------------------------------------------------------------------------


def ranks_check(gpus: int, measured: Sequence[int], error: str | None, parent_cuda: bool, wall_s: float) -> Check:
    """``measured``: the timed blocks of each rank (one per visible GPU; a single GPU runs one trial
    child, as a scan does). Every rank must start and measure, and the CLI's process must never
    have initialised CUDA (its trial children could not use it after a fork)."""
    figures = {"gpus": gpus, "ranks": len(measured), "blocks": list(measured), "error": error,
               "parent_cuda_initialised": parent_cuda, "wall_s": round(wall_s, 2)}
    what = f"{gpus} ranks, one per GPU" if gpus > 1 else "one GPU: the trial child on cuda:0"
    passed = error is None and len(measured) == max(gpus, 1) and all(n > 0 for n in measured) and not parent_cuda
    if passed:
        return Check(RANKS, True, f"{what}: every one started and measured ({wall_s:.1f} s); this process never initialised CUDA",
                     figures)
    why = error or ("this process initialised CUDA" if parent_cuda else f"{sum(1 for n in measured if n > 0)} of {max(gpus, 1)} measured")
    return Check(RANKS, False, f"{what}: {why}", figures)
