"""What puts a process of PyTorch's defaults on 96 MiB batches in one allocator state or the other.

A plain DataLoader loop of ``archetypes/large_batches.py`` without workers, each run a fresh process:
10 batches warm, then 30 timed, and the main process's minor page faults over them (MiB a batch).
Runs with address-space layout randomisation on (as every process runs) and off (``setarch -R``),
with ``PYTHONHASHSEED`` fixed, twice each; optionally with the heap kept (both MALLOC_ variables).

    python benchmarks/experiments/allocator-state/states.py --seeds 8 --repeats 2 --aslr-runs 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ARCHETYPES = Path(__file__).resolve().parents[2] / "archetypes"

LOOP = f"""
import json, resource, sys, time
sys.path.insert(0, {str(ARCHETYPES)!r})
from torch.utils.data import DataLoader
from large_batches import LargeBatchDataset
it = iter(DataLoader(LargeBatchDataset(), batch_size=32, shuffle=True, num_workers=0))
for _ in range(10):
    next(it)
f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
for _ in range(30):
    next(it)
dt, f1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(json.dumps({{"mib_per_batch": round((f1 - f0) * 4096 / 30 / 2**20, 1), "rate": round(30 * 32 / dt)}}))
"""


def run(seed: int | None, aslr: bool, heap: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    if seed is not None:
        env["PYTHONHASHSEED"] = str(seed)
    if heap:
        env.update(MALLOC_MMAP_THRESHOLD_=str(256 * 2**20), MALLOC_TRIM_THRESHOLD_=str(1024 * 2**20))
    cmd = ([] if aslr else ["setarch", "-R"]) + [sys.executable, "-c", LOOP]
    out = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
    return {"seed": seed, "aslr": aslr, "heap": heap, **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--aslr-runs", type=int, default=8)
    parser.add_argument("--heap", action="store_true", help="also the same with the heap kept")
    args = parser.parse_args()
    rows = []
    for heap in (False, True) if args.heap else (False,):
        rows += [run(seed, False, heap) for seed in range(args.seeds) for _ in range(args.repeats)]
        rows += [run(0, True, heap) for _ in range(args.aslr_runs)]
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
