"""``loadtune doctor``: what this machine offers a DataLoader and the copy to its GPUs.

Cores, memory and versions come from ``machine.py``; how steady the CPU's pace is from ``pace.py``; each GPU's name, driver and PCIe link from
NVML; the copy rates are measured here: host-to-device and device-to-host, from pinned and from
pageable memory, at a few sizes, timed with CUDA events after a warm-up, median of repeats with
its interval. The theoretical figure beside them is the link's: generation x lanes x the per-lane
rate after line encoding. A GPU idles its link down to a lower generation to save power, so the
current generation is read right after the copies, while it is still trained up. With a dataset's
folder (``--storage``) it also measures the storage's cold reads there (``diskread.py``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from loadtune.analysis.pace import CpuPace
from loadtune.engine import diskread
from loadtune.engine import machine as machine_mod
from loadtune.engine.pace import measure_pace
from loadtune.engine.bandwidth import SIZES, CopyRate, copy_rate
from loadtune.engine.trial import nvml
from loadtune.model.machine import MachineInfo
from loadtune.model.storage_read import StorageReadReport

# GB/s (10^9 bytes) per lane after encoding: 8b/10b for gen 1-2, 128b/130b for 3-5, FLIT mode for 6
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def link_gbps(gen: int | None, width: int | None) -> float | None:
    """The link's theoretical one-way GB/s, or None when the generation or width is unknown."""
    if not gen or not width or gen not in PCIE_LANE_GBPS:
        return None
    return PCIE_LANE_GBPS[gen] * width


@dataclass
class GPUDoctor:
    index: int  # CUDA's index
    name: str
    memory_bytes: int
    uuid: str | None = None
    driver: str | None = None
    link: nvml.PCIeLink | None = None
    copies: list[CopyRate] = field(default_factory=list)
    error: str | None = None  # why the copies could not be measured

    @property
    def link_gbps_max(self) -> float | None:
        return link_gbps(self.link.gen_max, self.link.width_max) if self.link else None

    @property
    def link_gbps_current(self) -> float | None:
        return link_gbps(self.link.gen_current, self.link.width_current) if self.link else None


@dataclass
class DoctorReport:
    machine: MachineInfo
    affinity_cores: int
    shm_free_bytes: int | None
    cudnn: int | None
    driver_cuda: str | None  # the CUDA version the driver supports (NVML)
    nvml_note: str | None  # why NVML could not be used, when it could not
    gpu_note: str | None  # why there is no GPU to show, when there is none
    gpus: list[GPUDoctor] = field(default_factory=list)
    cpu_pace: CpuPace | None = None  # how steady the CPU's pace was (None: not measured, or it could not be)
    storage: StorageReadReport | None = None  # --storage PATH: the storage's cold reads (None: not asked)

    def to_dict(self) -> dict:
        data = asdict(self)
        for gpu, obj in zip(data["gpus"], self.gpus):
            gpu["link_gbps_max"], gpu["link_gbps_current"] = obj.link_gbps_max, obj.link_gbps_current
        del data["storage"]  # written only when asked for: without --storage the findings are as they were
        storage = {"storage": self.storage.to_dict()} if self.storage else {}
        return {"schema": "loadtune/doctor", "schema_version": 1, **data, **storage}


def no_gpu_reason() -> str | None:
    """Why torch sees no CUDA device, in words; None when it sees one."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"no GPU: this torch ({torch.__version__}) is a CPU-only build"
    why = nvml.unavailable()
    return f"no GPU: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device" + (
        f" (NVML: {why})" if why else "")


def driver_cuda_version() -> str | None:
    version = nvml.query("nvmlSystemGetCudaDriverVersion")
    return f"{version // 1000}.{version % 1000 // 10}" if isinstance(version, int) and version > 0 else None


def examine_gpu(index: int, sizes: tuple[int, ...], measure: bool) -> GPUDoctor:
    import torch

    from loadtune.engine.trial.gpu import identity

    props = torch.cuda.get_device_properties(index)
    found = identity(torch.device("cuda", index))
    dev = nvml.handle_for(found["uuid"], found["pci_bus_id"])  # CUDA's index is not NVML's: never matched by it
    uuid = (nvml.query("nvmlDeviceGetUUID", dev) if dev is not None else None) or found["uuid"]
    gpu = GPUDoctor(index, props.name, props.total_memory, uuid, nvml.query("nvmlSystemGetDriverVersion"))
    if measure:
        try:
            for nbytes in sizes:
                for direction in ("h2d", "d2h"):
                    for pinned in (True, False):
                        gpu.copies.append(copy_rate(torch.device("cuda", index), nbytes, direction, pinned))
        except Exception as exc:  # noqa: BLE001 - a broken device or out of memory: say so, show the rest
            gpu.error = f"{type(exc).__name__}: {exc}"
        finally:
            torch.cuda.empty_cache()
    if dev is not None:  # read after the copies: an idle link trains down to save power
        gpu.link = nvml.pcie_link(dev)
    return gpu


def collect(measure: bool = True, sizes: tuple[int, ...] = SIZES, pace: bool = False, storage: str | None = None) -> DoctorReport:
    """Everything ``loadtune doctor`` prints (``pace``: with the CPU's pace measured, a few seconds of
    every core; ``storage``: a dataset's folder, its reads measured first, so that a path with nothing
    to read is refused before any other work). Creates a CUDA context when there is a GPU: not for a
    process that will fork trials afterwards."""
    import torch

    reads = diskread.measure(storage) if storage is not None else None
    info = machine_mod.collect()
    report = DoctorReport(
        machine=info,
        affinity_cores=machine_mod.affinity_cores(),
        shm_free_bytes=shm_free(),
        cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        driver_cuda=driver_cuda_version(),
        nvml_note=nvml.unavailable(),
        gpu_note=no_gpu_reason(),
        cpu_pace=measure_pace() if pace else None,  # before any CUDA context: its processes are spawned anyway
        storage=reads,
    )
    if report.gpu_note is None:
        report.gpus = [examine_gpu(i, sizes, measure) for i in range(torch.cuda.device_count())]
    return report


def shm_free() -> int | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize
