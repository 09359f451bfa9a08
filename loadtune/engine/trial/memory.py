"""Host memory of a process tree, counted without double-counting shared pages.

Summed RSS counts a page shared by the main process and eight forked workers nine times. PSS
(proportional set size) splits each shared page between its sharers, so the sum over the tree is
what the tree really costs. Sampled from outside the trial, so the sampling does not take the
trial's GIL or CPU time inside its timing loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import psutil

from loadtune.model.trial import MemoryUsage


def process_memory(proc: psutil.Process) -> tuple[int, str] | None:
    """(bytes, method) of one process: PSS where the OS offers it, RSS otherwise; None if gone."""
    try:
        pss = getattr(proc.memory_full_info(), "pss", None)
        if pss is not None:
            return pss, "pss"
    except psutil.AccessDenied:
        pass
    except psutil.Error:  # exited between listing and reading
        return None
    try:
        return proc.memory_info().rss, "rss"
    except psutil.Error:
        return None


def tree_memory(pid: int, include_parent: bool = True) -> tuple[int, int, str]:
    """(bytes, processes, method) of ``pid``, all its descendants, and its fork parent's share.

    A trial is forked from a process that already imported torch; the pages it inherited are
    shared with that parent, and PSS charges half of each to the parent. Adding the parent's PSS
    counts them whole, as a standalone training process would hold them."""
    total, counted, method, _ = tree_sample(pid, include_parent, shm=False)
    return total, counted, method


def tree_sample(pid: int, include_parent: bool = True, shm: bool = True) -> tuple[int, int, str, int]:
    """``tree_memory``'s figures plus the bytes of /dev/shm segments the tree maps (0 when not asked)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
        parent = root.parent()
    except psutil.Error:
        return 0, 0, "pss", 0
    total, counted, method = 0, 0, "pss"
    for proc in procs:
        got = process_memory(proc)
        if got is not None:
            total += got[0]
            counted += 1
            method = "rss" if got[1] == "rss" else method
    if include_parent and parent is not None and counted:
        got = process_memory(parent)
        if got is not None and got[1] == "pss":
            total += got[0]
    return total, counted, method, shm_mapped([p.pid for p in procs]) if shm else 0


def shm_mapped(pids: list[int]) -> int:
    """Bytes of /dev/shm segments mapped by these processes, each segment once (by inode).

    DataLoader workers hand batches over in /dev/shm segments (unlinked at once, so invisible to
    ``ls`` but still mapped): this is the shared memory the batches in flight hold. Reading
    ``/proc/PID/maps`` is cheap next to PSS (no page-table walk); 0 where there is no /proc."""
    segments: dict[str, int] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    if "/dev/shm/" not in line:
                        continue
                    parts = line.split(None, 5)
                    start, _, end = parts[0].partition("-")
                    size = int(end, 16) - int(start, 16)
                    inode = parts[4]
                    segments[inode] = max(segments.get(inode, 0), size)
        except (OSError, ValueError, IndexError):
            continue
    return sum(segments.values())


@dataclass
class MemorySampler:
    """Keeps the peak and the series of the tree's memory while a trial runs."""

    pid: int
    include_parent: bool = True  # the fork server's share; not when the parent is the user's own process
    interval_s: float = 0.25
    timed_share: float = 0.005  # while blocks are timed, at most this share of a core goes to sampling
    start: float = field(default_factory=time.monotonic)
    peak: int = 0
    peak_processes: int = 0
    method: str = "pss"
    samples: list[tuple[float, int]] = field(default_factory=list)
    timed: bool = False  # set while the trial's blocks are timed
    shm_peak: int = 0
    startup_index: int | None = None  # the sample taken when the workers were up
    _last: float = -1e9
    _cost: float = 0.0  # CPU seconds the last sample took (reading PSS walks every page table)

    def maybe_sample(self, force: bool = False) -> None:
        """Sample if the interval has passed, or now when forced. While blocks are timed the interval
        stretches so that sampling (tens of ms of CPU with workers) takes no measurable share of the
        cores the trial is being timed on."""
        now = time.monotonic()
        interval = max(self.interval_s, self._cost / self.timed_share) if self.timed else self.interval_s
        if now - self._last < interval and not force:
            return
        self._last = now
        cpu = time.process_time()
        total, procs, method, shm = tree_sample(self.pid, self.include_parent)
        self._cost = time.process_time() - cpu
        if procs == 0:
            return
        if method == "rss":
            self.method = "rss"
        self.peak = max(self.peak, total)
        self.shm_peak = max(self.shm_peak, shm)
        self.peak_processes = max(self.peak_processes, procs)
        self.samples.append((round(now - self.start, 3), total))

    def mark_startup(self) -> None:
        """Sample now, the workers being up, and remember it: growth during the trial counts from here."""
        self.maybe_sample(force=True)
        if self.samples:
            self.startup_index = len(self.samples) - 1

    def result(self) -> MemoryUsage | None:
        if not self.samples:
            return None
        return MemoryUsage(self.peak, self.peak_processes, self.method, self.samples, self.startup_index, self.shm_peak)
