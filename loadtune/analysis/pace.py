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
