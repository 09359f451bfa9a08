"""What a trial used of its GPU, read inside the trial process.

Device memory comes from torch's caching allocator, its peaks reset when the trial starts. Pinned
(page-locked) host memory comes from torch's pinned-memory allocator where this torch exposes its
counters (``torch.cuda.host_memory_stats``); elsewhere it is estimated as one batch's bytes times
the batches that can be in flight pinned (``prefetch_factor`` x ``num_workers``, plus the one being
copied), and labelled an estimate. Utilisation is sampled by the parent (``nvml.py``), not here.
"""

from __future__ import annotations

import torch

from loadtune.analysis import footprint
from loadtune.model.batch import BatchInfo
from loadtune.model.config import TrialConfig
from loadtune.model.results import GPUUsage


def identity(device: torch.device) -> dict:
    """What the parent needs to find this device in NVML: its UUID (device order and
    CUDA_VISIBLE_DEVICES make CUDA's index differ from NVML's) and the CUDA index."""
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    text = str(uuid) if uuid is not None else None
    if text and not text.startswith("GPU-"):
        text = "GPU-" + text
    return {"uuid": text, "index": device.index}


def reset_peaks(device: torch.device) -> None:
    torch.cuda.reset_peak_memory_stats(device)
    if hasattr(torch.cuda, "reset_peak_host_memory_stats"):
        torch.cuda.reset_peak_host_memory_stats()


def pinned_counted() -> int | None:
    """Peak bytes the pinned-memory allocator held since the reset (None where torch has no counter)."""
    stats = torch.cuda.host_memory_stats() if hasattr(torch.cuda, "host_memory_stats") else {}
    value = stats.get("allocated_bytes.peak")
    return int(value) if value is not None else None


def pinned_estimate(config: TrialConfig, batch: BatchInfo | None) -> int | None:
    """``footprint.pinned_estimate`` from the first batch the trial saw; None when nothing is pinned."""
    if not config.pin_memory or batch is None:
        return None
    return footprint.pinned_estimate(config, batch.nbytes)


def usage(device: torch.device, config: TrialConfig, batch: BatchInfo | None) -> GPUUsage:
    """The peaks since ``reset_peaks``, read while the loader is still alive."""
    pinned, estimated = pinned_counted(), False
    if pinned is None or (config.pin_memory and pinned == 0):  # no counter, or one that saw none of it
        guess = pinned_estimate(config, batch)
        if guess is not None:
            pinned, estimated = guess, True
    return GPUUsage(
        peak_allocated_bytes=torch.cuda.max_memory_allocated(device),
        peak_reserved_bytes=torch.cuda.max_memory_reserved(device),
        pinned_bytes=pinned,
        pinned_estimated=estimated,
    )
