"""Does a race leg read a loader at its rate alone, and how long does it take?

A race times each loader in short blocks after it rested while its neighbours ran
(``engine.trial.duet``); its figures must be its own rate, not a head start the rest gave it. Each
``--repeats`` round runs every config alone (one trial process, the scan's timing, a screening's 6
blocks) and then one leg of all of them per ``--turns`` mode (``engine.race.run_leg``, the scan's race
timing; modes alternated from round to round): ``frozen``, the race's (resting loaders' workers
stopped), and ``settled`` (resting loaders' workers run on and settle, as ``check --against``'s).
Reported: each config's median block rate alone and in each leg, the leg's ratio of the first two
configs as the race computes it (``race_ratio``: the mean over turn pairs of the log ratio) beside
the ratio of their medians alone, and each leg's wall time.

Cases: ``storage64`` (the default), the configs a scan of ``archetypes/storage_latency.py`` races at
the far end of its worker range (64 workers with 4 and 2 batches prefetched each, and 32 with 4);
``cpu_bound``, one worker and two (one leaves a core idle, the other keeps both busy); ``iterable`` and
``tiny_dataset``, no workers against two.

    python benchmarks/race_legs.py --case cpu_bound --turns frozen,settled --repeats 6 --out benchmarks/race_legs_frozen_cpu.json
    PYTHONPATH=/tmp/before python benchmarks/race_legs.py ...   # an older loadtune (its commit is recorded; --turns frozen only)

Run alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import loadtune
from loadtune.analysis.race import race_ratio
from loadtune.engine.race import run_leg
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.setup import LoaderOptions, scan_timing
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.config import TrialConfig
from loadtune.model.settings import ScanOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import git_state, run_meta  # noqa: E402

HERE = Path(__file__).resolve().parent
CASES = {  # name: (archetype, batch size, [(workers, prefetch_factor)])
    "storage64": ("storage_latency.py", 64, [(64, 4), (64, 2), (32, 4)]),
    "cpu_bound": ("cpu_bound.py", 32, [(1, 2), (2, 2)]),
    "iterable": ("iterable.py", 32, [(0, None), (2, 2)]),
    "tiny_dataset": ("tiny_dataset.py", 16, [(0, None), (2, 2)]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), default="storage64")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--turns", default="frozen", help="comma-separated: frozen, settled (each round runs a leg of each, alternated)")
    parser.add_argument("--out", type=Path, default=Path("race_legs.json"))
    args = parser.parse_args()
    modes = args.turns.split(",")
    opts = ScanOptions()
    timing = replace(scan_timing(opts), blocks=6, target_spread=0.0)  # the scan's, 6 blocks, no early stop
    archetype, batch, knobs = CASES[args.case]
    spec = str(HERE / "archetypes" / archetype)
    configs = [TrialConfig(batch, w, False, pf, bool(w)) for w, pf in knobs]
    request = TrialRequest(configs[0], "cpu", timing, LoaderOptions(shuffle=True, seed=1), opts.timeout, "fork")
    package = Path(loadtune.__file__).resolve().parents[1]
    out = {"meta": run_meta(), "loadtune": {"path": str(package), **git_state(package)}, "turns": modes, "rounds": []}
    a, b = configs[0].label(), configs[1].label()
    for repeat in range(args.repeats):
        alone = {c.label(): statistics.median(b.rate for b in run_trial(SpecRef(spec), replace(request, config=c)).blocks)
                 for c in configs}
        got = {"alone": alone, "alone_ratio": alone[a] / alone[b]}
        for mode in modes if repeat % 2 == 0 else modes[::-1]:
            started = time.perf_counter()
            leg = run_leg(SpecRef(spec), request, configs, repeat + 1, 7 + repeat, frozen=mode == "frozen")
            wall = time.perf_counter() - started
            blocks = {c.label(): [round(x.rate) for x in t.blocks] for c, t in zip(configs, leg)}
            raced = race_ratio(leg, configs[0], configs[1])
            got[mode] = {"leg_blocks": blocks, "leg_ratio": raced.value if raced else None, "leg_s": wall}
            print(f"round {repeat} {mode:8} leg {wall:5.1f} s, ratio {got[mode]['leg_ratio']:.3f} (alone {got['alone_ratio']:.3f}); "
                  + ", ".join(f"{c.label()} {statistics.median(blocks[c.label()]):.0f} (alone {alone[c.label()]:.0f})" for c in configs),
                  flush=True)
        out["rounds"].append(got)
    rounds = out["rounds"]
    out["summary"] = {"of": f"{a} / {b}", "alone_ratio": [r["alone_ratio"] for r in rounds],
                      "alone_ratio_mean": statistics.fmean(r["alone_ratio"] for r in rounds)}
    for mode in modes:
        out["summary"][mode] = {
            "leg_ratio": [r[mode]["leg_ratio"] for r in rounds],
            "leg_ratio_mean": statistics.fmean(r[mode]["leg_ratio"] for r in rounds),
            "leg_s_median": statistics.median(r[mode]["leg_s"] for r in rounds),
            "leg_over_alone": {c.label(): [statistics.median(r[mode]["leg_blocks"][c.label()]) / r["alone"][c.label()] for r in rounds]
                               for c in configs}}
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    main()
