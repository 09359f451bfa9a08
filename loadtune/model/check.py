"""TODO docstring."""

from __future__ import annotations




import statistics
from dataclasses import asdict, dataclass, field

from loadtune.model.config import TrialConfig
from loadtune.model.results import Trial


PASS, REGRESSION, NOTHING = "pass", "regression", "nothing measured"


@dataclass
class CheckResult:
    config: TrialConfig
    tolerance: float
    baseline_rate: float  # the baseline's samples/s for the config
    baseline_calibration: float  # the baseline's calibration samples/s
    rounds: list[tuple[float | None, float | None]]  # (config, calibration) samples/s per round
    default_rate: float | None  # PyTorch's defaults now, for context
    min_throughput: float | None
    status: str
    reasons: list[str]
    change: float | None = None  # relative change of the normalised throughput
    change_low: float | None = None
    change_high: float | None = None
    environment: list[str] = field(default_factory=list)  # what differs from the baseline's machine
    trials: list[Trial] = field(default_factory=list)

    @property
    def rate_now(self) -> float | None:
        rates = [r for r, _ in self.rounds if r]
        return statistics.median(rates) if rates else None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["config"] = self.config.to_dict()
        data["trials"] = [t.to_dict() for t in self.trials]
        return data


