"""How long does a loader read low after a lighter neighbour's turn? Turns in runs, timed one by one.

The race reads the heavier loader of some pairs a few percent low beside a lighter one
(benchmarks/RESULTS.md, "Why the ratio intervals miss"), and untimed lead-ins of up to half a second
did not remove it. This asks how the shortfall is spread over the turns that follow the neighbour's:
each round times a leg of the pair whose turns come in runs (``--run`` turns of ``a``, then as many
of ``b``, ``--cycles`` times), a leg of the race's own turns, and each config's solo frozen turns
back to back (no neighbour), in alternating order. Reported: each config's turns by their place in its run (1st after the
neighbour's, 2nd, ...), over its solo turns of the same round (geometric means); beside them, a leg
of the race's own turns (a shuffled order and its reverse) of the same length.

    python benchmarks/race_runs.py --archetype iterable --rounds 6 --out benchmarks/race_runs_iterable.json

Run alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from loadtune.engine.race import TURN_SHARE, leg_request
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.duet import run_in_turns
from loadtune.engine.trial.setup import LoaderOptions, scan_timing
from loadtune.engine.trial.paired import race_orders
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.settings import ScanOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import run_meta  # noqa: E402
from race_coverage import PAIRS, worker_config  # noqa: E402
from race_neighbour import geomean  # noqa: E402

HERE = Path(__file__).resolve().parent


def by_place(rates: list[float], run: int) -> list[float]:
    """A side's turn rates (in the order timed, ``run`` per run) as the geometric mean per place in the run.
    The first place of the leg's first run follows no neighbour's turn (only the warm-up): one of
    ``--cycles`` first-place turns, so the first place reads a little less of the neighbour than it would."""
    return [geomean(rates[i::run]) for i in range(run)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archetype", choices=sorted(PAIRS), default="iterable")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--run", type=int, default=4, help="turns of one config in a row")
    p.add_argument("--cycles", type=int, default=6, help="runs of each config per leg")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    path, batch, wa, wb, persistent = PAIRS[args.archetype]
    spec = SpecRef(str((HERE / path).resolve()))
    opts = ScanOptions()
    timing = replace(scan_timing(opts), blocks=6, target_spread=0.0)
    configs = {"a": worker_config(batch, wa, persistent), "b": worker_config(batch, wb, persistent)}
    turns = {k: leg_request(TrialRequest(c, "cpu", timing, LoaderOptions(shuffle=True, seed=1), opts.timeout, "fork"))
             for k, c in configs.items()}
    turn_s = timing.block_s * TURN_SHARE
    out = {"meta": run_meta(), "command": " ".join(sys.argv), "a": configs["a"].label(), "b": configs["b"].label(),
           "run": args.run, "rounds": []}
    for r in range(args.rounds):
        first = (0,) * args.run + (1,) * args.run if r % 2 == 0 else (1,) * args.run + (0,) * args.run
        both = {0: (spec, turns["a"]), 1: (spec, turns["b"])}
        steps = [("leg", both, [first] * args.cycles),
                 ("race", both, list(race_orders(2, args.cycles * args.run // 2, r))),
                 ("solo_a", {0: (spec, turns["a"])}, [(0,) * args.run] * args.cycles),
                 ("solo_b", {1: (spec, turns["b"])}, [(1,) * args.run] * args.cycles)]
        row: dict[str, list[float]] = {}
        for kind, sides, orders in (steps if r % 2 == 0 else steps[::-1]):
            got = run_in_turns(sides, orders, turn_s)
            for i, k in enumerate("ab"):
                if i in got:
                    row[kind if kind.startswith("solo") else f"{kind}_{k}"] = [b.rate for b in got[i].blocks]
        out["rounds"].append(row)
        parts = []
        for k in "ab":
            base = geomean(row[f"solo_{k}"])
            parts.append(f"{k}: " + " ".join(f"{x / base:.3f}" for x in by_place(row[f"leg_{k}"], args.run))
                         + f", race's turns {geomean(row[f'race_{k}']) / base:.3f}")
        print(f"round {r} (by place, over solo): " + "; ".join(parts), flush=True)
    summary = {}
    for k in "ab":
        logs = [[math.log(x / geomean(row[f"solo_{k}"])) for x in by_place(row[f"leg_{k}"], args.run)]
                for row in out["rounds"]]
        places = list(zip(*logs))
        summary[k] = {"by_place": [math.exp(statistics.fmean(v)) for v in places],
                      "se": [statistics.stdev(v) / math.sqrt(len(v)) if len(v) > 1 else None for v in places],
                      "below_solo": [sum(x < 0 for x in v) for v in places],
                      "race_turns": math.exp(statistics.fmean(math.log(geomean(row[f"race_{k}"]) / geomean(row[f"solo_{k}"]))
                                                              for row in out["rounds"]))}
    out["summary"] = summary
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
