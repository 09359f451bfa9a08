"""The paired reference ``check`` compares with (``check --record``, or a scan asked to): a pick
measured round by round beside a calibration workload shaped like the user's dataset (docs/ci.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from loadtune.model.config import TrialConfig
from loadtune.model.machine import MachineInfo


@dataclass(frozen=True)
class CalibrationShape:
    """A synthetic dataset cut to the user's per-sample costs: ``units`` of fixed CPU work and
    ``sleep_s`` of waiting per sample, ``sample_numel`` float32 values out. Run with the checked
    config's own loader settings, it meets the same contention and drift as the config does, so
    their ratio measures the dataset, not the machine's mood. The work is counted in units, not
    seconds, so a slower machine runs it slower too."""

    units: int
    sleep_s: float
    sample_numel: int
    unit_s: float  # CPU seconds one unit took where the shape was set: check compares this CPU's with it
    source: str  # where the costs came from: "stage profile", "trial CPU"
    unit_readings: int = 1  # of how many readings ``unit_s`` is the fastest (older files: one)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CalibrationShape":
        return cls(int(data["units"]), float(data["sleep_s"]), int(data["sample_numel"]), float(data["unit_s"]),
                   str(data.get("source", "")), int(data.get("unit_readings", 1)))


@dataclass(frozen=True)
class PairedRound:
    """One round: the config and its shaped calibration in one process, timed block by block in turn
    (``pairs`` block pairs; the rates are the geometric means of the paired blocks), or, with several
    ranks, in two trials back to back (``pairs`` 0). None: not measured. Which goes first alternates
    between rounds."""

    config_rate: float | None
    calibration_rate: float | None
    config_first: bool = True
    pairs: int = 0
    block_ratio: float | None = None  # the median ratio of neighbouring blocks (block pairs only)

    @property
    def ratio(self) -> float | None:
        """config / calibration: the median of the block pairs' ratios, robust to a neighbour's burst
        that hit one block of a pair; of the two trials' rates when measured back to back."""
        if not self.config_rate or not self.calibration_rate:
            return None
        return self.block_ratio or self.config_rate / self.calibration_rate


@dataclass
class PairedReference:
    """What ``check`` compares with: a pick measured in paired rounds with its shaped calibration, by
    ``check --record`` on the machine that runs the checks (or by a scan asked to). ``machine`` and
    ``recorded_at`` say where and when: the machine may not be the scan's, and drift grows with age."""

    config: TrialConfig
    shape: CalibrationShape
    rounds: list[PairedRound] = field(default_factory=list)
    recorded_at: str | None = None  # ISO 8601, UTC (absent in older files)
    machine: MachineInfo | None = None  # absent in older files: the scan's

    @property
    def measured(self) -> int:
        """Rounds that measured a ratio: what a check can compare with."""
        return sum(1 for r in self.rounds if r.ratio)

    def to_dict(self) -> dict:
        return {"config": self.config.to_dict(), "shape": self.shape.to_dict(), "rounds": [asdict(r) for r in self.rounds],
                "recorded_at": self.recorded_at, "machine": self.machine.to_dict() if self.machine else None}

    @classmethod
    def from_dict(cls, data: dict | None) -> "PairedReference | None":
        if not data:
            return None
        machine = data.get("machine")
        return cls(TrialConfig.from_dict(data["config"]), CalibrationShape.from_dict(data["shape"]),
                   [PairedRound(**r) for r in data.get("rounds", [])], data.get("recorded_at"),
                   MachineInfo.from_dict(machine) if machine else None)
