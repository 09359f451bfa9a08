"""How steady the machine's CPU pace is, from the stamps of fixed work: a pure function of them.

Every usable core runs the same fixed computation and stamps each unit it finishes; the stamps are
counted in windows of a tenth of a second, and adjacent windows are paired. On a machine of steady
pace two neighbouring windows hold the same work; the spread of their log ratio is how far the pace
moves from one to the next. On a shared VM the host moves it without telling the guest (steal time
read 0-1% while a 2-core VM's pace moved ±9% between tenths of a second and ±19-23% between
seconds: benchmarks/experiments/machine-pace/), and a CPU-bound loader's race turns spread as much:
only more turn pairs narrow their ratio there.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from loadtune.model.results import Recommendation

STEADY = 0.03  # adjacent tenths of a second this close (the spread of their log ratio): a steady pace


@dataclass(frozen=True)
class CpuPace:
    """The spread of the work done in adjacent windows (the standard deviation of their log ratio),
    from ``pairs`` pairs of ``window_s`` windows while ``processes`` processes ran fixed work."""

    spread: float
    pairs: int
    window_s: float
    processes: int

    @property
    def steady(self) -> bool:
        return self.spread <= STEADY


def window_counts(stamps: list[float], window_s: float, start: float, end: float) -> list[int]:
    """How many stamps fall in each whole window of ``window_s`` from ``start`` up to ``end``."""
    windows = max(0, int((end - start) / window_s))
    return [int(n) for n in window_sums(stamps, [1] * len(stamps), window_s, start, windows)]


def window_sums(stamps: list[float], weights: list[float], window_s: float, start: float, windows: int) -> list[float]:
    """The weights of the stamps in each of ``windows`` windows of ``window_s`` from ``start`` (a weight
    per stamp: the bytes a read returned, say)."""
    sums = [0.0] * windows
    for s, w in zip(stamps, weights):
        i = int((s - start) / window_s)
        if s >= start and i < windows:
            sums[i] += w
    return sums


def pace_of(stamps: list[float], window_s: float, start: float, end: float, processes: int) -> CpuPace | None:
    """The pace's spread from the units' stamps between ``start`` and ``end``: windows paired in turn
    (the first with the second, the third with the fourth, ...); None with fewer than two pairs or an
    empty window (the work's unit is too long for the window)."""
    counts = window_counts(stamps, window_s, start, end)
    pairs = [(a, b) for a, b in zip(counts[0::2], counts[1::2])]
    if len(pairs) < 2 or any(not a or not b for a, b in pairs):
        return None
    return CpuPace(statistics.pstdev(math.log(a / b) for a, b in pairs), len(pairs), window_s, processes)


def gain_halfwidth(rec: Recommendation) -> float | None:
    """The relative half-width of the headline gain's interval where the race measured it side by side
    (``speedup_pairs``); None for a gain from elsewhere, a range, or none."""
    if not rec.speedup_pairs or rec.speedup is None or rec.speedup_low is None or rec.speedup_high is None:
        return None
    return max(rec.speedup_high / rec.speedup - 1, 1 - rec.speedup_low / rec.speedup)


def pace_wanted(rec: Recommendation | None, wide: float) -> bool:
    """Whether the scan should measure the machine's pace: the headline gain, raced side by side,
    stayed wider than ``wide``. Turns side by side cancel what hits both loaders alike, and only that:
    where the machine's pace wanders (a host may move one vCPU apart from another, and a loader on one
    core and one on two are then not hit alike), only more turn pairs narrow their ratio. The pace says
    whether this machine wanders."""
    width = gain_halfwidth(rec) if rec is not None else None
    return width is not None and width > wide


def gain_storage_text(halfwidth: float) -> str:
    """Beside a wide gain whose loaders storage's bandwidth bounds: the CPU's pace is not the cause
    there, the reads are (each turn's share of the readahead that neighbours left cached varies)."""
    return f"±{halfwidth:.0%}: storage's bandwidth bounds these loaders, and their turns' reads spread"


def gain_pace_text(spread: float, halfwidth: float) -> str:
    """Beside a wide gain, short enough to keep the gain's line at two lines of a screen: how steady the
    CPU's pace was (adjacent tenths of a second, as doctor reads it) and so what kept the gain wide."""
    if spread <= STEADY:
        return f"±{halfwidth:.0%}, though the CPU's pace held steady (±{spread:.1%}): the dataset's turns spread"
    return f"±{halfwidth:.0%}: the CPU's pace wandered ±{spread:.1%} (steady: ±{STEADY:.0%})"
