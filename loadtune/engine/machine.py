"""What the machine offers: usable cores, memory, /dev/shm, accelerators, versions.

"Usable cores" is the CPU affinity mask capped by any cgroup CPU quota: in a container
``os.cpu_count()`` reports the host's cores, and a worker grid built from it oversubscribes.

The GPUs are read in a child process (``python -m loadtune.engine.machine``): this module runs in
the scan's own process, which must not touch CUDA. Even ``torch.cuda.is_available()`` initialises
the driver there and marks the process so that CUDA fails in any child forked from it, and trials
of in-memory datasets, and the ranks of a trial, may be forked (docs/measuring.md).
"""

from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
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


UNLIMITED = 1 << 60  # a cgroup v1 limit this high is its "no limit"


def stat_fields(text: str) -> dict[str, int]:
    """A cgroup ``memory.stat`` file as name -> value (malformed lines skipped)."""
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            fields[name] = int(value)
    return fields


def headroom(limit: int, usage: int, cache: int) -> int:
    """What a memory cgroup leaves for more memory: its limit less what it holds, its page cache not
    counted (the kernel reclaims the group's cache first when the group reaches its limit)."""
    return max(0, limit - max(0, usage - cache))


def v1_memory_dir(root: Path = CGROUP_ROOT) -> Path:
    """This process's cgroup v1 memory directory: its path from ``/proc/self/cgroup`` under the
    hierarchy, or the hierarchy's root where that path is not there (a container that mounts its own)."""
    base = root / "memory"
    try:
        line = next(x for x in Path("/proc/self/cgroup").read_text().splitlines() if x.split(":")[1:2] == ["memory"])
        here = base / line.split(":", 2)[2].strip().lstrip("/")
        return here if here.is_dir() else base
    except (OSError, StopIteration, IndexError):
        return base


def memory_headroom(root: Path = CGROUP_ROOT) -> int | None:
    """The least memory this process's cgroups leave it (a container's limit less what its processes
    hold), or None where no cgroup limits memory. ``psutil`` reads the host's memory, which a container
    may not use: the page cache of a job limited to 16 GiB holds at most that, whatever the host has."""
    rooms = []
    for d in cgroup_v2_dirs(root):
        try:
            limit = (d / "memory.max").read_text().strip()
            if limit != "max":
                rooms.append(headroom(int(limit), int((d / "memory.current").read_text()),
                                      stat_fields((d / "memory.stat").read_text()).get("file", 0)))
        except (OSError, ValueError):
            pass
    v1 = v1_memory_dir(root)
    try:
        stat = stat_fields((v1 / "memory.stat").read_text())
        limit = min(stat.get("hierarchical_memory_limit", UNLIMITED), int((v1 / "memory.limit_in_bytes").read_text()))
        if limit < UNLIMITED:
            rooms.append(headroom(limit, int((v1 / "memory.usage_in_bytes").read_text()),
                                  stat.get("total_cache", stat.get("cache", 0))))
    except (OSError, ValueError):
        pass
    return min(rooms) if rooms else None


def available_memory() -> int:
    """Memory a new process could use here: the host's available memory, capped by the cgroups'."""
    room = memory_headroom()
    available = psutil.virtual_memory().available
    return available if room is None else min(available, room)


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


GPU_QUERY_TIMEOUT_S = 120
DRIVER_FILES = ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd")  # NVIDIA's driver, WSL's, ROCm's


def cuda_gpus() -> list[GPUInfo]:
    """The CUDA devices torch would use here, read in a child process, never in this one. None without
    a CUDA (or ROCm) build of torch, or on Linux without any GPU driver's device file: no child then."""
    import torch

    if not (torch.version.cuda or getattr(torch.version, "hip", None)) or not driver_present():
        return []
    found = gpus_in_child(os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"))
    return [GPUInfo(**g) for g in found]


def driver_present() -> bool:
    """A GPU driver's device file exists (only checked on Linux, where they live in /dev)."""
    return not sys.platform.startswith("linux") or any(Path(f).exists() for f in DRIVER_FILES)


@functools.lru_cache(maxsize=8)
def gpus_in_child(visible: str | None, order: str | None) -> tuple[dict, ...]:
    """The devices as a fresh interpreter sees them under these CUDA_VISIBLE_DEVICES and
    CUDA_DEVICE_ORDER (cached: the answer only changes with them). A child that fails sees none."""
    code = "from loadtune.engine.machine import print_gpus; print_gpus()"
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent.parent)  # the child imports this very loadtune
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                              timeout=GPU_QUERY_TIMEOUT_S)
        lines = done.stdout.strip().splitlines()
        return tuple(json.loads(lines[-1])) if done.returncode == 0 and lines else ()
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return ()


def print_gpus() -> None:
    """The child's side of ``gpus_in_child``: one line of JSON, the devices in CUDA's order."""
    import torch

    out = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out.append({"index": i, "name": props.name, "memory_bytes": props.total_memory})
    print(json.dumps(out))


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
        memory_available_bytes=available_memory(),
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
