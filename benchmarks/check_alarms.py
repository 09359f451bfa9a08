"""False and true alarms of ``loadtune check`` (issue 5): against one baseline, run ``check`` N times
on the unchanged dataset (no alarm allowed at the default 10% tolerance) and N times on a variant
whose samples cost 25% more CPU, i.e. 20% fewer samples/s (must fail every time). Runs alternate,
so drift of the machine hits both sides alike.

    python benchmarks/check_alarms.py --runs 10 --out benchmarks/check_alarms.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEC = HERE / "check_dataset.py"


def loadtune(*args: str, work: float = 1.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "LOADTUNE_BENCH_WORK": str(work), "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "loadtune", *args], capture_output=True, text=True, env=env)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--slow-work", type=float, default=1.25, help="per-sample work of the slowed variant (1.25: 20%% fewer samples/s)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="loadtune-alarms-"))
    baseline = tmp / "baseline.json"
    started = time.monotonic()
    scan = loadtune("scan", str(SPEC), "--json", str(baseline), "-q")
    if scan.returncode != 0:
        sys.exit(f"baseline scan failed:\n{scan.stdout}\n{scan.stderr}")
    pick = json.loads(baseline.read_text())["recommendation"]["config"]
    print(f"baseline pick: num_workers={pick['num_workers']} batch_size={pick['batch_size']}", flush=True)
    runs = []
    for i in range(args.runs):
        for label, work in (("unchanged", 1.0), ("20% slower", args.slow_work)):
            out = tmp / f"check-{label[:4]}-{i}.json"
            proc = loadtune("check", str(SPEC), "--baseline", str(baseline), "--json", str(out), work=work)
            data = json.loads(out.read_text()) if out.exists() else {}
            runs.append({"variant": label, "exit": proc.returncode, "change": data.get("change"),
                         "change_low": data.get("change_low"), "change_high": data.get("change_high")})
            change = f"{data['change']:+.1%}" if data.get("change") is not None else "-"
            print(f"  {i + 1:2d} {label:10s} exit {proc.returncode}  normalised change {change}", flush=True)
    same = [r for r in runs if r["variant"] == "unchanged"]
    slow = [r for r in runs if r["variant"] != "unchanged"]
    summary = {
        "command": "python benchmarks/check_alarms.py --runs %d --out %s" % (args.runs, args.out),
        "runs_per_variant": args.runs,
        "false_alarms": sum(r["exit"] == 1 for r in same),
        "missed_regressions": sum(r["exit"] != 1 for r in slow),
        "other_exits": sorted({r["exit"] for r in runs} - {0, 1}),
        "wall_s": round(time.monotonic() - started, 1),
        "baseline_pick": pick,
        "runs": runs,
    }
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(f"false alarms {summary['false_alarms']}/{args.runs} (target 0), "
          f"regressions caught {args.runs - summary['missed_regressions']}/{args.runs} (target all); "
          f"{summary['wall_s']} s")


if __name__ == "__main__":
    main()
