"""A loader without workers on large fresh batches, in fresh processes: its speed against the page
faults its process takes per batch, under glibc malloc's defaults and with its thresholds set (one, the other, both).

Each batch of ``archetypes/large_tensors.py`` is 19 MiB collated in the main process. glibc malloc
serves it from the heap or from a fresh mapping, and after it is freed may hand the memory back to
the kernel (trim); the next batch then faults every page in again. Which it does depends on the
process's heap history (an allocation over 32 MiB, with ``--batch 64``, is mapped afresh every time by
default), so two processes running the same loop can differ about 2x. This script
runs the plain loop in fresh processes, alternating the environments, and records each process's
rate and minor page faults per batch (``getrusage``), after a warm-up:

    python benchmarks/allocator_regimes.py --processes 6 --out benchmarks/allocator_regimes.json
    python benchmarks/allocator_regimes.py --processes 4 --batch 64 --out benchmarks/allocator_regimes_64.json

Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from meta import run_meta  # noqa: E402

LOOP = r"""
import sys, time, importlib.util, resource
from torch.utils.data import DataLoader
spec = importlib.util.spec_from_file_location("archetype", sys.argv[1]); mod = importlib.util.module_from_spec(spec)
sys.modules["archetype"] = mod; spec.loader.exec_module(mod)
warm, timed, batch = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
loader = DataLoader(mod.dataset(), batch_size=batch, shuffle=True, num_workers=0)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
clock = time.perf_counter; begin = clock(); start = None
def batches():
    while True:  # an epoch is 100,000 samples: about 7 s at the fastest
        yield from loader
for b in batches():
    mod.step(b)
    now = clock()
    if start is None:
        if now - begin >= warm:
            start, f0, n = now, faults(), 0
        continue
    n += 1
    if now - start >= timed:
        print(n * batch / (now - start), (faults() - f0) / n); break
"""

ENVIRONMENTS = {  # name: what is added to the environment (the note's advice for a 19 MiB batch is "both")
    "default": {},
    "trim_only": {"MALLOC_TRIM_THRESHOLD_": str(1 << 30)},
    "mmap_only": {"MALLOC_MMAP_THRESHOLD_": str(64 << 20)},
    "both": {"MALLOC_MMAP_THRESHOLD_": str(64 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)},
    "both_128": {"MALLOC_MMAP_THRESHOLD_": str(128 << 20), "MALLOC_TRIM_THRESHOLD_": str(512 << 20)},
}


def one(spec: str, extra: dict, warm: float, timed: float, batch: int) -> dict:
    env = {**os.environ, **extra}
    out = subprocess.run([sys.executable, "-c", LOOP, spec, str(warm), str(timed), str(batch)], env=env, capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0 or len(out.stdout.split()) != 2:
        return {"error": f"exit {out.returncode}: {out.stderr.strip()[-400:]}"}
    rate, faults = out.stdout.split()
    return {"rate": float(rate), "faults_per_batch": float(faults)}


def summary(runs: list[dict]) -> dict:
    ok = [r for r in runs if "error" not in r]
    rates = [r["rate"] for r in ok]
    return {"processes": len(runs), "failed": len(runs) - len(ok), "median_rate": statistics.median(rates),
            "min_rate": min(rates), "max_rate": max(rates),
            "median_faults_per_batch": statistics.median(r["faults_per_batch"] for r in ok)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=8, help="fresh processes per environment")
    p.add_argument("--warm-s", type=float, default=2.0)
    p.add_argument("--timed-s", type=float, default=5.0)
    p.add_argument("--batch", type=int, default=32, help="batch size: 32 makes 19 MiB batches, 64 makes 37 MiB")
    p.add_argument("--spec", default=str(HERE / "archetypes" / "large_tensors.py"))
    p.add_argument("--out")
    args = p.parse_args()
    out = {"meta": run_meta(), "environments": ENVIRONMENTS, "runs": {name: [] for name in ENVIRONMENTS}}
    for i in range(args.processes):
        for name, extra in ENVIRONMENTS.items():
            got = one(args.spec, extra, args.warm_s, args.timed_s, args.batch)
            out["runs"][name].append(got)
            print(i, name, got.get("error") or f"{got['rate']:.0f} samples/s {got['faults_per_batch']:.0f} faults/batch",
                  flush=True)
    out["summary"] = {name: summary(runs) for name, runs in out["runs"].items()}
    print(json.dumps(out["summary"], indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
