"""How accurate is one trial? Each trial's estimate against a 10x longer run of the same config.

``search_quality.py`` checks only each scan's pick, with the benchmark's short timing. Here every
trial is one that ``loadtune scan`` would run, at loadtune's *default* timing (1 s warm-up, blocks of
0.5 s, 3 to 10 of them until the median is known to 3%), on several configs per archetype. Each is
paired with a run of the same config with 10x the blocks that trial took (no early stop), and the
two run back to back, in a shuffled order, over ``--rounds`` rounds, so that the machine's drift
lands on both sides of a pair rather than between them. Target: the trial's median within +-5% of
the long run's, and the long run inside the 95% interval the table prints for the trial (the
run-to-run noise learned from the archetype's other trials, as a scan learns it from its repeats)
in at least 90% of pairs.

    python benchmarks/accuracy.py --out benchmarks/results/accuracy.json.gz
    python benchmarks/accuracy.py --archetypes cpu_bound --rounds 1 --out /tmp/acc.json   # a smoke run
    python benchmarks/accuracy.py --rescore benchmarks/results/accuracy.json.gz --out benchmarks/results/accuracy.json.gz  # estimator changed

The figures are throughputs on this machine: run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from loadtune.engine.trial.setup import LoaderOptions, scan_timing
from loadtune.model.config import TrialConfig
from loadtune.analysis.noise import long_run, run_noise
from loadtune.model.results import ConfigResult, by_config
from loadtune.model.scanfile import check_writable
from loadtune.model.trial import Block, Trial
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.engine.plan import prepare
from loadtune.model.settings import ScanOptions
from loadtune.engine.spec import SpecRef

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import run_meta
from saved import read_json, write_json
from search_quality import ARCHETYPE_DIR, ARCHETYPES, load_average, rel_error, spec_batch_size

TARGET = 0.05
# Configs per archetype: no workers, the cores' count, and past it (more for the storage-bound
# archetype, whose workers wait rather than compute)
CONFIGS = {"default": [(0, None, False), (2, 2, False), (4, 2, True)],
           "storage_latency": [(0, None, False), (4, 2, False), (16, 2, True)]}


def configs_for(name: str, batch_size: int) -> list[TrialConfig]:
    return [TrialConfig(batch_size, w, prefetch_factor=pf, persistent_workers=persist)
            for w, pf, persist in CONFIGS.get(name, CONFIGS["default"])]


class Runner:
    """Trials at loadtune's default timing, and long runs of a fixed block count, as a scan runs them."""

    def __init__(self, spec: str, seed: int):
        plan = prepare(spec)
        self.source, self.device, self.start_method = SpecRef.parse(spec), plan.device, plan.machine.start_method
        self.loader = LoaderOptions(shuffle=plan.options.shuffle, drop_last=plan.options.drop_last, seed=seed)
        self.opts = ScanOptions()

    def run(self, config: TrialConfig, blocks: int | None = None):
        o = self.opts
        timing, timeout = scan_timing(o), o.timeout  # exactly a default scan's trial
        if blocks is not None:  # a fixed count of blocks, no early stop: the reference
            timeout = max(o.timeout, 4 * (o.warmup + blocks * o.block_time) + 30)
            timing = replace(timing, blocks=blocks, min_blocks=blocks, target_spread=0.0, max_s=timeout * 0.8)
        return run_trial(self.source, TrialRequest(config, self.device, timing, self.loader, timeout, self.start_method))


def pair(runner: Runner, config: TrialConfig, factor: int) -> tuple[dict, Trial | None]:
    short = runner.run(config)
    if not short.ok:
        return {"config": config.label(), "error": short.error.message}, None
    blocks = factor * len(short.blocks)
    long = runner.run(config, blocks)
    if not long.ok:
        return {"config": config.label(), "error": long.error.message}, None
    return {
        "config": config.label(),
        "trial": short.estimate.median,
        "trial_rel_spread": short.estimate.rel_spread,
        "trial_blocks": len(short.blocks),
        "long": long.estimate.median,
        "long_blocks": len(long.blocks),
        "rel_error": rel_error(short.estimate.median, long.estimate.median),
        "within_interval": short.estimate.low <= long.estimate.median <= short.estimate.high,
        "trial_rates": short.pace_rates,
    }, short


def long_run_coverage(pairs: list[dict], shorts: list[Trial | None]) -> None:
    """Adds to each pair the interval a scan would print for its trial (``analysis.noise.long_run``),
    with the run-to-run noise learned, as a scan learns it, from repeated configs: here every *other*
    short trial of the archetype (leave-one-out, so a trial never vouches for itself)."""
    for i, (p, short) in enumerate(zip(pairs, shorts)):
        if short is None:
            continue
        others = [t for j, t in enumerate(shorts) if t is not None and j != i]
        noise = run_noise(by_config(others))
        est = long_run(ConfigResult(short.config, [short]), noise)
        p.update(long_run_low=est.low, long_run_high=est.high, between=noise.between, between_df=noise.df,
                 within_long_run_interval=est.low <= p["long"] <= est.high)


def rescore(path: Path) -> dict:
    """The saved pairs scored again with today's long-run interval: the trials' raw block rates are in
    the file, so a change to the estimator needs no new measurement."""
    document = read_json(path)
    for record in document["archetypes"]:
        labels: dict[str, TrialConfig] = {}
        shorts = []
        for p in record["pairs"]:
            if "trial_rates" not in p:
                shorts.append(None)
                continue
            config = labels.setdefault(p["config"], TrialConfig(1, len(labels)))  # stands for the label: only grouping matters
            shorts.append(Trial(config, "ok", blocks=[Block(int(round(r * 1000)), 1, 1000.0) for r in p["trial_rates"]]))
        long_run_coverage(record["pairs"], shorts)
    document["summary"] = summary(document["archetypes"])
    document["rescored"] = run_meta(["--rescore", str(path)])
    return document


def run_archetype(name: str, args: argparse.Namespace) -> dict:
    spec = str(ARCHETYPE_DIR / f"{name}.py")
    runner = Runner(spec, args.seed)
    configs = configs_for(name, spec_batch_size(spec))
    rng = random.Random(args.seed)
    pairs, shorts, load_start = [], [], load_average()
    for r in range(args.rounds):
        order = list(configs)
        rng.shuffle(order)
        for config in order:
            record, short = pair(runner, config, args.factor)
            p = dict(record, round=r)
            pairs.append(p)
            shorts.append(short)
            err = p.get("rel_error")
            print(f"  {name:<16} {p['config']:<22} " + (f"trial {p['trial']:>10,.0f} ±{p['trial_rel_spread']:.1%} "
                  f"({p['trial_blocks']} blocks)  long {p['long']:>10,.0f} ({p['long_blocks']} blocks)  error {err:+.1%}"
                  if err is not None else f"failed: {p['error']}"), flush=True)
    long_run_coverage(pairs, shorts)
    return {"archetype": name, "pairs": pairs, "load_average_start": load_start, "load_average_end": load_average()}


def summary(records: list[dict]) -> dict:
    errors = [abs(p["rel_error"]) for r in records for p in r["pairs"] if p.get("rel_error") is not None]
    inside = [p["within_interval"] for r in records for p in r["pairs"] if "within_interval" in p]
    covered = [p["within_long_run_interval"] for r in records for p in r["pairs"] if "within_long_run_interval" in p]
    return {
        "trials": len(errors),
        "within_target": sum(e <= TARGET for e in errors),
        "median_abs_error": statistics.median(errors) if errors else None,
        "max_abs_error": max(errors, default=None),
        "long_run_inside_trial_interval": sum(inside),
        "long_run_inside_long_run_interval": sum(covered),
        "long_run_intervals": len(covered),
        "per_archetype": {r["archetype"]: {
            "within_target": sum(abs(p["rel_error"]) <= TARGET for p in r["pairs"] if p.get("rel_error") is not None),
            "trials": sum(p.get("rel_error") is not None for p in r["pairs"]),
            "max_abs_error": max((abs(p["rel_error"]) for p in r["pairs"] if p.get("rel_error") is not None), default=None),
        } for r in records},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="JSON file for every figure (rewritten after each archetype)")
    p.add_argument("--archetypes", default=",".join(ARCHETYPES), help="comma-separated subset (default: all six)")
    p.add_argument("--rounds", type=int, default=2, help="rounds over each archetype's configs (default 2)")
    p.add_argument("--factor", type=int, default=10, help="the long run's blocks as a multiple of the trial's (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rescore", type=Path, help="score a saved run's pairs again (no measuring) and write --out")
    args = p.parse_args(argv)
    if args.rescore:
        document = rescore(args.rescore)
        write_json(args.out, document, default=str)
        s = document["summary"]
        print(f"inside the long-run interval {s['long_run_inside_long_run_interval']}/{s['long_run_intervals']}; "
              f"the blocks' {s['long_run_inside_trial_interval']}/{s['trials']}; wrote {args.out}")
        return 0
    names = [n.strip() for n in args.archetypes.split(",") if n.strip()]
    unknown = [n for n in names if n not in ARCHETYPES]
    if unknown or args.rounds < 1 or args.factor < 1:
        p.error(f"archetypes from {', '.join(ARCHETYPES)}; --rounds and --factor at least 1")
    check_writable(args.out)
    started = time.monotonic()
    print(f"accuracy: {', '.join(names)}; {args.rounds} rounds; long runs {args.factor}x the trial's blocks; "
          f"load average {load_average()}", flush=True)
    document = {"benchmark": "accuracy", "meta": run_meta(argv), "target_abs_error": TARGET, "archetypes": []}
    for name in names:
        document["archetypes"].append(run_archetype(name, args))
        document["summary"] = summary(document["archetypes"])
        document["wall_s"] = time.monotonic() - started
        write_json(args.out, document, default=str)
    s = document["summary"]
    print(f"\n{s['within_target']}/{s['trials']} trials within ±{TARGET:.0%} of their long run; median |error| "
          f"{s['median_abs_error']:.1%}, worst {s['max_abs_error']:.1%}; the long run's median inside the trial's "
          f"blocks' interval {s['long_run_inside_trial_interval']}/{s['trials']}, inside the long-run interval the table "
          f"prints {s['long_run_inside_long_run_interval']}/{s['long_run_intervals']}; {document['wall_s']:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
