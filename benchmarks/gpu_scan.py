"""The README example's default scan, timed wall clock, and what its JSON says: for one call on a GPU machine.

Runs ``python -m loadtune scan SPEC FLAGS --json SCAN`` (the README's quick-start flags, no budget),
stopping it with Ctrl-C's signal at ``--timeout`` (it then saves what it measured), and writes a summary:
the wall time, the pick, its gain over PyTorch's defaults with the interval, the race's ratios to the
pick per leg (each leg's turn pairs alone: how wide one leg leaves them) and pooled, the per-block
spread of every trial, and the three pairs whose race coverage ``race_coverage.py`` then measures
against plain loops (``pairs``: two worker counts at the pick's other knobs; ``non_blocking`` against
``stream`` at the pick; the pick against PyTorch's defaults).

    python benchmarks/gpu_scan.py --scan /tmp/out/scan_images.json --out /tmp/out/gpu_scan.json
    python benchmarks/gpu_scan.py --spreads /tmp/out/scan_images.json   # the trials' per-block spreads, printed
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from meta import run_meta
from saved import read_json, write_json

from loadtune.analysis.race import legs, race_ratio, relative_to
from loadtune.model.config import TrialConfig, pytorch_default
from loadtune.model.results import ScanResult

ROOT = Path(__file__).resolve().parent.parent
README_FLAGS = "--workers 0,1,2,4 --prefetch 2 --no-persistent"  # the README's quick start
GRACE_S = 20  # after Ctrl-C's signal, for the scan to save and exit


def run_scan(spec: str, flags: list[str], json_path: Path, timeout: float) -> dict:
    """The scan in a session of its own, its output passed through; at ``timeout`` it is interrupted as
    Ctrl-C does (it saves what it measured), then killed if it has not exited."""
    cmd = [sys.executable, "-m", "loadtune", "scan", spec, *flags, "--json", str(json_path)]
    print("$", shlex.join(cmd), flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    try:
        rc, timed_out = proc.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            rc = proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        timed_out = True
    return {"command": shlex.join(cmd), "rc": rc, "timed_out": timed_out, "seconds": round(time.monotonic() - started, 1)}


def spreads(result: ScanResult) -> list[dict]:
    """Every trial's blocks: how many, the interval's half-width the table would print for that run
    alone, and the range of its block rates over their median."""
    out = []
    for t in result.trials:
        rates = [b.rate for b in t.blocks]
        est = t.estimate
        out.append({"config": result.label(t.config), "leg": t.leg, "round": t.round, "status": t.status, "blocks": len(rates),
                    "median": est.median if est else None, "halfwidth": est.rel_spread if est else None,
                    "range": (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 and est else None,
                    "wall_s": round(t.wall_s, 2)})
    return out


def ratio_dict(r) -> dict:
    return {"ratio": r.value, "low": r.low, "high": r.high, "halfwidth": r.halfwidth, "pairs": r.pairs, "legs": r.groups}


def race_summary(result: ScanResult, pick: TrialConfig) -> dict:
    """The raced configs' ratios to the pick: each leg's own (its turn pairs alone), and all legs pooled."""
    per_leg = []
    for number, leg in sorted(legs(result.trials).items()):
        ratios = {result.label(c): ratio_dict(r) for c in leg if c != pick and pick in leg
                  and (r := race_ratio(list(leg.values()), c, pick)) is not None}
        per_leg.append({"leg": number, "configs": [result.label(c) for c in leg], "wall_s": round(sum(t.wall_s for t in leg.values()), 1),
                        "vs_pick": ratios})
    pooled = {result.label(c): ratio_dict(r) for c, r in relative_to(result.trials, pick).items()}
    return {"legs": per_leg, "pooled_vs_pick": pooled}


def pairs_for(pick: TrialConfig | None, accelerator: bool, batch: int) -> dict:
    """The coverage step's three pairs, as the table writes configs: two worker counts at the pick's other
    knobs; ``non_blocking`` against ``stream`` at the pick (on a CPU, which moves nothing: persistent
    workers on and off); the pick against PyTorch's defaults (the best guess when the scan picked none)."""
    if pick is None or not pick.num_workers:
        base = TrialConfig(batch, 4, accelerator, 2, False, "non_blocking" if accelerator else "none")
    else:
        base = pick
    workers = [base.with_knobs(num_workers=8), base.with_knobs(num_workers=4)]
    if accelerator:
        pinned = base.with_knobs(pin_memory=True)
        other = [pinned.with_knobs(transfer="non_blocking"), pinned.with_knobs(transfer="stream")]
    else:
        other = [base.with_knobs(persistent_workers=True), base.with_knobs(persistent_workers=False)]
    defaults = pytorch_default(base.batch_size, accelerator)
    versus = [pick if pick is not None and pick != defaults else base, defaults]
    return {"workers": [c.label() for c in workers], "transfer": [c.label() for c in other],
            "defaults": [c.label() for c in versus]}


def summarise(result: ScanResult | None, ran: dict, batch: int) -> dict:
    """What the call answers of the scan; the pairs for coverage whatever happened to it."""
    accelerator = result.settings.device.startswith("cuda") if result else True
    if result is None or result.recommendation is None:
        return {**ran, "state": result.state if result else None, "pairs": pairs_for(None, accelerator, batch),
                "pairs_from": "a guess: the scan gave no pick"}
    rec = result.recommendation
    pick = rec.config
    return {**ran, "state": result.state, "device": result.settings.device, "trials": len(result.trials),
            "raced_legs": max((t.leg for t in result.trials), default=0),
            "pick": result.label(pick), "pick_config": pick.to_dict(),
            "gain": {"baseline": result.label(rec.baseline) if rec.baseline else None, "value": rec.speedup,
                     "low": rec.speedup_low, "high": rec.speedup_high, "pairs": rec.speedup_pairs, "unsettled": rec.gain_unsettled,
                     # the defaults picked: against the best config with workers
                     "versus": {"config": result.label(rec.versus.config), "value": rec.versus.value, "low": rec.versus.low,
                                "high": rec.versus.high} if rec.versus else None},
            "race": race_summary(result, pick), "spreads": spreads(result), "notes": result.notes,
            "skipped": [f"{s.what}: {s.why}" for s in result.skipped],
            "pairs": pairs_for(pick, accelerator, pick.batch_size), "pairs_from": "the pick"}


def saved_pairs(summary: Path | None, batch: int) -> dict:
    """The pairs of a summary written before, or the guess for this machine where there is none."""
    if summary is not None and summary.exists():
        return read_json(summary)["pairs"]
    import torch

    return pairs_for(None, torch.cuda.is_available(), batch)


def show(summary: dict) -> None:
    print(f"scan: rc {summary['rc']}{' (stopped at its time limit)' if summary['timed_out'] else ''}, "
          f"{summary['seconds']} s, state {summary.get('state')}")
    if "pick" in summary:
        g, v = summary["gain"], summary["gain"]["versus"]
        if g["baseline"] == summary["pick"]:
            gain = f"the defaults win: {v['value']:.2f}× {v['config']} ({v['low']:.2f}–{v['high']:.2f})" if v else "the defaults win"
        elif g["value"] is not None:
            gain = f"{g['value']:.2f}× ({g['low']:.2f}–{g['high']:.2f}) {g['baseline']}"
        else:
            gain = f"unsettled against {g['baseline']}: {g['unsettled']}"
        print(f"pick {summary['pick']}: {gain}; {summary['trials']} trials, {summary['raced_legs']} legs")
        for leg in summary["race"]["legs"]:
            ratios = ", ".join(f"{k} ±{v['halfwidth']:.0%}" for k, v in leg["vs_pick"].items())
            print(f"  leg {leg['leg']} ({leg['wall_s']} s): {ratios or 'no ratio to the pick'}")
        show_spreads(summary["spreads"])
    print("pairs for coverage:", summary["pairs"], f"({summary['pairs_from']})")


def show_spreads(rows: list[dict]) -> None:
    print("per-block spreads: config, leg, blocks, ± of the run alone, range of its blocks / median")
    for r in rows:
        half = f"±{r['halfwidth']:.1%}" if r["halfwidth"] is not None else "-"
        span = f"{r['range']:.1%}" if r["range"] is not None else "-"
        print(f"  {r['config']:<40} leg {r['leg']} {r['blocks']:>2} blocks {half:>8} range {span:>7} {r['status']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default="examples/images.py", help="relative to the checkout's root")
    p.add_argument("--flags", default=README_FLAGS, help="the scan's flags (default: the README's quick start)")
    p.add_argument("--scan", type=Path, help="where the scan's JSON goes")
    p.add_argument("--out", type=Path, help="where the summary goes")
    p.add_argument("--timeout", type=float, default=170.0, help="seconds before the scan is interrupted (it saves first)")
    p.add_argument("--batch", type=int, default=32, help="the spec's batch size, for the pairs when the scan gave no pick")
    p.add_argument("--spreads", type=Path, help="print the per-block spreads of a saved scan's trials, run nothing")
    p.add_argument("--pair", choices=["workers", "transfer", "defaults"],
                   help="print that pair as A,B from the summary at --out (a guess without one), run nothing")
    args = p.parse_args()
    if args.spreads:
        return show_spreads(spreads(ScanResult.load(args.spreads)))
    if args.pair:
        return print(",".join(saved_pairs(args.out, args.batch)[args.pair]))
    if not args.scan or not args.out:
        p.error("--scan and --out are needed to run the scan")
    for path in (args.scan, args.out):
        path.parent.mkdir(parents=True, exist_ok=True)
    meta = run_meta()
    ran = run_scan(args.spec, shlex.split(args.flags), args.scan.resolve(), args.timeout)
    try:
        result = ScanResult.load(args.scan) if args.scan.exists() else None
    except Exception as exc:  # a file cut short: the summary says what ran, and gives the pairs all the same
        print(f"the scan's JSON could not be read: {exc}", flush=True)
        result = None
    summary = {"meta": meta, **summarise(result, ran, args.batch)}
    write_json(args.out, summary)
    show(summary)


if __name__ == "__main__":
    main()
