"""The bound: the highest throughput any config could reach, from the stage costs, as pure functions.

In the spirit of Plumber (MLSys'22): each stage of the data path caps throughput on its own, and the
lowest cap is the bound. With workers, the caps are

- CPU: all the CPU a batch costs (the dataset's fetch, collation, the hand-off on both sides, the
  main thread's receiving and, on the CPU, the step) shared by the usable cores. Where the trials
  measured it, the CPU that the fastest config with workers used per batch while timed; the
  profile's sum of stage costs otherwise;
- workers: each worker makes its batches one after another, waiting included, so the most workers
  the search may try (the scan's worker range) make at most that many batches at a time;
- the main thread: it receives every batch and (without an accelerator) runs the step, one at a time;
- with CUDA: the pin thread, the copy engine, and the step on the device;
- in a cold scan, storage: its bandwidth (the profile's cold reads of the dataset's files, many in
  flight) over the bytes a sample made it fetch (readahead included; the fewest any config's timed
  runs fetched). It caps both modes alike: no number of workers reads faster than the storage serves.

Without workers (``num_workers=0``) everything runs in turn in the main process. The bound is the
better of the two modes; the stage named is the largest share of the cap that sets it.

The costs are means of a short profile, so every cap carries an interval: its rate with every cost at
the low and at the high end of its mean's 95% interval (conservative: all ends at once). A CPU cap set
from the trials spans the CPU per batch its config's runs read, lowest to highest (a run is one reading
over its timed window; one run gives no interval). Caps whose
intervals overlap the limiting one's cannot be told apart from it, and are named with it as ties: a
dataset that waits on storage, run with many workers on few cores, is limited by the waits and the
CPU together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadtune.model.results import ScanResult
    from loadtune.model.stages import StageCosts

from loadtune.analysis.state import read_figures
from loadtune.model.storage import COLD

DATASET_CPU = "dataset CPU work"
IO_WAIT = "I/O wait"
STORAGE_READ = "storage read (cold)"  # the profile's fetch from storage: a row of the diagnosis, its I/O wait the cap
STORAGE_BANDWIDTH = "storage bandwidth"
STORAGE = "storage"  # the cap both modes share
COLLATION = "collation"
HANDOFF = "hand-off between processes"
MAIN = "main process"
PIN = "pinning"
COPY = "host-to-device copy"
STEP = "consumer step"

ADVICE = {
    DATASET_CPU: "the dataset's own CPU work is the bound: cheaper transforms (decode at reduced size, cache "
                 "decoded samples), augmentation and normalisation on the GPU with uint8 transfer, or GPU decoding "
                 "(DALI, torchvision.io.decode_jpeg on the device); more usable cores move it too",
    IO_WAIT: "the dataset waits on storage: faster storage (local NVMe, or tmpfs / the page cache for a dataset that "
             "fits in RAM), fewer larger reads, or more workers than cores (they wait, not compute)",
    COLLATION: "collation is the bound: a cheaper collate_fn, samples that are already tensors of one shape, or "
               "fewer, larger tensors per batch",
    HANDOFF: "moving batches between processes is the bound: fewer bytes per batch (uint8 instead of float32 is a "
             "quarter, normalise on the GPU), fewer tensors per batch, or num_workers=0 when samples are cheap to make",
    MAIN: "the main process's share of every batch is the bound: fewer, larger tensors per batch and fewer bytes "
          "(uint8 transfer); a larger batch size spreads the per-batch cost",
    PIN: "pinning is the bound: fewer bytes per batch (uint8 transfer, normalise on the GPU)",
    COPY: "the host-to-device copy is the bound: fewer bytes per batch (uint8 transfer is a quarter of float32's, "
          "normalise on the GPU), pinned memory with non_blocking copies",
    STORAGE_BANDWIDTH: "storage's bandwidth is the bound: no loader setting reads faster than the storage serves; fewer "
                       "bytes fetched a sample (a memory-mapped file read at random: madvise(MADV_RANDOM) stops the "
                       "readahead), a copy in RAM (tmpfs, or the page cache for a dataset that fits), or faster storage",
    STEP: "the consumer step is the bound: loading keeps up, and no DataLoader setting will make training faster",
}


@dataclass(frozen=True)
class Ceiling:
    """One cap on throughput and the stage that dominates it."""

    name: str  # what caps: "CPU", "workers", "main thread", "in-process loading", "pin thread", "copy", "step"
    rate: float  # samples/s
    stage: str
    detail: str = ""
    low: float | None = None  # samples/s with every cost at the high end of its interval (None: no interval)
    high: float | None = None  # ... at the low end

    @property
    def rel_halfwidth(self) -> float:
        if self.low is None or self.high is None or not 0 < self.rate < math.inf:
            return 0.0
        return max(self.high - self.rate, self.rate - self.low) / self.rate


@dataclass(frozen=True)
class Bound:
    """The highest reachable throughput at ``batch_size``, the ceiling that sets it, and every ceiling."""

    rate: float  # samples/s
    stage: str  # the limiting stage
    ceiling: Ceiling
    ceilings: list[Ceiling] = field(default_factory=list)
    batch_size: int = 0
    max_workers: int = 0
    workers_needed: int | None = None  # workers that would lift the workers ceiling to the next one (waiting datasets)
    low: float | None = None  # the bound with every cost at the high end of its interval
    high: float | None = None  # ... at the low end
    ties: list[Ceiling] = field(default_factory=list)  # other caps whose intervals overlap the limiting one's

    @property
    def stages(self) -> list[str]:
        """The limiting stage, then the stages of caps that tie with it (each once)."""
        out = [self.stage]
        for tie in self.ties:
            if tie.stage not in out:
                out.append(tie.stage)
        return out

    @property
    def counts_storage(self) -> bool:
        """Whether a cap for storage's bandwidth is among the caps (a cold scan that measured it)."""
        return any(c.name == STORAGE for c in self.ceilings)

    @property
    def advice(self) -> str:
        return ADVICE.get(self.stage, "")

    def fraction(self, rate: float) -> float | None:
        return rate / self.rate if self.rate > 0 and math.isfinite(self.rate) else None

    def fraction_interval(self, rate: float) -> tuple[float, float] | None:
        """``rate`` against the bound's interval: (against its high end, against its low end)."""
        if self.low is None or self.high is None or not 0 < self.low <= self.high < math.inf:
            return None
        return rate / self.high, rate / self.low


@dataclass(frozen=True)
class Fetched:
    """Bytes a sample made storage fetch (readahead included), and whose reading that is."""

    per_sample: float
    by: str


@dataclass(frozen=True)
class BatchCosts:
    """Stage costs in seconds per batch, the inputs of the bound arithmetic."""

    batch_size: int
    fetch_cpu: float  # the dataset, CPU, one torch thread
    fetch_wall: float  # the dataset, wall (>= CPU): the rest is waiting
    fetch_main: float  # the dataset, wall, with the main process's torch threads
    collate: float
    handoff: float  # a worker's CPU to collate into shared memory and send (collation included)
    receive: float  # the main thread's CPU to receive
    touch: float  # the consumer's extra time on a batch from a worker: first touch of shared pages
    consumer: float  # copy + step on a local batch, on the main thread
    pin: float | None = None
    copy: float | None = None
    step: float | None = None
    cuda: bool = False
    storage: float | None = None  # seconds a batch costs the storage at its bandwidth (cold scans only)
    storage_fetched: Fetched | None = None  # the bytes a sample made it fetch

    @classmethod
    def of(cls, stages: "StageCosts", side: int = 0, cold: bool = False, fetched: Fetched | None = None) -> "BatchCosts":
        """The mean costs; with ``side`` -1 or +1, every cost at the low or high end of its mean's
        interval. ``cold``: the scan reads from storage, whose bandwidth then costs each batch too, for
        the bytes a sample ``fetched`` (the profile's own reading where not given)."""
        b = stages.batch_size
        fetched = fetched or (Fetched(stages.storage_bytes, "the profile's cold fetch") if stages.storage_bytes else None)

        def mean(cost):
            return max(0.0, cost.mean + side * cost.halfwidth) if cost is not None else None

        fetch_cpu = b * mean(stages.fetch_cpu)
        fetch_wall = max(fetch_cpu, b * mean(stages.fetch_wall))
        collate = mean(stages.collate)
        consumer = mean(stages.consumer) or 0.0
        received = mean(stages.consumer_received)
        return cls(
            batch_size=b,
            fetch_cpu=fetch_cpu,
            fetch_wall=fetch_wall,
            fetch_main=b * mean(stages.fetch_main) if stages.fetch_main else fetch_wall,
            collate=collate,
            handoff=max(collate, mean(stages.handoff) or 0.0),
            receive=mean(stages.receive) or 0.0,
            touch=max(0.0, received - consumer) if received is not None else 0.0,
            consumer=consumer,
            pin=mean(stages.pin),
            copy=mean(stages.copy),
            step=mean(stages.step),
            cuda=stages.device.startswith("cuda"),
            storage=storage_cost(stages, fetched.per_sample, side) if cold and fetched else None,
            storage_fetched=fetched if cold else None,
        )


def storage_cost(stages: "StageCosts", fetched: float, side: int = 0) -> float | None:
    """Seconds the storage takes to fetch a batch's ``fetched`` bytes a sample at its measured
    bandwidth (``side`` -1: at the high end of the bandwidth's interval, the cost's low end); None
    where the bandwidth was not measured."""
    bandwidth = stages.storage_mb_s
    if bandwidth is None or not fetched:
        return None
    mb_s = {0: bandwidth.median, -1: bandwidth.high, 1: bandwidth.low}[side]
    return stages.batch_size * fetched / (mb_s * 1e6) if mb_s > 0 else None


def fewest_fetched(result: "ScanResult") -> Fetched | None:
    """The fewest bytes a sample any config made storage fetch while timed (all its runs pooled): the
    bound is the most any config could reach, and how much of the kernel's readahead a later sample
    finds cached differs by config and by how long the run has gone since the drop (4.9 to 5.7 MiB a
    sample by config on a memory-mapped array, 7.4 in the profile's short fetch right after one). None
    where no run counted them."""
    readings = [(figures.storage, c) for c in result.configs if c.ok
                and (figures := read_figures(c.trials)) is not None and figures.storage > 0]
    if not readings:
        return None
    least, config = min(readings, key=lambda r: r[0])
    return Fetched(least, f"the fewest of any config: {result.label(config.config)}")


def dataset_stage(cpu: float, wall: float) -> str:
    """Waiting or computing: whichever is the larger part of the dataset's wall time."""
    return IO_WAIT if wall - cpu > cpu else DATASET_CPU


def largest(parts: dict[str, float]) -> str:
    return max(parts, key=lambda k: parts[k])


def rate_of(batch_size: int, seconds: float) -> float:
    return batch_size / seconds if seconds > 0 else math.inf


@dataclass(frozen=True)
class MeasuredCPU:
    """The CPU a config with workers used per batch while its blocks were timed (all its processes)."""

    per_batch: float  # seconds, all its runs pooled
    config: str  # its label
    low: float | None = None  # the lowest and highest CPU per batch its runs read (None: one run)
    high: float | None = None

    def ends(self) -> tuple["MeasuredCPU", "MeasuredCPU"]:
        """As read by its cheapest and its dearest run: the CPU cap at the high and the low end."""
        return (replace(self, per_batch=self.low if self.low is not None else self.per_batch),
                replace(self, per_batch=self.high if self.high is not None else self.per_batch))


def worker_ceilings(c: BatchCosts, usable_cores: int, max_workers: int, measured: MeasuredCPU | None = None) -> list[Ceiling]:
    """The caps on a loader with workers (up to ``max_workers`` of them). With ``measured``, the CPU
    cap divides the cores by the CPU a trial really used per batch; the profile's parts still say
    which stage has the largest share of it."""
    b = c.batch_size
    main_cpu = c.receive + c.touch + (0.0 if c.cuda else c.consumer)
    cpu_parts = {DATASET_CPU: c.fetch_cpu, COLLATION: c.collate, HANDOFF: c.handoff - c.collate + c.touch,
                 MAIN: c.receive, STEP: 0.0 if c.cuda else c.consumer, PIN: c.pin or 0.0}
    cpu_total = c.fetch_cpu + c.handoff + main_cpu + (c.pin or 0.0)
    cpu_source = "CPU per batch"
    if measured is not None:
        cpu_total, cpu_source = measured.per_batch, f"CPU per batch, used by {measured.config} while timed"
        if measured.low is not None and measured.high is not None and measured.high > measured.low:
            cpu_source += f" (its runs: {measured.low * 1e3:.3g}-{measured.high * 1e3:.3g} ms)"
    per_worker = c.fetch_wall + c.handoff
    worker_parts = {dataset_stage(c.fetch_cpu, c.fetch_wall): c.fetch_wall, COLLATION: c.collate,
                    HANDOFF: c.handoff - c.collate}
    main_parts = {MAIN: c.receive, HANDOFF: c.touch, STEP: 0.0 if c.cuda else c.consumer}
    out = [
        Ceiling("CPU", usable_cores * rate_of(b, cpu_total), largest(cpu_parts),
                f"{usable_cores} usable cores / {cpu_total * 1e3:.3g} ms {cpu_source}"),
        Ceiling("workers", max_workers * rate_of(b, per_worker), largest(worker_parts),
                f"{max_workers} workers / {per_worker * 1e3:.3g} ms per batch each"),
        Ceiling("main thread", rate_of(b, sum(main_parts.values())), largest(main_parts),
                f"{sum(main_parts.values()) * 1e3:.3g} ms per batch"),
    ]
    if c.cuda:
        if c.pin:
            out.append(Ceiling("pin thread", rate_of(b, c.pin), PIN, f"{c.pin * 1e3:.3g} ms per batch"))
        if c.copy:
            out.append(Ceiling("copy", rate_of(b, c.copy), COPY, f"{c.copy * 1e3:.3g} ms per batch, pinned"))
        if c.step:
            out.append(Ceiling("step", rate_of(b, c.step), STEP, f"{c.step * 1e3:.3g} ms per batch on the device"))
    return out


def in_process_ceiling(c: BatchCosts) -> Ceiling:
    """``num_workers=0``: fetch, collation and consumer one after another in the main process."""
    fetch_cpu = min(c.fetch_cpu, c.fetch_main)
    parts = {dataset_stage(fetch_cpu, c.fetch_main): c.fetch_main, COLLATION: c.collate, STEP: c.consumer}
    total = sum(parts.values())
    return Ceiling("in-process loading", rate_of(c.batch_size, total), largest(parts),
                   f"num_workers=0: {total * 1e3:.3g} ms per batch in the main process")


def storage_ceiling(c: BatchCosts) -> Ceiling | None:
    """The storage's bandwidth over the bytes a batch makes it fetch; None where not measured."""
    if not c.storage or c.storage_fetched is None:
        return None
    per_sample = c.storage_fetched.per_sample
    mb_s = c.batch_size * per_sample / c.storage / 1e6
    shown = f"{per_sample / 2**20:.3g} MiB" if per_sample >= 2**20 else f"{per_sample / 1024:.3g} KiB"
    return Ceiling(STORAGE, rate_of(c.batch_size, c.storage), STORAGE_BANDWIDTH,
                   f"{mb_s:,.0f} MB/s read cold / {shown} fetched a sample ({c.storage_fetched.by})")


def ceilings_of(costs: BatchCosts, usable_cores: int, max_workers: int, measured: MeasuredCPU | None = None) -> list[Ceiling]:
    """In-process loading first, then the caps with workers (none when the range has no workers), then
    storage's (cold scans), which caps both."""
    caps = worker_ceilings(costs, usable_cores, max_workers, measured) if max_workers >= 1 else []
    storage = storage_ceiling(costs)
    return [in_process_ceiling(costs)] + caps + ([storage] if storage else [])


def limiting(ceilings: list[Ceiling]) -> Ceiling:
    """The better of loading in the main process (the first) and the lowest cap with workers, unless
    storage's cap, which binds both, is lower still."""
    in_process = ceilings[0]
    caps = [x for x in ceilings[1:] if x.name != STORAGE]
    low = min(caps, key=lambda x: x.rate, default=None)
    best = low if low is not None and low.rate > in_process.rate else in_process
    return min([best] + [x for x in ceilings[1:] if x.name == STORAGE], key=lambda x: x.rate)


def compute_bound(costs: BatchCosts, usable_cores: int, max_workers: int,
                  spread: tuple[BatchCosts, BatchCosts] | None = None, measured: MeasuredCPU | None = None) -> Bound:
    """The bound from the mean costs; ``spread`` (the costs at the low and the high end of their
    intervals) gives every cap and the bound an interval, and the caps that tie with the limiting one.
    ``measured``: the CPU the trials used per batch, for the CPU cap (its interval: the runs' readings)."""
    ceilings = ceilings_of(costs, usable_cores, max_workers, measured)
    low = high = None
    if spread is not None:
        ends = measured.ends() if measured is not None else (None, None)
        cheap, dear = (ceilings_of(c, usable_cores, max_workers, m) for c, m in zip(spread, ends))
        fast, slow = {x.name: x.rate for x in cheap}, {x.name: x.rate for x in dear}
        ceilings = [replace(x, low=min(x.rate, slow.get(x.name, x.rate)), high=max(x.rate, fast.get(x.name, x.rate)))
                    for x in ceilings]
        low, high = min(limiting(dear).rate, limiting(ceilings).rate), max(limiting(cheap).rate, limiting(ceilings).rate)
    pick = limiting(ceilings)
    caps = ceilings[1:]
    ties = []
    workers_needed = None
    if pick in caps:
        top = pick.high if pick.high is not None else pick.rate
        ties = [x for x in caps if x is not pick and (x.low if x.low is not None else x.rate) <= top]
        if pick.name == "workers" and pick.stage == IO_WAIT:
            others = min((x.rate for x in caps if x.name != "workers"), default=math.inf)
            if math.isfinite(others):
                workers_needed = math.ceil(others / (pick.rate / max_workers))
    return Bound(rate=pick.rate, stage=pick.stage, ceiling=pick, ceilings=ceilings, batch_size=costs.batch_size,
                 max_workers=max_workers, workers_needed=workers_needed, low=low, high=high,
                 ties=sorted(ties, key=lambda x: x.rate))


def scan_bound(result: "ScanResult") -> Bound | None:
    """The bound of a scan at the batch size its stages were profiled at; None without a profile."""
    stages = result.stages
    if stages is None or stages.error or stages.fetch_cpu is None:
        return None
    max_workers = stages.max_workers
    if max_workers is None:  # a profile without the scan's range: the most workers measured
        max_workers = max((c.config.num_workers for c in result.configs), default=0)
    cold = result.storage is not None and result.storage.state == COLD
    fetched = fewest_fetched(result) if cold else None
    spread = (BatchCosts.of(stages, -1, cold, fetched), BatchCosts.of(stages, +1, cold, fetched))
    return compute_bound(BatchCosts.of(stages, cold=cold, fetched=fetched), result.machine.usable_cores, max_workers, spread,
                         measured_cpu(result, stages.batch_size))


def bound_by_storage(result: "ScanResult") -> bool:
    """Whether storage's bandwidth is the scan's bound (a cold scan whose profile measured it)."""
    bound = scan_bound(result)
    return bound is not None and bound.stage == STORAGE_BANDWIDTH


def measured_cpu(result: "ScanResult", batch_size: int) -> MeasuredCPU | None:
    """The CPU per batch of the fastest config with workers at the profile's batch size, as its trials
    measured it. The profile times each stage alone, on idle cores, where a dataset that waits pays for
    every wake-up from an idle core: on a 2-core VM, ``benchmarks/archetypes/storage_latency.py`` cost
    200-270 µs of CPU a sample alone, and 170 µs (main process and hand-off included) with 64 workers
    keeping the cores busy. A config near the CPU cap runs under that load."""
    runs = [c for c in result.configs if c.ok and c.config.num_workers > 0 and c.config.batch_size == batch_size
            and c.cpu_per_sample is not None and c.mean_rate]
    if not runs:
        return None
    top = max(runs, key=lambda c: c.mean_rate)
    readings = top.cpu_per_sample_runs
    low, high = (min(readings) * batch_size, max(readings) * batch_size) if len(readings) > 1 else (None, None)
    return MeasuredCPU(top.cpu_per_sample * batch_size, top.config.label(), low, high)


def pick_rate(result: "ScanResult") -> float | None:
    """The recommended config's throughput where it can be set against the bound (same batch size).
    Like with like: the bound comes from mean costs, so the pick's long-run rate (``mean_rate``), not
    its median block."""
    bound, rec = scan_bound(result), result.recommendation
    if bound is None or rec is None or rec.config.batch_size != bound.batch_size:
        return None
    pick = result.config_result(rec.config)
    return pick.mean_rate if pick and pick.ok else None


def pick_fraction(result: "ScanResult") -> float | None:
    """The recommended config's throughput as a fraction of the bound."""
    rate = pick_rate(result)
    return scan_bound(result).fraction(rate) if rate else None


OVER_BOUND = 1.05  # a pick this far above even the bound's high end shows the profile overstated a cost
AT_BOUND = 0.995  # a pick this close below the bound is at it


@dataclass(frozen=True)
class PickVsBound:
    """Where the pick's long-run rate sits against the bound. ``verdict`` is one of: ``not compared``
    (the pick's batch size differs), ``unknown``, ``over`` (beyond the bound's spread and the pick's
    noise: the profile overstated a stage's cost), ``within spread``, ``at``, ``below``."""

    verdict: str
    fraction: float | None = None
    interval: tuple[float, float] | None = None


def pick_against_bound(result: "ScanResult") -> PickVsBound:
    """How the recommended config's long-run rate compares with the bound and its interval."""
    bound, pick = scan_bound(result), pick_rate(result)
    if pick is None:
        return PickVsBound("not compared")
    fraction = bound.fraction(pick)
    if fraction is None:
        return PickVsBound("unknown")
    interval = bound.fraction_interval(pick)
    if fraction > 1 and (interval is None or interval[0] > OVER_BOUND):
        verdict = "over"
    elif interval is not None and interval[0] <= 1 <= interval[1]:
        verdict = "within spread"
    elif fraction >= AT_BOUND:
        verdict = "at"
    else:
        verdict = "below"
    return PickVsBound(verdict, fraction, interval)
