"""CPU accounting of processes, at nanosecond resolution where ``/proc`` has it.

Used by the stage profile (a worker's CPU per batch, waiting for a core taken off wall time) and by
the timed trials (the CPU a loader and its workers used over the timed window: what the CPU cap of
the bound is set from, measured under the load the config itself creates).
"""

from __future__ import annotations

import glob
import time
from typing import Any


def process_cpu_s(pid: int) -> float:
    """CPU seconds of all threads of a process, at nanosecond resolution where /proc has schedstat
    (psutil's 10 ms ticks are too coarse for a few milliseconds per batch)."""
    total, found = 0.0, False
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0]) / 1e9
                found = True
        except (OSError, ValueError, IndexError):
            continue
    if found:
        return total
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def runqueue_s() -> float:
    """Seconds this thread has waited for a CPU while runnable (``/proc/thread-self/schedstat``), 0
    where unavailable. Taken off the fetch's wall time, so that other processes' load on a busy
    machine does not pass for the dataset waiting on storage."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def worker_pids(iterator: Any) -> list[int]:
    """The worker processes of a DataLoader iterator (torch's multiprocessing iterator keeps them in
    ``_workers``); none for ``num_workers=0`` or a torch that keeps them elsewhere."""
    workers = getattr(iterator, "_workers", None) or []
    return [w.pid for w in workers if w.pid is not None]


def tree_cpu_s(iterator: Any) -> tuple[float | None, frozenset[int]]:
    """CPU seconds of this process (all its threads: the pin thread too) and of the iterator's live
    workers, with the workers' PIDs: a difference of two readings counts only if the PIDs match.
    None when a worker could not be read (it was exiting)."""
    pids = frozenset(worker_pids(iterator))
    try:
        return time.process_time() + sum(process_cpu_s(pid) for pid in pids), pids
    except Exception:  # noqa: BLE001 - psutil.NoSuchProcess and the like: this reading is lost, not the trial
        return None, pids
