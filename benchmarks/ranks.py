"""Tuning for several ranks per node against copying the single-loader pick to every rank.

On a CPU-bound dataset (benchmarks/archetypes/cpu_bound.py), in one process and one session:

a. a default scan with one loader (``loadtune.scan``): the single-rank pick;
b. a default scan with ``--nproc-per-node`` ranks: the per-rank pick under the node's shared cores
   (the two picks should differ: N ranks copying the single-rank num_workers oversubscribe the node);
c. side by side, interleaved in a shuffled order over ``--repeats`` rounds, both picks run on the N
   ranks through the same trial machinery (``loadtune.engine.trial.harness.run_trial`` with the scan's RankSetup),
   each over the same fixed window: the node's rate in step (ranks x the slowest rank, the pace of
   synchronous training) and the aggregate (sum of the ranks' rates over the window). Target: the
   per-rank pick at least matches the naive copy, and beats it where they differ.

    python benchmarks/ranks.py --out benchmarks/results/ranks.json.gz
    python benchmarks/ranks.py --quick --out /tmp/ranks.json       # a smoke run, about a minute and a half

The figures are throughputs on this machine: run it on an otherwise idle machine. The load average
at the start and the end is recorded so that a noisy run can be recognised.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path

import loadtune
from loadtune.engine.distributed.agent import with_ranks
from loadtune.engine.distributed.layout import setup_for
from loadtune.engine.machine import usable_cores
from loadtune.engine.trial.setup import LoaderOptions, scan_timing
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.engine.spec import SpecRef

from meta import run_meta
from saved import write_json

HERE = Path(__file__).resolve().parent
SPEC = HERE / "archetypes" / "cpu_bound.py"


def options(quick: bool) -> dict:
    """The scans' timing: loadtune's defaults, or short ones for a smoke run."""
    if quick:
        return dict(warmup=0.3, block_time=0.2, blocks=4, min_blocks=3, timeout=60, confirm=0, persistent=True, prefetch=[2])
    return dict(confirm=1)


def side_by_side(configs: dict, ranks: int, opts: dict, repeats: int, seed: int) -> dict:
    """Each config on ``ranks`` ranks, ``repeats`` times, interleaved in a shuffled order."""
    scan_opts = loadtune.ScanOptions(**{k: v for k, v in opts.items() if k in loadtune.ScanOptions.__dataclass_fields__})
    timing = scan_timing(scan_opts)
    source = SpecRef.parse(SPEC)
    setup = setup_for(ranks, 1, 0, "cpu", scan_opts.blocks * scan_opts.block_time)
    runs: dict[str, list] = {name: [] for name in configs}
    rng = random.Random(seed)
    for _ in range(repeats):
        order = list(configs)
        rng.shuffle(order)
        for name in order:
            request = with_ranks(TrialRequest(configs[name], "cpu", timing, LoaderOptions(seed=seed), scan_opts.timeout, "fork"), setup)
            trial = run_trial(source, request)
            runs[name].append({
                "ok": trial.ok,
                "error": trial.error.message if trial.error else None,
                "in_step": trial.estimate.median if trial.ok else None,
                "aggregate": trial.aggregate_rate,
                "ranks": [{"rank": r.rank, "window_rate": r.window_rate, "startup_s": r.startup_s} for r in trial.ranks],
                "memory_bytes": trial.memory.peak_bytes if trial.memory else None,
            })
            print(f"  {name:>16} {configs[name].label():<22} in step {fmt(runs[name][-1]['in_step'])} "
                  f"sum {fmt(runs[name][-1]['aggregate'])}", flush=True)
    summary = {}
    for name, got in runs.items():
        ok = [r for r in got if r["ok"]]
        summary[name] = {
            "config": configs[name].label(),
            "in_step_median": statistics.median(r["in_step"] for r in ok) if ok else None,
            "aggregate_median": statistics.median(r["aggregate"] for r in ok) if ok else None,
            "runs": got,
        }
    return summary


def fmt(value) -> str:
    return f"{value:>9,.0f}" if value else "        -"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2, help="ranks per node (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="side-by-side rounds (default 5)")
    parser.add_argument("--quick", action="store_true", help="short timings and 2 rounds: a smoke run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, metavar="PATH", help="write every figure here")
    args = parser.parse_args()
    repeats = 2 if args.quick else args.repeats
    opts = options(args.quick)
    started, load_start = time.monotonic(), os.getloadavg()[0]
    meta = run_meta()
    print(f"{SPEC.name}: {usable_cores()} usable cores, load average {load_start:.2f}", flush=True)

    single = loadtune.scan(str(SPEC), seed=args.seed, **opts)
    print(f"single-rank pick: {single.recommendation.config.label()}", flush=True)
    multi = loadtune.scan(str(SPEC), seed=args.seed, nproc_per_node=args.ranks, **opts)
    print(f"{args.ranks}-rank pick (per rank): {multi.recommendation.config.label()}", flush=True)

    picks = {"per-rank pick": multi.recommendation.config, "single-rank copy": single.recommendation.config}
    if picks["per-rank pick"] == picks["single-rank copy"]:
        print("the picks agree: nothing to compare side by side", flush=True)
        measured = {}
    else:
        print(f"side by side on {args.ranks} ranks, {repeats} rounds:", flush=True)
        measured = side_by_side(picks, args.ranks, opts, repeats, args.seed)
    mine, naive = measured.get("per-rank pick"), measured.get("single-rank copy")
    ratios = {}
    if mine and naive and naive["in_step_median"] and mine["in_step_median"]:
        ratios = {"in_step": mine["in_step_median"] / naive["in_step_median"],
                  "aggregate": mine["aggregate_median"] / naive["aggregate_median"]}
        print(f"per-rank pick / single-rank copy: in step {ratios['in_step']:.2f}x, aggregate {ratios['aggregate']:.2f}x")
    out = {
        "benchmark": "ranks",
        "meta": meta,
        "load_average_start": load_start,
        "load_average_end": os.getloadavg()[0],
        "ranks": args.ranks,
        "options": opts,
        "single_rank_pick": single.recommendation.config.label(),
        "per_rank_pick": multi.recommendation.config.label(),
        "picks_differ": picks["per-rank pick"] != picks["single-rank copy"],
        "side_by_side": measured,
        "ratios": ratios,
        "scans": {"single": single.to_dict(), "ranks": multi.to_dict()},
        "wall_s": time.monotonic() - started,
    }
    if args.out:
        write_json(args.out, out)
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
