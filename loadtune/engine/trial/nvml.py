"""NVML (the ``pynvml`` module of nvidia-ml-py), strictly optional.

NVML reads what CUDA does not: utilisation, the driver version, the PCIe link. It talks to the
driver without creating a CUDA context, so the scan's parent process can sample a trial's GPU from
outside it. Without the package, the library or a driver there are no figures, never a crash: every
query here returns None instead of raising.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

_nvml: Any = None  # the initialised module, False once it failed, None before the first try
_why: str | None = None


def nvml() -> Any | None:
    """The initialised ``pynvml`` module, or None (``unavailable()`` says why)."""
    global _nvml, _why
    if _nvml is None:
        try:
            import pynvml

            pynvml.nvmlInit()
            _nvml = pynvml
        except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
            _nvml, _why = False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return _nvml or None


def unavailable() -> str | None:
    """Why NVML cannot be used here, or None when it can."""
    return None if nvml() is not None else _why


def reset() -> None:
    """Forget the first attempt (tests swap the module)."""
    global _nvml, _why
    _nvml, _why = None, None


def query(name: str, *args: Any) -> Any | None:
    """``pynvml.<name>(*args)``, or None when NVML, the function or the answer is unavailable."""
    lib = nvml()
    if lib is None:
        return None
    try:
        value = getattr(lib, name)(*args)
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported on some boards, AttributeError on an old pynvml
        return None
    return value.decode() if isinstance(value, bytes) else value


def device_count() -> int:
    return query("nvmlDeviceGetCount") or 0


def handle(index: int | None = None, uuid: str | None = None) -> Any | None:
    """A device handle by UUID (what CUDA and NVML agree on whatever the device order), else by
    NVML index."""
    if uuid:
        found = query("nvmlDeviceGetHandleByUUID", uuid)
        if found is not None:
            return found
    return query("nvmlDeviceGetHandleByIndex", index) if index is not None else None


def utilisation(dev: Any) -> int | None:
    """Percent of the last sample period (1/6 s to 1 s) in which a kernel ran on the device."""
    rates = query("nvmlDeviceGetUtilizationRates", dev)
    return int(rates.gpu) if rates is not None else None


@dataclass
class PCIeLink:
    """A GPU's PCIe link: generation and lane count, now and at most (idle GPUs often train down)."""

    gen_current: int | None
    gen_max: int | None
    width_current: int | None
    width_max: int | None


def pcie_link(dev: Any) -> PCIeLink:
    return PCIeLink(
        query("nvmlDeviceGetCurrPcieLinkGeneration", dev),
        query("nvmlDeviceGetMaxPcieLinkGeneration", dev),
        query("nvmlDeviceGetCurrPcieLinkWidth", dev),
        query("nvmlDeviceGetMaxPcieLinkWidth", dev),
    )


@dataclass
class UtilisationSampler:
    """GPU utilisation of a trial's device, sampled from the parent process while blocks are timed."""

    dev: Any
    interval_s: float = 0.2
    start: float = field(default_factory=time.monotonic)
    samples: list[tuple[float, int]] = field(default_factory=list)
    timed: bool = False
    _last: float = -1e9

    @classmethod
    def for_device(cls, uuid: str | None, index: int | None) -> UtilisationSampler | None:
        """By UUID; by index only when CUDA_VISIBLE_DEVICES does not renumber the devices."""
        dev = handle(None if os.environ.get("CUDA_VISIBLE_DEVICES") else index, uuid)
        return cls(dev) if dev is not None else None

    def maybe_sample(self) -> None:
        now = time.monotonic()
        if not self.timed or now - self._last < self.interval_s:
            return
        self._last = now
        value = utilisation(self.dev)
        if value is not None:
            self.samples.append((round(now - self.start, 3), value))
