"""The bare side of benchmarks/overhead.py: what a user would write to time a DataLoader.

A module of its own (not the benchmark script) so the child that runs it is started exactly like a
loadtune trial: from loadtune's forkserver context, without re-importing the caller's ``__main__``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def noop_loader(loader_kwargs: dict, shuffle: bool, drop_last: bool, seed: int, start_method: str):
    """The DataLoader both bare loops run: the no-op dataset, as a loadtune trial would build it."""
    import multiprocessing

    import torch
    from torch.utils.data import DataLoader

    multiprocessing.set_start_method(start_method, force=True)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import noop_dataset

    return DataLoader(
        noop_dataset.dataset(),
        shuffle=shuffle,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed) if shuffle else None,
        **loader_kwargs,
    )


def bare_child(loader_kwargs: dict, shuffle: bool, drop_last: bool, seed: int, start_method: str,  # noqa: C901 - one child entry, kept whole to mirror the trial harness
               warmup_s: float, duration_s: float, count_with_len: bool, conn) -> None:
    """Run the bare loop in this (trial-like) child: own session, DataLoader workers started with
    ``start_method``; send ``{"samples", "seconds", "rate"}`` or ``{"error"}`` back."""
    os.setsid()
    try:
        loader = noop_loader(loader_kwargs, shuffle, drop_last, seed, start_method)

        # What a user writes: epochs of `for batch in loader`, a warm-up, then a fixed timed window.
        clock = time.perf_counter
        warm_until = clock() + warmup_s
        start = end = None
        samples = 0
        if count_with_len:
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
        else:
            while end is None:
                for batch in loader:
                    now = clock()
                    if start is None:
                        if now >= warm_until:
                            start = now  # the window opens after this batch: it is not counted
                        continue
                    samples += batch.shape[0]
                    if now - start >= duration_s:
                        end = now
                        break
        conn.send({"samples": samples, "seconds": end - start, "rate": samples / (end - start)})
        del loader  # workers shut down here, as in a trial, not at interpreter exit
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def windowed_child(loader_kwargs: dict, shuffle: bool, drop_last: bool, seed: int, start_method: str,
                   t0: float, windows: int, window_s: float, conn) -> None:
    """A bare loop that runs from before ``t0`` (monotonic clock) for ``windows`` windows of
    ``window_s`` and sends the samples delivered in each window (for benchmarks/experiments/overhead-parts/)."""
    os.setsid()
    try:
        loader = noop_loader(loader_kwargs, shuffle, drop_last, seed, start_method)
        counts = [0] * windows
        clock = time.monotonic  # system-wide: the parent keys its on/off windows to the same clock
        end = t0 + windows * window_s
        done = False
        while not done:
            for batch in loader:
                now = clock()
                if now >= end:
                    done = True
                    break
                if now >= t0:
                    counts[int((now - t0) / window_s)] += batch.shape[0]
        conn.send({"counts": counts})
        del loader
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()
