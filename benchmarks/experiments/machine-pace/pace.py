"""Does the machine's own pace wander, and how does a turn pair's spread depend on the turn's length?

Two measurements, alone on the machine:

- **pure compute**: ``k`` processes each run a fixed torch computation (one thread, the work of
  ``archetypes/cpu_bound.py``), and every finished unit is stamped; the stamps are binned into windows
  of 0.1-1 s, and adjacent windows form pairs. On a steady machine two adjacent windows hold the same
  work; the standard deviation of their log ratio is how far the machine's pace moves between them.
- **plain DataLoader loops** (no loadtune code): every batch's arrival is stamped for ``--seconds``;
  adjacent windows of 1, 2, 4 and 8 rounds (one batch per worker) form pairs, as a race's turn pair of
  one loader against itself would (before any freezing). From each length's pair spread and the
  window's length (plus ``TURN_EXTRA_S`` a turn costs beyond its timed part), the half-width the race
  would reach after a minute of turns.

    python benchmarks/experiments/machine-pace/pace.py --out /tmp/pace.json
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

ARCHETYPES = Path(__file__).resolve().parents[2] / "archetypes"
sys.path.insert(0, str(ARCHETYPES.parent))  # meta.py
sys.path.insert(0, str(ARCHETYPES))  # first: benchmarks/ has a many_workers.py of its own
TURN_EXTRA_S = 0.1  # what a race turn costs beyond its timed part (the untimed first burst, the handshake), about
RACE_S = 60.0  # a minute of turns


def compute(queue, seconds: float) -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x, w = torch.rand(64, 64, generator=g), torch.rand(64, 64, generator=g) / 64
    end, stamps = time.perf_counter() + seconds, []
    while time.perf_counter() < end:
        for _ in range(10):
            x = torch.tanh(x @ w + x)
        stamps.append(time.perf_counter())
    queue.put(stamps)


def pair_sd(logs: list[float]) -> float:
    return statistics.pstdev(logs) if len(logs) > 1 else math.nan


def pure_compute(procs: int, seconds: float) -> dict:
    queue = mp.Queue()
    workers = [mp.Process(target=compute, args=(queue, seconds)) for _ in range(procs)]
    for p in workers:
        p.start()
    stamps = sorted(s for _ in workers for s in queue.get())
    for p in workers:
        p.join()
    t0, t1 = stamps[0] + 1.0, stamps[-1] - 1.0  # the start and the end of the processes left out
    out = {}
    for width in (0.1, 0.25, 0.5, 1.0):
        counts = [0] * int((t1 - t0) / width)
        for s in stamps:
            i = int((s - t0) / width)
            if 0 <= i < len(counts):
                counts[i] += 1
        logs = [math.log(counts[i] / counts[i + 1]) for i in range(0, len(counts) - 1, 2) if counts[i] and counts[i + 1]]
        out[str(width)] = {"pairs": len(logs), "pair_sd": pair_sd(logs)}
    return out


def loader_trace(case: str, workers: int, seconds: float) -> list[float]:
    if case == "cpu_bound":
        from cpu_bound import CpuBoundDataset
        dataset = CpuBoundDataset(length=1_000_000)
    else:
        import many_workers
        dataset = many_workers.dataset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        it = iter(DataLoader(dataset, batch_size=32, num_workers=workers, prefetch_factor=2, shuffle=True))
    for _ in range(3 * workers):  # warm-up
        next(it)
    stamps, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        try:
            next(it)
        except StopIteration:
            break
        stamps.append(time.perf_counter())
    del it
    return stamps


def by_rounds(stamps: list[float], workers: int) -> dict:
    out = {}
    for rounds in (1, 2, 4, 8):
        k = rounds * workers
        logs, lengths, i = [], [], 0
        while i + 2 * k < len(stamps):
            a, b = stamps[i + k] - stamps[i], stamps[i + 2 * k] - stamps[i + k]
            logs.append(math.log(a / b))
            lengths += [a, b]
            i += 2 * k
        if len(logs) < 2:
            continue
        turn = statistics.median(lengths)
        sd = pair_sd(logs)
        out[str(rounds)] = {"turn_s": turn, "pairs": len(logs), "pair_sd": sd,
                            "halfwidth_after_minute": 1.96 * sd / math.sqrt(RACE_S / (2 * (turn + TURN_EXTRA_S)))}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compute-procs", default="1,2,8")
    p.add_argument("--compute-s", type=float, default=30.0)
    p.add_argument("--loaders", default="cpu_bound:2,cpu_bound:4,cpu_bound:8,storage:16")
    p.add_argument("--seconds", type=float, default=45.0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    from meta import run_meta
    out = {"meta": run_meta(), "command": " ".join(sys.argv), "compute": {}, "loaders": {}}
    for procs in [int(x) for x in args.compute_procs.split(",") if x]:
        out["compute"][str(procs)] = row = pure_compute(procs, args.compute_s)
        print(f"compute x{procs}: " + ", ".join(f"{w} s ±{v['pair_sd'] * 100:.1f}%" for w, v in row.items()), flush=True)
    for item in [x for x in args.loaders.split(",") if x]:
        case, workers = item.split(":")
        rows = by_rounds(loader_trace(case, int(workers), args.seconds), int(workers))
        out["loaders"][item] = rows
        print(f"{item}: " + ", ".join(f"{r} rounds ({v['turn_s']:.2f} s) ±{v['pair_sd'] * 100:.1f}% -> "
                                      f"±{v['halfwidth_after_minute'] * 100:.1f}%" for r, v in rows.items()), flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
