"""The outcome of ``loadtune check``: the checked config, its rounds, the verdict and why. Data only; the
verdict is computed in ``analysis.verdict`` and rendered in ``report.check`` and ``report.ci``."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from loadtune.model.against import Against
from loadtune.model.config import TrialConfig
from loadtune.model.machine import MachineInfo
from loadtune.model.paired import CalibrationShape, PairedRound
from loadtune.model.trial import Trial
from loadtune.version import __version__


PASS, REGRESSION, INCONCLUSIVE, NOTHING = "pass", "regression", "inconclusive", "nothing measured"
NO_BASE = "no base"  # check --against: the spec is new in this change, nothing to compare with (exit 0, with a note)
SCHEMA = "loadtune/check"  # the JSON of ``check --json`` / ``--format json``: loadtune/schema/check.schema.json
SCHEMA_VERSION = 1


@dataclass
class CheckResult:
    """A check's verdict and every figure behind it: today's paired rounds, the baseline's, the change
    of their ratio with its interval, and how the machine itself moved."""

    config: TrialConfig
    tolerance: float
    baseline_rate: float | None  # the baseline scan's samples/s for the config (None: the scan did not measure it)
    rounds: list[PairedRound]  # today's: the config, its shaped calibration (and the defaults), block by block in turn
    baseline_rounds: list[PairedRound]  # the baseline's reference rounds
    shape: CalibrationShape | None  # None: checked against another revision (``against``), with no calibration
    min_throughput: float | None
    status: str
    reasons: list[str]
    change: float | None = None  # relative change of config / calibration, today against the baseline
    change_low: float | None = None
    change_high: float | None = None
    machine_change: float | None = None  # the calibration alone, today against the baseline: the machine
    machine_low: float | None = None
    machine_high: float | None = None
    cpu_change: float | None = None  # CPU time per calibration unit, today against the baseline's, less one
    environment: list[str] = field(default_factory=list)  # what differs from the reference's machine
    reference_recorded_at: str | None = None  # when the reference was measured (ISO 8601; older files: unknown)
    defaults: TrialConfig | None = None  # PyTorch's defaults, measured in every round (None: the config is them, or an older reference)
    gain: float | None = None  # the config over the defaults today, side by side (a t-interval over today's rounds below: their noise alone)
    gain_low: float | None = None
    gain_high: float | None = None
    baseline_gain: float | None = None  # the same in the reference's rounds
    wall_s: float = 0.0
    trials: list[Trial] = field(default_factory=list)
    against: Against | None = None  # ``check --against``: the head timed in turns with a base revision, not against a reference
    machine: MachineInfo | None = None  # where the check ran (a page or a log read later names the runner)

    @property
    def rate_now(self) -> float | None:
        rates = [r.config_rate for r in self.rounds if r.config_rate]
        return statistics.median(rates) if rates else None

    @property
    def default_rate(self) -> float | None:
        """PyTorch's defaults today: the median of the rounds' rates."""
        rates = [r.default_rate for r in self.rounds if r.default_rate]
        return statistics.median(rates) if rates else None

    @property
    def calibration_now(self) -> float | None:
        rates = [r.calibration_rate for r in self.rounds if r.calibration_rate]
        return statistics.median(rates) if rates else None

    @property
    def baseline_calibration(self) -> float | None:
        rates = [r.calibration_rate for r in self.baseline_rounds if r.calibration_rate]
        return statistics.median(rates) if rates else None

    def to_dict(self) -> dict:
        data = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "loadtune_version": __version__, **asdict(self)}
        data["config"] = self.config.to_dict()
        data["defaults"] = self.defaults.to_dict() if self.defaults else None
        data["default_rate"] = self.default_rate  # derived, for readers
        data["trials"] = [t.to_dict() for t in self.trials]
        return data
