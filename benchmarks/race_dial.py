"""Can the race tell configs 10% apart, and does it leave identical configs alone? Real races on a
dataset whose answer is known.

Every sample of ``archetypes/storage_latency.py`` waits about 4.5 ms and computes little, so throughput
is workers / latency well past the cores: ``w10`` and ``w11`` are 10% apart by construction, while
``w10`` with and without ``persistent_workers`` are the same (it acts only at an epoch's end, and no
epoch of 100,000 samples ends inside a race). A first version compared ``w10 pf2`` with ``w10 pf3``,
taken for identical: the race read pf3 1-4% ahead in all six races run, so they are not an identical
pair (a likely cause, not verified by long runs: with in-order delivery a worker whose two slots are
full idles while the main process waits on a slower one, and a third slot absorbs the jitter).

For each repeat the two pairs are raced as a scan races them (``engine.race.race``, legs of real trial
processes, the scan's default legs and floor), alternating
which pair goes first. Reported: how often the 10% pair was resolved (w11 leader, w10 slower), how
often the identical pair was called different (either one slower), the ratios and their intervals,
legs and seconds per race.

    python benchmarks/race_dial.py --repeats 20 --out benchmarks/results/race_dial_frozen.json.gz

Run alone on the machine: anything else running competes with the trials for the cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from loadtune.analysis.comparison import SLOWER
from loadtune.analysis.race import RacePolicy, verdict
from loadtune.engine.race import RaceRun, race, run_leg
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.config import TrialConfig
from loadtune.model.settings import NOISE_FLOOR, ScanOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import run_meta  # noqa: E402
from saved import write_json  # noqa: E402

HERE = Path(__file__).resolve().parent
SPEC = str(HERE / "archetypes" / "storage_latency.py")
BATCH = 16
W10, W11 = TrialConfig(BATCH, 10, False, 2, True), TrialConfig(BATCH, 11, False, 2, True)
W10_RESTARTING = TrialConfig(BATCH, 10, False, 2, False)
PAIRS = {"ten_percent": (W10, W11), "identical": (W10, W10_RESTARTING)}


def one_race(configs: tuple[TrialConfig, TrialConfig], seed: int, legs: int) -> dict:
    opts = ScanOptions()
    timing = Timing(warmup_s=opts.warmup, block_s=opts.block_time, blocks=opts.blocks, max_s=opts.timeout * 0.8,
                    min_blocks=opts.min_blocks)
    request = TrialRequest(configs[0], "cpu", timing, LoaderOptions(shuffle=True, seed=seed), opts.timeout, "fork")
    trials: list = []
    started = time.monotonic()
    run = RaceRun(lambda cs, n: run_leg(SpecRef(SPEC), request, cs, n, seed * 100 + n), lambda s: True, trials.extend)
    how = race(trials, list(configs), RacePolicy(NOISE_FLOOR, legs), run)
    v = verdict(trials, NOISE_FLOOR)
    other = next(s for s in v.standings if s.config != v.leader)
    r = other.ratio
    return {"leader": v.leader.label(), "other": other.config.label(), "status": other.status, "ended": how,
            "ratio": r.value if r else None, "low": r.low if r else None, "high": r.high if r else None,
            "pairs": r.pairs if r else 0, "legs": max(t.round for t in trials), "seconds": time.monotonic() - started}


def summary(runs: dict) -> dict:
    ten, same = runs["ten_percent"], runs["identical"]
    resolved = sum(1 for r in ten if r["leader"] == W11.label() and r["status"] == SLOWER)
    different = sum(1 for r in same if r["status"] == SLOWER)
    halfwidths = [max(r["high"] / r["ratio"] - 1, 1 - r["low"] / r["ratio"]) for r in ten + same if r["ratio"]]
    return {"ten_percent_resolved": resolved, "ten_percent_races": len(ten),
            "identical_called_different": different, "identical_races": len(same),
            "median_halfwidth": statistics.median(halfwidths) if halfwidths else None,
            "median_seconds": {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items() if v},
            "longest_seconds": {k: max(r["seconds"] for r in v) for k, v in runs.items() if v}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--legs", type=int, default=3, help="the race's legs at most (--race-legs)")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    out = {"meta": run_meta(), "command": " ".join(sys.argv), "runs": {k: [] for k in PAIRS}}
    for i in range(args.repeats):
        names = list(PAIRS) if i % 2 == 0 else list(PAIRS)[::-1]
        for name in names:
            got = one_race(PAIRS[name], i, args.legs)
            out["runs"][name].append(got)
            print(f"{i + 1}/{args.repeats} {name}: {got['other']} vs {got['leader']} {got['status']} "
                  f"{got['ratio'] and round(got['ratio'], 3)} ({got['low'] and round(got['low'], 3)}–"
                  f"{got['high'] and round(got['high'], 3)}) legs {got['legs']} {got['seconds']:.0f}s", flush=True)
        out["summary"] = summary(out["runs"])
        write_json(args.out, out)
    print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    main()
