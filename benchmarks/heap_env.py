"""The heap setting two ways: exported at process start, as the snippet tells the user, against set
through ``mallopt`` once the process runs, as a scan's trial process sets it.

glibc reads ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` when its allocator starts; a
trial process is already running when it learns its config, so loadtune sets the same two parameters
with ``mallopt`` (``engine.trial.allocator.keep_in_heap``) after its imports, with a heap history of
its own. Whether the two agree is what makes the scan's figure for ``w0 +MALLOC env`` the user's.

A plain ``DataLoader`` loop of ``archetypes/large_batches.py`` without workers (96 MiB batches, which
glibc maps afresh every time by default) runs in fresh processes, the three ways interleaved round by
round: glibc's defaults, the two variables exported at process start, ``mallopt`` after the imports.
Each process warms up, then times its samples/s and its page faults per batch. Target: the medians of
the exported and the ``mallopt`` processes within ±5% of each other, both well clear of the defaults.

    python benchmarks/heap_env.py --rounds 6 --out benchmarks/results/heap_env.json.gz

Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from meta import REPO, run_meta
from saved import write_json

from loadtune.model.config import HEAP_TRIM, heap_for

ARCHETYPE = REPO / "benchmarks" / "archetypes" / "large_batches.py"
BATCH = 32
BATCH_BYTES = BATCH * 3 * 256 * 1024 * 4  # 96 MiB

LOOP = r"""
import importlib.util, resource, sys, time
from torch.utils.data import DataLoader
if sys.argv[5] == "mallopt":  # as a trial process: running, its imports done, then the two parameters
    from loadtune.engine.trial.allocator import keep_in_heap
    keep_in_heap(int(sys.argv[6]), int(sys.argv[7]))
spec = importlib.util.spec_from_file_location("archetype", sys.argv[1]); mod = importlib.util.module_from_spec(spec)
sys.modules["archetype"] = mod; spec.loader.exec_module(mod)
warm, timed, batch = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
loader = DataLoader(mod.dataset(), batch_size=batch, shuffle=True, num_workers=0)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
clock = time.perf_counter; begin = clock(); start = None
for b in loader:
    now = clock()
    if start is None:
        if now - begin >= warm:
            start, f0, n = now, faults(), 0
        continue
    n += 1
    if now - start >= timed:
        print(n * batch / (now - start), (faults() - f0) / n); break
"""


def environments(threshold: int) -> dict[str, dict[str, str]]:
    exported = {"MALLOC_MMAP_THRESHOLD_": str(threshold), "MALLOC_TRIM_THRESHOLD_": str(HEAP_TRIM * threshold)}
    return {"defaults": {}, "exported": exported, "mallopt": {}}


def one(way: str, extra: dict[str, str], threshold: int, warm: float, timed: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(extra, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", LOOP, str(ARCHETYPE), str(warm), str(timed), str(BATCH), way,
                          str(threshold), str(HEAP_TRIM * threshold)], env=env, capture_output=True, text=True,
                         check=True, timeout=120)
    rate, faults = out.stdout.split()
    return {"way": way, "samples_per_s": float(rate), "faults_per_batch": float(faults)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="processes per way, interleaved")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--timed", type=float, default=5.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    threshold = heap_for(BATCH_BYTES)
    ways = environments(threshold)
    runs = []
    for r in range(args.rounds):
        order = list(ways) if r % 2 == 0 else list(reversed(ways))
        for way in order:
            runs.append({**one(way, ways[way], threshold, args.warmup, args.timed), "round": r})
            print(f"round {r + 1}: {way}: {runs[-1]['samples_per_s']:,.0f} samples/s, "
                  f"{runs[-1]['faults_per_batch']:,.0f} faults a batch", flush=True)
    summary = {}
    for way in ways:
        rates = [x["samples_per_s"] for x in runs if x["way"] == way]
        summary[way] = {"median": statistics.median(rates), "low": min(rates), "high": max(rates),
                        "faults_median": statistics.median(x["faults_per_batch"] for x in runs if x["way"] == way)}
    paired = [e["samples_per_s"] / m["samples_per_s"] for e, m in zip(
        [x for x in runs if x["way"] == "exported"], [x for x in runs if x["way"] == "mallopt"])]
    summary["exported_over_mallopt"] = {"median_ratio": summary["exported"]["median"] / summary["mallopt"]["median"],
                                        "paired_ratios": paired}
    for way in ways:
        s = summary[way]
        print(f"{way}: median {s['median']:,.0f} samples/s ({s['low']:,.0f}-{s['high']:,.0f}), {s['faults_median']:,.0f} faults a batch")
    print(f"exported / mallopt: {summary['exported_over_mallopt']['median_ratio']:.3f} "
          f"(paired per round {min(paired):.3f}-{max(paired):.3f})")
    if args.out:
        write_json(args.out, {"meta": run_meta(), "threshold": threshold, "runs": runs, "summary": summary})


if __name__ == "__main__":
    main()
