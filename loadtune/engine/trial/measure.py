"""The timing loop of one trial, run inside the trial's own process.

Protocol: time to first batch (``iter`` + first ``next``: worker start-up) on its own; a warm-up
phase that drains the prefetch queue and is discarded; then timed blocks of at least ``block_s``.
Phases are contiguous: each ends where the next begins, and device work is synchronised only at
those boundaries, so the overlap of loading, copying and compute stays in what is measured.
The warm-up lasts until the backlog the workers built while the first batch was awaited has been
consumed: timing a loader that still hands out batches finished ahead overstates its pace.
Once a short epoch (up to a few blocks long) has ended, phases end only at epoch boundaries, so
every block of a short dataset holds whole epochs (and the worker restarts that
``persistent_workers`` removes); a long epoch does not stretch every block to its length.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch.utils.data import DataLoader

try:
    import resource

    PAGE_BYTES = resource.getpagesize()
except ImportError:  # Windows: no page-fault counts
    resource = None

from loadtune.engine.loaders import LoaderError, start
from loadtune.engine.spec import LoadedSpec
from loadtune.engine.trial import gpu
from loadtune.engine.trial.cpu import tree_cpu_s
from loadtune.engine.trial.faults import DuplicateDetector
from loadtune.engine.trial.idle import GPUIdleClock
from loadtune.engine.trial.load import LoadMeter
from loadtune.engine.trial.prefetch import CUDAPrefetcher
from loadtune.engine.trial.transfer import batch_info, batch_size_of, move_to, nbytes_of, unmoved_note
from loadtune.engine.trial.workload import StepWorkload
from loadtune.model.batch import BatchInfo
from loadtune.model.config import DEFAULT_PREFETCH, TrialConfig
from loadtune.model.estimate import estimate
from loadtune.model.batch import BatchSizes
from loadtune.model.trial import Block
from loadtune.model.settings import ScanOptions


@dataclass(frozen=True)
class Timing:
    """How long to measure. ``max_s`` is a soft cap: measurement ends early (with fewer blocks)
    rather than be killed by the hard per-trial timeout."""

    warmup_s: float = 1.0
    block_s: float = 0.5
    blocks: int = 10  # at most
    max_s: float = 60.0
    min_blocks: int = 3
    target_spread: float = 0.0  # stop once the median's interval is this tight (relative); 0: run all blocks

    def enough(self, rates: list[float]) -> bool:
        """Blocks keep coming until the estimate is as precise as asked, as blocked_autorange does."""
        if len(rates) >= self.blocks:
            return True
        if len(rates) < self.min_blocks or self.target_spread <= 0:
            return False
        return estimate(rates).rel_spread <= self.target_spread


def scan_timing(options: ScanOptions) -> Timing:
    """How each trial of a scan measures (and each of a check against it): the soft cap leaves the
    hard per-trial timeout a margin."""
    return Timing(warmup_s=options.warmup, block_s=options.block_time, blocks=options.blocks, max_s=options.timeout * 0.8,
                  min_blocks=options.min_blocks, target_spread=options.target_spread)


@dataclass(frozen=True)
class LoaderOptions:
    """DataLoader arguments that are part of the user's training setup, not searched."""

    shuffle: bool = True
    drop_last: bool = False
    seed: int = 0


ALIGN_EPOCHS_UP_TO = 4  # epochs up to this many block lengths are measured whole
RESTART_SHARE = 0.02  # ...and longer ones too when restarting the workers costs this share of an epoch
DRAIN_SHARE = 0.25  # at most this share of a trial's time goes on consuming the start-up backlog


@dataclass(frozen=True)
class Shard:
    """This process is one rank of several: it loads its share of the dataset, and its timed window
    is aligned with the other ranks' by barriers (before start-up, after warm-up, after the window),
    never inside a timed block. The window has a fixed length so that every rank measures the same
    stretch of time, under the contention of all the others."""

    rank: int  # global rank: which shard
    world: int  # ranks over all nodes: how many shards
    barrier: Callable[[str], None]  # waits for every rank of this node's trial; the name says which
    window_s: float

    def sampler(self, dataset: Any, options: LoaderOptions):
        """The sampler training uses under DDP: DistributedSampler with its defaults (padding to equal shards)."""
        from torch.utils.data.distributed import DistributedSampler

        return DistributedSampler(dataset, num_replicas=self.world, rank=self.rank, shuffle=options.shuffle, seed=options.seed)


class TrialFailure(Exception):
    """The loader could not be measured for a reason that is not an exception of the dataset's."""


class ConsumerError(Exception):
    """Moving a batch to the device or the spec's ``step`` raised: not the dataset's fault."""


def make_loader(spec: LoadedSpec, config: TrialConfig, options: LoaderOptions, shard: Shard | None = None) -> Any:
    """The loader of one trial: loadtune's DataLoader over the spec's dataset (with its extra arguments;
    a rank's shard through DistributedSampler), or the user's own loader built with the config's knobs."""
    sampler = shard.sampler(spec.dataset, options) if shard is not None and not spec.iterable and not spec.own_order else None
    try:
        return spec.build_loader(config.loader_kwargs(), options.shuffle, options.drop_last, options.seed, sampler)
    except LoaderError as exc:
        raise TrialFailure(str(exc)) from None


class Consumer:
    """What happens to each batch: reach the device, then the step. Nothing else. Per block it also
    gives the bytes copied to the device and how long the step waited for data (``idle.py``)."""

    def __init__(self, step: Callable[[Any], Any] | None, transfer: str, device: torch.device):
        self.step, self.device = step, device
        self.move = transfer in ("sync", "non_blocking")  # "stream": the loader is a prefetcher, batches arrive moved
        self.non_blocking = transfer == "non_blocking"
        self.counts_bytes = transfer != "none"
        self.bytes = 0
        self.source: CUDAPrefetcher | None = None  # with "stream": the prefetcher copies and counts
        self.clock = GPUIdleClock(device) if device.type == "cuda" and step is not None else None
        self._mark = 0

    def __call__(self, batch: Any) -> None:
        try:  # zero-cost until raised (Python 3.11+), so no cost per batch
            if self.move:
                self.bytes += nbytes_of(batch)
                batch = move_to(batch, self.device, self.non_blocking)
            if self.step is not None:
                if self.clock is not None:
                    self.clock.before_step()
                self.step(batch)
                if self.clock is not None:
                    self.clock.after_step()
        except Exception as exc:
            raise ConsumerError(exc) from exc

    @property
    def idle(self) -> bool:
        """Nothing to do per batch (no copy, no step): the trial's loop just drops it, as a bare loop does."""
        return not self.move and self.step is None

    @property
    def waits_on_host(self) -> bool:
        """The step's wait for data is host time inside ``next()`` (on a GPU the idle clock reads it)."""
        return self.step is not None and self.clock is None

    def moved(self) -> int:
        return self.source.bytes_moved if self.source is not None else self.bytes

    def begin_block(self) -> None:
        self._mark = self.moved()
        if self.clock is not None:
            self.clock.begin()

    def end_block(self, host_wait_s: float) -> tuple[float | None, int | None]:
        """(seconds the step waited for data, bytes copied) since ``begin_block``; after the device sync.
        No step, no wait figure: then nothing consumes, and "waiting" would be all of the time."""
        wait = None
        if self.step is not None:
            wait = self.clock.idle_s() if self.clock is not None else host_wait_s
        return wait, (self.moved() - self._mark if self.counts_bytes else None)


def make_consumer(spec: LoadedSpec, config: TrialConfig, device: torch.device,
                  step: Callable[[Any], Any] | None = None) -> Consumer:
    """The consumer of a trial: ``step`` (a synthetic one) in place of the spec's, when given."""
    return Consumer(step if step is not None else spec.step, config.transfer, device)


class TrialPrefetcher(CUDAPrefetcher):
    """The ``stream`` strategy inside a trial: a failing copy is the consumer's fault, not the dataset's."""

    def _move(self, batch: Any, side: Any) -> Any:
        try:
            return super()._move(batch, side)
        except Exception as exc:
            raise ConsumerError(exc) from exc


def device_sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def open_device(device: torch.device) -> None:
    """Make the CUDA ``device`` current and create its context now, not inside the first timed copy."""
    torch.cuda.set_device(device)
    torch.zeros(1, device=device)
    torch.cuda.synchronize(device)


class SampleCounter:
    """Samples per batch. For map-style datasets under loadtune's own sampler it is exact from the epoch
    position (the last batch is short unless ``drop_last``); otherwise (streams, the user's own sampler,
    batch_sampler or loader, pre-batched streams) it is read off the batch, ``batch_size`` as fallback."""

    def __init__(self, spec: LoadedSpec, config: TrialConfig, drop_last: bool, length: int | None = None):
        self.batch_size = config.batch_size
        self.position = 0
        self.sizes = SizeTally() if not spec.batch_knob else None  # the loader's own batches: how they vary
        self.declared = not spec.batch_knob and spec.batch_size is None  # its batch size was not read from it
        self.per_epoch = None
        n = None if spec.iterable or spec.own_order else length if length is not None else spec.length  # a rank: its shard
        if n is not None:
            full, rest = divmod(n, config.batch_size)
            self.per_epoch = full if drop_last or rest == 0 else full + 1
            self.last = config.batch_size if drop_last or rest == 0 else rest

    def new_epoch(self) -> None:
        self.position = 0
        if self.sizes is not None:
            self.sizes.end_epoch()

    def __call__(self, batch: Any) -> int:
        self.position += 1
        if self.per_epoch is not None:
            return self.last if self.position == self.per_epoch else self.batch_size
        n = batch_size_of(batch)
        n = n if n is not None else self.batch_size
        if self.sizes is not None:
            self.sizes.add(n)
        return n


class SizeTally:
    """The sizes of the batches a loader that batches by itself hands out while they are timed. Each
    epoch's last batch is kept apart: a short last batch is no batch size of its own."""

    def __init__(self):
        self.inner: set[int] = set()  # sizes of batches that another followed in their epoch
        self.ends: set[int] = set()  # sizes of each epoch's last batch
        self.held: int | None = None  # the latest batch: inner or last, as the epoch's next batch tells
        self.samples = self.batches = 0

    def add(self, n: int) -> None:
        if self.held is not None:
            self.inner.add(self.held)
        self.held = n
        self.samples += n
        self.batches += 1

    def end_epoch(self) -> None:
        if self.held is not None:
            self.ends.add(self.held)
            self.held = None

    def result(self) -> BatchSizes | None:
        if not self.batches:
            return None
        ends = self.ends | ({self.held} if self.held is not None else set())
        every = self.inner | ends
        varying = len(self.inner) > 1 or (bool(self.inner) and max(ends) > max(self.inner))
        return BatchSizes(self.samples / self.batches, min(every), max(every), varying)


class Meter:
    """Drives the loader through phases of a trial and times them."""

    def __init__(self, loader: DataLoader, consume: Callable, sync: Callable, count: SampleCounter,
                 align_s: float = math.inf, restarts: bool = False):
        self.loader, self.consume, self.sync, self.count = loader, consume, sync, count
        self.align_s = align_s  # epochs up to this long are measured whole
        self.restarts = restarts  # every epoch starts its workers again (num_workers > 0, not persistent)
        self.startup_s = 0.0
        self.iterator = None
        self.pending = None
        self.mark = 0.0
        self.aligned = False  # set once a short epoch has ended: phases then end at epoch boundaries
        self.epoch_started = 0.0
        self.epoch_times: list[float] = []  # seconds per epoch (its start-up included), as they end
        self.stats = consume if isinstance(consume, Consumer) else None  # bytes and waits per block

    @property
    def loader_iterator(self) -> Any:
        """The DataLoader's own iterator (with the stream strategy the meter iterates a prefetcher;
        between epochs, persistent workers stay with the loader's ``_iterator``)."""
        # ``is None``, never truth: a loader's iterator has ``__len__``, which an IterableDataset's lacks
        for candidate in (getattr(self.loader, "loader_iterator", None), self.iterator):
            if candidate is not None:
                return candidate
        return getattr(getattr(self.loader, "loader", self.loader), "_iterator", None)

    @property
    def between_epochs(self) -> bool:
        """Resting at an epoch boundary of whole-epoch phases: its workers have nothing made ahead or
        half made."""
        return self.aligned and self.iterator is None

    def _next(self) -> Any:
        if self.iterator is None:
            self.epoch_started = time.perf_counter()
            self.iterator = start(self.loader)
            self.count.new_epoch()
        return next(self.iterator)

    def epochs_for(self, min_s: float) -> int:
        """Whole epochs that last ``min_s`` even if every one is as fast as the fastest so far: decided
        from the epochs before the phase, never from those inside it."""
        fastest = min(self.epoch_times)
        return max(1, math.ceil(min_s / fastest)) if fastest > 0 else 1

    def startup(self) -> float:
        """Seconds from ``iter(loader)`` to the first batch: worker start-up plus one batch."""
        start = time.perf_counter()
        try:
            self.pending = self._next()
        except StopIteration:
            raise TrialFailure("the loader yielded no batch at all") from None
        self.mark = time.perf_counter()
        self.startup_s = self.mark - start
        return self.startup_s

    def phase(self, min_s: float, min_batches: int = 1, deadline: float = math.inf,
              settled: Callable[[], bool] = lambda: True, multiple: int = 1) -> Block:
        """Consume batches for at least ``min_s`` and ``min_batches`` (and until ``settled()``, checked
        after each batch once those are met, and a whole ``multiple`` of batches), then synchronise the
        device once.

        ``multiple``: a loader resumed after resting starts all its workers at once, so its batches
        arrive in bursts of one per worker; a block that ended at the first batch past ``min_s`` would
        hold one batch of its last burst and the time of all of it (7% low with two workers and
        fourteen batches). Ending after whole bursts (``multiple`` the worker count) times them right.

        Once an epoch no longer than ``align_s`` has ended, the dataset is short next to the
        measurement, and phases end only at epoch boundaries: every block then holds whole epochs,
        with the worker restarts between them that ``persistent_workers`` removes. How many epochs
        is decided before the phase starts (``epochs_for``): ending a block at the first epoch
        boundary past ``min_s`` would end it early exactly when an epoch was slow, and the median of
        such blocks overstated a restarting loader's rate (by up to 40% on
        benchmarks/archetypes/tiny_dataset.py). A phase still lasts ``min_s`` at least."""
        clock = time.perf_counter
        start, faulted_before = self.mark, faulted_bytes()
        whole = self.epochs_for(min_s) if self.aligned else 0  # epochs this phase spans
        samples = batches = epochs = 0
        waited = asked = 0.0  # host time inside next(): what a CPU consumer waits for data
        consume, time_waits = self._begin_block()
        # the hot loop does only what this trial needs: a bare loop's work plus counting
        while True:
            if self.pending is not None:
                batch, self.pending = self.pending, None
            else:
                if time_waits:
                    asked = clock()
                try:
                    batch = next(self.iterator) if self.iterator is not None else self._next()
                    if time_waits:
                        waited += clock() - asked
                except StopIteration:
                    if time_waits:
                        waited += clock() - asked
                    epochs += 1
                    now = self._end_epoch()
                    if (batches >= min_batches and epochs >= whole and now - start >= min_s) or now > deadline:
                        break
                    continue
            if consume is not None:
                consume(batch)
            samples += self.count(batch)
            batches += 1
            now = clock()
            if now > deadline or (not self.aligned and batches >= min_batches and now - start >= min_s
                                  and batches % multiple == 0 and settled()):
                break
        return self._end_block(start, samples, batches, epochs, waited, faulted_before)

    def _begin_block(self) -> tuple[Callable | None, bool]:
        """What the hot loop calls per batch (None when there is nothing to do with a batch: it is
        dropped, as a bare loop does), and whether it times the host's wait inside ``next()``."""
        stats = self.stats
        if stats is not None:
            stats.begin_block()
        consume = None if self.consume is stats and stats.idle else self.consume  # (a warm-up may wrap it)
        return consume, stats is not None and stats.waits_on_host

    def _end_epoch(self) -> float:
        """Close the epoch that has just ended; returns when it ended.

        Blocks then hold whole epochs when the epoch is short, or when restarting the workers is a
        real share of it (the median of time-cut blocks would drop the slow one holding the restart).
        Otherwise blocks are cut by time: one block need not last a long epoch."""
        if self.count.position == 0:
            raise TrialFailure("an epoch yielded no batch") from None
        self.iterator = None
        now = time.perf_counter()
        epoch_s = now - self.epoch_started
        self.epoch_times.append(epoch_s)
        self.aligned = self.aligned or epoch_s <= self.align_s or (
            self.restarts and self.startup_s >= RESTART_SHARE * epoch_s)
        return now

    def _end_block(self, start: float, samples: int, batches: int, epochs: int, waited: float,
                   faulted_before: int | None) -> Block:
        """Synchronise the device once; the block ends there, where the next one begins."""
        self.sync()
        self.mark = time.perf_counter()
        wait_s = h2d_bytes = None
        if self.stats is not None:
            wait_s, h2d_bytes = self.stats.end_block(waited)
        end = faulted_bytes()
        faulted = end - faulted_before if end is not None and faulted_before is not None else None
        return Block(samples, batches, self.mark - start, epochs, wait_s, h2d_bytes, faulted)


def faulted_bytes() -> int | None:
    """Bytes of pages this process (every thread) has taken fresh from the kernel so far: its minor
    page faults times the page size. A main process whose allocator hands each freed batch back to the
    kernel faults the next one in anew (``analysis.footprint.fresh_pages``); None where the platform
    does not count faults."""
    if resource is None:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt * PAGE_BYTES


def queued_batches(iterator: Any) -> int | None:
    """Batches the workers have finished that still wait in the loader's queues; None when the loader
    has no workers or this torch keeps them elsewhere (the DataLoader's private state)."""
    try:
        queued = iterator._data_queue.qsize()
        if iterator._worker_result_queue is not iterator._data_queue:  # pin_memory: not pinned yet
            queued += iterator._worker_result_queue.qsize()
        return queued
    except (AttributeError, NotImplementedError, TypeError):
        return None


def ready_batches(iterator: Any) -> int | None:
    """Batches the workers have finished that the main process has not taken yet: those queued, and
    those taken from the queue out of order and held for their turn; None as ``queued_batches``."""
    queued = queued_batches(iterator)
    if queued is None:
        return None
    try:
        return queued + sum(1 for info in iterator._task_info.values() if len(info) == 2)
    except (AttributeError, TypeError):
        return None


class Drained:
    """Whether the start-up backlog is consumed: the batches workers finished ahead while the main
    process awaited the first one (up to ``num_workers x prefetch_factor``). Consuming them runs
    at the main process's pace, not the workers': with 64 workers waiting on storage that read 38%
    above the steady state for seconds. Settled once the backlog is down to half the workers, or
    when it stops shrinking (then the consumer, not the workers, sets the pace and a full queue is
    the steady state), or at ``max_s``."""

    SEGMENT_S = 0.25  # the backlog is judged by its minimum over segments this long

    def __init__(self, meter: Meter, workers: int, max_s: float):
        self.meter, self.limit = meter, max(1, workers // 2)
        self.until = time.perf_counter() + max_s
        self.segment_end = time.perf_counter() + self.SEGMENT_S
        self.low = self.previous_low = math.inf
        self.stalls = 0

    def __call__(self) -> bool:
        iterator = self.meter.loader_iterator
        ready = ready_batches(iterator) if iterator is not None else None
        if ready is None or ready <= self.limit:
            return True
        now = time.perf_counter()
        self.low = min(self.low, ready)
        if now >= self.segment_end:
            self.stalls = self.stalls + 1 if self.low >= self.previous_low else 0
            self.previous_low, self.low, self.segment_end = self.low, math.inf, now + self.SEGMENT_S
        return self.stalls >= 2 or now >= self.until


def measure(
    spec: LoadedSpec,
    config: TrialConfig,
    device: torch.device,
    timing: Timing,
    options: LoaderOptions,
    emit: Callable[[str, Any], None],
    measured: Callable[[], None] = lambda: None,
    workload: StepWorkload | None = None,
    shard: Shard | None = None,
) -> None:
    """Run one trial in this process, reporting ``("startup", s)``, ``("warmup", Block)``,
    ``("block", Block)`` through ``emit`` as they happen, so a crash later loses none of them.
    ``measured`` is called after the last block, with the loader and its workers still alive.
    ``workload``: the synthetic step of ``--step-ms`` instead of the spec's ``step``.
    With a ``shard`` this process is one rank of several, measuring over the window they share."""
    deadline = time.perf_counter() + timing.max_s
    cuda = device.type == "cuda"
    if cuda:
        open_device(device)
        emit("device", gpu.identity(device))  # the parent samples its utilisation through NVML
    meter = build_meter(spec, config, device, timing, options, workload, shard)
    if shard is not None:
        shard.barrier("start")  # every rank starts its workers at once, as training does
    emit("startup", meter.startup())
    first = batch_info(meter.pending)
    emit("batch", first)
    unmoved = unmoved_note(meter.pending) if config.transfer != "none" else None
    if unmoved:  # nothing reaches the device: the copy's figures would silently read 0
        emit("warning", unmoved)
    warm_up(meter, spec, config, timing, deadline, emit)
    enough = timing.enough
    if shard is not None:  # every rank measures the same window, whatever its own spread
        shard.barrier("warmup")
        meter.mark = time.perf_counter()  # the window starts now on every rank; the wait is not timed
        deadline = min(deadline, meter.mark + shard.window_s)
        enough = whole_window
    finish_trial(partial(timed_blocks, meter, config, timing, deadline, enough, emit), device, config, first, emit,
                 measured, load=shard is None, before_measured=(lambda: shard.barrier("window")) if shard else None)
    del meter  # with it the loader: shut workers down inside the trial, not in the interpreter's exit


def finish_trial(timed: Callable[[], None], device: torch.device, config: TrialConfig, first: BatchInfo | None,
                 emit: Callable[[str, Any], None], measured: Callable[[], None], load: bool = True,
                 before_measured: Callable[[], None] | None = None) -> None:
    """The timed part of a trial (``timed``) and what every trial reports after it: who else kept the
    cores busy meanwhile (``load``: not for a rank, whose peers would read as outside load), the
    device's memory (``first``: the first batch, for its pinned bytes), then ``measured`` with the
    loaders still alive for the parent's memory sample."""
    meter = LoadMeter() if load else None
    if meter is not None:
        meter.start()
    timed()
    reading = meter.stop() if meter is not None else None
    if reading is not None:
        emit("load", reading)
    if device.type == "cuda":
        emit("gpu_memory", gpu.usage(device, config, first))
    if before_measured is not None:
        before_measured()
    measured()


def batch_sizes(count: SampleCounter, batch_size: int, emit: Callable[[str, Any], None], warn: bool = True) -> None:
    """A loader that batches by itself: the sizes of the batches timed, and (``warn``) a warning when
    they are all of one size other than the batch size declared for it. Batches that vary by design (a
    token budget) have no one size to declare: they are labelled by their mean, and nothing is said."""
    sizes = count.sizes.result() if count.sizes is not None else None
    if sizes is None:
        return
    emit("batch_sizes", sizes)
    if warn and count.declared and not sizes.varying and sizes.largest != batch_size:
        n = sizes.largest
        emit("warning", f"the loader's batches hold {n} samples, not the batch size {batch_size} the scan was given: "
                        f"samples/s counts what arrives, but labels and check's calibration use {batch_size}; set batch_size to {n}")


def build_meter(spec: LoadedSpec, config: TrialConfig, device: torch.device, timing: Timing,
                options: LoaderOptions, workload: StepWorkload | None, shard: Shard | None,
                whole_epochs: bool = True) -> Meter:
    """The trial's consumer and loader (a prefetcher over it with the ``stream`` strategy) in a Meter;
    the device's memory peaks count from here, once both are built. ``whole_epochs`` False: blocks are
    cut by time even where an epoch is short or restarts its workers (the race's turns must stay
    short and alike, whatever the loaders' epochs)."""
    consumer = make_consumer(spec, config, device, workload.build(device) if workload else None)
    loader = make_loader(spec, config, options, shard)
    shard_length = len(loader.sampler) if shard is not None and not spec.iterable and not spec.own_order else None
    source = loader
    if config.transfer == "stream":  # the closing device sync of each block also waits for its pending copy
        source = consumer.source = TrialPrefetcher(loader, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        gpu.reset_peaks(device)
    return Meter(source, consumer, device_sync(device),
                 SampleCounter(spec, config, options.drop_last, shard_length),
                 ALIGN_EPOCHS_UP_TO * timing.block_s if whole_epochs else -math.inf,
                 restarts=whole_epochs and config.num_workers > 0 and not config.persistent_workers)


def warm_up(meter: Meter, spec: LoadedSpec, config: TrialConfig, timing: Timing, deadline: float,
            emit: Callable[[str, Any], None]) -> None:
    """The warm-up phase, discarded: at least one batch per prefetch slot, and until the start-up
    backlog is consumed (``Drained``). An IterableDataset over several workers is also checked,
    untimed, for workers that all yield the same samples."""
    warm_batches = config.num_workers * (config.prefetch_factor or DEFAULT_PREFETCH) + 1
    consume, detector = meter.consume, None
    if spec.iterable and config.num_workers > 1:  # look at the first batch of each worker, untimed
        detector = DuplicateDetector(config.num_workers)
        meter.consume = lambda batch: (detector.see(batch), consume(batch))
    drain_s = max(0.0, min(timing.max_s * DRAIN_SHARE, deadline - time.perf_counter()))
    emit("warmup", meter.phase(timing.warmup_s, warm_batches, deadline, Drained(meter, config.num_workers, drain_s)))
    meter.consume = consume
    if detector is not None and detector.duplicated:
        emit("warning", detector.warning())


def whole_window(rates: list[float]) -> bool:
    """A rank never stops early on its own spread: every rank measures the whole shared window."""
    return False


def timed_blocks(meter: Meter, config: TrialConfig, timing: Timing, deadline: float,
                 enough: Callable[[list[float]], bool], emit: Callable[[str, Any], None]) -> None:
    """Timed blocks until ``enough`` of them or the deadline, then the CPU that the loader and its
    workers used over them."""
    rates: list[float] = []
    # many workers deliver in bursts: a block spans at least two batches per worker, so its rate is
    # not just the luck of which burst fell inside it
    block_batches = max(1, 2 * config.num_workers)
    if meter.count.sizes is not None:
        meter.count.sizes = SizeTally()  # the batches timed, not the warm-up's
    cpu_start = tree_cpu_s(meter.loader_iterator)  # twice per trial, outside the hot loop and the blocks:
    meter.mark = time.perf_counter()  # reading 64 workers' counters takes milliseconds, which are not the loader's
    while not enough(rates) and time.perf_counter() < deadline:
        block = meter.phase(timing.block_s, block_batches, deadline)
        if block.batches:
            rates.append(block.rate)
            emit("block", block)
    batch_sizes(meter.count, config.batch_size, emit)
    cpu_end = tree_cpu_s(meter.loader_iterator)
    if (rates and cpu_start[0] is not None and cpu_end[0] is not None and cpu_start[1] == cpu_end[1]
            and len(cpu_end[1]) == config.num_workers):
        emit("cpu", cpu_end[0] - cpu_start[0])  # the same workers throughout: none of their CPU went uncounted
