"""The one data model of a scan, and its JSON schema (docs/api.md).

Raw figures are the record: every timed block of every trial is kept, and estimates are computed
from them (``Trial.estimate``), never stored as the only truth. The file is rewritten atomically
after every trial, so an interrupted scan loses no finished trial.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from loadtune.version import __version__
from loadtune.model.paired import PairedReference
from loadtune.model.machine import MachineInfo
from loadtune.model.config import Skip, TrialConfig
from loadtune.model.estimate import Estimate, estimate, mean_halfwidth
from loadtune.model.batch import BatchInfo, BatchSizes
from loadtune.model.known import from_known, known
from loadtune.model.settings import ScanSettings

SCHEMA = "loadtune/scan"
SCHEMA_VERSION = 2
RENDERERS: dict[str, Callable[["ScanResult"], str]] = {}  # MIME type -> renderer, set by loadtune.report.notebook


class ResultError(ValueError):
    """A results file that is missing, corrupt, or not ours: a clear message and exit code 2."""


# How a file of an older schema version is read: MIGRATIONS[n] turns version n into n + 1. Keys added
# since are read with their defaults where they are parsed (``from_dict``, ``OLDER_FILES`` in
# model/settings.py), so a step is needed only where a key was renamed or changed meaning; a version
# without one is read as it is. A committed CI baseline thus survives a version bump.
MIGRATIONS: dict[int, Callable[[dict], dict]] = {}


def legs_apart(data: dict) -> dict:
    """Version 1 kept a raced trial's leg number in ``round``: it moves to ``leg``, and ``round`` keeps
    closing rounds only."""
    trials = []
    for t in data.get("trials", []):
        if isinstance(t, dict) and t.get("raced"):
            t = {**t, "leg": t.get("round", 0), "round": 0}
        trials.append(t)
    return {**data, "trials": trials, "schema_version": 2}


MIGRATIONS[1] = legs_apart


def migrated(data: dict) -> dict:
    """``data`` brought to SCHEMA_VERSION; a version this loadtune cannot know (newer, or not one) is refused."""
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ResultError(f"schema version {version!r} is not one loadtune writes; re-run the scan")
    if version > SCHEMA_VERSION:
        raise ResultError(f"schema version {version} was written by a newer loadtune ({data.get('loadtune_version', 'unknown')}) "
                          f"than this one ({__version__}, which reads up to {SCHEMA_VERSION}); upgrade loadtune")
    for step in range(version, SCHEMA_VERSION):
        data = MIGRATIONS.get(step, dict)(data)
    return data


@dataclass
class Block:
    """One timed stretch of the loop: device work synchronised at its end, never inside."""

    samples: int
    batches: int
    seconds: float
    epochs: int = 0  # epoch boundaries crossed inside this block
    wait_s: float | None = None  # the consumer waited for data this long (None: no consumer step)
    h2d_bytes: int | None = None  # bytes of the batches copied to a CUDA device (None: none copied)
    # pages the trial's main process took fresh from the kernel in the block, in bytes (minor faults x
    # page size; None: not counted on this platform)
    faulted_bytes: int | None = None

    @classmethod
    def from_dict(cls, data: dict) -> "Block":
        """A block read back from JSON; its figures must be numbers, or every estimate made from it fails later."""
        block = from_known(cls, data)
        figures = (block.samples, block.batches, block.seconds, block.epochs, block.wait_s or 0, block.h2d_bytes or 0,
                   block.faulted_bytes or 0)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < float("inf") for v in figures):
            raise ValueError(f"a block's figures are not all non-negative numbers: {data}")
        return block

    @property
    def rate(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def h2d_gbps(self) -> float | None:
        """Host-to-device GB/s (10^9 bytes) over the whole block, waits included."""
        return self.h2d_bytes / self.seconds / 1e9 if self.h2d_bytes is not None and self.seconds > 0 else None


@dataclass
class MemoryUsage:
    """Host memory of the trial's process tree (main process + workers), sampled from outside it."""

    peak_bytes: int
    peak_processes: int
    method: str  # "pss": shared pages split between sharers; "rss": summed, overcounts shared pages
    samples: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, bytes)
    startup_index: int | None = None  # the sample taken once the workers were up (growth is measured from it)
    shm_peak_bytes: int | None = None  # /dev/shm segments mapped by the tree at once, at most (batches in flight)


def block_dict(block: Block) -> dict:
    """A block as JSON, its optional figures left out when not measured (blocks are many)."""
    return {k: v for k, v in asdict(block).items() if v is not None or k not in ("wait_s", "h2d_bytes", "faulted_bytes")}


@dataclass
class GPUUsage:
    """The trial's GPU: the torch allocator's peaks (inside the trial, reset at its start), utilisation
    (NVML, sampled from the parent while blocks are timed) and page-locked host memory."""

    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    pinned_bytes: int | None = None  # page-locked host memory of the trial's main process, at its peak
    pinned_estimated: bool = False  # True: batch bytes x batches in flight, no allocator counter available
    utilisation: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, percent)

    @property
    def mean_utilisation(self) -> float | None:
        return statistics.fmean(u for _, u in self.utilisation) if self.utilisation else None

    @classmethod
    def from_dict(cls, data: dict) -> "GPUUsage":
        return from_known(cls, data, utilisation=[tuple(s) for s in data.get("utilisation", [])])


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


@dataclass
class TrialError:
    """Why a trial failed, in the dataset's own words where it raised."""

    kind: str  # exception | collate | worker_killed | cuda_oom | timeout | killed | crashed | failure
    message: str  # one paragraph: what happened, where, what to do
    exception_type: str | None = None
    traceback: str | None = None
    log_tail: str | None = None
    index: int | None = None  # the dataset index that raised, when it could be found
    rank: int | None = None  # the rank that failed first, in a trial of several ranks


@dataclass
class RankFigures:
    """What one rank of a distributed trial measured over the window it shared with the others."""

    rank: int  # global rank (node_rank x ranks per node + local rank): which shard it loaded
    local_rank: int = 0
    startup_s: float | None = None
    warmup: Block | None = None
    blocks: list[Block] = field(default_factory=list)
    memory_bytes: int | None = None  # PSS of the rank and its workers at steady state, measured inside it
    gpu: GPUUsage | None = None  # its own GPU (cuda:local_rank): allocator peaks, utilisation

    @property
    def estimate(self) -> Estimate | None:
        return estimate([b.rate for b in self.blocks]) if self.blocks else None

    @property
    def window_rate(self) -> float:
        """Samples over seconds of the whole timed window: what this rank delivered alongside the others."""
        seconds = sum(b.seconds for b in self.blocks)
        return sum(b.samples for b in self.blocks) / seconds if seconds > 0 else 0.0

    @classmethod
    def from_dict(cls, data: dict) -> "RankFigures":
        return from_known(cls, data, warmup=Block.from_dict(data["warmup"]) if data.get("warmup") else None,
                          blocks=[Block.from_dict(b) for b in data.get("blocks", [])],
                          gpu=GPUUsage.from_dict(data["gpu"]) if data.get("gpu") else None)


@dataclass
class Trial:
    config: TrialConfig
    status: str  # "ok" | "failed"
    reference: bool = False  # added to measure PyTorch's defaults, not part of the requested grid
    startup_s: float | None = None  # iter(loader) to first batch: worker start-up + first batch
    warmup: Block | None = None
    blocks: list[Block] = field(default_factory=list)
    memory: MemoryUsage | None = None
    error: TrialError | None = None
    warnings: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    round: int = 0  # 0: the search; 1, 2, ...: the fallback's closing rounds (contenders re-measured side by side)
    gpu: GPUUsage | None = None  # only for trials on a CUDA device
    batch: BatchInfo | None = None  # the first batch's bytes, dtypes and shapes
    batch_sizes: BatchSizes | None = None  # samples per batch timed, where the loader batches by itself
    cpu_s: float | None = None  # CPU seconds of the trial's process and its workers over the timed blocks
    # Several ranks per trial: each rank's figures; ``blocks``, ``warmup`` and ``startup_s`` above are
    # then the slowest rank's (its pace is the pace of synchronous training), see ``settle_ranks``
    ranks: list[RankFigures] = field(default_factory=list)
    load: LoadReading | None = None  # who kept the usable cores busy over the timed blocks (one loader only)
    # check's paired trial: the shaped calibration's blocks and PyTorch's defaults', each timed beside
    # one of ``blocks`` (same index)
    calibration_blocks: list[Block] = field(default_factory=list)
    default_blocks: list[Block] = field(default_factory=list)
    # the race's leg (1, 2, ...; 0: not raced): this config's blocks, block i timed in turn i beside the
    # other raced configs' block i, each config in a live process of its own (engine/race.py)
    leg: int = 0

    @property
    def raced(self) -> bool:
        return self.leg > 0

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.blocks)

    @property
    def pace_rates(self) -> list[float]:
        """Samples/s per block of the trial's figure. One rank: its blocks. Several: the slowest
        rank's blocks times the number of ranks, since synchronous training advances at that rank's
        pace on every rank at once."""
        return [b.rate * max(1, len(self.ranks)) for b in self.blocks]

    @property
    def estimate(self) -> Estimate | None:
        """Samples/s: median over blocks with its interval (the node's pace with several ranks)."""
        return estimate(self.pace_rates) if self.ok else None

    def rank_figures(self, rank: int, local_rank: int) -> RankFigures:
        """The figures of one rank, added (in rank order) when it first reports: the trial protocol
        writes what each rank streams as it measures into them."""
        figures = next((r for r in self.ranks if r.rank == rank), None)
        if figures is None:
            figures = RankFigures(rank, local_rank)
            self.ranks.append(figures)
            self.ranks.sort(key=lambda r: r.rank)
        return figures

    def settle_ranks(self) -> None:
        """Take the slowest rank's blocks as the trial's own, and the last rank's start-up (training
        starts when every rank has its first batch). Ranks that measured nothing count as slowest."""
        if not self.ranks:
            return
        if any(not r.blocks for r in self.ranks):
            slowest = next(r for r in self.ranks if not r.blocks)
        else:
            slowest = min(self.ranks, key=lambda r: r.estimate.median)
        self.blocks, self.warmup = list(slowest.blocks), slowest.warmup
        starts = [r.startup_s for r in self.ranks if r.startup_s is not None]
        self.startup_s = max(starts) if len(starts) == len(self.ranks) else None

    @property
    def slowest_rank(self) -> RankFigures | None:
        measured = [r for r in self.ranks if r.blocks]
        return min(measured, key=lambda r: r.estimate.median) if measured else None

    @property
    def aggregate_rate(self) -> float | None:
        """Sum of the ranks' rates over the aligned window: what the ranks deliver when none waits."""
        return sum(r.window_rate for r in self.ranks) if self.ranks and all(r.blocks for r in self.ranks) else None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["config"] = self.config.to_dict()
        data["blocks"] = [block_dict(b) for b in self.blocks]
        data["calibration_blocks"] = [block_dict(b) for b in self.calibration_blocks]
        data["default_blocks"] = [block_dict(b) for b in self.default_blocks]
        data["warmup"] = block_dict(self.warmup) if self.warmup else None
        est = self.estimate
        data["samples_per_s"] = asdict(est) if est else None  # derived, for readers; recomputed on load
        data["load"] = self.load.to_dict() if self.load else None
        data["raced"] = self.raced  # derived from ``leg``, for readers
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Trial":
        data = known(cls, data)  # without the derived samples_per_s
        data["config"] = TrialConfig.from_dict(data["config"])
        data["warmup"] = Block.from_dict(data["warmup"]) if data.get("warmup") else None
        data["blocks"] = [Block.from_dict(b) for b in data.get("blocks", [])]
        data["calibration_blocks"] = [Block.from_dict(b) for b in data.get("calibration_blocks", [])]
        data["default_blocks"] = [Block.from_dict(b) for b in data.get("default_blocks", [])]
        if data.get("memory"):
            data["memory"] = from_known(MemoryUsage, data["memory"], samples=[tuple(s) for s in data["memory"].get("samples", [])])
        data["error"] = from_known(TrialError, data["error"]) if data.get("error") else None
        data["gpu"] = GPUUsage.from_dict(data["gpu"]) if data.get("gpu") else None
        data["batch"] = BatchInfo.from_dict(data["batch"]) if data.get("batch") else None
        data["batch_sizes"] = BatchSizes.from_dict(data["batch_sizes"]) if data.get("batch_sizes") else None
        data["ranks"] = [RankFigures.from_dict(r) for r in data.get("ranks", [])]
        data["load"] = LoadReading.from_dict(data["load"]) if data.get("load") else None  # files before it: None
        cpu = data.get("cpu_s")
        if cpu is not None and (not isinstance(cpu, (int, float)) or isinstance(cpu, bool) or not 0 <= cpu < float("inf")):
            raise ValueError(f"a trial's cpu_s is not a non-negative number: {cpu!r}")
        return cls(**data)


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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Recommendation":
        data = known(cls, data)
        for key in ("config", "best", "baseline"):
            data[key] = TrialConfig.from_dict(data[key]) if data.get(key) else None
        data["tied"] = [TrialConfig.from_dict(c) for c in data.get("tied", [])]
        data["excluded"] = [TrialConfig.from_dict(c) for c in data.get("excluded", [])]
        return cls(**data)


@dataclass
class StageCost:
    """One stage's cost, measured repeatedly: ``seconds[i]`` spent on ``units[i]`` samples or batches.

    The mean (total seconds / total units) is what a long run pays, and so what bounds throughput;
    the interval comes from the spread of the per-unit values, as for throughput (``stats.estimate``)."""

    seconds: list[float]
    units: list[int]

    @property
    def values(self) -> list[float]:
        return [s / u for s, u in zip(self.seconds, self.units) if u > 0]

    @property
    def mean(self) -> float:
        total = sum(self.units)
        return sum(self.seconds) / total if total else 0.0

    @property
    def estimate(self) -> Estimate | None:
        values = self.values
        return estimate(values) if values else None

    @property
    def halfwidth(self) -> float:
        """The mean's 95% half-width (seconds per unit): the bound's interval is built from these."""
        return mean_halfwidth(self.values)

    @property
    def rel_spread(self) -> float:
        est = self.estimate
        return est.rel_spread if est else float("inf")

    @classmethod
    def from_dict(cls, data: dict | None) -> "StageCost | None":
        return cls(list(data["seconds"]), list(data["units"])) if data else None


@dataclass
class StageCosts:
    """Where the time goes, from one profiling run of the dataset in an isolated process (``stages.py``).

    Per sample: the dataset's fetch, CPU and wall time in a worker-like process (one torch thread);
    wall minus CPU is waiting (storage, network). Per batch: collation, a worker's CPU to collate
    into shared memory and send, the main process's CPU to receive, the consumer (on a batch made
    locally and on one received from a worker: the difference is the first touch of shared pages),
    and with CUDA pinning, the host-to-device copy and the step on the device."""

    batch_size: int
    device: str
    fetch_cpu: StageCost  # s per sample
    fetch_wall: StageCost  # s per sample, less the time spent waiting for a CPU (another process's load is not I/O)
    collate: StageCost  # s per batch
    fetch_main: StageCost | None = None  # s per sample, wall less CPU waits, with the main process's torch threads (num_workers=0)
    handoff: StageCost | None = None  # s per batch: a worker's CPU to collate into shared memory and send
    receive: StageCost | None = None  # s per batch: the main thread's CPU to receive a batch from a worker
    consumer: StageCost | None = None  # s per batch: copy + step on a batch collated in this process
    consumer_received: StageCost | None = None  # s per batch: the same on a batch received from a worker
    pin: StageCost | None = None  # s per batch (CUDA only)
    copy: StageCost | None = None  # s per batch, pinned, non_blocking, synchronised (CUDA only)
    step: StageCost | None = None  # s per batch, on a batch already on the device (CUDA only)
    batch_bytes: int = 0  # bytes of the tensors in one batch
    torch_threads: int = 1  # the main process's intra-op threads
    max_workers: int | None = None  # the most workers the scan could try (the bound's I/O ceiling)
    wall_s: float = 0.0
    error: str | None = None  # the profile failed: the scan's figures stand, the diagnosis is missing
    notes: list[str] = field(default_factory=list)

    COSTS = ("fetch_cpu", "fetch_wall", "collate", "fetch_main", "handoff", "receive", "consumer",
             "consumer_received", "pin", "copy", "step")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "StageCosts":
        data = known(cls, data)
        for name in cls.COSTS:
            data[name] = StageCost.from_dict(data.get(name))
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
            "batch_sizes": asdict(varying) if (varying := self.varying_batches) else None,  # derived, for readers
        }

    @classmethod
    def from_dict(cls, data: dict) -> "ScanResult":
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ResultError("not a loadtune scan result (no 'schema': 'loadtune/scan' field)")
        data = migrated(data)
        if not isinstance(data.get("settings"), dict):
            raise ResultError("malformed scan result: 'settings' is missing or not an object")
        missing = [k for k in ("options", "device", "references") if k not in data["settings"]]
        if missing:
            raise ResultError(f"malformed scan result: settings lack {', '.join(missing)}")
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
            )
            _ = result.configs  # every estimate a report shows: a damaged figure is refused here, not mid-report
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ResultError(f"malformed scan result: {type(exc).__name__}: {exc}") from None
        return result

    def save(self, path: str | Path) -> None:
        """Write atomically: a reader (or a crash) never sees a half-written file."""
        write_atomic(Path(path), json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "ScanResult":
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ResultError(f"{path}: cannot read: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ResultError(f"{path}: not a text file, so not a loadtune result") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ResultError(f"{path}: not valid JSON (line {exc.lineno}): {exc.msg}") from None
        try:
            return cls.from_dict(data)
        except ResultError as exc:
            raise ResultError(f"{path}: {exc}") from None


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, then rename over the target."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a results file is for others to read too
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_writable(path: str | Path) -> None:
    """Fail before the scan, not after it, when the results cannot be saved."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ResultError(f"{path}: folder {folder} does not exist")
    if path.is_dir():
        raise ResultError(f"{path}: is a folder; give a file name such as loadtune.json")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ResultError(f"{path}: cannot write there: {exc.strerror or exc}") from None
