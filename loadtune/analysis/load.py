"""Whether load from outside the scan disturbed a trial: pure functions of its ``LoadReading``.

A scan compares trials taken minutes apart; a trial that another job slowed reads low, and the
config beside it wins, or gains, by what the other job took. The trial reads the CPUs it may run on
against its own processes (``engine/trial/load.py``); here the outside CPU time is judged against
two resolutions, the counters' and the scan's own (``disturbed``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from loadtune.model.config import TrialConfig
from loadtune.model.load import LoadReading
from loadtune.model.trial import Trial


def resolution_s(reading: LoadReading) -> float:
    """CPU seconds of "outside" time that the counters cannot tell from none: every counter kept in
    ticks (each CPU's, the time of reaped children) may be a tick off in a difference, and while the
    counters were being read (``edge_s``) the trial's processes ran on unread, on at most every CPU
    of the mask."""
    return reading.tick_reads * reading.tick_s + reading.cpus * reading.edge_s


def sampling_s(reading: LoadReading) -> float:
    """How far the CPUs' busy ticks may read from their busy time, 95% of the time. A timer tick
    charges its whole length to whatever runs when it fires, so a CPU busy a share ``p`` of the
    window gets a binomial count of ticks: its standard deviation is at most
    ``sqrt(window * p * (1 - p) * tick)`` with ticks no shorter than /proc/stat's unit (kernels tick
    at 100 to 1000 Hz). The CPUs' variances add; two standard deviations cover 95%."""
    variance = 0.0
    for busy in reading.cpu_busy_s:
        p = min(1.0, max(0.0, busy / reading.window_s)) if reading.window_s > 0 else 0.0
        variance += reading.window_s * p * (1 - p) * reading.tick_s
    return 2 * math.sqrt(variance)


def excess_s(reading: LoadReading) -> float:
    """Outside CPU seconds beyond what the counters' resolution explains: both ways of reading the
    CPUs must show it (the idle time's way counts the idle loop's own cost, the ticks' way is
    sampled), or the quota's usage must."""
    plain = resolution_s(reading)
    excess = min(reading.idle_outside_s - plain, reading.tick_outside_s - plain - sampling_s(reading))
    if reading.quota_outside_s is not None:
        excess = max(excess, reading.quota_outside_s - plain)
    return max(0.0, excess)


def excess_cores(reading: LoadReading) -> float:
    """``excess_s`` in cores over the window."""
    return excess_s(reading) / reading.window_s if reading.window_s > 0 else 0.0


def disturbed(reading: LoadReading | None, noise_floor: float) -> bool:
    """Outside load beyond the counters' resolution that takes more than the noise floor's share
    of the usable cores.

    Why that threshold: outside processes that took ``o`` cores' worth of CPU time from ``N`` usable
    cores took the share ``o / N`` of the CPU the trial could have had. A CPU-bound trial loses about
    that share of its rate; one that hands batches between processes can lose more (each wake-up on
    a busy CPU waits: 0.1-0.2 of a core busy in 2 ms bursts cost two workers 13% on a 2-core VM). A
    share below the noise floor is below the smallest difference the scan acts on, so the threshold
    is the scan's own resolution for rates (``noise_floor``) on top of the counters' (``excess_s``),
    not a constant of this module: a machine's background (daemons) passes, and on 64 cores one
    busy process does too, while on two cores it does not."""
    if reading is None or reading.window_s <= 0 or reading.usable_cores <= 0:
        return False
    return excess_cores(reading) > noise_floor * reading.usable_cores


def quieter(first: Trial, second: Trial) -> tuple[Trial, Trial]:
    """(kept, set aside) of two runs of one config: a run that measured over one that failed, else
    the one with less outside load."""
    if first.ok != second.ok:
        return (first, second) if first.ok else (second, first)
    outside = [t.load.outside_cores if t.load else float("inf") for t in (first, second)]
    return (second, first) if outside[1] < outside[0] else (first, second)


@dataclass(frozen=True)
class LoadSummary:
    """The trials of a scan (or a check) taken under outside load, for the reports."""

    disturbed: int  # finished trials whose figures were taken under load
    read: int  # finished trials with a load reading
    peak_cores: float  # the most outside load during one of them, in cores
    usable_cores: float
    configs: tuple[TrialConfig, ...]  # the configs of those trials
    remeasured: int = 0  # runs set aside: taken under load, measured once more, the quieter run kept

    @property
    def peak_share(self) -> float:
        """The largest share of the usable cores taken from outside: how low a figure may read."""
        return self.peak_cores / self.usable_cores if self.usable_cores > 0 else 0.0


def load_summary(trials: Iterable[Trial], noise_floor: float, remeasured: Iterable[Trial] = ()) -> LoadSummary | None:
    """What outside load did to these trials; None when it disturbed none (and none was measured again)."""
    read = [t for t in trials if t.ok and t.load is not None]
    hit = [t for t in read if disturbed(t.load, noise_floor)]
    again = len(list(remeasured))
    if not hit and not again:
        return None
    usable = max((t.load.usable_cores for t in read), default=0.0)
    peak = max((t.load.outside_cores for t in hit), default=0.0)
    configs = tuple(dict.fromkeys(t.config for t in hit))
    return LoadSummary(len(hit), len(read), peak, usable, configs, again)
