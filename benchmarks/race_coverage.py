"""Does the race's ratio interval hold what long runs of a plain DataLoader give?

For a pair of configs on each archetype (two worker counts a scan would weigh against each other; and
the README's example, where a loader without workers races one that restarts its workers every epoch),
``--races`` races of the two (``engine.race.race``, legs of real trial processes, the scan's defaults)
each give a ratio a / b with its 95% interval. The reference is what a user's own loop gets: long runs
of a plain ``DataLoader`` loop (``for batch in loader``, the spec's ``step`` on each batch where it has
one, a warm-up, then ``--long-s`` seconds timed), one
process per run, the two configs interleaved (a b, b a, ...) over ``--long-rounds`` rounds; its ratio is
the geometric mean of the rounds' ratios, with its own 95% interval over the rounds (the reference is
measured too: where its interval is as wide as a race's, a miss says as much about the reference).
Races and long runs alternate per archetype. Reported: how many race intervals hold the long-run
ratio, their half-widths, and the reference's.

With ``--scans N``, N scans of the pair (``loadtune.scan`` with the two worker counts, the scan's
defaults otherwise: a screening, PyTorch's defaults, the race) alternate with the long runs too, and
each long run of ``a`` and of ``b`` is scored against the absolute 95% interval every scan prints for
that config (the table's ``±``, ``analysis.noise.long_run``): the label says it holds what a long run
later gives. The scans' trials are kept in the output, to score another estimator on the same runs
(``--rescore``). Each long run also records the page faults its main process took per batch, and the
score is given apart for configs whose scan noted fresh pages (their figure rests on the allocator's
state: benchmarks/RESULTS.md, "Fresh pages").

    python benchmarks/race_coverage.py --races 3 --long-rounds 4 --long-s 8 --warm-s 3 --out benchmarks/results/race_coverage_cheapest.json.gz
    python benchmarks/race_coverage.py --races 3 --scans 3 --long-rounds 6 --long-s 8 --out benchmarks/results/race_coverage_allocator.json.gz
    python benchmarks/race_coverage.py --rescore benchmarks/results/race_coverage_allocator.json.gz

Run alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

from loadtune.analysis.footprint import fresh_page_takers
from loadtune.analysis.noise import long_run, run_noise
from loadtune.analysis.race import RacePolicy, legs, pair_logs, race_ratio, verdict
from loadtune.engine.race import RaceRun, race, run_leg
from loadtune.engine.scan import scan
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.config import TrialConfig
from loadtune.model.estimate import t975
from loadtune.model.results import ScanResult
from loadtune.model.settings import NOISE_FLOOR, ScanOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import run_meta  # noqa: E402
from saved import read_json, write_json  # noqa: E402

HERE = Path(__file__).resolve().parent
LEGS = 3  # the race's legs at most (--race-legs 3, the scan's default)


def worker_config(batch: int, workers: int, persistent: bool = True) -> TrialConfig:
    return TrialConfig(batch, workers, False, 2 if workers else None, persistent and bool(workers))


PAIRS = {  # name: (spec, batch size, worker counts a, b, persistent_workers): neighbours a scan weighs
    "cpu_bound": ("archetypes/cpu_bound.py", 32, 1, 2, True),
    "heavy_tail": ("archetypes/heavy_tail.py", 32, 2, 4, True),
    "iterable": ("archetypes/iterable.py", 32, 0, 2, True),
    "large_tensors": ("archetypes/large_tensors.py", 32, 0, 2, True),
    "storage_latency": ("archetypes/storage_latency.py", 32, 16, 32, True),
    "tiny_dataset": ("archetypes/tiny_dataset.py", 16, 0, 2, True),
    # the README's example: no workers beside workers restarted every epoch (about 7 s)
    "images_no_persistent": ("../examples/images.py", 32, 0, 2, False),
    # the same pair with persistent workers: what the restarts add to the one above (not in the default set)
    "images_persistent": ("../examples/images.py", 32, 0, 2, True),
}
DEFAULT_PAIRS = [name for name in PAIRS if name != "images_persistent"]

PLAIN_LOOP = """
import sys, time, importlib.util, resource, torch
from torch.utils.data import DataLoader, IterableDataset
spec = importlib.util.spec_from_file_location("archetype", sys.argv[1]); mod = importlib.util.module_from_spec(spec)
sys.modules["archetype"] = mod; spec.loader.exec_module(mod)
ds = mod.dataset(); batch, workers, warm, timed = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
kw = dict(prefetch_factor=2, persistent_workers=sys.argv[6] == "1") if workers else {}
loader = DataLoader(ds, batch_size=batch, shuffle=not isinstance(ds, IterableDataset), num_workers=workers, **kw)
step = getattr(mod, "step", None) or (lambda batch: None)  # the spec's consumer, as a trial runs it
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt  # the main process's: see "Fresh pages"
clock = time.perf_counter; start = None; samples = batches = 0; warm_until = clock() + warm
while True:
    for b in loader:
        step(b)
        now = clock()
        if start is None:
            if now >= warm_until:
                start, faulted = now, faults()
            continue
        samples += len(b[0]) if isinstance(b, (list, tuple)) else len(b)
        batches += 1
        if now - start >= timed:
            print(samples / (now - start), (faults() - faulted) / batches); sys.exit(0)
"""


def plain_rate(spec: str, batch: int, workers: int, warm_s: float, timed_s: float, persistent: bool) -> tuple[float, float]:
    """A long run's samples/s, and the page faults its main process took per batch."""
    out = subprocess.run([sys.executable, "-c", PLAIN_LOOP, spec, str(batch), str(workers), str(warm_s), str(timed_s),
                          "1" if persistent else "0"],
                         capture_output=True, text=True, check=True, timeout=300)
    rate, faults = out.stdout.strip().splitlines()[-1].split()
    return float(rate), float(faults)


def one_race(spec: str, a: TrialConfig, b: TrialConfig, seed: int) -> dict:
    opts = ScanOptions()
    timing = Timing(warmup_s=opts.warmup, block_s=opts.block_time, blocks=opts.blocks, max_s=opts.timeout * 0.8,
                    min_blocks=opts.min_blocks)
    request = TrialRequest(a, "cpu", timing, LoaderOptions(shuffle=True, seed=seed), opts.timeout, "fork")
    trials: list = []
    started = time.monotonic()
    run = RaceRun(lambda cs, n: run_leg(SpecRef(spec), request, cs, n, seed * 100 + n), lambda s: True, trials.extend)
    how = race(trials, [a, b], RacePolicy(NOISE_FLOOR, LEGS), run)
    r = race_ratio(trials, a, b)
    v = verdict(trials, NOISE_FLOOR)
    by_leg = legs(trials)
    return {"ratio": r.value, "low": r.low, "high": r.high, "pairs": r.pairs, "legs": r.groups, "ended": how,
            "leader": v.leader.label(), "seconds": time.monotonic() - started,
            # each leg's turn pairs' log(a / b), to score another interval rule on the same races
            "leg_logs": [pair_logs(leg[a], leg[b]) for leg in by_leg.values() if a in leg and b in leg]}


def one_scan(spec: str, batch: int, wa: int, wb: int, persistent: bool, seed: int) -> dict:
    """A scan of the pair as a user would run it with ``--workers A,B --prefetch 2``: its whole result."""
    started = time.monotonic()
    result = scan(spec, workers=sorted({wa, wb}), prefetch=[2], persistent=persistent, batch_size=[batch],
                  diagnose=False, seed=seed)
    return {"seconds": time.monotonic() - started, "result": result.to_dict()}


def absolute_scores(scans: list[dict], rounds: list[dict], configs: dict[str, TrialConfig]) -> dict:
    """Each scan's printed interval for ``a`` and ``b`` against every long run of that config; apart,
    those of configs whose scan noted fresh pages (``analysis.footprint.fresh_pages``: the figure rests
    on the allocator's state)."""
    held, pairs, halves, fresh_held, fresh_pairs = 0, 0, [], 0, 0
    for s in scans:
        result = ScanResult.from_dict(s["result"])
        noise = run_noise(result.configs)
        for key, config in configs.items():
            found = result.config_result(config)
            est = long_run(found, noise) if found is not None else None
            if est is None:
                continue
            fresh = bool(fresh_page_takers([found]))
            halves.append(max(est.high / est.median - 1, 1 - est.low / est.median))
            for r in rounds:
                inside = est.low <= r[key] <= est.high
                pairs, held = pairs + 1, held + inside
                fresh_pairs, fresh_held = fresh_pairs + fresh, fresh_held + (fresh and inside)
    return {"held": held, "pairs": pairs, "halfwidths": halves, "fresh_held": fresh_held, "fresh_pairs": fresh_pairs}


def rescore(path: Path) -> None:
    """The absolute intervals of a saved run's scans, scored again by today's estimator."""
    out = read_json(path)
    held = pairs = 0
    halves = []
    for name, got in out["archetypes"].items():
        configs = {"a": TrialConfig.from_dict(got["a_config"]), "b": TrialConfig.from_dict(got["b_config"])}
        score = absolute_scores(got["scans"], got["long_rounds"], configs)
        held, pairs, halves = held + score["held"], pairs + score["pairs"], halves + score["halfwidths"]
        print(f"{name}: {score['held']}/{score['pairs']} long runs inside, half-widths "
              f"{', '.join(f'{h:.1%}' for h in score['halfwidths'])}")
    print(f"all: {held}/{pairs} ({held / pairs:.0%}), median half-width {statistics.median(halves):.1%}")


def main() -> None:  # noqa: C901 - the benchmark's loop, kept whole to read as one procedure
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archetypes", default=",".join(DEFAULT_PAIRS))
    p.add_argument("--races", type=int, default=3)
    p.add_argument("--long-rounds", type=int, default=4)
    p.add_argument("--long-s", type=float, default=10.0)
    p.add_argument("--warm-s", type=float, default=3.0)
    p.add_argument("--scans", type=int, default=0, help="scans of each pair, for the absolute intervals")
    p.add_argument("--out")
    p.add_argument("--rescore", type=Path, help="score a saved run's scans again, measure nothing")
    args = p.parse_args()
    if args.rescore:
        return rescore(args.rescore)
    if not args.out:
        p.error("--out is required to measure")
    out = {"meta": run_meta(), "command": " ".join(sys.argv), "archetypes": {}}
    for name in args.archetypes.split(","):
        path, batch, wa, wb, persistent = PAIRS[name]
        spec = str((HERE / path).resolve())
        a, b = worker_config(batch, wa, persistent), worker_config(batch, wb, persistent)
        races, rounds, scans = [], [], []
        for i in range(max(args.races, args.long_rounds, args.scans)):
            if i < args.long_rounds:
                order = [(wa, "a"), (wb, "b")] if i % 2 == 0 else [(wb, "b"), (wa, "a")]
                got = {}
                for w, k in order:
                    got[k], got[f"{k}_faults_per_batch"] = plain_rate(spec, batch, w, args.warm_s, args.long_s, persistent)
                rounds.append(got)
            if i < args.races:
                races.append(one_race(spec, a, b, i))
            if i < args.scans:
                scans.append(one_scan(spec, batch, wa, wb, persistent, i))
            print(f"{name} {i + 1}: long {rounds[-1] if i < args.long_rounds else '-'} race "
                  f"{races[-1] if i < args.races else '-'}", flush=True)
        logs = [math.log(r["a"] / r["b"]) for r in rounds]
        truth = math.exp(statistics.fmean(logs))
        half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.inf
        absolute = absolute_scores(scans, rounds, {"a": a, "b": b})
        out["archetypes"][name] = {"a": a.label(), "b": b.label(), "a_config": a.to_dict(), "b_config": b.to_dict(),
                                   "long_ratio": truth, "long_low": truth * math.exp(-half), "long_high": truth * math.exp(half),
                                   "long_rounds": rounds, **scored(races, truth), "scans": scans, "absolute": absolute}
        held = out["archetypes"][name]["held"]
        out["summary"] = summary(out["archetypes"])
        write_json(args.out, out)
        print(f"{name}: long-run ratio {truth:.3f} ({truth * math.exp(-half):.3f}–{truth * math.exp(half):.3f}); "
              f"race intervals holding it: {held}/{len(races)}; long runs inside the scans' intervals: "
              f"{absolute['held']}/{absolute['pairs']}", flush=True)
        got = out["archetypes"][name]
        if races:
            print(f"  held {got['held']}/{len(races)}, lean {got['lean']:+.1%}, "
                  f"race {statistics.median(r['seconds'] for r in races):.1f} s", flush=True)
    print(json.dumps(out["summary"], indent=1))


def scored(races: list[dict], truth: float) -> dict:
    """Races against the long runs' ratio: how many intervals hold it, their half-widths, and the lean
    (the mean log of race / long runs, which a race's interval does not include)."""
    return {"races": races, "held": sum(1 for r in races if r["low"] <= truth <= r["high"]),
            "halfwidths": [max(r["high"] / r["ratio"] - 1, 1 - r["low"] / r["ratio"]) for r in races],
            "lean": statistics.fmean(math.log(r["ratio"] / truth) for r in races) if races else None}


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def races_summary(sets: list[dict]) -> dict:
    """Scored sets of races (``scored``), one per archetype, taken together."""
    races = [r for v in sets for r in v["races"]]
    return {"held": sum(v["held"] for v in sets), "races": len(races),
            "median_halfwidth": median([h for v in sets for h in v["halfwidths"]]),
            "median_race_seconds": median([r["seconds"] for r in races]),
            "leans": [v.get("lean") for v in sets]}


def summary(archetypes: dict) -> dict:
    """The races' coverage and half-widths, the reference's, and the scans' absolute intervals'."""
    got = list(archetypes.values())
    return {**races_summary(got),
            "median_reference_halfwidth": median([v["long_high"] / v["long_ratio"] - 1 for v in got]),
            "absolute_held": sum(v["absolute"]["held"] for v in got),
            "absolute_pairs": sum(v["absolute"]["pairs"] for v in got),
            "absolute_fresh_held": sum(v["absolute"].get("fresh_held", 0) for v in got),
            "absolute_fresh_pairs": sum(v["absolute"].get("fresh_pairs", 0) for v in got),
            "absolute_median_halfwidth": median([h for v in got for h in v["absolute"]["halfwidths"]]),
            "median_scan_seconds": median([s["seconds"] for v in got for s in v["scans"]])}


if __name__ == "__main__":
    main()
