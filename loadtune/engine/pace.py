"""Measure how steady this machine's CPU pace is (``analysis.pace``): one process per usable core
runs the same fixed one-thread torch computation for a few seconds, all from one moment, and stamps
every unit it finishes. ``loadtune doctor`` reports it: a pace that wanders is why side-by-side
comparisons of CPU-bound loaders need more turns on this machine, and no process list shows it."""

from __future__ import annotations

import multiprocessing as mp
import time

from loadtune.analysis.pace import CpuPace, pace_of
from loadtune.engine.machine import usable_cores

SECONDS = 5.0  # of work per process: the pace moves in steps of seconds, which a shorter look can miss
EDGE_S = 0.2  # left out at each end: the processes settling onto the cores, and ending
WINDOW_S = 0.1
UNIT_ROUNDS = 10  # a unit: this many rounds of a 64x64 matmul and tanh, well under a millisecond
READY_S = 60.0  # how long the processes may take to start (each imports torch)
MAX_PROCESSES = 8  # a process per usable core up to this many: each holds torch (~200 MiB), and 8 show a host's moods


def work(conn) -> None:
    """Say ready once torch is loaded, run the fixed unit from the moment the parent names (a
    ``time.perf_counter`` reading: one clock for every process) for the seconds it names, and send
    every unit's finishing time."""
    import torch

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x, w = torch.rand(64, 64, generator=g), torch.rand(64, 64, generator=g) / 64
    conn.send("ready")
    start, seconds = conn.recv()
    while time.perf_counter() < start:
        time.sleep(0.001)
    stamps, end = [], start + seconds
    while (now := time.perf_counter()) < end:
        for _ in range(UNIT_ROUNDS):
            x = torch.tanh(x @ w + x)
        stamps.append(now)
    conn.send(stamps)


def measure_pace(seconds: float = SECONDS, processes: int | None = None) -> CpuPace | None:
    """The pace's spread while ``processes`` (default: one per usable core, ``MAX_PROCESSES`` at most)
    run the fixed work together; None when they could not run or too little was stamped."""
    n = processes or min(usable_cores(), MAX_PROCESSES)
    ctx = mp.get_context("spawn")  # no fork of a process that may hold threads or a CUDA context
    ends = [ctx.Pipe() for _ in range(n)]
    procs = [ctx.Process(target=work, args=(child,), daemon=True) for _, child in ends]
    try:
        for p in procs:
            p.start()
        for parent, _ in ends:
            if not parent.poll(READY_S) or parent.recv() != "ready":
                return None
        start = time.perf_counter() + 0.05
        for parent, _ in ends:
            parent.send((start, seconds))
        stamps = sorted(s for parent, _ in ends for s in parent.recv())
    except (OSError, EOFError):
        return None
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return pace_of(stamps, WINDOW_S, start + EDGE_S, start + seconds - EDGE_S, n)
