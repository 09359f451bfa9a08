"""Storage: scans of a file-backed dataset in each page-cache state, held against plain loops in the
same state.

A folder of small files (``archetypes/small_files.py``: 20,000 files of 48 KiB) is scanned with
``--storage warm`` and ``--storage cold``; then plain ``DataLoader`` loops (fresh processes with no
loadtune code in them, interleaved, ``shuffle=True``) time the configs in both states: warm, every
file in the page cache; cold, every file dropped from the cache before each run, one epoch at most
(what every epoch of a dataset larger than RAM reads). Targets: each scan's pick at least 0.95 of the
plain loops' best in its state; its gain over the defaults within its interval of the plain loops'
gain; no ``±`` above 100% printed.

    python benchmarks/storage.py --rounds 3 --out benchmarks/results/storage_small_files.json.gz

Run alone: nothing else on the machine meanwhile (other reads move the disk's speed most of all).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from meta import REPO, run_meta
from saved import write_json

SPEC = REPO / "benchmarks" / "archetypes" / "small_files.py"
CONFIGS = {  # label -> DataLoader arguments, as the scan labels them
    "w0": {"num_workers": 0},
    "w2 pf2": {"num_workers": 2, "prefetch_factor": 2},
    "w4 pf2": {"num_workers": 4, "prefetch_factor": 2},
    "w8 pf2": {"num_workers": 8, "prefetch_factor": 2},
}
BATCH = 32

LOOP = """
import importlib.util, json, os, sys, time
from torch.utils.data import DataLoader
spec = importlib.util.spec_from_file_location("user_spec", sys.argv[1]); mod = importlib.util.module_from_spec(spec)
sys.modules["user_spec"] = mod; spec.loader.exec_module(mod)
ds = mod.dataset()
if sys.argv[3] == "cold":
    for p in ds.paths:
        fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
loader = DataLoader(ds, shuffle=True, batch_size=int(sys.argv[4]), **json.loads(sys.argv[2]))
warm, samples, t0 = 2 * max(1, loader.num_workers), 0, None
for i, batch in enumerate(loader):  # one epoch at most: no sample read twice
    if i == warm:
        t0, samples = time.perf_counter(), 0
    elif t0 is not None:
        samples += len(batch[0])
print(samples / (time.perf_counter() - t0))
"""


def plain_loop(label: str, state: str) -> float:
    out = subprocess.run([sys.executable, "-c", LOOP, str(SPEC), json.dumps(CONFIGS[label]), state, str(BATCH)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def plain_loops(rounds: int) -> dict[str, dict[str, list[float]]]:
    """Every config in both states, interleaved: round by round, each state, each config."""
    got: dict[str, dict[str, list[float]]] = {s: {c: [] for c in CONFIGS} for s in ("warm", "cold")}
    for r in range(rounds):
        for state in ("warm", "cold"):
            labels = list(CONFIGS) if r % 2 == 0 else list(reversed(CONFIGS))
            if state == "warm":  # the files in the page cache before the warm runs
                plain_loop("w0", "warm")
            for label in labels:
                got[state][label].append(plain_loop(label, state))
                print(f"round {r + 1} {state} {label}: {got[state][label][-1]:,.0f} samples/s", file=sys.stderr)
    return got


def scan(state: str, out: Path) -> dict:
    """A default scan in ``state``: its pick, gain and the widest ± it printed."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "loadtune", "scan", str(SPEC), "--batch-size", str(BATCH), "--storage", state,
                           "--json", str(out)], capture_output=True, text=True, env={**__import__("os").environ, "COLUMNS": "120"})
    wall = time.monotonic() - started
    data = json.loads(out.read_text())
    rec = data["recommendation"]
    widths = [float(w.replace(",", "")) for w in re.findall(r"±([\d,.]+)%", proc.stdout)]
    return {"state": state, "exit": proc.returncode, "wall_s": round(wall, 1), "pick": rec["config"], "speedup": rec["speedup"],
            "speedup_low": rec["speedup_low"], "speedup_high": rec["speedup_high"], "widest_pm": max(widths, default=None),
            "storage": {k: v for k, v in data["storage"].items() if k != "other"},
            "other": [(t["config"]["num_workers"], (t.get("samples_per_s") or {}).get("median")) for t in data["storage"]["other"]],
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
                     "scan_gain_interval": [s["speedup_low"], s["speedup_high"]], "widest_pm": s["widest_pm"], "wall_s": s["wall_s"]})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "storage_small_files.json.gz")
    args = parser.parse_args(argv)
    meta = run_meta(argv)
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(SPEC.parent)!r}); import small_files; small_files.write_files()"],
                   check=True)
    scans = [scan(state, Path(f"/tmp/loadtune-storage-{state}.json")) for state in ("warm", "cold")]
    loops = plain_loops(args.rounds)
    rows = summary(scans, loops)
    write_json(args.out, {"meta": meta, "scans": scans, "loops": loops, "summary": rows})
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
