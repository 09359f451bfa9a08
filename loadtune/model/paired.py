"""The paired reference ``check`` compares with (``check --record``, or a scan asked to): a pick
measured round by round beside a calibration workload shaped like the user's dataset (docs/ci.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from loadtune.model.config import TrialConfig
from loadtune.model.known import from_known
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
    batch_size: int | None = None  # the calibration batches by itself, this many a batch: the mean of batches that vary

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CalibrationShape":
        return cls(int(data["units"]), float(data["sleep_s"]), int(data["sample_numel"]), float(data["unit_s"]),
                   str(data.get("source", "")), int(data.get("unit_readings", 1)),
                   int(data["batch_size"]) if data.get("batch_size") else None)


CONFIG, CALIBRATION, DEFAULTS = "config", "calibration", "defaults"  # the loaders of a round


def alternating(order: tuple, turns: int) -> list[tuple]:
    """The turns of loaders measured side by side: ``order``, then its reverse, and so on, ``turns`` in
    all. Over each pair of turns every loader sits at the same mean position, so drift linear over the
    pair hits each alike: the race's turn pairs, a check's rounds and ``check --against``'s duets."""
    return [order if i % 2 == 0 else order[::-1] for i in range(turns)]


def turn_order(defaults: bool, config_first: bool) -> tuple[str, ...]:
    """The order in which a round's loaders take their turn (block by block, or as trials back to back).
    The config sits beside the calibration (the verdict's ratio) and, with PyTorch's defaults in the round,
    between the two, so both of its ratios come from neighbours; the next turn runs the reverse order,
    and ``config_first`` says whether the config goes before the calibration in the first."""
    order = (DEFAULTS, CONFIG, CALIBRATION) if defaults else (CONFIG, CALIBRATION)
    return order if config_first else order[::-1]


@dataclass(frozen=True)
class PairedRound:
    """One round: the config and its shaped calibration (and PyTorch's defaults, unless the config is
    them) in one process, timed block by block in turn (``pairs`` turns; the rates are the geometric
    means of the blocks of the turns every loader completed), or, with several ranks, as trials back to
    back (``pairs`` 0). None: not measured. Which goes first alternates between rounds."""

    config_rate: float | None
    calibration_rate: float | None
    config_first: bool = True
    pairs: int = 0
    block_ratio: float | None = None  # the median ratio config / calibration of neighbouring blocks (turns in one process only)
    default_rate: float | None = None  # PyTorch's defaults in the same round; None: not in the round
    default_ratio: float | None = None  # config / defaults: the median of neighbouring blocks' ratios

    @property
    def gain(self) -> float | None:
        """The config over PyTorch's defaults in this round, side by side."""
        if not self.config_rate or not self.default_rate:
            return None
        return self.default_ratio or self.config_rate / self.default_rate

    @property
    def ratio(self) -> float | None:
        """config / calibration: the median of the turns' ratios, robust to a neighbour's burst
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
    defaults: TrialConfig | None = None  # PyTorch's defaults, measured in every round; None: the config is them (or an older file)

    @property
    def measured(self) -> int:
        """Rounds that measured a ratio: what a check can compare with."""
        return sum(1 for r in self.rounds if r.ratio)

    def to_dict(self) -> dict:
        return {"config": self.config.to_dict(), "shape": self.shape.to_dict(), "rounds": [asdict(r) for r in self.rounds],
                "recorded_at": self.recorded_at, "machine": self.machine.to_dict() if self.machine else None,
                "defaults": self.defaults.to_dict() if self.defaults else None}

    @classmethod
    def from_dict(cls, data: dict | None) -> "PairedReference | None":
        if not data:
            return None
        machine, defaults = data.get("machine"), data.get("defaults")
        return cls(TrialConfig.from_dict(data["config"]), CalibrationShape.from_dict(data["shape"]),
                   [from_known(PairedRound, r) for r in data.get("rounds", [])], data.get("recorded_at"),
                   MachineInfo.from_dict(machine) if machine else None,
                   TrialConfig.from_dict(defaults) if defaults else None)
