"""loadtune's own loop overhead: its reported samples/s against a bare DataLoader loop (target: >= 98%).

For each config, and for several interleaved repeats, isolated child processes run over the same
near-no-op dataset (benchmarks/noop_dataset.py) with the same DataLoader arguments:

  loadtune  ``loadtune.engine.trial.harness.run_trial`` exactly as a default scan runs it (forkserver child with
            torch preloaded, memory sampler in the parent, ``measure()`` in the child); the figure
            is the one loadtune reports, ``Trial.estimate.median`` (median of its block rates).
  bare      (benchmarks/bare_loop.py) a child started from the very same forkserver context, the
            same way (caller's ``__main__`` not re-imported), own session, same DataLoader
            worker start method, same shuffle/seed/drop_last, running what a user would write:
            ``for batch in loader`` over epochs, a warm-up, then ``time.perf_counter`` around a
            fixed window, counting the samples each batch actually holds (``batch.shape[0]``).

The dataset is nearly free, so the DataLoader's own per-batch cost (tens of microseconds) is the
yardstick: any per-batch or per-epoch cost loadtune adds is as visible here as it will ever be.
The sides of a pair alternate which runs first (A B, then B A, ...) so drift favours neither.

The bare loop counts with ``batch.shape[0]`` rather than ``len(batch)``: ``Tensor.__len__`` is a
Python-level method costing about 0.5 us a call, which at ~35 us per batch would slow the bare
loop by a few percent and flatter loadtune (``--bare-count len`` shows it).

``--diagnose`` adds a third arm, loadtune with its parent-side memory sampler switched off
(monkeypatched in this process only), to separate the sampler's cost from the timing loop's.

    python benchmarks/overhead.py --out benchmarks/results/overhead.json.gz
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from unittest import mock

from meta import run_meta
from saved import write_json

HERE = Path(__file__).resolve().parent
SPEC_PATH = HERE / "noop_dataset.py"
TARGET = 0.98
LOADTUNE, BARE, NO_SAMPLER = "loadtune", "bare", "loadtune-no-sampler"


@dataclass(frozen=True)
class Case:
    name: str
    batch_size: int
    num_workers: int
    prefetch_factor: int | None = None
    persistent_workers: bool = False

    def loader_kwargs(self) -> dict:
        """The DataLoader arguments a user would pass, written out by hand (not taken from loadtune)."""
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


def run_bare(case: Case, loader_options, start_method: str, warmup_s: float, duration_s: float,
             timeout_s: float, count_with_len: bool) -> dict:
    from loadtune.engine.trial import harness as runner
    from loadtune.engine.spec import SpecRef

    from bare_loop import bare_child

    ctx = runner.context_for(SpecRef(str(SPEC_PATH)))  # the very context (forkserver, torch preloaded) trials use
    hidden = getattr(runner, "main_module_hidden", contextlib.nullcontext)  # trials skip re-importing __main__ too
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=bare_child,
        args=(case.loader_kwargs(), loader_options.shuffle, loader_options.drop_last, loader_options.seed, start_method,
              warmup_s, duration_s, count_with_len, send),
        name="overhead-bare",
    )
    started = time.monotonic()
    with hidden():
        proc.start()
    send.close()
    try:
        if not recv.poll(timeout_s):
            result = {"error": f"timeout after {timeout_s:g} s"}
        else:
            try:
                result = recv.recv()
            except EOFError:
                result = {"error": f"bare child exited with code {proc.exitcode} without a result"}
            proc.join(10)
    finally:
        runner.kill_group(proc.pid)
        proc.join(5)
        recv.close()
    result["wall_s"] = time.monotonic() - started
    return result


# ----------------------------------------------------------------------------------- loadtune side


def run_loadtune(case: Case, request_base: dict, sampler: bool = True) -> dict:
    from loadtune.engine.trial import harness as runner
    from loadtune.engine.trial.protocol import TrialRequest
    from loadtune.model.config import TrialConfig
    from loadtune.engine.spec import SpecRef

    config = TrialConfig(case.batch_size, case.num_workers, False, case.prefetch_factor, case.persistent_workers, "none")
    request = TrialRequest(config=config, **request_base)
    if sampler:
        trial = runner.run_trial(SpecRef(str(SPEC_PATH)), request)
    else:  # diagnosis only: the same trial without the parent sampling the tree's memory every 0.25 s
        with mock.patch.object(runner.MemorySampler, "maybe_sample", lambda self, force=False: None):
            trial = runner.run_trial(SpecRef(str(SPEC_PATH)), request)
    if not trial.ok:
        return {"error": f"{trial.error.kind}: {trial.error.message}" if trial.error else "no blocks", "wall_s": trial.wall_s}
    return {
        "rate": trial.estimate.median,
        "window_rate": sum(b.samples for b in trial.blocks) / sum(b.seconds for b in trial.blocks),
        "block_rates": [b.rate for b in trial.blocks],
        "block_seconds": [b.seconds for b in trial.blocks],
        "block_epochs": [b.epochs for b in trial.blocks],
        "samples": sum(b.samples for b in trial.blocks),
        "seconds": sum(b.seconds for b in trial.blocks),
        "startup_s": trial.startup_s,
        "memory_samples": len(trial.memory.samples) if trial.memory else 0,
        "wall_s": trial.wall_s,
    }


# ------------------------------------------------------------------------------------------ driver


def spread(values: list[float]) -> dict:
    xs = sorted(values)
    return {"min": xs[0], "median": statistics.median(xs), "max": xs[-1]}


def compare(runs: list[dict], arm: str, key: str) -> dict | None:
    """``arm``'s figure ``key`` against the bare loop over the repeats where both succeeded."""
    pairs = [(r[arm][key], r[BARE]["rate"]) for r in runs if key in r.get(arm, {}) and "rate" in r[BARE]]
    if not pairs:
        return None
    ours, bare = [a for a, _ in pairs], [b for _, b in pairs]
    ratios = [a / b for a, b in pairs]
    return {
        "median": statistics.median(ours),
        "bare_median": statistics.median(bare),
        "ratio_of_medians": statistics.median(ours) / statistics.median(bare),
        "pair_ratios": ratios,
        "pair_ratio_spread": spread(ratios),
        "pairs": len(pairs),
    }


def summarise(case: Case, runs: list[dict], arms: list[str]) -> dict:
    out = {"name": case.name, "case": asdict(case), "repeats": runs}
    out["reported"] = compare(runs, LOADTUNE, "rate")  # the headline: what loadtune prints
    out["window"] = compare(runs, LOADTUNE, "window_rate")  # same trial, the bare loop's estimator
    if NO_SAMPLER in arms:
        out["no_sampler_reported"] = compare(runs, NO_SAMPLER, "rate")
        out["no_sampler_window"] = compare(runs, NO_SAMPLER, "window_rate")
    out["meets_target"] = out["reported"] is not None and out["reported"]["ratio_of_medians"] >= TARGET
    return out


def print_table(summaries: list[dict], arms: list[str]) -> None:
    """Medians over the repeats of each side; ratios of those medians; spread of the per-pair ratios."""
    columns = [("loadtune", "reported"), ("lt window", "window")]
    if NO_SAMPLER in arms:
        columns += [("no-sampler", "no_sampler_reported")]  # its window figures are in the JSON
    head = f"{'config':<22}{'bare':>11}" + "".join(f"{title:>14}{'ratio':>8}  {'pair ratios min/med/max':<25}" for title, _ in columns) + "target"
    print(head)
    print("-" * len(head))
    for s in summaries:
        if s["reported"] is None:
            errors = {r[arm].get("error") for r in s["repeats"] for arm in arms if r[arm].get("error")}
            print(f"{s['name']:<22}  no complete pair: {errors}")
            continue
        line = f"{s['name']:<22}{s['reported']['bare_median']:>11,.0f}"
        for _, key in columns:
            c = s.get(key)
            if c is None:
                line += f"{'n/a':>14}{'':>8}  {'':<25}"
                continue
            sp = c["pair_ratio_spread"]
            line += (f"{c['median']:>14,.0f}{c['ratio_of_medians']:>8.1%}  "
                     f"{sp['min']:>6.1%} /{sp['median']:>6.1%} /{sp['max']:>6.1%}  ")
        print(line + ("ok" if s["meets_target"] else "MISSED") + f" (n={s['reported']['pairs']})")
    print("samples/s, each the median over the repeats; ratio = that median / bare's median; pair ratios = per repeat.")
    print("loadtune: the figure loadtune reports (median of its block rates). lt window: the same trials' samples /")
    print("seconds over all their blocks, the estimator the bare loop uses. bare: samples / seconds of its one window.")
    if NO_SAMPLER in arms:
        print("no-sampler: loadtune trials with the parent's memory sampler switched off (diagnosis only).")


def default_timing(opts, timing_cls):
    """The Timing a default scan gives each trial (as ``scan.execute`` builds it)."""
    names = {f.name for f in fields(timing_cls)}
    kwargs = dict(warmup_s=opts.warmup, block_s=opts.block_time, blocks=opts.blocks, max_s=opts.timeout * 0.8)
    for name in ("min_blocks", "target_spread"):  # adaptive block count, where this loadtune has it
        if name in names and hasattr(opts, name):
            kwargs[name] = getattr(opts, name)
    return timing_cls(**kwargs)


def describe_timing(timing) -> str:
    blocks = f"{timing.blocks} blocks of >= {timing.block_s:g} s"
    if getattr(timing, "target_spread", 0) and getattr(timing, "min_blocks", timing.blocks) < timing.blocks:
        blocks = (f"{timing.min_blocks} to {timing.blocks} blocks of >= {timing.block_s:g} s until the median "
                  f"is known to +-{timing.target_spread:.0%}")
    return f"warm-up {timing.warmup_s:g} s, then {blocks}; figure: median of block rates"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", metavar="PATH", help="write all figures (every repeat, every block) here")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats per config (default 5)")
    parser.add_argument("--cases", help="comma-separated subset of config names, e.g. 'w0 bs64,w0 bs16'")
    parser.add_argument("--diagnose", action="store_true",
                        help="add a third arm: loadtune with its parent-side memory sampler off (~1.5x the time)")
    parser.add_argument("--bare-count", choices=("shape", "len"), default="shape",
                        help="how the bare loop counts a batch's samples: batch.shape[0] (default) or len(batch)")
    parser.add_argument("--bare-window", type=float, default=2.5, metavar="S",
                        help="seconds the bare loop is timed for, after its warm-up (default 2.5)")
    args = parser.parse_args(argv)
    if args.bare_window <= 0:
        parser.error("--bare-window must be positive")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")

    from loadtune.engine import machine
    from loadtune.engine.trial.setup import LoaderOptions, Timing
    from loadtune.model.settings import ScanOptions

    import torch

    sys.path.insert(0, str(HERE))
    import noop_dataset

    length, features = noop_dataset.DEFAULT_LENGTH, noop_dataset.FEATURES
    cases = CASES
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",")]
        cases = [c for c in CASES if c.name in wanted]
        if len(cases) != len(wanted):
            parser.error(f"unknown case; known: {', '.join(c.name for c in CASES)}")
    arms = [LOADTUNE, BARE] + ([NO_SAMPLER] if args.diagnose else [])

    # Everything loadtune's side gets is what a default scan gives a trial (scan.execute).
    opts = ScanOptions()
    meta = run_meta(argv)
    info = machine.collect()
    timing = default_timing(opts, Timing)
    loader_options = LoaderOptions(shuffle=opts.shuffle, drop_last=opts.drop_last, seed=opts.seed)
    request_base = dict(device="cpu", timing=timing, options=loader_options, timeout_s=opts.timeout, start_method=info.start_method)
    duration_s = args.bare_window
    count_with_len = args.bare_count == "len"

    print(
        f"loadtune loop overhead: {len(cases)} configs x {args.repeats} interleaved repeats; dataset {SPEC_PATH.name} "
        f"(len {length}, one preallocated {features}-float tensor per index), shuffle={opts.shuffle}, seed={opts.seed}, "
        f"drop_last={opts.drop_last}, DataLoader worker start method {info.start_method}, device cpu"
    )
    print(
        f"timing: loadtune as a default scan times a trial ({describe_timing(timing)}); "
        f"bare warm-up {timing.warmup_s:g} s + one {duration_s:g} s window, counting "
        f"{'len(batch)' if count_with_len else 'batch.shape[0]'}"
    )
    print(f"machine: {info.usable_cores} usable cores, {info.cpu_model}, torch {torch.__version__}, python {platform.python_version()}")

    runners = {
        LOADTUNE: lambda case: run_loadtune(case, request_base),
        NO_SAMPLER: lambda case: run_loadtune(case, request_base, sampler=False),
        BARE: lambda case: run_bare(case, loader_options, info.start_method, timing.warmup_s, duration_s,
                                    opts.timeout, count_with_len),
    }
    load_before = os.getloadavg()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load_before)} (1/5/15 min; other processes share these cores)")
    print()
    began = time.monotonic()
    runs: dict[str, list[dict]] = {c.name: [] for c in cases}
    for rep in range(args.repeats):
        for i, case in enumerate(cases):
            shift = (rep + i) % len(arms)  # rotate which arm goes first: A B, B A, ... (A B C, B C A, ...)
            order = arms[shift:] + arms[:shift]
            run = {"repeat": rep, "order": order}
            for arm in order:
                run[arm] = runners[arm](case)
            runs[case.name].append(run)
            bare = run[BARE].get("rate")
            parts = []
            for arm in arms:
                rate = run[arm].get("rate")
                ratio = f" ({rate / bare:.1%})" if rate and bare and arm != BARE else ""
                parts.append(f"{arm} {rate:>10,.0f}{ratio}" if rate else f"{arm} failed")
            print(f"  repeat {rep + 1}/{args.repeats}  {case.name:<22} " + "  ".join(parts) + f"  [{order[0]} first]", flush=True)
            for arm in arms:
                if "error" in run[arm]:
                    print(f"      {arm} failed: {run[arm]['error']}")

    summaries = [summarise(c, runs[c.name], arms) for c in cases]
    elapsed = time.monotonic() - began
    load_after = os.getloadavg()
    print()
    print_table(summaries, arms)
    print()
    holds = all(s["meets_target"] for s in summaries)
    print(f"target (loadtune's reported figure >= {TARGET:.0%} of the bare loop's, ratio of medians): "
          + ("holds for every config" if holds else "missed for " + ", ".join(s["name"] for s in summaries if not s["meets_target"])))
    print(f"total {elapsed:.0f} s; load average after: {' '.join(f'{x:.2f}' for x in load_after)}")

    if args.out:
        doc = {
            "benchmark": "loadtune/overhead",
            "meta": meta,
            "timing": asdict(timing),
            "bare_window_s": duration_s,
            "bare_count": "len(batch)" if count_with_len else "batch.shape[0]",
            "loader_options": asdict(loader_options),
            "dataset": {"spec": "benchmarks/noop_dataset.py", "length": length, "features": features},
            "arms": arms,
            "target": TARGET,
            "target_holds": holds,
            "elapsed_s": elapsed,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "results": summaries,
        }
        write_json(args.out, doc, indent=2)
        print(f"figures written to {args.out}")
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
