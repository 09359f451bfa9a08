"""What the machine offers: usable cores, memory, /dev/shm, accelerators, versions.

"Usable cores" is the CPU affinity mask capped by any cgroup CPU quota: in a container
``os.cpu_count()`` reports the host's cores, and a worker grid built from it oversubscribes.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import platform
import shutil
from pathlib import Path

import psutil
from loadtune.model.machine import GPUInfo, MachineInfo

CGROUP_ROOT = Path("/sys/fs/cgroup")


def parse_cpu_max(text: str) -> float | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` line (``"200000 100000"`` -> 2.0, ``"max ..."`` -> None)."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    quota, period = int(parts[0]), int(parts[1])
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs allowed by cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1 means unlimited)."""
    quota, period = int(quota_text.strip()), int(period_text.strip())
    return quota / period if quota > 0 and period > 0 else None


def cgroup_v2_dirs(root: Path = CGROUP_ROOT) -> list[Path]:
    """This process's cgroup v2 directory and its ancestors: a quota on any of them applies."""
    try:
        line = next(entry for entry in Path("/proc/self/cgroup").read_text().splitlines() if entry.startswith("0::"))
    except (OSError, StopIteration):
        return [root]
    here = root / line[3:].strip().lstrip("/")
    return [here, *[p for p in here.parents if p.is_relative_to(root)]]


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The tightest CPU quota of this process's cgroups, in CPUs, or None when there is none."""
    reads = [lambda d=d: parse_cpu_max((d / "cpu.max").read_text()) for d in cgroup_v2_dirs(root) if (d / "cpu.max").exists()]
    v1 = root / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        reads.append(lambda: parse_cfs((v1 / "cpu.cfs_quota_us").read_text(), (v1 / "cpu.cfs_period_us").read_text()))
    limits = []
    for read in reads:  # one unreadable or malformed file must not hide the others
        try:
            limits.append(read())
        except (OSError, ValueError):
            pass
    limits = [x for x in limits if x is not None]
    return min(limits) if limits else None


def affinity_cores() -> int:
    """Cores this process may run on (the affinity mask), falling back to the logical count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def usable_cores() -> int:
    """Affinity mask capped by the cgroup quota (rounded up: a 1.5-CPU quota still runs 2 threads)."""
    cores = affinity_cores()
    quota = cgroup_cpu_limit()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def shm_size() -> int | None:
    try:
        return shutil.disk_usage("/dev/shm").total
    except OSError:
        return None


def cuda_gpus() -> list[GPUInfo]:
    import torch

    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        gpus.append(GPUInfo(index=i, name=props.name, memory_bytes=props.total_memory))
    return gpus


def collect() -> MachineInfo:
    """Read the machine once; cheap (no measurement), safe to call before any trial."""
    import torch

    vm = psutil.virtual_memory()
    return MachineInfo(
        usable_cores=usable_cores(),
        logical_cores=os.cpu_count() or 1,
        cgroup_cpu_limit=cgroup_cpu_limit(),
        cpu_model=cpu_model(),
        memory_total_bytes=vm.total,
        memory_available_bytes=vm.available,
        shm_total_bytes=shm_size(),
        python=platform.python_version(),
        platform=platform.platform(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        start_method=multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0],
        gpus=cuda_gpus(),
        torch_threads=torch.get_num_threads(),
        load_average=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    )
