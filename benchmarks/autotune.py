"""autotune on the live loop against the scan's pick, with a CPU training step.

For each archetype (benchmarks/archetypes/: cpu_bound, storage_latency), in one process:

a. a default scan with ``--step-ms`` (``loadtune.scan``): the scan's pick, measured with a calibrated
   synthetic CPU step; the same step (the same matmuls) is then the training step of every loop below;
b. over ``--repeats`` rounds, in a shuffled order within each round, one first epoch (a fresh loader,
   worker start-up included) of a training loop over the same data: with ``loadtune.autotune``, with
   PyTorch's defaults, with the scan's pick, and with the config autotune settled on in round 1;
c. in each round, right after its autotune epoch, the settled config and the scan's pick side by side
   (shuffled order), each a steady window of ``--window`` batches after its start-up backlog: the
   ratio settled / pick per round. Target: the median ratio at least 95%.

    python benchmarks/autotune.py --out benchmarks/autotune.json
    python benchmarks/autotune.py --quick --out /tmp/autotune.json   # a smoke run, a few minutes

Figures are throughputs and times on this machine: the load average at the start and the end is
recorded, and on a shared machine only the side-by-side ratios mean much.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

import loadtune
from loadtune.engine.trial.workload import StepWorkload
from loadtune.live.meter import warmup_batches
from loadtune.model.config import TrialConfig

from meta import run_meta

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "archetypes"))

from cpu_bound import CpuBoundDataset  # noqa: E402
from storage_latency import StorageLatencyDataset  # noqa: E402

ARCHETYPES = {
    # spec for the scan, the dataset of the training loop's epoch, batch size, the step's ms per batch
    # epochs of 300 and 500 batches: a few times what tuning takes, as a real epoch (often far longer) is
    "cpu_bound": dict(spec=HERE / "archetypes" / "cpu_bound.py", make=CpuBoundDataset, length=9600, batch=32, step_ms=20),
    "storage_latency": dict(spec=HERE / "archetypes" / "storage_latency.py", make=StorageLatencyDataset, length=16000,
                            batch=32, step_ms=10),
}


def fixed_loader(dataset, config: TrialConfig) -> DataLoader:
    """A plain DataLoader with ``config``, as a user would write it (its batch size is the config's)."""
    return DataLoader(dataset, shuffle=True, **config.loader_kwargs())


def train_epoch(loader, step) -> dict:
    """One epoch of the training loop: every batch goes through ``step``."""
    start = time.perf_counter()
    samples = 0
    for x, _ in loader:
        step(x)
        samples += len(x)
    return {"seconds": time.perf_counter() - start, "samples": samples}


def steady_rate(dataset, config: TrialConfig, step, window: int) -> float:
    """Samples/s of ``config`` over ``window`` batches of the loop, after its start-up backlog."""
    loader = iter(fixed_loader(dataset, config))
    for _ in range(warmup_batches(config)):
        step(next(loader)[0])
    start, samples = time.perf_counter(), 0
    for _ in range(window):
        x, _ = next(loader)
        step(x)
        samples += len(x)
    rate = samples / (time.perf_counter() - start)
    del loader
    return rate


def autotune_epoch(dataset, batch: int, step) -> dict:
    loader = loadtune.autotune(dataset, batch_size=batch, shuffle=True, log=False)
    out = train_epoch(loader, step)
    report = loader.report()
    out.update(settled=report.config.to_dict(), label=report.config.label(), tuning_s=report.cost.seconds,
               tuning_batches=report.cost.batches, windows=len(report.trials), loaders=report.cost.loaders,
               stop=report.stop, lost_s=report.lost_s)
    return out


def run_archetype(name: str, spec: dict, args) -> dict:
    print(f"{name}: scanning with a {spec['step_ms']} ms CPU step", flush=True)
    scan_opts = dict(batch_size=[spec["batch"]], step_ms=spec["step_ms"], seed=args.seed, budget=args.scan_budget)
    if args.quick:
        scan_opts.update(warmup=0.3, block_time=0.2, blocks=4, min_blocks=3, confirm=0, reference_rounds=0, diagnose=False)
    t = time.perf_counter()
    scan = loadtune.scan(str(spec["spec"]), **scan_opts)
    scan_s = time.perf_counter() - t
    pick = scan.recommendation.config
    step = StepWorkload.from_dict(scan.settings.step).build(torch.device("cpu"))
    print(f"  scan's pick: {pick.label()} ({scan_s:.0f} s)", flush=True)
    dataset = spec["make"](spec["length"])
    default = TrialConfig(spec["batch"], 0)
    rng = random.Random(args.seed)
    rounds = []
    settled: TrialConfig | None = None
    for r in range(args.repeats):
        got: dict = {}
        got["autotune"] = autotune_epoch(dataset, spec["batch"], step)
        this = TrialConfig.from_dict(got["autotune"]["settled"])
        settled = settled or this
        epochs = {"defaults": default, "scan_pick": pick, "settled_round1": settled}
        order = list(epochs)
        rng.shuffle(order)
        for key in order:
            got[key] = train_epoch(fixed_loader(dataset, epochs[key]), step)
        pair = [("settled", this), ("scan_pick", pick)]
        rng.shuffle(pair)
        steady = {key: steady_rate(dataset, config, step, args.window) for key, config in pair}
        got["steady"] = steady | {"ratio": steady["settled"] / steady["scan_pick"], "settled": this.label()}
        rounds.append(got)
        print(f"  round {r + 1}: autotune {got['autotune']['seconds']:.1f} s (settled {this.label()}, tuning "
              f"{got['autotune']['tuning_s']:.1f} s), defaults {got['defaults']['seconds']:.1f} s, scan's pick "
              f"{got['scan_pick']['seconds']:.1f} s, settled {got['settled_round1']['seconds']:.1f} s; steady "
              f"settled/pick {got['steady']['ratio']:.1%}", flush=True)
    return {"scan": {"pick": pick.label(), "seconds": scan_s, "step": scan.settings.step}, "rounds": rounds,
            "summary": summarise(rounds)}


def summarise(rounds: list[dict]) -> dict:
    """Medians over rounds; the epoch ratios are taken within each round (side by side), then the median."""
    ratios = [r["steady"]["ratio"] for r in rounds]

    def epoch_ratio(key: str) -> list[float]:
        return [r["autotune"]["seconds"] / r[key]["seconds"] for r in rounds]

    best = [min(r[k]["seconds"] for k in ("scan_pick", "settled_round1")) for r in rounds]
    return {
        "steady_ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "epoch_vs_defaults": statistics.median(epoch_ratio("defaults")),
        "epoch_vs_scan_pick": statistics.median(epoch_ratio("scan_pick")),
        "epoch_vs_best_fixed": statistics.median(r["autotune"]["seconds"] / b for r, b in zip(rounds, best)),
        "settled": [r["autotune"]["label"] for r in rounds],
        "tuning_s": statistics.median(r["autotune"]["tuning_s"] for r in rounds),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--window", type=int, default=40, help="batches of each steady side-by-side window")
    parser.add_argument("--scan-budget", type=float, default=240.0, help="seconds for each scan")
    parser.add_argument("--archetypes", default=",".join(ARCHETYPES))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than cores, on purpose
    if args.quick:
        args.repeats, args.window, args.scan_budget = 1, 20, 90.0
    out = {"meta": run_meta(argv), "load_before": os.getloadavg()[0], "archetypes": {}}
    for name in args.archetypes.split(","):
        out["archetypes"][name] = run_archetype(name, ARCHETYPES[name], args)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    out["load_after"] = os.getloadavg()[0]
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for name, got in out["archetypes"].items():
        s = got["summary"]
        print(f"{name}: steady settled/pick median {s['steady_ratio']['median']:.1%} "
              f"({s['steady_ratio']['min']:.1%}-{s['steady_ratio']['max']:.1%}); first epoch with autotune "
              f"{s['epoch_vs_defaults']:.2f}x the defaults' time, {s['epoch_vs_best_fixed']:.2f}x the best fixed config's")


if __name__ == "__main__":
    main()
