"""Does what runs between a raced loader's blocks change its rate? A two-worker loader's frozen turns
with different rests between them.

A race reads a loader that keeps both cores busy 2-7% low against a lighter neighbour, beside long runs
of a plain DataLoader (every coverage run since the race began; benchmarks/RESULTS.md, "The race").
This times one config's frozen turns (``engine.trial.duet.run_in_turns``, the race's blocks and
warm-up) with one of these between its blocks, each round also running the config alone (a trial, 6
blocks) as the yardstick:

- ``none``: nothing, its blocks back to back;
- ``idle``: both cores idle for a turn's time;
- ``one``: one core busy for a turn's time (this process spinning), the other idle, as while a loader
  without workers times its block;
- ``two``: both cores busy for a turn's time (this process and a helper spinning);
- ``duo``: a real race leg beside ``--neighbour`` workers (the lighter loader of the coverage pair).

Reported: each mode's geometric-mean block rate over the config's rate alone, per round and on
average. The modes run in a reversed order every other round.

    python benchmarks/race_neighbour.py --archetype iterable --rounds 6 --out benchmarks/race_neighbour_iterable.json

Run alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import loadtune.engine.trial.duet as duet
from loadtune.engine.race import TURN_SHARE, leg_request
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.duet import run_in_turns
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.setup import LoaderOptions, scan_timing
from loadtune.engine.trial.paired import race_orders
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.config import TrialConfig
from loadtune.model.settings import ScanOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import run_meta  # noqa: E402

HERE = Path(__file__).resolve().parent
ARCHETYPES = {"iterable": 32, "tiny_dataset": 16, "cpu_bound": 32}  # name: batch size
MODES = ("none", "idle", "one", "two", "duo")


def spin_while(flag, stop) -> None:
    """The helper: spin whenever ``flag`` is set, until ``stop``."""
    while not stop.is_set():
        if flag.wait(0.01):
            while flag.is_set():
                pass


def rest(mode: str, seconds: float, flag) -> None:
    """What runs between two blocks of the config, for ``seconds``."""
    if mode == "idle":
        time.sleep(seconds)
    elif mode in ("one", "two"):
        if mode == "two":
            flag.set()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        flag.clear()


def geomean(rates: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(r) for r in rates))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archetype", choices=sorted(ARCHETYPES), default="iterable")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--neighbour", type=int, default=0, help="workers of the duo's other loader")
    p.add_argument("--turns", type=int, default=12, help="timed blocks of the config per mode and round")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    batch = ARCHETYPES[args.archetype]
    spec = SpecRef(str(HERE / "archetypes" / f"{args.archetype}.py"))
    opts = ScanOptions()
    timing = replace(scan_timing(opts), blocks=6, target_spread=0.0)  # the scan's, 6 blocks, no early stop
    config = TrialConfig(batch, args.workers, False, 2, True)
    other = TrialConfig(batch, args.neighbour, False, 2 if args.neighbour else None, bool(args.neighbour))
    request = TrialRequest(config, "cpu", timing, LoaderOptions(shuffle=True, seed=1), opts.timeout, "fork")
    raced = leg_request(request)
    turn_s = timing.block_s * TURN_SHARE  # the race's
    ctx = mp.get_context("fork")
    flag, stop = ctx.Event(), ctx.Event()
    helper = ctx.Process(target=spin_while, args=(flag, stop), daemon=True)
    helper.start()
    mode = {"now": "none"}
    tell = duet.tell

    def resting_tell(proc, trial, ending, block_s, on_event):
        if block_s is not None:
            rest(mode["now"], turn_s, flag)
        return tell(proc, trial, ending, block_s, on_event)

    duet.tell = resting_tell
    out = {"meta": run_meta(), "config": config.label(), "neighbour": other.label(), "turn_s": turn_s, "rounds": []}
    try:
        for r in range(args.rounds):
            row = {}
            mode["now"] = "none"
            row["alone"] = geomean([b.rate for b in run_trial(spec, request).blocks])
            for m in MODES if r % 2 == 0 else MODES[::-1]:
                if m == "duo":
                    mode["now"] = "none"
                    sides = {0: (spec, raced), 1: (spec, replace(raced, config=other))}
                    got = run_in_turns(sides, list(race_orders(2, max(1, args.turns // 2), r)), turn_s)
                else:
                    mode["now"] = m
                    got = run_in_turns({0: (spec, raced)}, [(0,)] * args.turns, turn_s)
                row[m] = geomean([b.rate for b in got[0].blocks])
            out["rounds"].append(row)
            print(f"round {r}: alone {row['alone']:.0f}; "
                  + ", ".join(f"{m} {row[m] / row['alone']:.3f}" for m in MODES), flush=True)
    finally:
        stop.set()
        duet.tell = tell
    out["summary"] = {m: statistics.fmean(x[m] / x["alone"] for x in out["rounds"]) for m in MODES}
    out["summary_se"] = {m: statistics.stdev(x[m] / x["alone"] for x in out["rounds"]) / math.sqrt(len(out["rounds"]))
                         for m in MODES} if args.rounds > 1 else {}
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps({"mean over alone": out["summary"], "s.e.": out["summary_se"]}, indent=1))


if __name__ == "__main__":
    main()
