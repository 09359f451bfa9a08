"""A scan's result: its trials pooled by config (``ConfigResult``), the recommendation, and the
``ScanResult`` that holds everything a scan measured and is saved as the scan file (``scanfile.py``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from loadtune.version import __version__
from loadtune.model.paired import PairedReference
from loadtune.model.machine import MachineInfo
from loadtune.model.config import Skip, TrialConfig
from loadtune.model.estimate import Estimate, estimate
from loadtune.model.batch import BatchInfo, BatchSizes
from loadtune.model.known import from_known, known
from loadtune.model.scanfile import SCHEMA, SCHEMA_VERSION, ResultError, checked, read_json, write_json
from loadtune.model.settings import ScanSettings
from loadtune.model.stages import StageCosts
from loadtune.model.storage import StorageState
from loadtune.model.trial import GPUUsage, MemoryUsage, Trial, TrialError

RENDERERS: dict[str, Callable[["ScanResult"], str]] = {}  # MIME type -> renderer, set by loadtune.report.notebook


@dataclass
class ConfigResult:
    """Every run of one config, pooled: what the table ranks and the recommendation weighs.

    Pooling the blocks of runs made at different times puts the machine's drift into the interval,
    which the blocks of a single run cannot show."""

    config: TrialConfig
    trials: list[Trial]

    @property
    def ok(self) -> bool:
        return any(t.ok for t in self.trials)

    @property
    def estimate(self) -> Estimate | None:
        """One run: its own estimate. Several: the estimate over the first m blocks of each run, m the
        fewest any run has. Runs weigh the same (all blocks pooled would favour a disturbed run, which
        measures more blocks before its spread is small); the spread between runs enters the interval,
        and the interval narrows as runs are added, so re-measuring contenders can separate them."""
        runs = [t for t in self.trials if t.ok]
        if len(runs) <= 1:
            return runs[0].estimate if runs else None
        m = min(len(t.blocks) for t in runs)
        return estimate([rate for t in runs for rate in t.pace_rates[:m]])

    @property
    def mean_rate(self) -> float | None:
        """Samples over seconds of all timed blocks: the long-run rate, which a bound built from mean
        per-sample costs is compared with (a median block of a heavy-tailed dataset holds fewer slow
        samples than the mean and reads above it)."""
        blocks = [b for t in self.trials if t.ok for b in t.blocks]
        seconds = sum(b.seconds for b in blocks)
        return sum(b.samples for b in blocks) / seconds if seconds > 0 else None

    def _cpu_runs(self) -> list[Trial]:
        return [t for t in self.trials if t.ok and t.cpu_s is not None]

    @property
    def cpu_per_sample(self) -> float | None:
        """CPU seconds per sample of the loader's processes (main and workers) while the blocks were
        timed: what the config really costs the CPU, under the load it creates itself."""
        runs = self._cpu_runs()
        samples = sum(b.samples for t in runs for b in t.blocks)
        return sum(t.cpu_s for t in runs) / samples if samples else None

    @property
    def cpu_per_sample_runs(self) -> list[float]:
        """Each run's CPU seconds per sample: how far apart they read is the spread of ``cpu_per_sample``."""
        out = []
        for t in self._cpu_runs():
            samples = sum(b.samples for b in t.blocks)
            if samples:
                out.append(t.cpu_s / samples)
        return out

    @property
    def busy_cores(self) -> float | None:
        """Cores the loader's processes kept busy on average while the blocks were timed."""
        runs = self._cpu_runs()
        seconds = sum(b.seconds for t in runs for b in t.blocks)
        return sum(t.cpu_s for t in runs) / seconds if seconds > 0 else None

    @property
    def startup_s(self) -> float | None:
        values = [t.startup_s for t in self.trials if t.startup_s is not None]
        return statistics.median_high(values) if values else None

    @property
    def memory(self) -> MemoryUsage | None:
        usages = [t.memory for t in self.trials if t.memory]
        return max(usages, key=lambda m: m.peak_bytes) if usages else None

    @property
    def error(self) -> TrialError | None:
        return next((t.error for t in self.trials if t.error is not None), None)

    @property
    def wait_fraction(self) -> float | None:
        """Share of the timed blocks' wall time the consumer spent waiting for the next batch."""
        blocks = [b for t in self.trials if t.ok for b in t.blocks if b.wait_s is not None]
        seconds = sum(b.seconds for b in blocks)
        return min(1.0, max(0.0, sum(b.wait_s for b in blocks) / seconds)) if seconds > 0 else None

    @property
    def h2d_gbps(self) -> float | None:
        """Achieved host-to-device GB/s: the median over timed blocks of bytes copied / block time."""
        rates = [b.h2d_gbps for t in self.trials if t.ok for b in t.blocks if b.h2d_gbps is not None]
        return statistics.median(rates) if rates else None

    @property
    def gpu(self) -> GPUUsage | None:
        """The run with the most GPU memory reserved (the cost to plan for)."""
        usages = [t.gpu for t in self.trials if t.gpu]
        return max(usages, key=lambda g: g.peak_reserved_bytes or 0) if usages else None

    @property
    def batch(self) -> BatchInfo | None:
        return next((t.batch for t in self.trials if t.batch), None)

    @property
    def warnings(self) -> list[str]:
        notes = list(dict.fromkeys(w for t in self.trials for w in t.warnings))
        failed = sum(1 for t in self.trials if not t.ok)
        if self.ok and failed:
            notes.append(f"{failed} of {len(self.trials)} runs failed: {self.error.message}")
        return notes

    @property
    def ranks(self) -> int:
        """Ranks per trial (1 unless the scan ran several ranks per node)."""
        return max((len(t.ranks) for t in self.trials), default=0) or 1

    @property
    def aggregate_rate(self) -> float | None:
        """Median over runs of the ranks' summed rates (several ranks only)."""
        values = [t.aggregate_rate for t in self.trials if t.ok and t.aggregate_rate is not None]
        return statistics.median(values) if values else None

    @property
    def slowest_rank_rate(self) -> float | None:
        """The slowest rank's samples/s: the pace divided by the ranks (several ranks only)."""
        est = self.estimate
        return est.median / self.ranks if est and self.ranks > 1 else None


def by_config(trials: list[Trial]) -> list[ConfigResult]:
    """Group runs by config, in order of first appearance."""
    groups: dict[TrialConfig, list[Trial]] = {}
    for trial in trials:
        groups.setdefault(trial.config, []).append(trial)
    return [ConfigResult(config, runs) for config, runs in groups.items()]


@dataclass(frozen=True)
class Versus:
    """The pick against the best config with workers, where PyTorch's defaults are the pick: pick /
    it, with its 95% interval, and what that rests on (turn pairs of the race, or closing rounds; neither:
    figures measured at different times)."""

    config: TrialConfig
    value: float
    low: float
    high: float
    pairs: int = 0
    rounds: int = 0

    @classmethod
    def from_dict(cls, data: dict) -> "Versus":
        return from_known(cls, data, config=TrialConfig.from_dict(data["config"]))


@dataclass
class Recommendation:
    """The pick and the evidence for it."""

    config: TrialConfig
    best: TrialConfig  # the fastest measured config
    tied: list[TrialConfig]  # configs the noise cannot tell from the best, the pick among them
    baseline: TrialConfig | None  # PyTorch's defaults at the pick's batch size
    speedup: float | None  # pick / baseline, median ratio
    speedup_low: float | None
    speedup_high: float | None
    reason: str
    excluded: list[TrialConfig] = field(default_factory=list)  # measured peak memory over --max-memory
    max_memory: int | None = None  # the limit in bytes, when one was set
    speedup_rounds: int = 0  # closing rounds the speedup was measured side by side in (0: figures taken apart)
    speedup_pairs: int = 0  # with a race: the turn pairs the speedup was measured in, side by side block by block
    # why the gain rests on a state the scan did not set (the baseline's allocator, say): speedup is then
    # None and speedup_low/high the range of its runs, not an interval
    gain_unsettled: str | None = None
    versus: Versus | None = None  # where the defaults are the pick: against the best config with workers

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Recommendation":
        data = known(cls, data)
        for key in ("config", "best", "baseline"):
            data[key] = TrialConfig.from_dict(data[key]) if data.get(key) else None
        data["tied"] = [TrialConfig.from_dict(c) for c in data.get("tied", [])]
        data["excluded"] = [TrialConfig.from_dict(c) for c in data.get("excluded", [])]
        data["versus"] = Versus.from_dict(data["versus"]) if data.get("versus") else None
        return cls(**data)


@dataclass
class SpecInfo:
    """Which dataset was measured: enough to refuse comparing results of different specs."""

    path: str | None
    factory: str | None
    sha256: str | None
    dataset_type: str
    length: int | None
    iterable: bool
    has_step: bool
    has_collate_fn: bool
    loader: str | None = None  # None: loadtune's DataLoader over the dataset; "factory", "dataloader", "datamodule": the user's own
    loader_name: str | None = None  # the spec's name for it (its loader factory, DataLoader or DataModule)
    loader_args: list[str] = field(default_factory=list)  # the spec's extra DataLoader arguments (loader_kwargs), by name


@dataclass
class ScanResult:
    spec: SpecInfo
    machine: MachineInfo
    settings: ScanSettings
    trials: list[Trial] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the search did beyond the grid, machine warnings
    calibration: list[Trial] = field(default_factory=list)  # loadtune's yardstick workload, same run
    recommendation: Recommendation | None = None
    stages: StageCosts | None = None  # the profiling run: where the time goes (None: not run, or an old file)
    state: str = "running"  # "running" | "complete" | "interrupted"
    h2d_peak_gbps: float | None = None  # pinned host-to-device GB/s of the device, measured before the trials
    h2d_peaks_gbps: list[float] | None = None  # with several ranks: each rank's own GPU (cuda:local_rank)
    reference: PairedReference | None = None  # the pick beside its shaped calibration, for check (docs/ci.md)
    # trials taken under outside load and measured once more, the quieter run kept in ``trials``: these
    # are the others, kept out of every estimate
    remeasured: list[Trial] = field(default_factory=list)
    storage: StorageState | None = None  # the page cache's state every run read the dataset in (None: none set)
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    loadtune_version: str = __version__

    @property
    def ok_trials(self) -> list[Trial]:
        return [t for t in self.trials if t.ok]

    @property
    def configs(self) -> list[ConfigResult]:
        return by_config(self.trials)

    def config_result(self, config: TrialConfig) -> ConfigResult | None:
        return next((c for c in self.configs if c.config == config), None)

    @property
    def varying_batches(self) -> BatchSizes | None:
        """The loader's own batches, when they vary in size: pooled over every batch its trials timed
        (every config runs the same loader, so one mean labels them all), the race's aside where the
        screening timed some (a race's short blocks cut epochs anywhere, so they may hold more of one
        size; a trial times whole epochs where they are short); None when they do not vary."""
        runs = [t for t in self.trials if t.ok and t.batch_sizes is not None]
        runs = [t for t in runs if not t.raced] or runs
        pooled = BatchSizes.pooled([t.batch_sizes for t in runs], [sum(b.batches for b in t.blocks) for t in runs])
        return pooled if pooled is not None and pooled.varying else None

    def label(self, config: TrialConfig) -> str:
        """``config.label()``, its batch size shown as the mean (``bs~31``) when the batches vary."""
        varying = self.varying_batches
        return config.label(varying.label if varying else None)

    def _repr_html_(self) -> str | None:
        """Jupyter shows a result as the report (table, diagnosis, recommendation). The renderer lives in
        the report layer, which the model may not import: it registers itself in ``RENDERERS``."""
        render = RENDERERS.get("text/html")
        return render(self) if render else None

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "loadtune_version": self.loadtune_version,
            "created": self.created,
            "state": self.state,
            "spec": asdict(self.spec),
            "machine": self.machine.to_dict(),
            "settings": self.settings.to_dict(),
            "skipped": [asdict(s) for s in self.skipped],
            "notes": self.notes,
            "calibration": [t.to_dict() for t in self.calibration],
            "trials": [t.to_dict() for t in self.trials],
            "recommendation": self.recommendation.to_dict() if self.recommendation else None,
            "h2d_peak_gbps": self.h2d_peak_gbps,
            "h2d_peaks_gbps": self.h2d_peaks_gbps,
            "stages": self.stages.to_dict() if self.stages else None,
            "reference": self.reference.to_dict() if self.reference else None,
            "remeasured": [t.to_dict() for t in self.remeasured],
            "storage": self.storage.to_dict() if self.storage else None,
            "batch_sizes": asdict(varying) if (varying := self.varying_batches) else None,  # derived, for readers
        }

    @classmethod
    def from_dict(cls, data: dict) -> "ScanResult":
        data = checked(data)
        try:
            result = cls(
                spec=from_known(SpecInfo, data["spec"]),
                machine=MachineInfo.from_dict(data["machine"]),
                settings=ScanSettings.from_dict(data["settings"]),
                trials=[Trial.from_dict(t) for t in data["trials"]],
                skipped=[from_known(Skip, s) for s in data.get("skipped", [])],
                notes=list(data.get("notes", [])),
                calibration=[Trial.from_dict(t) for t in data.get("calibration", [])],
                recommendation=Recommendation.from_dict(data["recommendation"]) if data.get("recommendation") else None,
                stages=StageCosts.from_dict(data["stages"]) if data.get("stages") else None,
                state=data["state"],
                created=data["created"],
                loadtune_version=data["loadtune_version"],
                h2d_peak_gbps=data.get("h2d_peak_gbps"),
                h2d_peaks_gbps=data.get("h2d_peaks_gbps"),
                reference=PairedReference.from_dict(data.get("reference")),
                remeasured=[Trial.from_dict(t) for t in data.get("remeasured", [])],
                storage=StorageState.from_dict(data.get("storage")),
            )
            _ = result.configs  # every estimate a report shows: a damaged figure is refused here, not mid-report
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ResultError(f"malformed scan result: {type(exc).__name__}: {exc}") from None
        return result

    def save(self, path: str | Path) -> None:
        """Write atomically: a reader (or a crash) never sees a half-written file."""
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "ScanResult":
        path = Path(path)
        data = read_json(path)
        try:
            return cls.from_dict(data)
        except ResultError as exc:
            raise ResultError(f"{path}: {exc}") from None
