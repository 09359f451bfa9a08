"""How much one race turn's rate spreads, and whether freezing a loader between its turns adds to it.

A race's ratio interval is as wide as its turn pairs spread (``analysis.race``), so this times one
loader, in this one process, two ways with blocks of a race turn's length (half a ``--block-time``):

- ``plain``: blocks back to back in one continuous run (``Meter.phase``), as a trial times them;
- ``frozen``: the race's turns (``paired.frozen_turn``), its workers stopped between them for
  ``--rest`` seconds (the other racers' turns, in a race).

Each round builds the loader afresh for each way, in alternating order. Reported per round and on
average: the standard deviation of a block's log rate, and the geometric-mean rate. No neighbour
runs here: what a turn spreads beside other loaders is in the scans' own figures (``scan_time.py``).

    python benchmarks/turn_spread.py --archetype cpu_bound --workers 2 --out /tmp/turn_spread_cpu_bound.json

(benchmarks/turn_spread.json holds one such run per archetype, each under its own name with its meta.)

Run alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from race_coverage import PAIRS, worker_config
from race_neighbour import geomean

from loadtune.engine.race import TURN_SHARE
from loadtune.engine.spec import load_spec
from loadtune.engine.trial.setup import LoaderOptions, scan_timing
from loadtune.engine.trial.paired import freeze, frozen_turn, open_meters
from loadtune.model.settings import ScanOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import run_meta  # noqa: E402

HERE = Path(__file__).resolve().parent
WAYS = ("plain", "frozen")


def blocks(spec, config, timing, way: str, count: int, rest_s: float) -> list[float]:
    """``count`` block rates of one freshly built loader, timed ``way``."""
    meters, _ = open_meters({0: (spec, config)}, torch.device("cpu"), timing, LoaderOptions(shuffle=True, seed=1),
                            None, time.perf_counter() + 600, lambda *args: None, whole_epochs=False)
    meter, turn_s, rates = meters[0], timing.block_s * TURN_SHARE, []
    if way == "frozen":
        freeze(meter)
    for _ in range(count):
        deadline = time.perf_counter() + 60
        if way == "frozen":
            time.sleep(rest_s)
            rates.append(frozen_turn(meter, config, turn_s, deadline).rate)
        else:
            rates.append(meter.phase(turn_s, 1, deadline).rate)
    if way == "frozen":
        freeze(meter, stop=False)  # its workers must hear the loader's shutdown
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archetype", choices=sorted(PAIRS), default="cpu_bound")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--rest", type=float, default=0.3, help="seconds a frozen loader rests between its turns")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    path, batch, *_ = PAIRS[args.archetype]
    spec = load_spec(str((HERE / path).resolve()))
    config = worker_config(batch, args.workers)
    timing = scan_timing(ScanOptions())
    out = {"meta": run_meta(), "command": " ".join(sys.argv), "config": config.label(), "rounds": []}
    for r in range(args.rounds):
        row = {}
        for way in WAYS if r % 2 == 0 else WAYS[::-1]:
            rates = blocks(spec, config, timing, way, args.blocks, args.rest)
            row[way] = {"sd": statistics.stdev(math.log(x) for x in rates), "rate": geomean(rates)}
        out["rounds"].append(row)
        print(f"round {r}: " + ", ".join(f"{w} ±{row[w]['sd']:.1%} at {row[w]['rate']:.0f}/s" for w in WAYS), flush=True)
    out["summary"] = {w: {"sd": statistics.fmean(x[w]["sd"] for x in out["rounds"]),
                          "rate": statistics.fmean(x[w]["rate"] for x in out["rounds"])} for w in WAYS}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    main()
