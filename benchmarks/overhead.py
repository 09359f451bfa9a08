"""loadtune's own loop overhead: its reported samples/s against a bare DataLoader loop (issue 2).

For each config, and for several interleaved repeats, two isolated child processes run over the
same near-no-op dataset (benchmarks/noop_dataset.py) with the same DataLoader arguments:

  A  loadtune: ``loadtune.runner.run_trial`` exactly as a scan runs it (forkserver child, memory
     sampler in the parent, ``measure()`` in the child); the figure is ``Trial.estimate.median``.
  B  bare: a child started from the same forkserver context, same worker start method, same
     shuffle/seed/drop_last, running what a user would write: ``for batch in loader`` over epochs,
     a warm-up, then ``time.perf_counter`` around a fixed duration, counting ``len(batch)``.

The dataset is nearly free, so the DataLoader's own per-batch cost (tens of microseconds) is the
yardstick: any per-batch or per-epoch cost loadtune adds is as visible here as it will ever be.
Pairs alternate which side runs first (A B, then B A, ...) so drift of the machine favours neither.

    python benchmarks/overhead.py --json overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEC_PATH = HERE / "noop_dataset.py"
TARGET = 0.98


@dataclass(frozen=True)
class Case:
    name: str
    batch_size: int
    num_workers: int
    prefetch_factor: int | None = None
    persistent_workers: bool = False

    def loader_kwargs(self) -> dict:
        """The DataLoader arguments a user would pass, written out by hand (not via loadtune)."""
        kwargs = {"batch_size": self.batch_size, "num_workers": self.num_workers, "pin_memory": False}
        if self.num_workers > 0:
            kwargs["prefetch_factor"] = self.prefetch_factor
            kwargs["persistent_workers"] = self.persistent_workers
        return kwargs


CASES = [
    Case("w0 bs64", 64, 0),
    Case("w0 bs16", 16, 0),
    Case("w2 pf2 bs64", 64, 2, 2, False),
    Case("w2 pf2 persist bs64", 64, 2, 2, True),
    Case("w2 pf2 persist bs256", 256, 2, 2, True),
]


# --------------------------------------------------------------------------------------- bare side


def bare_child(case: Case, shuffle: bool, drop_last: bool, seed: int, start_method: str,
               warmup_s: float, duration_s: float, conn) -> None:
    """The bare loop, in a child set up like a loadtune trial's (own session, worker start method)."""
    os.setsid()
    try:
        import multiprocessing

        import torch
        from torch.utils.data import DataLoader

        multiprocessing.set_start_method(start_method, force=True)
        sys.path.insert(0, str(HERE))
        import noop_dataset

        loader = DataLoader(
            noop_dataset.dataset(),
            shuffle=shuffle,
            drop_last=drop_last,
            generator=torch.Generator().manual_seed(seed) if shuffle else None,
            **case.loader_kwargs(),
        )

        # What a user writes: epochs of `for batch in loader`, a warm-up, then a fixed timed window.
        clock = time.perf_counter
        warm_until = clock() + warmup_s
        start = end = None
        samples = 0
        while end is None:
            for batch in loader:
                now = clock()
                if start is None:
                    if now >= warm_until:
                        start = now  # the window opens after this batch: it is not counted
                    continue
                samples += len(batch)
                if now - start >= duration_s:
                    end = now
                    break
        conn.send({"samples": samples, "seconds": end - start, "rate": samples / (end - start)})
        del loader
    except BaseException as exc:  # noqa: BLE001
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def run_bare(case: Case, loader_options, start_method: str, warmup_s: float, duration_s: float,
             timeout_s: float) -> dict:
    from loadtune.runner import context_for, kill_group
    from loadtune.spec import SpecRef

    ctx = context_for(SpecRef(str(SPEC_PATH)))  # the very context (forkserver, torch preloaded) trials use
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=bare_child,
        args=(case, loader_options.shuffle, loader_options.drop_last, loader_options.seed, start_method,
              warmup_s, duration_s, send),
        name="overhead-bare",
    )
    started = time.monotonic()
    proc.start()
    send.close()
    try:
        if not recv.poll(timeout_s):
            return {"error": f"timeout after {timeout_s:g} s"}
        try:
            result = recv.recv()
        except EOFError:
            result = {"error": f"bare child exited with code {proc.exitcode} without a result"}
        proc.join(10)
    finally:
        kill_group(proc.pid)
        proc.join(5)
        recv.close()
    result["wall_s"] = time.monotonic() - started
    return result


# ----------------------------------------------------------------------------------- loadtune side


def run_loadtune(case: Case, request_base: dict) -> dict:
    from loadtune.plan import TrialConfig
    from loadtune.runner import TrialRequest, run_trial
    from loadtune.spec import SpecRef

    config = TrialConfig(case.batch_size, case.num_workers, False, case.prefetch_factor, case.persistent_workers, "none")
    request = TrialRequest(config=config, **request_base)
    trial = run_trial(SpecRef(str(SPEC_PATH)), request)
    if not trial.ok:
        return {"error": f"{trial.error.kind}: {trial.error.message}" if trial.error else "no blocks", "wall_s": trial.wall_s}
    est = trial.estimate
    return {
        "rate": est.median,
        "block_rates": [b.rate for b in trial.blocks],
        "block_seconds": [b.seconds for b in trial.blocks],
        "block_epochs": [b.epochs for b in trial.blocks],
        "samples": sum(b.samples for b in trial.blocks),
        "seconds": sum(b.seconds for b in trial.blocks),
        "startup_s": trial.startup_s,
        "wall_s": trial.wall_s,
    }


# ------------------------------------------------------------------------------------------ driver


def spread(values: list[float]) -> dict:
    xs = sorted(values)
    return {"min": xs[0], "median": statistics.median(xs), "max": xs[-1]}


def summarise(case: Case, runs: list[dict]) -> dict:
    pairs = [r for r in runs if "rate" in r["loadtune"] and "rate" in r["bare"]]
    out = {"case": asdict(case), "name": case.name, "repeats": runs, "ok_pairs": len(pairs)}
    if not pairs:
        return out
    lt = [r["loadtune"]["rate"] for r in pairs]
    bare = [r["bare"]["rate"] for r in pairs]
    ratios = [a / b for a, b in zip(lt, bare)]
    out.update(
        loadtune_median=statistics.median(lt),
        bare_median=statistics.median(bare),
        ratio_of_medians=statistics.median(lt) / statistics.median(bare),
        pair_ratios=ratios,
        pair_ratio_spread=spread(ratios),
        meets_target=statistics.median(lt) / statistics.median(bare) >= TARGET,
    )
    return out


def print_table(summaries: list[dict]) -> None:
    head = f"{'config':<22}{'loadtune sps':>14}{'bare sps':>14}{'ratio':>8}   {'pair ratios min/med/max':<26}{'n':>3}  target"
    print(head)
    print("-" * len(head))
    for s in summaries:
        if "ratio_of_medians" not in s:
            errors = {r["loadtune"].get("error") or r["bare"].get("error") for r in s["repeats"]}
            print(f"{s['name']:<22}  no complete pair: {errors}")
            continue
        sp = s["pair_ratio_spread"]
        print(
            f"{s['name']:<22}{s['loadtune_median']:>14,.0f}{s['bare_median']:>14,.0f}{s['ratio_of_medians']:>7.1%}"
            f"   {sp['min']:.1%} / {sp['median']:.1%} / {sp['max']:.1%}      {s['ok_pairs']:>3}  "
            f"{'ok' if s['meets_target'] else 'MISSED'}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="write all figures (every repeat, every block) here")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved pairs per config (default 5)")
    parser.add_argument("--cases", help="comma-separated subset of config names, e.g. 'w0 bs64,w0 bs16'")
    args = parser.parse_args(argv)

    import torch

    from loadtune import machine
    from loadtune.measure import LoaderOptions, Timing
    from loadtune.scan import ScanOptions

    sys.path.insert(0, str(HERE))
    import noop_dataset

    length, features = noop_dataset.DEFAULT_LENGTH, noop_dataset.FEATURES
    cases = CASES
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",")]
        cases = [c for c in CASES if c.name in wanted]
        if len(cases) != len(wanted):
            parser.error(f"unknown case; known: {', '.join(c.name for c in CASES)}")

    # Everything loadtune's side gets is what a default scan would give it (scan.execute).
    opts = ScanOptions()
    info = machine.collect()
    timing = Timing(warmup_s=opts.warmup, block_s=opts.block_time, blocks=opts.blocks, max_s=opts.timeout * 0.8)
    loader_options = LoaderOptions(shuffle=opts.shuffle, drop_last=opts.drop_last, seed=opts.seed)
    request_base = dict(device="cpu", timing=timing, options=loader_options, timeout_s=opts.timeout, start_method=info.start_method)
    duration_s = timing.block_s * timing.blocks  # the bare window spans what loadtune's blocks span, at least

    print(
        f"loadtune loop overhead: {len(cases)} configs x {args.repeats} interleaved pairs; "
        f"dataset {SPEC_PATH.name} (len {length}, {features} floats/sample), shuffle={opts.shuffle}, seed={opts.seed}, "
        f"drop_last={opts.drop_last}, worker start method {info.start_method}"
    )
    print(
        f"timing: loadtune warm-up {timing.warmup_s:g} s + {timing.blocks} blocks >= {timing.block_s:g} s (median); "
        f"bare warm-up {timing.warmup_s:g} s + one {duration_s:g} s window"
    )
    print(f"machine: {info.usable_cores} usable cores, {info.cpu_model}, torch {torch.__version__}, python {platform.python_version()}")
    print()

    began = time.monotonic()
    runs: dict[str, list[dict]] = {c.name: [] for c in cases}
    for rep in range(args.repeats):
        for i, case in enumerate(cases):
            loadtune_first = (rep + i) % 2 == 0
            sides = {}
            for side in (("loadtune", "bare") if loadtune_first else ("bare", "loadtune")):
                if side == "loadtune":
                    sides[side] = run_loadtune(case, request_base)
                else:
                    sides[side] = run_bare(case, loader_options, info.start_method, timing.warmup_s, duration_s, opts.timeout)
            run = {"repeat": rep, "first": "loadtune" if loadtune_first else "bare", **sides}
            runs[case.name].append(run)
            a, b = sides["loadtune"].get("rate"), sides["bare"].get("rate")
            ratio = f"{a / b:6.1%}" if a and b else "  n/a "
            print(
                f"  repeat {rep + 1}/{args.repeats}  {case.name:<22} loadtune {a or float('nan'):>12,.0f}  "
                f"bare {b or float('nan'):>12,.0f}  ratio {ratio}  ({run['first']} first)",
                flush=True,
            )
            for side in ("loadtune", "bare"):
                if "error" in sides[side]:
                    print(f"      {side} failed: {sides[side]['error']}")

    summaries = [summarise(c, runs[c.name]) for c in cases]
    elapsed = time.monotonic() - began
    print()
    print_table(summaries)
    print()
    complete = [s for s in summaries if "ratio_of_medians" in s]
    holds = bool(complete) and len(complete) == len(summaries) and all(s["meets_target"] for s in complete)
    print(f"target loadtune >= {TARGET:.0%} of bare: {'holds' if holds else 'DOES NOT hold'} for every config"
          if holds else f"target loadtune >= {TARGET:.0%} of bare: DOES NOT hold for every config")
    print(f"total {elapsed:.0f} s")

    if args.json:
        doc = {
            "benchmark": "loadtune/overhead",
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": info.to_dict(),
            "timing": asdict(timing),
            "bare_window_s": duration_s,
            "loader_options": asdict(loader_options),
            "dataset": {"spec": str(SPEC_PATH.relative_to(HERE.parent)), "length": length, "features": features},
            "target": TARGET,
            "target_holds": holds,
            "elapsed_s": elapsed,
            "results": summaries,
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"figures written to {args.json}")
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
