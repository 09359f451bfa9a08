"""How noisy are loaders with many workers, and why? Within-trial and turn-pair spread against the
number of workers, the block length and the threads each process runs.

On a 16-core machine, 8-worker loaders read +-37-50% within a trial and the race's turn pairs +-20%
a leg (benchmarks/RESULTS.md, the H100 runs). This reproduces the conditions on any machine: loaders
with more workers than cores, on ``archetypes/many_workers.py`` (16-64 workers waiting on storage
with a heavy tail of slow reads) and on ``archetypes/cpu_bound.py`` (CPU work, workers up to 4x the
cores). For each worker count and block length:

- a trial alone, as the screening runs it (``engine.trial.harness.run_trial``, the scan's timing with
  ``--block-s``): its blocks' rates, their relative spread (the median absolute deviation over the
  median, and the trial's own 95% half-width);
- a race of an identical pair (the loader with and without ``persistent_workers``: no epoch ends in a
  race, so the two are one loader twice), as a scan races it (``engine.race.race``, the default
  policy: legs until +-5% or the legs are spent): each leg's turn-pair half-width and the race's
  final one.

The threads each process runs are set from outside: ``OMP_NUM_THREADS=1 python benchmarks/many_workers.py``
gives the trial's main process one intra-op thread (the workers already run one each).

    python benchmarks/many_workers.py --out benchmarks/results/many_workers.json.gz

Run alone on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from loadtune.analysis.comparison import compare
from loadtune.analysis.race import RacePolicy, legs, pair_logs, race_ratio
from loadtune.engine.race import RaceRun, race, run_leg
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.model.config import TrialConfig
from loadtune.model.settings import NOISE_FLOOR, ScanOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import run_meta  # noqa: E402
from saved import write_json  # noqa: E402

HERE = Path(__file__).resolve().parent
CASES = {"jittery": (HERE / "archetypes" / "many_workers.py", 32), "cpu_bound": (HERE / "archetypes" / "cpu_bound.py", 32)}


def request_for(config: TrialConfig, block_s: float, seed: int) -> TrialRequest:
    opts = ScanOptions()
    timing = Timing(warmup_s=opts.warmup, block_s=block_s, blocks=opts.blocks, max_s=opts.timeout * 0.8,
                    min_blocks=opts.min_blocks, target_spread=opts.target_spread)
    return TrialRequest(config, "cpu", timing, LoaderOptions(shuffle=True, seed=seed), opts.timeout, "fork")


def halfwidth(low: float, value: float, high: float) -> float:
    return max(high / value - 1, 1 - low / value)


def alone(spec: Path, config: TrialConfig, block_s: float, seed: int) -> dict:
    trial = run_trial(SpecRef(str(spec)), request_for(config, block_s, seed))
    rates = [b.rate for b in trial.blocks]
    est = trial.estimate
    med = statistics.median(rates) if rates else None
    return {"ok": trial.ok, "rates": rates, "batches": [b.batches for b in trial.blocks],
            "mad": statistics.median(abs(r - med) for r in rates) / med if med else None,
            "halfwidth": halfwidth(est.low, est.median, est.high) if est and est.median else None}


def identical_race(spec: Path, config: TrialConfig, block_s: float, seed: int, max_legs: int) -> dict:
    a, b = config, TrialConfig(config.batch_size, config.num_workers, config.pin_memory, config.prefetch_factor,
                               not config.persistent_workers)
    request = request_for(a, block_s, seed)
    trials: list = []
    started = time.monotonic()
    run = RaceRun(lambda cs, n: run_leg(SpecRef(str(spec)), request, cs, n, seed * 100 + n), lambda s: True, trials.extend)
    ended = race(trials, [a, b], RacePolicy(NOISE_FLOOR, max_legs), run)
    r = race_ratio(trials, a, b)
    per_leg = []
    for leg in legs(trials).values():
        if a in leg and b in leg and leg[a].ok and leg[b].ok:
            c = compare([pair_logs(leg[a], leg[b])])
            per_leg.append(halfwidth(c.low, c.value, c.high) if c else None)
    return {"ended": ended, "seconds": time.monotonic() - started, "legs": r.groups if r else 0,
            "ratio": r.value if r else None, "halfwidth": halfwidth(r.low, r.value, r.high) if r else None,
            "leg_halfwidths": per_leg}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jittery-workers", default="4,16,32,64")
    p.add_argument("--cpu-workers", default="2,4,8")
    p.add_argument("--block-s", default="0.5", help="comma-separated block lengths (the scan's default 0.5)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--legs", type=int, default=ScanOptions().race_legs)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    grid = [("jittery", int(w)) for w in args.jittery_workers.split(",") if w] + \
           [("cpu_bound", int(w)) for w in args.cpu_workers.split(",") if w]
    out = {"meta": run_meta(), "command": " ".join(sys.argv), "main_threads": torch.get_num_threads(), "runs": []}
    for i in range(args.repeats):
        for block_s in [float(s) for s in args.block_s.split(",")]:
            for case, workers in grid:
                spec, batch = CASES[case]
                config = TrialConfig(batch, workers, False, 2, True)
                solo = alone(spec, config, block_s, i)
                raced = identical_race(spec, config, block_s, i, args.legs)
                row = {"case": case, "workers": workers, "block_s": block_s, "repeat": i, "alone": solo, "race": raced}
                out["runs"].append(row)
                legs_hw = [round(h * 100, 1) for h in raced["leg_halfwidths"] if h is not None]
                print(f"{case} w{workers} block {block_s}s: alone MAD {solo['mad'] and solo['mad'] * 100:.1f}% "
                      f"hw {solo['halfwidth'] and solo['halfwidth'] * 100:.1f}% | race {raced['legs']} legs "
                      f"hw {raced['halfwidth'] and raced['halfwidth'] * 100:.1f}% legs {legs_hw} {raced['seconds']:.0f}s",
                      flush=True)
                write_json(args.out, out)


if __name__ == "__main__":
    main()
