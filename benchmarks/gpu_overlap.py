"""How much of the copy time the ``stream`` strategy hides behind a compute step of equal length.

Three loops over the same pinned batches, each timed on the wall clock with the device synchronised
before and after it (never inside):

  copy   ``move_to(batch, device, non_blocking=True)`` on the compute stream, nothing else;
  step   the synthetic step of ``--step-ms`` (``loadtune.workload``), calibrated to the copy's
         measured length, on batches already on the device;
  both   ``for batch in CUDAPrefetcher(batches, device): step(batch)``.

hidden = (copy + step - both) / copy: 1.0 when the copy is wholly overlapped, 0 when it is not at all.
The first batch's copy cannot be hidden (nothing runs before it), so the ceiling is (n - 1) / n.
Repeats are interleaved (copy, step, both, copy, ...) and each figure is the median. Target: >= 90%.

    PYTHONPATH=. python3 benchmarks/gpu_overlap.py --out /tmp/gpu_overlap.json   # kept as benchmarks/results/gpu_overlap.json.gz (gzip -9n)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_common import gpu_meta, require_cuda

TARGET = 0.90


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64, help="bytes per batch, MiB (default: 64)")
    parser.add_argument("--batches", type=int, default=100, help="batches per loop (default: 100)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats (default: 5)")
    parser.add_argument("--out", type=Path, metavar="PATH", help="write the figures here")
    args = parser.parse_args()
    require_cuda("gpu_overlap")
    meta = gpu_meta()
    import torch

    from loadtune.engine.trial.prefetch import CUDAPrefetcher
    from loadtune.engine.trial.transfer import move_to
    from loadtune.engine.trial.workload import calibrate

    device = torch.device("cuda", torch.cuda.current_device())
    pool = [torch.full(((args.mib << 20) // 4,), float(i)).pin_memory() for i in range(4)]
    batches = [pool[i % len(pool)] for i in range(args.batches)]
    on_device = [b.to(device) for b in pool]

    def timed(loop) -> float:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        loop()
        torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / args.batches

    def copy_loop():
        for batch in batches:
            move_to(batch, device, non_blocking=True)

    copy_s = statistics.median(timed(copy_loop) for _ in range(3))
    work = calibrate(copy_s * 1000, device)
    step = work.build(device)

    def step_loop():
        for i in range(args.batches):
            step(on_device[i % len(on_device)])

    def both_loop():
        for batch in CUDAPrefetcher(batches, device):
            step(batch)

    figures = {"copy": [], "step": [], "both": []}
    for _ in range(args.repeats):
        for name, loop in (("copy", copy_loop), ("step", step_loop), ("both", both_loop)):
            figures[name].append(timed(loop))
    copy, step_t, both = (statistics.median(figures[k]) for k in ("copy", "step", "both"))
    hidden = (copy + step_t - both) / copy
    ceiling = (args.batches - 1) / args.batches
    print(f"batch {args.mib} MiB pinned, {args.batches} batches, {args.repeats} repeats (median ms per batch)")
    print(f"  copy only {copy * 1000:.3f} ms ({(args.mib << 20) / copy / 1e9:.1f} GB/s)")
    print(f"  step only {step_t * 1000:.3f} ms ({work.iterations} matmuls of {work.size}x{work.size})")
    print(f"  both      {both * 1000:.3f} ms (stream strategy: CUDAPrefetcher)")
    verdict = "PASS" if hidden >= TARGET else "FAIL"
    print(f"  hidden {hidden:.1%} of the copy time (ceiling {ceiling:.0%}): {verdict} (target {TARGET:.0%})")
    if args.out:
        args.out.write_text(json.dumps({
            "benchmark": "gpu_overlap", "meta": meta, "target": TARGET, "batch_mib": args.mib,
            "batches": args.batches, "repeats": args.repeats, "workload": work.to_dict(),
            "seconds_per_batch": figures, "copy_s": copy, "step_s": step_t, "both_s": both, "hidden": hidden,
        }, indent=1) + "\n")
        print(f"saved to {args.out}")


if __name__ == "__main__":
    main()
