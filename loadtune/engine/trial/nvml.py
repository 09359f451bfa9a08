"""NVML (the ``pynvml`` module of nvidia-ml-py), strictly optional.

NVML reads what CUDA does not: utilisation, the driver version, the PCIe link. It talks to the
driver without creating a CUDA context, so the scan's parent process can sample a trial's GPU from
outside it. Without the package, the library or a driver there are no figures, never a crash: every
query here returns None instead of raising.

A device is found by what CUDA and NVML agree on, never by index: CUDA numbers devices fastest
first (unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``) and renumbers them under ``CUDA_VISIBLE_DEVICES``,
NVML numbers them by PCI bus. CUDA reports a UUID without NVML's prefix, which is ``GPU-`` for a
whole GPU and ``MIG-`` for a MIG instance, so both are tried; then the PCI bus id.
"""

from __future__ import annotations

import atexit
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
            atexit.unregister(shutdown)
            atexit.register(shutdown)  # every successful nvmlInit is paired with one nvmlShutdown
        except Exception as exc:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
            _nvml, _why = False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return _nvml or None


def unavailable() -> str | None:
    """Why NVML cannot be used here, or None when it can."""
    return None if nvml() is not None else _why


def shutdown() -> None:
    """Release NVML if this process initialised it; a later query initialises it again."""
    global _nvml, _why
    if _nvml:
        try:
            _nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - an old or fake module without it, a driver gone meanwhile
            pass
    _nvml, _why = None, None


def reset() -> None:
    """Forget the first attempt (tests swap the module)."""
    shutdown()


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
    """A device handle by UUID (see ``handle_for``), else by NVML's own index (NVML's numbering, which
    is not CUDA's)."""
    found = handle_for(uuid) if uuid else None
    if found is None and index is not None:
        found = query("nvmlDeviceGetHandleByIndex", index)
    return found


UUID_PREFIXES = ("GPU-", "MIG-")  # NVML's names: a whole GPU, a MIG instance


def uuid_candidates(uuid: str) -> list[str]:
    """NVML's possible names for a UUID as CUDA reports it (bare hex, or already prefixed)."""
    bare = uuid.removeprefix("GPU-").removeprefix("MIG-")
    given = [uuid] if uuid.startswith(UUID_PREFIXES) else []
    return list(dict.fromkeys(given + [prefix + bare for prefix in UUID_PREFIXES]))


def handle_for(uuid: str | None, pci_bus_id: str | None = None) -> Any | None:
    """The NVML handle of the device CUDA knows by ``uuid`` (a whole GPU or a MIG instance), else by
    its PCI bus id (``"00000000:3B:00.0"``: for a MIG instance, that is its whole GPU). Never by
    index (see the module's note)."""
    for name in uuid_candidates(uuid) if uuid else []:
        found = query("nvmlDeviceGetHandleByUUID", name)
        if found is not None:
            return found
    if pci_bus_id:
        for function in ("nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"):
            found = query(function, pci_bus_id)
            if found is not None:
                return found
    return None


MIG_ENABLED = 1  # pynvml.NVML_DEVICE_MIG_ENABLE: nvmlDeviceGetMigMode's current mode


def no_utilisation(dev: Any) -> str | None:
    """Why NVML reports no utilisation for ``dev``, or None when it does: a MIG instance, or a whole
    GPU in MIG mode (what the PCI bus id finds for a MIG instance whose UUID NVML did not know)."""
    if query("nvmlDeviceIsMigDeviceHandle", dev):
        return "the device is a MIG instance, for which NVML reports no utilisation"
    mode = query("nvmlDeviceGetMigMode", dev)  # [current, pending]; None on a GPU without MIG
    if mode and mode[0] == MIG_ENABLED:
        return "the GPU is in MIG mode, for which NVML reports no utilisation"
    return None


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
    def for_device(cls, uuid: str | None, index: int | None = None,
                   pci_bus_id: str | None = None) -> UtilisationSampler | None:
        """The sampler of the device a trial reported (``gpu.identity``): found by UUID or PCI bus id,
        never by CUDA's ``index``, which NVML numbers differently. None when NVML cannot find it or
        reports no utilisation for it (``unsampled`` says why)."""
        dev = handle_for(uuid, pci_bus_id)
        return cls(dev) if dev is not None and no_utilisation(dev) is None else None

    def maybe_sample(self) -> None:
        now = time.monotonic()
        if not self.timed or now - self._last < self.interval_s:
            return
        self._last = now
        value = utilisation(self.dev)
        if value is not None:
            self.samples.append((round(now - self.start, 3), value))


def unsampled(uuid: str | None, pci_bus_id: str | None = None) -> str | None:
    """Why the utilisation of the device CUDA knows by ``uuid`` cannot be sampled, in words for the
    report; None when it can."""
    why = unavailable()
    if why is not None:
        return f"NVML is unavailable ({why})"
    dev = handle_for(uuid, pci_bus_id)
    if dev is None:
        return f"NVML knows no device with UUID {uuid} or PCI bus id {pci_bus_id}"
    return no_utilisation(dev)


def utilisation_notes(devices: list[dict]) -> list[str]:
    """Which devices (``gpu.identity``'s answers) the trials cannot sample the utilisation of, and why:
    one note per reason."""
    by_reason: dict[str, list[str]] = {}
    for found in devices:
        why = unsampled(found.get("uuid"), found.get("pci_bus_id"))
        if why is not None:
            by_reason.setdefault(why, []).append(f"cuda:{found.get('index')}")
    return [f"GPU utilisation is not sampled on {', '.join(names)}: {why}" for why, names in by_reason.items()]
