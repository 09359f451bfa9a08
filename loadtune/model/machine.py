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
    load_average: float | None = None  # 1-minute load when the scan started (recorded; it lags: see ``busy``)
    # cores that processes outside the scan kept busy over a short window as it started, measured (None:
    # not measured: older files, other platforms), and the busiest of them ("pip 95%")
    outside_cores: float | None = None
    outside_who: list[str] = field(default_factory=list)
    # how far the CPU's pace moved between adjacent tenths of a second (``analysis.pace``: the spread of
    # their log ratio), measured during a scan whose headline gain stayed wide (None: not measured)
    pace_spread: float | None = None

    @property
    def has_accelerator(self) -> bool:
        return bool(self.gpus)

    @property
    def busy(self) -> bool:
        """Other work kept half the usable cores busy as the scan started, as measured. The load
        average is read only where nothing was measured (older files): it still carries work that
        ended a minute ago (a ``pip install`` just finished), and counts the whole machine (a container
        sees its host's), so it is compared with all logical cores."""
        if self.outside_cores is not None:
            return self.outside_cores > 0.5 * self.usable_cores
        return self.load_average is not None and self.load_average > 0.5 * self.logical_cores

    def busy_text(self) -> str:
        """What made the machine busy, in words."""
        if self.outside_cores is None:
            return f"load average {self.load_average:.1f} on {self.logical_cores} cores"
        who = f": {', '.join(self.outside_who)}" if self.outside_who else ""
        return f"other processes kept {self.outside_cores:.1f} of its {self.usable_cores} usable cores busy{who}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "MachineInfo":
        return from_known(cls, data, gpus=[from_known(GPUInfo, g) for g in data.get("gpus", [])])


