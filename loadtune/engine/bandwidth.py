"""Host-to-device and device-to-host copy rates, timed with CUDA events: what ``doctor`` reports and
the pinned peak a scan sets its achieved copy rates beside. Runs only in processes allowed to touch
CUDA (the probe child, ``doctor``), never in a scan's own process."""

from __future__ import annotations

from dataclasses import dataclass

from loadtune.model.estimate import estimate

MiB = 1 << 20
SIZES = (1 * MiB, 16 * MiB, 256 * MiB)


@dataclass
class CopyRate:
    """One measured copy rate: median GB/s over ``repeats`` timed copies, with its 95% interval."""

    direction: str  # "h2d" (host to device) or "d2h"
    memory: str  # "pinned" or "pageable" host memory
    size_bytes: int
    gbps: float
    low: float
    high: float
    repeats: int


def copy_rate(device, nbytes: int, direction: str = "h2d", pinned: bool = True,
              repeats: int | None = None, warmup: int = 2) -> CopyRate:
    """Time ``nbytes`` copied between host and ``device`` with CUDA events around each copy.

    Pinned copies are issued ``non_blocking`` (as a DataLoader with ``pin_memory=True`` and
    ``.to(device, non_blocking=True)`` would); pageable ones cannot be, the driver stages them."""
    import torch

    device = torch.device(device)
    repeats = repeats or max(5, min(50, (1 << 30) // nbytes))  # about 1 GiB per figure, 5 to 50 copies
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    host.fill_(1)  # touch every page: a pageable buffer's first-touch faults are not the copy's
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    stream = torch.cuda.current_stream(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rates = []
    for i in range(warmup + repeats):
        start.record(stream)
        if direction == "h2d":
            dev.copy_(host, non_blocking=pinned)
        else:
            host.copy_(dev, non_blocking=pinned)
        end.record(stream)
        end.synchronize()
        if i >= warmup:
            rates.append(nbytes / (start.elapsed_time(end) / 1000) / 1e9)
    est = estimate(rates)
    return CopyRate(direction, "pinned" if pinned else "pageable", nbytes, est.median, est.low, est.high, repeats)


def pinned_peak(device, nbytes: int = 256 * MiB) -> float:
    """Pinned host-to-device GB/s at a large size: the figure the scan sets achieved rates beside."""
    return copy_rate(device, nbytes, "h2d", pinned=True).gbps
