"""Does a race leg read a loader at its rate alone? Many-worker loaders on the storage-bound archetype.

A race times each loader in short blocks after it rested while its neighbours ran
(``engine.trial.duet``); its figures must be its own rate, not a head start the rest gave it. Each
``--repeats`` round runs every config alone (one trial process, the scan's timing, a screening's 6
blocks) and then one leg of all of them (``engine.race.run_leg``, the scan's race timing), and reports
each config's median block rate in both. The configs are those a scan of
``benchmarks/archetypes/storage_latency.py`` races at the far end of its worker range: 64 workers with
4 and 2 batches prefetched each, and 32 with 4. ``--case cpu_bound``: one worker and two on the
CPU-bound archetype, where one leaves a core idle and the other keeps both busy. Each round also
reports the leg's ratio of the first two configs as the race computes it (``race_ratio``: the mean
over turn pairs of the log ratio, which a few dipped blocks move where a median does not) beside
the ratio of their medians alone.

    python benchmarks/race_legs.py --repeats 3 --out benchmarks/race_legs.json
    python benchmarks/race_legs.py --case cpu_bound --repeats 8 --out /tmp/race_legs_cpu.json
    PYTHONPATH=/tmp/before python benchmarks/race_legs.py ...   # an older loadtune (its commit is recorded)

Run alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import loadtune
from loadtune.analysis.race import race_ratio
from loadtune.engine.race import run_leg
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.measure import LoaderOptions, scan_timing
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.config import TrialConfig
from loadtune.model.settings import ScanOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import git_state, run_meta  # noqa: E402

HERE = Path(__file__).resolve().parent
CASES = {  # name: (archetype, batch size, [(workers, prefetch_factor)])
    "storage64": ("storage_latency.py", 64, [(64, 4), (64, 2), (32, 4)]),
    "cpu_bound": ("cpu_bound.py", 32, [(1, 2), (2, 2)]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), default="storage64")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("race_legs.json"))
    args = parser.parse_args()
    opts = ScanOptions()
    timing = replace(scan_timing(opts), blocks=6, target_spread=0.0)  # the scan's, 6 blocks, no early stop
    archetype, batch, knobs = CASES[args.case]
    spec = str(HERE / "archetypes" / archetype)
    configs = [TrialConfig(batch, w, False, pf, True) for w, pf in knobs]
    request = TrialRequest(configs[0], "cpu", timing, LoaderOptions(shuffle=True, seed=1), opts.timeout, "fork")
    package = Path(loadtune.__file__).resolve().parents[1]
    out = {"meta": run_meta(), "loadtune": {"path": str(package), **git_state(package)}, "rounds": []}
    for repeat in range(args.repeats):
        alone = {c.label(): statistics.median(b.rate for b in run_trial(SpecRef(spec), replace(request, config=c)).blocks)
                 for c in configs}
        leg = run_leg(SpecRef(spec), request, configs, repeat + 1, 7 + repeat)
        legs = {c.label(): [round(b.rate) for b in t.blocks] for c, t in zip(configs, leg)}
        a, b = configs[0].label(), configs[1].label()
        raced = race_ratio(leg, configs[0], configs[1])
        out["rounds"].append({"alone": alone, "leg_blocks": legs, "alone_ratio": alone[a] / alone[b],
                              "leg_ratio": raced.value if raced else None})
        for c in configs:
            print(f"{c.label():24} alone {alone[c.label()]:8.0f}  leg {statistics.median(legs[c.label()]):8.0f}  "
                  f"blocks {legs[c.label()]}", flush=True)
    out["summary"] = {c.label(): {"alone_median": statistics.median(r["alone"][c.label()] for r in out["rounds"]),
                                  "leg_median": statistics.median(b for r in out["rounds"] for b in r["leg_blocks"][c.label()]),
                                  "leg_over_alone": [statistics.median(r["leg_blocks"][c.label()]) / r["alone"][c.label()]
                                                     for r in out["rounds"]]}
                      for c in configs}
    out["summary"]["ratio"] = {"of": f"{configs[0].label()} / {configs[1].label()}",
                               "alone": [r["alone_ratio"] for r in out["rounds"]],
                               "leg": [r["leg_ratio"] for r in out["rounds"]]}
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    main()
