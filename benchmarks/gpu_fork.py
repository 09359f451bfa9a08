"""Do forked DataLoader workers survive a live CUDA context, epoch after epoch?

A plain training-style loop (loadtune only in the ``start`` variant): examples/images.py's dataset, 8 workers started with
``fork`` (Linux's default), ``pin_memory=True``, batches moved with ``.to("cuda", non_blocking=True)``,
several short epochs. Without ``persistent_workers`` the workers are forked again at every epoch
boundary, from a process whose CUDA context is live. Each variant runs in its own process and
reports its exit code and the last lines of its stderr (a worker that dies by SIGABRT prints its
reason there):

  plain        the loop above;
  gc           the same, with ``gc.collect()`` before each epoch's ``iter(loader)``;
  persistent   ``persistent_workers=True``: workers forked once, at the first epoch;
  forkserver   ``multiprocessing_context="forkserver"``;
  nopin        ``pin_memory=False``, blocking copies;
  cpu          no CUDA at all (control);
  garbage      the plain loop leaving, each epoch, a reference cycle that holds its last batch on the
               GPU and in pinned memory: the garbage a forked worker may collect (expected to abort);
  start        the same garbage, each epoch's workers started by ``loadtune.engine.loaders.start``
               (expected to survive: its workers freeze what they inherit).

    PYTHONPATH=. python3 benchmarks/gpu_fork.py --out /tmp/gpu_fork.json   # kept as benchmarks/results/gpu_fork.json.gz (gzip -9n)
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VARIANTS = ("plain", "gc", "forkserver", "persistent", "nopin", "cpu", "garbage", "start")


class Cycle:
    """A reference cycle holding tensors: freed only by the garbage collector."""

    def __init__(self, *tensors):
        self.me, self.tensors = self, tensors


def loop(variant: str, epochs: int, workers: int) -> None:
    import gc

    import torch
    from torch.utils.data import DataLoader

    sys.path.insert(0, str(HERE.parent / "examples"))
    import images

    cuda = variant != "cpu"
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        torch.zeros(1, device=device)  # the context is live before any worker starts, as in training
    loader = DataLoader(images.SyntheticImageFolder(n=32 * 6), batch_size=32, shuffle=True, num_workers=workers,
                        pin_memory=variant not in ("nopin", "cpu"), persistent_workers=variant == "persistent",
                        multiprocessing_context="forkserver" if variant == "forkserver" else None)
    begin = iter
    if variant == "start":
        from loadtune.engine.loaders import start as begin

    for _ in range(epochs):
        if variant == "gc":
            gc.collect()
        for batch, _ in begin(loader):
            moved = batch.to(device, non_blocking=cuda)
            moved.sum()
        if cuda:
            torch.cuda.synchronize()
        if variant in ("garbage", "start"):
            Cycle(batch, moved)
    print(f"{variant}: {epochs} epochs done", flush=True)


def run(variant: str, epochs: int, workers: int, timeout: float) -> dict:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", variant, "--epochs", str(epochs),
                               "--workers", str(workers)], capture_output=True, text=True, timeout=timeout)
        rc, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, err = "timeout", (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    tail = [line for line in err.splitlines() if line.strip()][-6:]
    return {"variant": variant, "rc": rc, "seconds": round(time.perf_counter() - t0, 1), "stderr_tail": tail}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        loop(args.child, args.epochs, args.workers)
        return
    import torch

    if not torch.cuda.is_available():
        print("gpu_fork: SKIPPED, nothing measured: no CUDA device here")
        return
    rows = []
    for r in range(args.repeats):
        for variant in args.variants.split(","):
            row = run(variant, args.epochs, args.workers, args.timeout)
            row["repeat"] = r
            rows.append(row)
            print(f"{variant:>11} #{r}: rc={row['rc']} in {row['seconds']} s", *row["stderr_tail"][-3:], sep="\n    ",
                  flush=True)
    if args.out:
        meta = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
                "epochs": args.epochs, "workers": args.workers}
        args.out.write_text(json.dumps({"meta": meta, "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
