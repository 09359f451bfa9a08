"""Which side of a raced pair leans? Each config of a pair in a race leg, in solo frozen turns and in a
trial alone, over its own long run of a plain DataLoader, interleaved round by round.

The race reads some pairs' ratio a few percent off long runs of a plain DataLoader (benchmarks/RESULTS.md,
"Why the ratio intervals miss"); the ratio alone cannot say whether the lighter loader reads high or the
heavier one low. Each round times, for both configs: a long run (``race_coverage.plain_rate``), a trial
alone (6 blocks), a race leg of the two (``--pairs`` turn pairs, the race's turns) and ``--pairs`` x 2
solo frozen turns back to back (the same turns with no neighbour). Reported: each figure over the same
round's long run of that config, per round and on average.

    python benchmarks/race_sides.py --archetype tiny_dataset --rounds 6 --out benchmarks/race_sides_tiny_dataset.json

Run alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from loadtune.engine.race import TURN_SHARE, leg_request
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.duet import run_in_turns
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.setup import LoaderOptions, scan_timing
from loadtune.engine.trial.paired import race_orders
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.settings import ScanOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import run_meta  # noqa: E402
from race_coverage import PAIRS, plain_rate, worker_config  # noqa: E402
from race_neighbour import geomean  # noqa: E402

HERE = Path(__file__).resolve().parent
KINDS = ("alone", "leg", "solo")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archetype", choices=sorted(PAIRS), default="tiny_dataset")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--pairs", type=int, default=6, help="turn pairs of a leg; solo turns are twice this")
    p.add_argument("--long-s", type=float, default=8.0)
    p.add_argument("--warm-s", type=float, default=3.0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    path, batch, wa, wb, persistent = PAIRS[args.archetype]
    spec_path = str((HERE / path).resolve())
    spec = SpecRef(spec_path)
    opts = ScanOptions()
    timing = replace(scan_timing(opts), blocks=6, target_spread=0.0)  # the scan's, 6 blocks, no early stop
    configs = {"a": worker_config(batch, wa, persistent), "b": worker_config(batch, wb, persistent)}
    workers = {"a": wa, "b": wb}
    alone = {k: TrialRequest(c, "cpu", timing, LoaderOptions(shuffle=True, seed=1), opts.timeout, "fork")
             for k, c in configs.items()}
    turns = {k: leg_request(r) for k, r in alone.items()}
    turn_s = timing.block_s * TURN_SHARE
    out = {"meta": run_meta(), "command": " ".join(sys.argv), "a": configs["a"].label(), "b": configs["b"].label(),
           "rounds": []}
    for r in range(args.rounds):
        order = ("a", "b") if r % 2 == 0 else ("b", "a")
        row: dict[str, float] = {}
        for k in order:
            row[f"long_{k}"] = plain_rate(spec_path, batch, workers[k], args.warm_s, args.long_s, persistent)[0]
        for k in order:
            row[f"alone_{k}"] = geomean([b.rate for b in run_trial(spec, alone[k]).blocks])
        got = run_in_turns({0: (spec, turns["a"]), 1: (spec, turns["b"])}, list(race_orders(2, args.pairs, r)), turn_s)
        row["leg_a"], row["leg_b"] = (geomean([b.rate for b in got[i].blocks]) for i in (0, 1))
        for k in order:
            got = run_in_turns({0: (spec, turns[k])}, [(0,)] * (2 * args.pairs), turn_s)
            row[f"solo_{k}"] = geomean([b.rate for b in got[0].blocks])
        out["rounds"].append(row)
        print(f"round {r}: " + ", ".join(f"{kind} {k} {row[f'{kind}_{k}'] / row[f'long_{k}']:.3f}"
                                         for k in "ab" for kind in KINDS)
              + f"; ratio a/b long {row['long_a'] / row['long_b']:.3f}, leg {row['leg_a'] / row['leg_b']:.3f}", flush=True)
    out["summary"] = {f"{kind}_{k}": statistics.fmean(x[f"{kind}_{k}"] / x[f"long_{k}"] for x in out["rounds"])
                      for k in "ab" for kind in KINDS}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({"mean over the long run": out["summary"]}, indent=1))


if __name__ == "__main__":
    main()
