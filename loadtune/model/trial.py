"""What one trial measured: its timed blocks, the memory and GPU it used, why it failed, and with
several ranks each rank's figures.

Raw figures are the record: every timed block of every trial is kept, and estimates are computed
from them (``Trial.estimate``), never stored as the only truth.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from loadtune.model.batch import BatchInfo, BatchSizes
from loadtune.model.config import TrialConfig
from loadtune.model.estimate import Estimate, estimate
from loadtune.model.known import from_known, known
from loadtune.model.load import LoadReading


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
    # bytes the trial's process tree (main process and workers) made storage fetch in the block, and every
    # byte its read() calls returned, from the page cache or not (/proc/<pid>/io read_bytes and rchar; None:
    # not counted, the dataset reads no files the scan knows of)
    storage_bytes: int | None = None
    read_bytes: int | None = None

    @classmethod
    def from_dict(cls, data: dict) -> "Block":
        """A block read back from JSON; its figures must be numbers, or every estimate made from it fails later."""
        block = from_known(cls, data)
        figures = (block.samples, block.batches, block.seconds, block.epochs, block.wait_s or 0, block.h2d_bytes or 0,
                   block.faulted_bytes or 0, block.storage_bytes or 0, block.read_bytes or 0)
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
    return {k: v for k, v in asdict(block).items() if v is not None or k not in OPTIONAL_FIGURES}


OPTIONAL_FIGURES = ("wait_s", "h2d_bytes", "faulted_bytes", "storage_bytes", "read_bytes")  # left out of JSON when None


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
    # the referee's round (1, 2, ...; 0: none): this config timed alone in a fresh process right before or
    # after the other config of a pair whose race ratio and runs alone disagreed (engine/referee.py)
    referee: int = 0

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
