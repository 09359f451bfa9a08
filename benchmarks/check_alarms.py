"""Error rates of ``loadtune check`` on this machine: false alarms on an unchanged dataset and
detection of real slowdowns, on a quiet machine, with one core kept busy by another process, and with
a background process switched on and off every few seconds (the machine's pace changes mid-check).

One baseline scan (quiet; of 2 workers unless ``--workers`` says otherwise, so that the checked config's
worker processes contend for the cores with the background load), then ``--runs`` checks per cell at
default settings; cells (condition x
slowdown) are interleaved run by run, so drift of the machine over the benchmark hits every cell alike.
The dataset's work per sample is a dial (``check_dataset.py``: more operations per sample), not a
sleep: ``--extra-work 0.25`` gives each sample 25% more operations. Targets: at most 1 regression
verdict in 20 on the unchanged dataset in every condition; at least 19 in 20 caught at +25% work.
The detection rate at each step, the change the checks measured and the time each check takes are
reported.

    python benchmarks/check_alarms.py --runs 20 --out benchmarks/results/check_alarms.json.gz

A round holds PyTorch's defaults beside the config unless the config is them. ``--check-workers N``
records and checks the pick with N workers, so that they are in the rounds whatever the scan picked;
``--pairs-too`` checks each cell a second time, right after, against a copy of the baseline whose
reference holds no defaults (as an older reference does), so that the rounds hold the config and the
calibration only: what the defaults cost in time, and whether a third loader moves the ratio.

``--tolerance`` and ``--budget`` pass check's own flags to every check (default: check's defaults, 10%
and 180 s): the promises the test suite once asserted on single checks, a 20% slower dataset caught at
``--tolerance 5%`` and an unchanged one passed within ``--budget 60``, measured as rates.

``--replay JSON`` scores a saved run's rounds again with today's stopping rule and verdict
(``analysis.verdict.next_step``), round by round as ``check`` would have met them: a rule that stops
no later than the one that measured them gives exactly the verdicts it would have given.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from meta import run_meta
from saved import read_json, write_json

from loadtune.analysis.verdict import judge, next_step
from loadtune.engine.check import DEFAULT_BUDGET_S, MAX_ROUNDS, parse_tolerance
from loadtune.model.paired import PairedRound

DEFAULT_ROUNDS = 3  # check's --rounds default

HERE = Path(__file__).resolve().parent
SPEC = HERE / "check_dataset.py"
EXIT_STATUS = {0: "pass", 1: "regression", 3: "nothing measured", 4: "inconclusive"}
BUSY = [sys.executable, "-c", "while True: pass"]
# on for 4 s, off for 4 s: a neighbour's job starting and stopping while the check runs
TOGGLING = [sys.executable, "-c", "import time\nwhile True:\n    end = time.time() + 4\n    while time.time() < end: pass\n"
                                  "    time.sleep(4)"]
CONDITIONS = {"quiet": None, "one core busy": BUSY, "pace changes": TOGGLING}


def loadtune(*args: str, extra_work: float = 0.0) -> subprocess.CompletedProcess:
    slowdown = 1 - 1 / (1 + extra_work)  # the dial's own unit: a sample costs 1 / (1 - slowdown) of the work
    env = {**os.environ, "LOADTUNE_BENCH_SLOWDOWN": str(slowdown), "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "loadtune", *args], capture_output=True, text=True, env=env)


@contextlib.contextmanager
def background(cmd: list[str] | None):
    """Another process's load for the duration of one check."""
    proc = subprocess.Popen(cmd, start_new_session=True) if cmd else None
    try:
        yield
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def one_check(baseline: Path, out: Path, condition: str, extra_work: float, knobs: list[str]) -> dict:
    started = time.monotonic()
    with background(CONDITIONS[condition]):
        proc = loadtune("check", str(SPEC), "--baseline", str(baseline), "--json", str(out), *knobs, extra_work=extra_work)
    data = json.loads(out.read_text()) if out.exists() else {}
    return {"condition": condition, "extra_work": extra_work, "exit": proc.returncode,
            "loaders": 3 if data.get("defaults") else 2,
            "gain": data.get("gain"), "gain_low": data.get("gain_low"), "gain_high": data.get("gain_high"),
            "status": EXIT_STATUS.get(proc.returncode, f"exit {proc.returncode}"),
            "change": data.get("change"), "change_low": data.get("change_low"), "change_high": data.get("change_high"),
            "rounds": len(data.get("rounds", [])), "wall_s": round(time.monotonic() - started, 1),
            "reasons": data.get("reasons"),
            "paired_rounds": data.get("rounds", []),  # to score another verdict rule on the same rounds
            "stderr_tail": proc.stderr[-400:] if proc.returncode not in EXIT_STATUS else None}


def replay(run: dict, baseline_rounds: list[dict], tolerance: float = 0.10, budget_s: float = DEFAULT_BUDGET_S,
           censor: bool = False) -> dict:
    """One saved check scored again round by round with ``next_step``, its rounds taken to have come at
    the check's average pace (its wall time over its rounds) for the budget's projection. ``censor``:
    a replay that would go on past the rounds measured says "censored" (a baseline other than the
    check's own may want more rounds than were taken) instead of the verdict at the last one."""
    base = [PairedRound(**r) for r in baseline_rounds]
    rounds = [PairedRound(**r) for r in run["paired_rounds"]]
    per_round = run["wall_s"] / max(1, len(rounds))
    for n in range(1, len(rounds) + 1):
        at_end = min(MAX_ROUNDS, n + int((budget_s - n * per_round) // per_round))
        status, stop, early = next_step(base, rounds[:n], tolerance, DEFAULT_ROUNDS, at_end)
        if n == len(rounds) and not stop and censor:
            return {**run, "status": "censored", "rounds": n}
        if stop or n == len(rounds):
            _, _, change = judge(base, rounds[:n], tolerance)
            return {**run, "status": status, "rounds": n, "wall_s": round(n * per_round, 1), "early": early,
                    "change": change.value if change else None, "change_low": change.low if change else None,
                    "change_high": change.high if change else None}
    return run


def summarise(runs: list[dict]) -> list[dict]:
    cells = []
    for condition, extra, loaders in itertools.product(CONDITIONS, sorted({r["extra_work"] for r in runs}), (3, 2)):
        rs = [r for r in runs if r["condition"] == condition and r["extra_work"] == extra and r.get("loaders", 2) == loaders]
        if rs:
            walls = sorted(r["wall_s"] for r in rs)
            changes = sorted(r["change"] for r in rs if r["change"] is not None)
            gains = sorted(r["gain"] for r in rs if r.get("gain"))
            cells.append({"condition": condition, "extra_work": extra, "loaders": loaders, "checks": len(rs),
                          "median_change": changes[len(changes) // 2] if changes else None,
                          "median_gain": gains[len(gains) // 2] if gains else None,
                          "median_rounds": sorted(r["rounds"] for r in rs)[len(rs) // 2],
                          **{s: sum(r["status"] == s for r in rs) for s in ("pass", "regression", "inconclusive")},
                          "other": sum(r["status"] not in ("pass", "regression", "inconclusive") for r in rs),
                          "median_wall_s": walls[len(walls) // 2], "max_wall_s": walls[-1]})
    return cells


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20, help="checks per cell")
    p.add_argument("--extra-work", default="0,0.10,0.25", help="work added to each sample, comma-separated fractions")
    p.add_argument("--conditions", default=",".join(CONDITIONS), help="machine conditions, comma-separated")
    p.add_argument("--cells", help="instead of every condition x work step: condition:work pairs, comma-separated "
                   "(e.g. 'quiet:0.05,one core busy:0.10')")
    p.add_argument("--workers", default="2", help="the baseline scan's worker counts (default 2: the checked config "
                   "has workers, whose processes contend for the cores with the background load)")
    p.add_argument("--baseline", help="check against this saved scan instead of scanning first (another cell set "
                   "against the same baseline)")
    p.add_argument("--check-workers", type=int, help="record and check the pick with this many workers (PyTorch's "
                   "defaults are then in every round)")
    p.add_argument("--tolerance", help="check's --tolerance for every check (default: check's own, 10%%)")
    p.add_argument("--budget", type=float, help="check's --budget for every check, seconds (default: check's own, 180)")
    p.add_argument("--pairs-too", action="store_true", help="check each cell again against the reference without "
                   "PyTorch's defaults (rounds of two loaders), right after")
    p.add_argument("--out", help="the JSON written as the checks end")
    p.add_argument("--show", metavar="JSON", help="print the table of a saved run and exit")
    p.add_argument("--replay", metavar="JSON", help="score a saved run's rounds again with today's rules, print the "
                   "table and exit")
    p.add_argument("--baseline-rounds", type=int, help="with --replay: score the checks against every subset of this "
                   "many of the baseline's rounds (what a scan recording fewer reference rounds would give)")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))  # killed: the background load goes too
    if args.show:
        print_table(summarise(read_json(args.show)["runs"]))
        return
    if args.replay and args.baseline_rounds:
        replay_shorter_baselines(read_json(args.replay), args.baseline_rounds)
        return
    if args.replay:
        saved = read_json(args.replay)
        limits = {"tolerance": parse_tolerance(saved.get("tolerance") or 0.10), "budget_s": saved.get("budget_s") or DEFAULT_BUDGET_S}
        replayed = [replay(r, saved["baseline_reference"]["rounds"], **limits) for r in saved["runs"]]
        changed = sum(a["status"] != b["status"] for a, b in zip(saved["runs"], replayed))
        print_table(summarise(replayed))
        print(f"{changed} of {len(replayed)} verdicts differ from the saved run's; "
              f"{sum(r['rounds'] < o['rounds'] for r, o in zip(replayed, saved['runs']))} checks stop sooner")
        return
    if not args.out:
        p.error("--out is required to run the checks")
    run_checks(args)


def run_checks(args: argparse.Namespace) -> None:
    """The baseline (scanned and recorded, or given), then ``--runs`` checks of every cell, in turn."""
    meta = run_meta()
    if args.cells:
        cells = [(c.strip(), float(w)) for c, w in (cell.rsplit(":", 1) for cell in args.cells.split(","))]
    else:
        cells = [(c.strip(), float(w)) for c in args.conditions.split(",") for w in args.extra_work.split(",")]
    conditions = [c for c, _ in cells]
    unknown = set(conditions) - set(CONDITIONS)
    if unknown:
        sys.exit(f"unknown condition {sorted(unknown)[0]!r}; choose from {', '.join(CONDITIONS)}")
    tmp = Path(tempfile.mkdtemp(prefix="loadtune-alarms-"))
    started = time.monotonic()
    baseline, scan_s = (Path(args.baseline), None) if args.baseline else (tmp / "baseline.json", 0.0)
    if not args.baseline:
        scan = loadtune("scan", str(SPEC), "--json", str(baseline), "-q", "--workers", args.workers)
        if scan.returncode != 0:
            sys.exit(f"baseline scan failed:\n{scan.stdout}\n{scan.stderr}")
    knobs = ["--workers", str(args.check_workers)] if args.check_workers is not None else []
    limits = [*(["--tolerance", args.tolerance] if args.tolerance else []), *(["--budget", str(args.budget)] if args.budget else [])]
    if not args.baseline or other_workers(baseline, args.check_workers):
        recorded = loadtune("check", str(SPEC), "--baseline", str(baseline), "--record", *knobs)  # the reference, as CI records it
        if recorded.returncode != 0:
            sys.exit(f"recording the reference failed:\n{recorded.stdout}\n{recorded.stderr}")
        scan_s = round(time.monotonic() - started, 1)
    saved = json.loads(baseline.read_text())
    pick, reference = saved["recommendation"]["config"], saved["reference"]
    print(f"baseline ({scan_s or 'given'} s): num_workers={pick['num_workers']} batch_size={pick['batch_size']}; checked: "
          f"num_workers={reference['config']['num_workers']}, defaults in the rounds: {bool(reference.get('defaults'))}", flush=True)
    baselines = [baseline] + ([without_defaults(saved, tmp / "pairs.json")] if args.pairs_too else [])
    runs: list[dict] = []
    for i in range(args.runs):
        for (condition, extra), base in itertools.product(cells, baselines):
            r = one_check(base, tmp / f"check-{len(runs)}.json", condition, extra, knobs + limits)
            runs.append(r)
            change = f"{r['change']:+.1%} ({r['change_low']:+.1%}…{r['change_high']:+.1%})" if r["change"] is not None else "-"
            gain = f"gain {r['gain']:.2f}× ({r['gain_low']:.2f}–{r['gain_high']:.2f})" if r["gain"] else ""
            print(f"{i + 1:3d} {condition:14s} +{extra:<4.0%} {r['loaders']} loaders {r['status']:12s} {change:28s} "
                  f"{r['rounds']} rounds {r['wall_s']:5.1f} s {gain}", flush=True)
            summary = {"meta": meta, "runs_per_cell": args.runs, "tolerance": args.tolerance, "budget_s": args.budget,
                       "baseline_scan_s": scan_s, "baseline_pick": pick,
                       "baseline_reference": reference,
                       "cells": summarise(runs), "wall_s": round(time.monotonic() - started, 1), "runs": runs}
            write_json(args.out, summary)  # a cut-off run keeps what it has
    print_table(summarise(runs))


def other_workers(baseline: Path, workers: int | None) -> bool:
    """The given baseline's reference is not of ``workers`` workers (None: any will do): record one."""
    reference = json.loads(baseline.read_text()).get("reference")
    return workers is not None and (reference is None or reference["config"]["num_workers"] != workers)


def without_defaults(saved: dict, path: Path) -> Path:
    """A copy of the baseline whose reference holds no PyTorch's defaults: checks against it measure
    rounds of the config and the calibration only (the reference's ratios are the same rounds')."""
    reference = dict(saved["reference"], defaults=None)
    reference["rounds"] = [dict(r, default_rate=None, default_ratio=None) for r in reference["rounds"]]
    path.write_text(json.dumps(dict(saved, reference=reference)))
    return path


def replay_shorter_baselines(saved: dict, k: int) -> None:
    """Each saved check replayed against every ``k``-round subset of its baseline's rounds: how the
    verdicts would move had the scan recorded ``k`` reference rounds. Checks that would have wanted
    more rounds than were measured are counted apart ("censored"), not guessed."""
    base = saved["baseline_reference"]["rounds"]
    subsets = list(itertools.combinations(range(len(base)), k))
    cells: dict[tuple[str, float], collections.Counter] = {}
    for run in saved["runs"]:
        counts = cells.setdefault((run["condition"], run["extra_work"]), collections.Counter())
        for subset in subsets:
            counts[replay(run, [base[i] for i in subset], censor=True)["status"]] += 1
    print(f"{len(subsets)} subsets of {k} of the baseline's {len(base)} rounds; verdicts as shares of checks x subsets")
    print("| condition | work added | checks | pass | regression | inconclusive | censored |")
    print("|---|---|---|---|---|---|---|")
    for (condition, extra), counts in sorted(cells.items(), key=lambda c: (list(CONDITIONS).index(c[0][0]), c[0][1])):
        total = sum(counts.values())
        shares = " | ".join(f"{counts[s] / total:.1%}" for s in ("pass", "regression", "inconclusive", "censored"))
        print(f"| {condition} | +{extra:.2%} | {total // len(subsets)} | {shares} |")


def print_table(cells: list[dict]) -> None:
    """The cells as the Markdown table RESULTS.md shows."""
    print("| condition | work added | loaders | checks | pass | regression | inconclusive | median change | median gain | "
          "median rounds | median s | max s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in cells:
        change = f"{c['median_change']:+.1%}" if c["median_change"] is not None else "-"
        gain = f"{c['median_gain']:.2f}×" if c.get("median_gain") else "-"
        print(f"| {c['condition']} | +{c['extra_work']:.0%} | {c.get('loaders', 2)} | {c['checks']} | {c['pass']} | {c['regression']} | "
              f"{c['inconclusive']} | {change} | {gain} | {c.get('median_rounds', '-')} | {c['median_wall_s']:.0f} | "
              f"{c['max_wall_s']:.0f} |")


if __name__ == "__main__":
    main()
