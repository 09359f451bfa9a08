"""Storage: scans of a file-backed dataset in each page-cache state, held against plain loops in the
same state.

A folder of small files (``archetypes/small_files.py``: 20,000 files of 48 KiB) is scanned with
``--storage warm`` and ``--storage cold``; then plain ``DataLoader`` loops (fresh processes with no
loadtune code in them, interleaved, ``shuffle=True``) time the configs in both states: warm, every
file in the page cache; cold, every file dropped from the cache before each run, one epoch at most
(what every epoch of a dataset larger than RAM reads). Targets: each scan's pick at least 0.95 of the
plain loops' best in its state; its gain over the defaults within its interval of the plain loops'
gain; no ``±`` above 100% printed. Each scan's bound (the stage profile's) is kept beside them: the
plain loops' best against it says whether the bound is one the loader reaches.

    python benchmarks/storage.py --rounds 3 --out benchmarks/results/storage_small_files.json.gz
    python benchmarks/storage.py --rounds 2 --throttle-iops 3000 --out benchmarks/results/storage_small_files_3000iops.json.gz
    python benchmarks/storage.py --archetype tar_shards --rounds 3 --out benchmarks/results/storage_tar_shards.json.gz

The warm scan runs twice, with two trial orders (``--seed 0`` and ``1``): the same dataset in the same
state must give figures within each other's intervals. ``--throttle-iops`` caps the disk's reads a
second for everything the bench runs (cgroup v1 ``blkio``, as root), so that storage is the bound.
``--memory-limit`` gives everything the bench runs that much memory, page cache included (cgroup v1
``memory``): a dataset larger than it reads cold as a dataset larger than RAM does in every epoch. That
is the reference a memory-mapped file needs: one epoch after a single drop is not cold for it, since
each page fault reads ahead far beyond its row and the rest of the epoch finds those pages cached.

    LOADTUNE_MEMMAP=/var/tmp/loadtune-memmap-8g.u8 LOADTUNE_MEMMAP_ROWS=175000 python benchmarks/storage.py \
        --archetype memmap_array --memory-limit 3 --loop-samples 20000 --rounds 3 --out benchmarks/results/storage_memmap_3gib.json.gz

Run alone: nothing else on the machine meanwhile (other reads move the disk's speed most of all).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from loadtune.analysis.bound import pick_fraction, scan_bound
from loadtune.model.results import ScanResult

from meta import REPO, run_meta
from saved import write_json

ARCHETYPES = REPO / "benchmarks" / "archetypes"
CONFIGS = {  # label -> DataLoader arguments, as the scan labels them
    "w0": {"num_workers": 0},
    "w2 pf2": {"num_workers": 2, "prefetch_factor": 2},
    "w4 pf2": {"num_workers": 4, "prefetch_factor": 2},
    "w8 pf2": {"num_workers": 8, "prefetch_factor": 2},
}
BATCH = 32

LOOP = """
import importlib.util, json, os, sys, time
from torch.utils.data import DataLoader, IterableDataset
spec = importlib.util.spec_from_file_location("user_spec", sys.argv[1]); mod = importlib.util.module_from_spec(spec)
sys.modules["user_spec"] = mod; spec.loader.exec_module(mod)
ds = mod.dataset()
if sys.argv[3] == "cold":
    for p in getattr(ds, "paths", None) or [ds.path]:
        fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
loader = DataLoader(ds, shuffle=not isinstance(ds, IterableDataset), batch_size=int(sys.argv[4]), **json.loads(sys.argv[2]))
warm, samples, t0, most = 2 * max(1, loader.num_workers), 0, None, int(sys.argv[5])
for i, batch in enumerate(loader):  # one epoch at most: no sample read twice
    if i == warm:
        t0, samples = time.perf_counter(), 0
    elif t0 is not None:
        samples += len(batch[0])
        if most and samples >= most:
            break
print(samples / (time.perf_counter() - t0))
"""


def plain_loop(spec: Path, label: str, state: str, most: int = 0) -> float:
    """One plain loop in a fresh process: its samples/s over one epoch at most (``most``: at most that
    many samples after its warm-up, 0 for the whole epoch)."""
    out = subprocess.run([sys.executable, "-c", LOOP, str(spec), json.dumps(CONFIGS[label]), state, str(BATCH), str(most)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def plain_loops(spec: Path, rounds: int, states: tuple[str, ...], most: int = 0) -> dict[str, dict[str, list[float]]]:
    """Every config in each state, interleaved: round by round, each state, each config."""
    got: dict[str, dict[str, list[float]]] = {s: {c: [] for c in CONFIGS} for s in states}
    for r in range(rounds):
        for state in states:
            labels = list(CONFIGS) if r % 2 == 0 else list(reversed(CONFIGS))
            if state == "warm":  # the files in the page cache before the warm runs
                plain_loop(spec, "w0", "warm")
            for label in labels:
                got[state][label].append(plain_loop(spec, label, state, most))
                print(f"round {r + 1} {state} {label}: {got[state][label][-1]:,.0f} samples/s", file=sys.stderr)
    return got


def scan(spec: Path, state: str, out: Path, flags: list[str] | None = None) -> dict:
    """A default scan in ``state``: its pick, gain and the widest ± it printed."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "loadtune", "scan", str(spec), "--batch-size", str(BATCH), "--storage", state,
                           "--json", str(out), *(flags or [])], capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
    wall = time.monotonic() - started
    data = json.loads(out.read_text())
    rec = data["recommendation"]
    result = ScanResult.load(out)
    bound, share = scan_bound(result), pick_fraction(result)
    widths = [float(w.replace(",", "")) for w in re.findall(r"±([\d,.]+)%", proc.stdout)]
    return {"state": state, "exit": proc.returncode, "wall_s": round(wall, 1), "pick": rec["config"], "speedup": rec["speedup"],
            "speedup_low": rec["speedup_low"], "speedup_high": rec["speedup_high"], "widest_pm": max(widths, default=None),
            "storage": {k: v for k, v in data["storage"].items() if k != "other"},
            "other": [(t["config"]["num_workers"], (t.get("samples_per_s") or {}).get("median")) for t in data["storage"]["other"]],
            "bound": None if bound is None else {"rate": round(bound.rate, 1), "low": bound.low, "high": bound.high,
                                                 "stage": bound.stage, "pick_share": share,
                                                 "caps": {c.name: round(c.rate, 1) for c in bound.ceilings}},
            "stdout": proc.stdout}


def label_of(config: dict) -> str:
    w = config["num_workers"]
    return "w0" if w == 0 else f"w{w} pf{config.get('prefetch_factor') or 2}"


def summary(scans: list[dict], loops: dict) -> list[dict]:
    rows = []
    for s in scans:
        medians = {c: statistics.median(v) for c, v in loops[s["state"]].items()}
        best = max(medians, key=medians.get)
        pick = label_of(s["pick"])
        gain = medians.get(pick, float("nan")) / medians["w0"]
        rows.append({"state": s["state"], "pick": pick, "pick_share_of_best": round(medians.get(pick, 0) / medians[best], 3),
                     "plain_best": best, "plain_gain": round(gain, 2), "scan_gain": s["speedup"],
                     "scan_gain_interval": [s["speedup_low"], s["speedup_high"]], "widest_pm": s["widest_pm"], "wall_s": s["wall_s"],
                     "bound": (s.get("bound") or {}).get("rate"), "bound_stage": (s.get("bound") or {}).get("stage"),
                     "plain_best_of_bound": round(medians[best] / s["bound"]["rate"], 3) if s.get("bound") else None})
    return rows


class Group:
    """This process and every process it starts in a cgroup v1 group of ``controller`` with ``settings``
    (file -> value), removed afterwards: a slower disk (``blkio``), less memory for the page cache
    (``memory``). As root; only the bench's own processes are in it."""

    def __init__(self, controller: str, settings: dict[str, str]):
        self.root = Path("/sys/fs/cgroup") / controller
        self.group, self.settings = self.root / f"loadtune-bench-{os.getpid()}", settings

    def __enter__(self) -> "Group":
        self.group.mkdir()
        for name, value in self.settings.items():
            (self.group / name).write_text(value + "\n")
        (self.group / "cgroup.procs").write_text(str(os.getpid()))
        return self

    def __exit__(self, *exc) -> None:
        (self.root / "cgroup.procs").write_text(str(os.getpid()))
        self.group.rmdir()


def throttled(iops: int, path: Path) -> Group:
    """Reads from the disk under ``path`` capped at ``iops`` a second."""
    return Group("blkio", {"blkio.throttle.read_iops_device": f"{disk_of(path)} {iops}"})


def memory_limited(gib: float) -> Group:
    """At most ``gib`` GiB of memory, the page cache of the files read included: a dataset larger than
    this reads as one larger than RAM does, evicted as it goes, mapped pages too."""
    return Group("memory", {"memory.limit_in_bytes": str(int(gib * 2**30))})


def disk_of(path: Path) -> str:
    """The whole disk under ``path`` as MAJOR:MINOR (a partition's parent: blkio throttles whole disks)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    parent = Path(f"/sys/dev/block/{major}:{minor}/..").resolve() / "dev"
    return parent.read_text().strip() if parent.exists() and Path(f"/sys/dev/block/{major}:{minor}/partition").exists() else f"{major}:{minor}"


def printed_pick(stdout: str) -> tuple[float, float] | None:
    """The pick's figure as the recommendation panel prints it, as the range it states: a rate with its
    ± for a long run, or the runs' range where that interval is too wide to print (over 2x)."""
    panel = stdout[stdout.find("Recommendation"):]
    ranged = re.search(r"([\d,]+)–([\d,]+) samples/s over its runs", panel)
    if ranged:
        return float(ranged.group(1).replace(",", "")), float(ranged.group(2).replace(",", ""))
    found = re.search(r"([\d,]+) samples/s ±([\d.]+)%", panel)
    if not found:
        return None
    rate, spread = float(found.group(1).replace(",", "")), float(found.group(2)) / 100
    return rate * (1 - spread), rate * (1 + spread)


def repeat_warm(scans: list[dict]) -> dict:
    """The warm scan in two trial orders (seeds 0 and 1): the pick's printed ranges must overlap, each
    holding part of what the other printed."""
    printed = [printed_pick(s["stdout"]) for s in scans]
    within = all(p is not None for p in printed) and printed[0][0] <= printed[1][1] and printed[1][0] <= printed[0][1]
    return {"picks": [label_of(s["pick"]) + (" heap" if s["pick"].get("heap") else "") for s in scans],
            "printed": printed, "each_within_the_other": within}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--archetype", default="small_files", help="small_files, tar_shards or memmap_array (benchmarks/archetypes)")
    parser.add_argument("--throttle-iops", type=int, default=None, help="cap the disk's reads a second (cgroup v1 blkio; root)")
    parser.add_argument("--memory-limit", type=float, default=None,
                        help="GiB of memory for everything the bench runs, page cache included (cgroup v1 memory; root): "
                             "a dataset larger than this reads as one larger than RAM; only the cold state is run")
    parser.add_argument("--loop-samples", type=int, default=0, help="a plain loop times at most this many samples (0: one epoch)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "storage_small_files.json.gz")
    args = parser.parse_args(argv)
    meta = run_meta(argv)
    spec = ARCHETYPES / f"{args.archetype}.py"
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ARCHETYPES)!r}); import {args.archetype}; "
                    f"{args.archetype}.dataset()"], check=True)  # its files written once, before anything is timed
    root = Path("/var/tmp")
    states = ("cold",) if args.memory_limit else ("warm", "cold")
    with contextlib.ExitStack() as groups:
        if args.throttle_iops:
            groups.enter_context(throttled(args.throttle_iops, root))
        if args.memory_limit:
            groups.enter_context(memory_limited(args.memory_limit))
        scans = [scan(spec, state, Path(f"/tmp/loadtune-storage-{state}.json")) for state in states]
        if "warm" in states:
            scans.append(scan(spec, "warm", Path("/tmp/loadtune-storage-warm-seed1.json"), ["--seed", "1"]))
        loops = plain_loops(spec, args.rounds, states, args.loop_samples)
    rows = summary(scans[:len(states)], loops)
    again = repeat_warm([scans[0], scans[2]]) if "warm" in states else None
    write_json(args.out, {"meta": meta, "throttle_iops": args.throttle_iops, "memory_limit_gib": args.memory_limit,
                          "loop_samples": args.loop_samples, "scans": scans, "loops": loops, "summary": rows, "warm_again": again})
    for row in rows:
        print(json.dumps(row))
    print(json.dumps({"warm_again": again}))


if __name__ == "__main__":
    main()
