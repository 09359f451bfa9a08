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

Any spec and pair, on any device: ``--spec FILE --batch N --pair A,B`` (configs written as the table
writes them, ``"w8 pf2 pin non-blocking"``; ``--pair`` again for more pairs), ``--device cuda``
(the long runs then copy each batch to the GPU as the config's transfer says: ``.to(device)``,
``non_blocking=True``, or through ``loadtune.CUDAPrefetcher`` for ``stream``), ``--legs`` (the race's
legs at most), ``--block-time`` (the race's block; a turn is half of it) and ``--deadline-s`` (start
no race or long round that would end past it, judged by those so far: the file holds what finished):

    python benchmarks/race_coverage.py --spec ../examples/images.py --batch 32 --device cuda --legs 2 \
        --pair "w8 pf2 pin non-blocking,w4 pf2 pin non-blocking" --races 5 --long-rounds 2 --long-s 2 \
        --deadline-s 60 --out /tmp/coverage_workers.json

Run alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from loadtune.analysis.footprint import fresh_page_takers
from loadtune.analysis.noise import long_run, run_noise
from loadtune.analysis.race import RacePolicy, legs, pair_logs, race_ratio, verdict
from loadtune.engine.race import RaceRun, race, run_leg
from loadtune.engine.scan import scan
from loadtune.engine.spec import SpecRef, load_spec
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.config import DEVICE_TRANSFERS, TrialConfig, heap_for
from loadtune.model.estimate import t975
from loadtune.model.results import ScanResult
from loadtune.model.settings import NOISE_FLOOR, ScanOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from meta import run_meta  # noqa: E402
from saved import read_json, write_json  # noqa: E402

HERE = Path(__file__).resolve().parent
LEGS = 3  # the race's legs at most, unless --legs says otherwise


def worker_config(batch: int, workers: int, persistent: bool = True, heap: int | None = None) -> TrialConfig:
    return TrialConfig(batch, workers, False, 2 if workers else None, persistent and bool(workers), heap=heap)


def heap_of(spec: str, batch: int) -> int:
    """The heap setting a scan gives a loader without workers on ``spec`` (``model.config.heap_for``),
    from one collated batch's bytes."""
    loaded = load_spec(spec)
    loader = DataLoader(loaded.dataset, batch_size=batch, collate_fn=loaded.collate_fn)
    first = next(iter(loader))
    nbytes = sum(t.nbytes for t in (first if isinstance(first, (list, tuple)) else [first]) if isinstance(t, torch.Tensor))
    return heap_for(nbytes)


# name: (spec, batch size, worker counts a, b, persistent_workers, a with the heap setting): neighbours a scan weighs
PAIRS = {
    "cpu_bound": ("archetypes/cpu_bound.py", 32, 1, 2, True, False),
    "heavy_tail": ("archetypes/heavy_tail.py", 32, 2, 4, True, False),
    "iterable": ("archetypes/iterable.py", 32, 0, 2, True, False),
    # a loader without workers and 19 MiB batches: the scan races it with the heap setting (plain, its speed
    # follows its allocator's state, and the race gives it no verdict)
    "large_tensors": ("archetypes/large_tensors.py", 32, 0, 2, True, True),
    "storage_latency": ("archetypes/storage_latency.py", 32, 16, 32, True, False),
    "tiny_dataset": ("archetypes/tiny_dataset.py", 16, 0, 2, True, False),
    # the README's example: no workers beside workers restarted every epoch (about 7 s)
    "images_no_persistent": ("../examples/images.py", 32, 0, 2, False, False),
    # 96 MiB batches: past glibc's moving mmap threshold, a loader without workers maps each afresh
    "large_batches": ("archetypes/large_batches.py", 32, 0, 2, True, True),
    # 1.5 million dicts: each worker copies the pages whose reference counts it touches
    "copy_on_write": ("archetypes/copy_on_write.py", 32, 0, 2, True, False),
    # not in the default set: the README's pair with persistent workers (what the restarts add to the one
    # above), and large_tensors' plain w0 (its two allocator states; the races before the heap setting)
    "images_persistent": ("../examples/images.py", 32, 0, 2, True, False),
    "large_tensors_plain": ("archetypes/large_tensors.py", 32, 0, 2, True, False),
}
DEFAULT_PAIRS = [name for name in PAIRS if name not in ("images_persistent", "large_tensors_plain")]

PLAIN_LOOP = """
import json, sys, time, importlib.util, resource, torch
from torch.utils.data import DataLoader, IterableDataset
spec = importlib.util.spec_from_file_location("archetype", sys.argv[1]); mod = importlib.util.module_from_spec(spec)
sys.modules["archetype"] = mod; spec.loader.exec_module(mod)
ds = mod.dataset(); kwargs, transfer = json.loads(sys.argv[2]), sys.argv[3]
device, warm, timed = torch.device(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
loader = DataLoader(ds, shuffle=not isinstance(ds, IterableDataset), **kwargs)
cuda = device.type == "cuda"
def moved(b, non_blocking):  # what a training loop does: every tensor of the batch to the GPU
    if isinstance(b, torch.Tensor):
        return b.to(device, non_blocking=non_blocking)
    return type(b)(moved(x, non_blocking) for x in b) if isinstance(b, (list, tuple)) else b
if cuda and transfer == "stream":  # what the recommendation tells you to paste
    from loadtune import CUDAPrefetcher
    batches = CUDAPrefetcher(loader, device)
    move = lambda b: b
else:
    batches = loader
    move = (lambda b: moved(b, transfer == "non_blocking")) if cuda else (lambda b: b)
step = getattr(mod, "step", None) or (lambda batch: None)  # the spec's consumer, as a trial runs it
sync = torch.cuda.synchronize if cuda else (lambda: None)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt  # the main process's: see "Fresh pages"
clock = time.perf_counter; start = None; samples = batches_timed = 0; warm_until = clock() + warm
while True:
    for b in batches:
        step(move(b))
        now = clock()
        if start is None:
            if now >= warm_until:
                sync(); start, faulted = clock(), faults()
            continue
        samples += len(b[0]) if isinstance(b, (list, tuple)) else len(b)
        batches_timed += 1
        if now - start >= timed:
            sync(); now = clock()
            print(samples / (now - start), (faults() - faulted) / batches_timed); sys.exit(0)
"""


def plain_rate(spec: str, config: TrialConfig, device: str, warm_s: float, timed_s: float) -> tuple[float, float]:
    """A long run's samples/s, and the page faults its main process took per batch."""
    out = subprocess.run([sys.executable, "-c", PLAIN_LOOP, spec, json.dumps(config.loader_kwargs()), config.transfer, device,
                          str(warm_s), str(timed_s)],
                         env={**os.environ, **config.environment}, capture_output=True, text=True, check=True, timeout=300)
    rate, faults = out.stdout.strip().splitlines()[-1].split()
    return float(rate), float(faults)


def config_of(label: str, batch: int, accelerator: bool, heap: int | None = None) -> TrialConfig:
    """A config written as the table writes it (``TrialConfig.label``: "w4 pf2 pin persist non-blocking
    bs32"); ``batch`` where it names no batch size. Without a transfer named, pinned or not, batches
    are copied plainly (``sync``) to a GPU, and not at all without one."""
    knobs: dict = {"batch_size": batch, "num_workers": None, "pin_memory": False, "persistent_workers": False,
                   "transfer": "sync" if accelerator else "none"}
    transfers = {t.replace("_", "-"): t for t in DEVICE_TRANSFERS}
    for word in label.split():
        if word[0] in "wb" and word.lstrip("wbs").isdigit():
            knobs["num_workers" if word[0] == "w" else "batch_size"] = int(word.lstrip("wbs"))
        elif word.startswith("pf") and word[2:].isdigit():
            knobs["prefetch_factor"] = int(word[2:])
        elif word in ("pin", "persist", "unordered", "fork", "spawn", "forkserver"):
            key = {"pin": "pin_memory", "persist": "persistent_workers", "unordered": "in_order"}.get(word, "start_method")
            knobs[key] = word if key == "start_method" else word != "unordered"
        elif word == "heap":
            knobs["heap"] = heap
        elif word in transfers and accelerator:
            knobs["transfer"] = transfers[word]
        else:
            raise SystemExit(f"--pair: cannot read {word!r} in {label!r} (a label as the table writes it, on this device)")
    if knobs["num_workers"] is None:
        raise SystemExit(f"--pair: {label!r} names no worker count (w0, w4, ...)")
    config = TrialConfig(**knobs)
    if config.label(str(config.batch_size)) != " ".join(w for w in label.split() if not w.startswith("bs")) + f" bs{config.batch_size}":
        raise SystemExit(f"--pair: {label!r} reads as {config.label()!r}; write it as the table does")
    return config


def one_race(spec: str, a: TrialConfig, b: TrialConfig, seed: int, device: str = "cpu", max_legs: int = LEGS,
             block_s: float | None = None) -> dict:
    opts = ScanOptions() if block_s is None else ScanOptions(block_time=block_s)
    timing = Timing(warmup_s=opts.warmup, block_s=opts.block_time, blocks=opts.blocks, max_s=opts.timeout * 0.8,
                    min_blocks=opts.min_blocks)
    request = TrialRequest(a, device, timing, LoaderOptions(shuffle=True, seed=seed), opts.timeout, "fork")
    trials: list = []
    started = time.monotonic()
    run = RaceRun(lambda cs, n: run_leg(SpecRef(spec), request, cs, n, seed * 100 + n), lambda s: True, trials.extend)
    how = race(trials, [a, b], RacePolicy(NOISE_FLOOR, max_legs), run)
    r = race_ratio(trials, a, b)
    v = verdict(trials, NOISE_FLOOR)
    by_leg = legs(trials)
    if r is None:  # a failed leg: no ratio to score
        return {"ended": how, "seconds": time.monotonic() - started,
                "errors": [t.error.message for t in trials if t.error is not None][:2]}
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


@dataclass
class Clock:
    """``--deadline-s``: a unit of work (a race, a long round, a scan) starts only where one as long as
    the longest of its kind so far would end before the deadline."""

    deadline: float = math.inf
    longest: dict = field(default_factory=dict)
    refused: int = 0  # units not started for the deadline

    def allows(self, kind: str) -> bool:
        ok = time.monotonic() + self.longest.get(kind, 0.0) <= self.deadline
        self.refused += not ok
        return ok

    def timed(self, kind: str, work: Callable[..., Any], *args: Any) -> Any:
        started = time.monotonic()
        got = work(*args)
        self.longest[kind] = max(self.longest.get(kind, 0.0), time.monotonic() - started)
        return got


@dataclass(frozen=True)
class Pair:
    """Two configs of one spec to race and to run long: ``scans`` need the archetypes' worker counts."""

    name: str
    spec: str
    a: TrialConfig
    b: TrialConfig
    workers: tuple[int, int] | None = None


def pairs_of(args, accelerator: bool) -> list[Pair]:
    """The archetypes' pairs, or ``--pair``'s on ``--spec``."""
    if not args.pair:
        out = []
        for name in args.archetypes.split(","):
            path, batch, wa, wb, persistent, heap = PAIRS[name]
            spec = str((HERE / path).resolve())
            out.append(Pair(name, spec, worker_config(batch, wa, persistent, heap_of(spec, batch) if heap else None),
                            worker_config(batch, wb, persistent), (wa, wb)))
        return out
    if not args.spec:
        raise SystemExit("--pair needs --spec")
    spec = str((HERE / args.spec).resolve()) if not Path(args.spec).is_absolute() else args.spec
    out = []
    for text in args.pair:
        labels = text.split(",")
        if len(labels) != 2:
            raise SystemExit(f"--pair: two configs, comma-separated, got {text!r}")
        heap = heap_of(spec, args.batch) if "heap" in text.replace(",", " ").split() else None
        a, b = (config_of(label, args.batch, accelerator, heap) for label in labels)
        out.append(Pair(f"{a.label()} / {b.label()}", spec, a, b))
    return out


def measure_pair(pair: Pair, args, clock: Clock, save: Callable[[dict], None]) -> dict:
    """Races and long runs of ``pair`` alternating (and scans, with ``--scans``), saved after each."""
    races, rounds, scans = [], [], []
    a, b = pair.a, pair.b
    got = {"a": a.label(), "b": b.label(), "a_config": a.to_dict(), "b_config": b.to_dict(), "long_rounds": rounds,
           "races": races, "scans": scans}
    for i in range(max(args.races, args.long_rounds, args.scans)):
        done = len(rounds), len(races)
        if i < args.long_rounds and clock.allows("long"):
            order = [(a, "a"), (b, "b")] if i % 2 == 0 else [(b, "b"), (a, "a")]
            rounds.append(clock.timed("long", long_round, pair.spec, order, args))
        if i < args.races and clock.allows("race"):
            races.append(clock.timed("race", one_race, pair.spec, a, b, i, args.device, args.legs, args.block_time))
        if i < args.scans and pair.workers and clock.allows("scan"):
            scans.append(clock.timed("scan", one_scan, pair.spec, a.batch_size, *pair.workers, a.persistent_workers, i))
        print(f"{pair.name} {i + 1}: long {rounds[-1] if len(rounds) > done[0] else '-'} "
              f"race {races[-1] if len(races) > done[1] else '-'}", flush=True)
        save({**got, **scored_pair(got)})
    return {**got, **scored_pair(got)}


def long_round(spec: str, order: list[tuple[TrialConfig, str]], args) -> dict:
    """One long run of each config, in ``order``: their rates and page faults per batch."""
    runs = {}
    for config, k in order:
        runs[k], runs[f"{k}_faults_per_batch"] = plain_rate(spec, config, args.device, args.warm_s, args.long_s)
    return runs


def scored_pair(got: dict) -> dict:
    """The long runs' ratio with its interval over the rounds, and the races and scans scored against it."""
    rounds = [r for r in got["long_rounds"] if "a" in r and "b" in r]
    if not rounds:
        return {"long_ratio": None, "held": 0, "halfwidths": [], "lean": None,
                "absolute": {"held": 0, "pairs": 0, "halfwidths": [], "fresh_held": 0, "fresh_pairs": 0}}
    logs = [math.log(r["a"] / r["b"]) for r in rounds]
    truth = math.exp(statistics.fmean(logs))
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.inf
    configs = {"a": TrialConfig.from_dict(got["a_config"]), "b": TrialConfig.from_dict(got["b_config"])}
    races = {k: v for k, v in scored([r for r in got["races"] if "ratio" in r], truth).items() if k != "races"}
    return {"long_ratio": truth, "long_low": truth * math.exp(-half), "long_high": truth * math.exp(half), **races,
            "absolute": absolute_scores(got["scans"], rounds, configs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archetypes", default=",".join(DEFAULT_PAIRS))
    p.add_argument("--spec", help="a spec file (relative to benchmarks/ or absolute), for --pair")
    p.add_argument("--batch", type=int, default=32, help="the batch size of --pair's labels that name none")
    p.add_argument("--pair", action="append", help='two configs as the table writes them: "w8 pf2 pin,w4 pf2 pin"')
    p.add_argument("--device", default="cpu", help="cpu, or cuda: the races' trials and the long runs on that device")
    p.add_argument("--legs", type=int, default=LEGS, help="the race's legs at most")
    p.add_argument("--block-time", type=float, help="the race's block, seconds (a turn is half of it; default: the scan's)")
    p.add_argument("--deadline-s", type=float, help="start no race, long round or scan that would end past this many seconds")
    p.add_argument("--races", type=int, default=3)
    p.add_argument("--long-rounds", type=int, default=4)
    p.add_argument("--long-s", type=float, default=10.0)
    p.add_argument("--warm-s", type=float, default=3.0)
    p.add_argument("--scans", type=int, default=0, help="scans of each pair, for the absolute intervals (archetypes only)")
    p.add_argument("--out")
    p.add_argument("--rescore", type=Path, help="score a saved run's scans again, measure nothing")
    args = p.parse_args()
    if args.rescore:
        return rescore(args.rescore)
    if not args.out:
        p.error("--out is required to measure")
    if args.device.startswith("cuda"):
        args.device = args.device if ":" in args.device else "cuda:0"
    pairs = pairs_of(args, args.device.startswith("cuda"))
    clock = Clock(time.monotonic() + args.deadline_s if args.deadline_s else math.inf)
    out = {"meta": run_meta(), "command": " ".join(sys.argv), "archetypes": {}}

    def save(name: str, got: dict) -> None:
        out["archetypes"][name] = got
        out["summary"] = summary(out["archetypes"])
        write_json(args.out, out)

    for pair in pairs:
        got = measure_pair(pair, args, clock, lambda partial, name=pair.name: save(name, partial))
        save(pair.name, got)
        if got["long_ratio"] is not None:
            print(f"{pair.name}: long-run ratio {got['long_ratio']:.3f} ({got['long_low']:.3f}–{got['long_high']:.3f}); "
                  f"race intervals holding it: {got['held']}/{len(got['races'])}; long runs inside the scans' intervals: "
                  f"{got['absolute']['held']}/{got['absolute']['pairs']}", flush=True)
        if got["races"] and got["long_ratio"] is not None:
            print(f"  held {got['held']}/{len(got['races'])}, lean {got['lean']:+.1%}, "
                  f"race {statistics.median(r['seconds'] for r in got['races']):.1f} s", flush=True)
    if clock.deadline < math.inf:
        out["not_started_for_the_deadline"] = clock.refused
        write_json(args.out, out)
    print(json.dumps(out.get("summary"), indent=1))


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
            "failed_races": sum("ratio" not in r for r in races),
            "leans": [v.get("lean") for v in sets]}


def summary(archetypes: dict) -> dict:
    """The races' coverage and half-widths, the reference's, and the scans' absolute intervals'."""
    got = list(archetypes.values())
    return {**races_summary(got),
            "median_reference_halfwidth": median([v["long_high"] / v["long_ratio"] - 1 for v in got if v.get("long_ratio")]),
            "absolute_held": sum(v["absolute"]["held"] for v in got),
            "absolute_pairs": sum(v["absolute"]["pairs"] for v in got),
            "absolute_fresh_held": sum(v["absolute"].get("fresh_held", 0) for v in got),
            "absolute_fresh_pairs": sum(v["absolute"].get("fresh_pairs", 0) for v in got),
            "absolute_median_halfwidth": median([h for v in got for h in v["absolute"]["halfwidths"]]),
            "median_scan_seconds": median([s["seconds"] for v in got for s in v["scans"]])}


if __name__ == "__main__":
    main()
