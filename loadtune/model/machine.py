"""What the machine offered when a result was measured: usable cores, memory, ``/dev/shm``, GPUs,
versions, load. Read by ``engine.machine.collect``; saved with every result so that comparisons can
say what differs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from loadtune.model.known import from_known


@dataclass
class GPUInfo:
    index: int
    name: str
    memory_bytes: int


@dataclass
class MachineInfo:
    """Facts that explain a result: saved with every scan so numbers from two machines are not confused."""

    usable_cores: int
    logical_cores: int
    cgroup_cpu_limit: float | None
    cpu_model: str
    memory_total_bytes: int
    memory_available_bytes: int
    shm_total_bytes: int | None
    python: str
    platform: str
    torch: str
    cuda: str | None
    start_method: str
    gpus: list[GPUInfo] = field(default_factory=list)
    torch_threads: int = 0  # intra-op threads of a process (workers use 1): num_workers=0 gets these
    load_average: float | None = None  # 1-minute load when the scan started: a busy machine is a noisy one

    @property
    def has_accelerator(self) -> bool:
        return bool(self.gpus)

    @property
    def busy(self) -> bool:
        """Other work already kept half the machine busy before the scan. The load average counts the
        whole machine (a container sees its host's), so it is compared with all logical cores."""
        return self.load_average is not None and self.load_average > 0.5 * self.logical_cores

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "MachineInfo":
        return from_known(cls, data, gpus=[from_known(GPUInfo, g) for g in data.get("gpus", [])])


