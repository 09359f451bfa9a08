"""autotune on the live loop against the best fixed config, found by long interleaved runs.

For each archetype (benchmarks/archetypes/: cpu_bound; storage_latency, whose best lies at 32 or more
workers; heavy_tail; large_tensors; tiny_dataset; iterable, which autotune switches at epoch ends
only), with a calibrated synthetic CPU training step (``--step-ms``):

a. the reference: every candidate config (worker counts up to 64, prefetch 2, persistent), each a
   plain DataLoader in the training loop, timed over ``--long-s`` seconds after its start-up backlog,
   in ``--long-rounds`` rounds of a shuffled order; the best fixed config is the one with the highest
   median;
b. ``--repeats`` times: a fresh ``loadtune.autotune`` in the same training loop, epoch after epoch
   until it settles (its tuning cost: the epochs' time until then against the best fixed config's
   time for the same samples, at its reference rate); then the settled config and the best fixed
   config side by side, ``--check-rounds`` interleaved rounds of ``--long-s`` each: the ratio
   settled / best, the median of the rounds' ratios. Target: >= 0.95 in at least 4 of 5 repeats.

    python benchmarks/autotune.py --out benchmarks/results/autotune.json.gz
    python benchmarks/autotune.py --quick --out /tmp/autotune.json   # a smoke run, a few minutes

On a GPU (``--device cuda``): the README example's dataset (``images``: examples/images.py) with the
synthetic step calibrated on the GPU; every batch is copied to it with ``non_blocking=True``, as the
loop autotune's docs pair with ``pin_memory``, and the fixed configs are pinned (autotune tunes
``pin_memory`` itself):

    python benchmarks/autotune.py --device cuda --archetypes images --repeats 1 --long-rounds 2 --check-rounds 2 \
        --long-s 3 --out /tmp/autotune_gpu.json

Run alone on the machine: only ratios measured side by side mean much on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader, IterableDataset

import loadtune
from loadtune.engine.trial.workload import calibrate
from loadtune.live.meter import warmup_batches
from loadtune.model.config import TrialConfig

from meta import run_meta
from saved import write_json

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "archetypes"))
sys.path.insert(0, str(HERE.parent / "examples"))

from cpu_bound import CpuBoundDataset  # noqa: E402
from heavy_tail import HeavyTailDataset  # noqa: E402
from iterable import ShardedStream  # noqa: E402
from large_tensors import LargeTensorDataset  # noqa: E402
from storage_latency import StorageLatencyDataset  # noqa: E402
from tiny_dataset import LENGTH as TINY_LENGTH, TinyDataset  # noqa: E402
from images import SyntheticImageFolder  # noqa: E402

ARCHETYPES = {
    # the dataset of the training loop's epoch, batch size, the step's ms per batch, the worker counts of the reference
    "cpu_bound": dict(make=CpuBoundDataset, length=9600, batch=32, step_ms=5, workers=[0, 1, 2, 4]),
    "storage_latency": dict(make=StorageLatencyDataset, length=20000, batch=32, step_ms=2, workers=[0, 2, 8, 16, 32, 64]),
    "heavy_tail": dict(make=HeavyTailDataset, length=12000, batch=32, step_ms=5, workers=[0, 1, 2, 4]),
    "large_tensors": dict(make=LargeTensorDataset, length=6400, batch=32, step_ms=2, workers=[0, 1, 2, 4]),
    # epochs of a few batches: autotune switches across epoch ends
    "tiny_dataset": dict(make=TinyDataset, length=TINY_LENGTH, batch=16, step_ms=2, workers=[0, 1, 2, 4]),
    # an IterableDataset orders its own stream (no shuffle) and autotune switches at its epoch ends only
    "iterable": dict(make=ShardedStream, length=3200, batch=32, step_ms=5, workers=[0, 1, 2, 4]),
    # the README example's dataset, for a GPU machine (not among the defaults)
    "images": dict(make=SyntheticImageFolder, length=4000, batch=32, step_ms=5, workers=[0, 4, 8, 16]),
}
DEFAULT_ARCHETYPES = [name for name in ARCHETYPES if name != "images"]
MAX_EPOCHS = 24  # epochs a repeat lets autotune take (its own cap is twenty)


def fixed(batch: int, workers: int, pin: bool = False) -> TrialConfig:
    return TrialConfig(batch, workers, pin, 2 if workers else None, bool(workers))


def mover(device: torch.device):
    """How the training loop hands a batch's input to the step: on a GPU, copied with ``non_blocking=True``."""
    if device.type != "cuda":
        return lambda x: x
    return lambda x: x.to(device, non_blocking=True)


def synced(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def shuffles(dataset) -> bool:
    """A training loop shuffles map-style data; an IterableDataset orders its own stream."""
    return not isinstance(dataset, IterableDataset)


def loader_of(dataset, config: TrialConfig) -> DataLoader:
    """A plain DataLoader with ``config``, as a user would write it."""
    return DataLoader(dataset, shuffle=shuffles(dataset), **config.loader_kwargs())


def steady_rate(dataset, config: TrialConfig, step, seconds: float, device: torch.device = torch.device("cpu")) -> float:
    """Samples/s of ``config`` in the training loop over ``seconds``, after its start-up backlog and a
    burst (``live.meter.warmup_batches``), epochs restarting as they end."""
    loader = loader_of(dataset, config)
    it = iter(loader)
    move = mover(device)

    def take():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(loader)
            return next(it)

    for _ in range(warmup_batches(config)):
        step(move(take()[0]))
    synced(device)
    start, samples = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        x, _ = take()
        step(move(x))
        samples += len(x)
    synced(device)
    return samples / (time.perf_counter() - start)  # the loader and its workers go with this frame


def reference(dataset, spec: dict, step, args, rng: random.Random) -> dict:
    """Every candidate's steady rate over shuffled rounds; the best by median."""
    configs = [fixed(spec["batch"], w, args.device.type == "cuda") for w in spec["workers"]]
    rates: dict[str, list[float]] = {c.label(): [] for c in configs}
    for r in range(args.long_rounds):
        order = configs[:]
        rng.shuffle(order)
        for c in order:
            rates[c.label()].append(steady_rate(dataset, c, step, args.long_s, args.device))
        print(f"  reference round {r + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rates.items()), flush=True)
    medians = {k: statistics.median(v) for k, v in rates.items()}
    best = max(configs, key=lambda c: medians[c.label()])
    return {"rates": rates, "medians": medians, "best": best.to_dict(), "best_label": best.label()}


def autotune_run(dataset, spec: dict, step, device: torch.device = torch.device("cpu")) -> dict:
    """Epochs of the training loop with autotune until it settles: the tuning's cost and its pick."""
    loader = loadtune.autotune(dataset, batch_size=spec["batch"], shuffle=shuffles(dataset), log=False)
    move = mover(device)
    seconds, samples, epochs = 0.0, 0, 0
    while epochs < MAX_EPOCHS and not loader.report().settled:
        start = time.perf_counter()
        for x, _ in loader:
            step(move(x))
            samples += len(x)
        synced(device)
        seconds += time.perf_counter() - start
        epochs += 1
    report = loader.report()
    return {"settled": report.config.to_dict(), "label": report.config.label(), "is_settled": report.settled,
            "epochs": epochs, "seconds": seconds, "samples": samples, "tuning_s": report.cost.seconds,
            "windows": len(report.trials), "raced": sum(t.raced for t in report.trials), "stop": report.stop,
            "untried": [c.label() for c in report.untried]}


def side_by_side(dataset, a: TrialConfig, b: TrialConfig, step, args, rng: random.Random) -> list[float]:
    """``--check-rounds`` ratios a / b, each round both configs in a shuffled order."""
    ratios = []
    for _ in range(args.check_rounds):
        pair = [("a", a), ("b", b)]
        rng.shuffle(pair)
        got = {k: steady_rate(dataset, c, step, args.long_s, args.device) for k, c in pair}
        ratios.append(got["a"] / got["b"])
    return ratios


def run_archetype(name: str, spec: dict, args, save=lambda got: None) -> dict:
    """The reference runs, then the repeats; ``save`` hears what there is after each (a run cut off keeps it)."""
    step = calibrate(spec["step_ms"], args.device).build(args.device)
    dataset = spec["make"](args.length or spec["length"])
    rng = random.Random(args.seed)
    print(f"{name}: reference runs ({args.long_rounds} rounds of {len(spec['workers'])} configs)", flush=True)
    ref = reference(dataset, spec, step, args, rng)
    save({"reference": ref, "repeats": []})
    best = TrialConfig.from_dict(ref["best"])
    best_rate = ref["medians"][best.label()]
    print(f"  best fixed config: {best.label()} ({best_rate:,.0f} samples/s)", flush=True)
    repeats = []
    for r in range(args.repeats):
        run = autotune_run(dataset, spec, step, args.device)
        settled = TrialConfig.from_dict(run["settled"])
        run["ratios"] = [1.0] * args.check_rounds if settled == best else side_by_side(dataset, settled, best, step, args, rng)
        run["ratio"] = statistics.median(run["ratios"])
        run["cost_vs_best"] = run["seconds"] / (run["samples"] / best_rate)  # the tuning epochs against the best config's time
        repeats.append(run)
        save({"reference": ref, "repeats": repeats})
        print(f"  repeat {r + 1}: settled {run['label']} after {run['epochs']} epochs ({run['stop']}); "
              f"settled/best {run['ratio']:.3f}; those epochs took {run['cost_vs_best']:.2f}x the best config's time", flush=True)
    ratios = [r["ratio"] for r in repeats]
    return {"reference": ref, "repeats": repeats,
            "summary": {"best": best.label(), "settled": [r["label"] for r in repeats], "ratios": ratios,
                        "at_least_95": sum(x >= 0.95 for x in ratios), "repeats": len(ratios),
                        "cost_vs_best_median": statistics.median(r["cost_vs_best"] for r in repeats),
                        "epochs_median": statistics.median(r["epochs"] for r in repeats)}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--long-rounds", type=int, default=3)
    parser.add_argument("--check-rounds", type=int, default=3)
    parser.add_argument("--long-s", type=float, default=4.0, help="seconds of each steady run")
    parser.add_argument("--archetypes", default=",".join(DEFAULT_ARCHETYPES), help=f"of {', '.join(ARCHETYPES)}")
    parser.add_argument("--length", type=int, help="samples in the dataset's epoch (default: the archetype's)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: the step runs there and each batch is copied to it")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than cores, on purpose
    if args.quick:
        args.repeats, args.long_rounds, args.check_rounds, args.long_s = 1, 1, 1, 2.0
    args.device = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device(args.device)
    out = {"meta": run_meta(argv), "load_before": os.getloadavg()[0], "device": str(args.device), "archetypes": {}}

    def save(name: str, got: dict) -> None:
        out["archetypes"][name] = got
        write_json(args.out, out)

    for name in args.archetypes.split(","):
        save(name, run_archetype(name, ARCHETYPES[name], args, lambda got, name=name: save(name, got)))
    out["load_after"] = os.getloadavg()[0]
    write_json(args.out, out)
    for name, got in out["archetypes"].items():
        s = got["summary"]
        print(f"{name}: best fixed {s['best']}; settled {s['settled']}; settled/best {[round(x, 3) for x in s['ratios']]}: "
              f"{s['at_least_95']}/{s['repeats']} at >= 0.95; tuning epochs {s['cost_vs_best_median']:.2f}x the best config's time")


if __name__ == "__main__":
    main()
