"""Who else kept a trial's cores busy: the CPU counters read around its timed blocks, and the load
from outside the scan that follows from them (read by ``engine/trial/load.py``, judged by
``analysis/load.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from loadtune.model.known import from_known


@dataclass
class LoadReading:
    """Who kept the trial's usable cores busy while its blocks were timed: the counters, read around
    the blocks inside the trial (``engine/trial/load.py``), so that the load from outside the scan
    (``outside_s``) and whether it disturbed the trial (``analysis/load.py``) follow from the record.

    The CPUs' busy time is kept two ways (``engine/trial/load.py`` says why): the window less their
    idle time, which also counts the idle loop's own cost, and their busy ticks, which are sampled.
    Outside load is the smaller of the two: real load shows in both."""

    window_s: float  # wall seconds from the first reading to the last
    cpus: int  # CPUs of the trial's affinity mask, read in /proc/stat
    usable_cores: float  # the mask capped by the cgroup quota: what the trial could use
    idle_s: float  # idle and iowait seconds of those CPUs, together
    cpu_busy_s: list[float]  # user, system, interrupt and steal seconds of each of them (ticks)
    own_s: float  # CPU seconds of the trial's processes: its main process, the workers, their children
    tick_s: float  # /proc/stat's unit (1 / USER_HZ)
    tick_reads: int  # differences of counters kept in ticks (each CPU's, reaped children's time)
    edge_s: float  # seconds the readings took: the trial's processes ran on, unread, for that long
    kernel_s: float = 0.0  # CPU seconds of the kernel's threads: the trial's batches make them work too
    quota_busy_s: float | None = None  # CPU seconds of the cgroup whose quota binds (None: no quota)
    scan_s: float | None = None  # CPU seconds of the scan's own process (its samplers, its display) ...
    scan_window_s: float | None = None  # ... over these wall seconds, read by the trial's parent

    @property
    def scan_share_s(self) -> float:
        """The scan's own process's CPU over this window (its rate over the parent's window)."""
        if not self.scan_s or not self.scan_window_s:
            return 0.0
        return self.scan_s * self.window_s / self.scan_window_s

    def _beyond_own(self, busy: float) -> float:
        """Busy CPU seconds of the mask less the trial's, the kernel threads' and the scan's, and less
        what the CPUs a quota leaves unusable anyway can hold: only beyond that is a core taken."""
        spare = max(0.0, self.cpus - self.usable_cores) * self.window_s
        return busy - self.own_s - self.kernel_s - self.scan_share_s - spare

    @property
    def idle_outside_s(self) -> float:
        """Outside CPU seconds from the CPUs' idle time (precise; counts the idle loop's cost)."""
        return self._beyond_own(self.cpus * self.window_s - self.idle_s)

    @property
    def tick_outside_s(self) -> float:
        """Outside CPU seconds from the CPUs' busy ticks (sampled; without the idle loop's cost)."""
        return self._beyond_own(sum(self.cpu_busy_s))

    @property
    def quota_outside_s(self) -> float | None:
        """CPU seconds charged to the trial's quota by other processes of its cgroup."""
        return None if self.quota_busy_s is None else self.quota_busy_s - self.own_s - self.scan_share_s

    @property
    def outside_s(self) -> float:
        """CPU seconds taken from the usable cores by processes outside the scan."""
        outside = min(self.idle_outside_s, self.tick_outside_s)
        if self.quota_outside_s is not None:
            outside = max(outside, self.quota_outside_s)
        return max(0.0, outside)

    @property
    def outside_cores(self) -> float:
        """Cores kept busy by processes outside the scan, on average over the window."""
        return self.outside_s / self.window_s if self.window_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "outside_cores": round(self.outside_cores, 4)}  # derived, for readers

    @classmethod
    def from_dict(cls, data: dict) -> "LoadReading":
        reading = from_known(cls, data)  # without the derived outside_cores
        figures = [v for v in asdict(reading).values() if v is not None and not isinstance(v, list)] + reading.cpu_busy_s
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf") for v in figures):
            raise ValueError(f"a trial's load figures are not all non-negative numbers: {data}")
        return reading
