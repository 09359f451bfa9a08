"""Where the time goes: the stage costs of the dataset's profiling run (``engine/stages.py``), from
which the throughput bound is built (``analysis/bound.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from loadtune.model.estimate import Estimate, estimate, mean_halfwidth
from loadtune.model.known import from_known, known


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
    """Where the time goes, from one profiling run of the dataset in an isolated process (``engine/stages.py``).

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
    # s per sample: the fetch's wall time (one thread, less CPU waits) with the dataset's files dropped
    # from the page cache first, where the scan knows them: what a sample costs read from storage
    storage_read: StageCost | None = None
    storage_bytes: float | None = None  # bytes storage fetched a sample in that read (readahead included)
    # MB/s (10^6 bytes) the storage read of the dataset's files, cold, with ``storage_in_flight`` reads
    # in flight (the best of a few depths): its bandwidth, which caps every config however many workers
    storage_mb_s: Estimate | None = None
    storage_in_flight: int | None = None
    batch_bytes: int = 0  # bytes of the tensors in one batch
    torch_threads: int = 1  # the main process's intra-op threads
    max_workers: int | None = None  # the most workers the scan could try (the bound's I/O ceiling)
    wall_s: float = 0.0
    error: str | None = None  # the profile failed: the scan's figures stand, the diagnosis is missing
    notes: list[str] = field(default_factory=list)

    COSTS = ("fetch_cpu", "fetch_wall", "collate", "fetch_main", "handoff", "receive", "consumer",
             "consumer_received", "pin", "copy", "step", "storage_read")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "StageCosts":
        data = known(cls, data)
        for name in cls.COSTS:
            data[name] = StageCost.from_dict(data.get(name))
        if data.get("storage_mb_s"):
            data["storage_mb_s"] = from_known(Estimate, data["storage_mb_s"])
        return cls(**data)
