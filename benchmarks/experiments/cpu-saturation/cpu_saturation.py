"""Which resource runs out as workers are added: throughput and the machine's busy cores, side by side.

A check on the bound's diagnosis that uses no loadtune code: for each worker count, a plain DataLoader
over the dataset (persistent workers, prefetch 2) is warmed up for 3 s, then timed for 5 s while
``/proc/stat`` counts the busy and idle cores. A waiting dataset bound by its workers leaves cores
idle and scales with the worker count; one bound by the CPU has no idle core left.

    python benchmarks/cpu_saturation.py benchmarks/archetypes/storage_latency.py --workers 16,32,64
    python benchmarks/cpu_saturation.py benchmarks/archetypes/storage_latency.py:object_store --workers 16,32,64

Run it on an otherwise idle machine: the busy cores are the whole machine's.
"""

from __future__ import annotations

import argparse
import time
import warnings

import psutil
from loadtune.engine.spec import SpecRef, load_spec
from torch.utils.data import DataLoader

BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


def busy_idle(before, after) -> tuple[float, float]:
    busy = sum(getattr(after, f, 0.0) - getattr(before, f, 0.0) for f in BUSY_FIELDS)
    idle = (after.idle - before.idle) + (getattr(after, "iowait", 0.0) - getattr(before, "iowait", 0.0))
    return busy, idle


def measure(spec, workers: int, batch_size: int, warmup_s: float, timed_s: float) -> dict:
    loader = DataLoader(spec.dataset, batch_size=batch_size, num_workers=workers, persistent_workers=workers > 0,
                        prefetch_factor=2 if workers else None, collate_fn=spec.collate_fn)
    it = iter(loader)
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        next(it)
    samples, before, start = 0, psutil.cpu_times(), time.perf_counter()
    while time.perf_counter() - start < timed_s:
        batch = next(it)
        samples += len(batch[0]) if isinstance(batch, (list, tuple)) else len(batch)
    seconds = time.perf_counter() - start
    busy, idle = busy_idle(before, psutil.cpu_times())
    del it, loader
    return {"workers": workers, "samples_per_s": samples / seconds, "busy_cores": busy / seconds,
            "idle_cores": idle / seconds, "cpu_us_per_sample": 1e6 * busy / samples}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("spec", help="dataset spec file, optionally file.py:factory")
    p.add_argument("--workers", default="16,32,64")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--seconds", type=float, default=5.0)
    args = p.parse_args()
    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    spec = load_spec(SpecRef.parse(args.spec))
    print(f"{args.spec}, batch size {args.batch_size}, {psutil.cpu_count()} cores; "
          f"load average {[round(x, 2) for x in psutil.getloadavg()]}")
    for w in (int(x) for x in args.workers.split(",")):
        r = measure(spec, w, args.batch_size, args.warmup, args.seconds)
        print(f"  workers {w:4d}: {r['samples_per_s']:9,.0f} samples/s   busy {r['busy_cores']:.2f} cores, "
              f"idle {r['idle_cores']:.2f}   {r['cpu_us_per_sample']:.0f} µs CPU per sample (whole machine)", flush=True)


if __name__ == "__main__":
    main()
