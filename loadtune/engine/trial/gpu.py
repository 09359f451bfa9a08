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
from loadtune.model.trial import GPUUsage


def identity(device: torch.device) -> dict:
    """What the parent needs to find this device in NVML (``nvml.handle_for``): its UUID as CUDA
    reports it (bare hex; NVML prefixes it ``GPU-`` or, for a MIG instance, ``MIG-``) and its PCI bus
    id. CUDA's index is kept for the record only: NVML numbers devices differently."""
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    return {"uuid": str(uuid) if uuid is not None else None, "pci_bus_id": pci_bus_id(props), "index": device.index}


def pci_bus_id(props) -> str | None:
    """``"00000000:3B:00.0"``, NVML's form, from CUDA's device properties (None on a torch without them)."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if any(not isinstance(p, int) or p < 0 for p in parts):
        return None
    domain, bus, dev = parts
    return f"{domain:08X}:{bus:02X}:{dev:02X}.0"


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
