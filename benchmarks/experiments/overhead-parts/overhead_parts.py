"""Where loadtune's overhead comes from: its timing loop, or the memory sampler of its trial parent.

benchmarks/overhead.py compares whole trials with a bare loop, seconds apart; on a shared machine
the noise between two such runs is often larger than the 2% it is looking for. The two parts here
alternate their A and B every half second or second, so drift cancels, and each isolates one cause:

  loop     In one process, ``loadtune.engine.trial.meter.Meter.phase`` and a bare ``for batch in loader`` loop,
           each over its own DataLoader of the same config, alternating 0.5 s phases. Nothing but
           the loop differs.
  sampler  A bare loop in a trial-like child (benchmarks/bare_loop.py, forkserver as trials use),
           while the parent runs loadtune's ``MemorySampler.maybe_sample()`` exactly as
           ``run_trial`` does (every 50 ms poll) in even 1 s windows and stays idle in odd ones.
           Each on-window's rate is compared with the mean of its two neighbouring off-windows.

    python benchmarks/overhead_parts.py --out overhead_parts.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from meta import run_meta

HERE = Path(__file__).resolve().parent
SPEC_PATH = HERE / "noop_dataset.py"

CASES = {  # name: (batch_size, num_workers, prefetch_factor, persistent_workers)
    "w0 bs64": (64, 0, None, False),
    "w0 bs16": (16, 0, None, False),
    "w2 pf2 persist bs64": (64, 2, 2, True),
    "w2 pf2 persist bs256": (256, 2, 2, True),
}


def quartiles(xs: list[float]) -> dict:
    q1, med, q3 = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else (xs[0],) * 3
    return {"q1": q1, "median": med, "q3": q3, "n": len(xs)}


def loadtune_phase(meter, phase_s: float) -> float:
    """One ``Meter.phase`` of ``phase_s``: loadtune's timing loop, as a trial runs it."""
    meter.mark = time.perf_counter()  # phases are contiguous: the bare phase just run is not loadtune's
    block = meter.phase(phase_s)
    return block.samples / block.seconds


def bare_phase(loader, phase_s: float) -> float:
    """What a user would write: ``for batch in loader`` until ``phase_s`` has passed."""
    clock = time.perf_counter
    start, samples, end = clock(), 0, None
    while end is None:
        for batch in loader:
            now = clock()
            samples += batch.shape[0]
            if now - start >= phase_s:
                end = now
                break
    return samples / (end - start)


def loop_part(name: str, pairs: int, phase_s: float) -> dict:
    import torch

    from loadtune.engine.trial.meter import Meter, SampleCounter
    from loadtune.engine.trial.setup import LoaderOptions, device_sync, make_consumer, make_loader
    from loadtune.model.config import TrialConfig
    from loadtune.engine.spec import load_spec

    bs, w, pf, pw = CASES[name]
    spec = load_spec(SPEC_PATH)
    config = TrialConfig(bs, w, False, pf, pw, "none")
    options = LoaderOptions()
    cpu = torch.device("cpu")
    meter = Meter(make_loader(spec, config, options), make_consumer(spec, config, cpu), device_sync(cpu),
                  SampleCounter(spec, config, options.drop_last))
    bare_loader = make_loader(spec, config, options)  # same arguments, its own workers
    meter.startup()
    meter.phase(1.0, 5)
    bare_phase(bare_loader, phase_s)
    ours, bare, ratios = [], [], []
    for i in range(pairs):
        if i % 2:
            a, b = loadtune_phase(meter, phase_s), bare_phase(bare_loader, phase_s)
        else:
            b, a = bare_phase(bare_loader, phase_s), loadtune_phase(meter, phase_s)
        ours.append(a)
        bare.append(b)
        ratios.append(a / b)
    del meter, bare_loader
    return {"case": name, "loadtune_median": statistics.median(ours), "bare_median": statistics.median(bare),
            "us_per_batch": bs / statistics.median(bare) * 1e6, "paired_ratio": quartiles(ratios), "ratios": ratios}


def sampler_part(name: str, windows: int, window_s: float, interval_s: float | None = None) -> dict:
    from loadtune.engine import machine
    from loadtune.engine.trial import harness as runner
    from loadtune.engine.trial.memory import MemorySampler
    from loadtune.engine.spec import SpecRef

    from bare_loop import windowed_child

    bs, w, pf, pw = CASES[name]
    kwargs = {"batch_size": bs, "num_workers": w, "pin_memory": False}
    if w:
        kwargs.update(prefetch_factor=pf, persistent_workers=pw)
    ctx = runner.context_for(SpecRef(str(SPEC_PATH)))
    hidden = getattr(runner, "main_module_hidden", None)
    recv, send = ctx.Pipe(duplex=False)
    t0 = time.monotonic() + 3.0  # start-up and warm-up first
    proc = ctx.Process(target=windowed_child, name="overhead-parts",
                       args=(kwargs, True, False, 0, machine.collect().start_method, t0, windows, window_s, send))
    if hidden:
        with hidden():
            proc.start()
    else:
        proc.start()
    send.close()
    sampler = MemorySampler(proc.pid) if interval_s is None else MemorySampler(proc.pid, interval_s=interval_s)
    cpu = 0.0
    try:
        while not recv.poll(0.05):  # run_trial's poll period
            now = time.monotonic()
            if now >= t0 and int((now - t0) // window_s) % 2 == 0:  # even windows: sampler on
                before, c0 = len(sampler.samples), time.process_time()
                sampler.maybe_sample()
                if len(sampler.samples) > before:
                    cpu += time.process_time() - c0
        result = recv.recv()
        proc.join(10)
    finally:
        runner.kill_group(proc.pid)
        proc.join(5)
        recv.close()
    if "error" in result:
        return {"case": name, "error": result["error"]}
    rates = [c / window_s for c in result["counts"]]
    on, off = rates[0::2], rates[1::2]
    vs_neighbours = [on[j] / ((off[j - 1] + off[j]) / 2) for j in range(1, min(len(on), len(off)))]
    samples = len(sampler.samples)
    return {
        "case": name,
        "on_median": statistics.median(on),
        "off_median": statistics.median(off),
        "on_vs_neighbouring_off": quartiles(vs_neighbours),
        "ratios": vs_neighbours,
        "memory_samples": samples,
        "sampler_interval_s": sampler.interval_s,
        "cpu_ms_per_sample": cpu / samples * 1e3 if samples else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="loop,sampler", help="loop, sampler or both (default)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, from: {', '.join(CASES)}")
    parser.add_argument("--pairs", type=int, default=30, help="loop part: alternating 0.5 s phase pairs (default 30)")
    parser.add_argument("--windows", type=int, default=30, help="sampler part: 1 s windows, half on (default 30)")
    parser.add_argument("--interval", type=float, metavar="S",
                        help="sampler part: MemorySampler interval_s to try (default: loadtune's own)")
    parser.add_argument("--out", metavar="PATH", help="write all figures here")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",")]
    cases = [c.strip() for c in args.cases.split(",")]
    if any(p not in ("loop", "sampler") for p in parts) or any(c not in CASES for c in cases):
        parser.error("unknown part or case")

    import torch

    print(f"torch {torch.__version__}, {os.cpu_count()} logical cores; load average before "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    began = time.monotonic()
    out: dict = {"meta": run_meta(argv)}
    if "loop" in parts:
        print("\nloop: Meter.phase vs bare loop, same config, one process, alternating 0.5 s phases")
        print(f"  {'config':<22}{'us/batch':>9}{'Meter.phase':>14}{'bare':>12}   paired ratio median (q1-q3)")
        out["loop"] = []
        for name in cases:
            r = loop_part(name, args.pairs, 0.5)
            out["loop"].append(r)
            q = r["paired_ratio"]
            print(f"  {name:<22}{r['us_per_batch']:>9.1f}{r['loadtune_median']:>14,.0f}{r['bare_median']:>12,.0f}"
                  f"   {q['median']:.3f} ({q['q1']:.3f}-{q['q3']:.3f}), n={q['n']}", flush=True)
    if "sampler" in parts:
        every = f"every {args.interval:g} s" if args.interval else "at loadtune's default interval"
        print(f"\nsampler: bare loop in a trial-like child; parent's MemorySampler ({every}) on in even 1 s windows, off in odd")
        print(f"  {'config':<22}{'on':>12}{'off':>12}   on/off median (q1-q3)      CPU per sample  samples")
        out["sampler"] = []
        for name in cases:
            r = sampler_part(name, args.windows, 1.0, args.interval)
            out["sampler"].append(r)
            if "error" in r:
                print(f"  {name:<22} failed: {r['error']}")
                continue
            q = r["on_vs_neighbouring_off"]
            print(f"  {name:<22}{r['on_median']:>12,.0f}{r['off_median']:>12,.0f}   {q['median']:.3f} ({q['q1']:.3f}-{q['q3']:.3f}), n={q['n']}"
                  f"   {r['cpu_ms_per_sample']:>6.1f} ms      {r['memory_samples']:>4}", flush=True)
    out["load_average_after"] = os.getloadavg()
    out["elapsed_s"] = time.monotonic() - began
    print(f"\ntotal {out['elapsed_s']:.0f} s; load average after " + " ".join(f"{x:.2f}" for x in out["load_average_after"]))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
        print(f"figures written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
