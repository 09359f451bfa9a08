"""The ``Meter``, which drives a trial's loader through phases and times them, and its counters: the
samples of each batch, the sizes of a loader's own batches, the pages faulted in, the batches
the workers finished ahead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader

try:
    import resource

    PAGE_BYTES = resource.getpagesize()
except ImportError:  # Windows: no page-fault counts
    resource = None

from loadtune.engine.loaders import start
from loadtune.engine.spec import LoadedSpec
from loadtune.engine.trial import gpu
from loadtune.engine.trial.cpu import worker_pids
from loadtune.engine.trial.pagecache import CacheSetting, IOCount, WorkerRelease, answer_file, tree_io
from loadtune.engine.trial.setup import (Consumer, LoaderOptions, Shard, Timing, TrialFailure, TrialPrefetcher, device_sync,
                                         make_consumer, make_loader)
from loadtune.engine.trial.transfer import batch_size_of
from loadtune.engine.trial.workload import StepWorkload
from loadtune.model.batch import BatchSizes
from loadtune.model.config import TrialConfig
from loadtune.model.settings import BURSTS
from loadtune.model.trial import Block

ALIGN_EPOCHS_UP_TO = 4  # epochs up to this many block lengths are measured whole
RESTART_SHARE = 0.02  # ...and longer ones too when restarting the workers costs this share of an epoch


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

    def forget(self, samples: int, batches: int) -> None:
        """A block dropped untimed: its batches leave the mean (the sizes seen stay seen)."""
        self.samples -= samples
        self.batches -= batches

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


def burst_batches(workers: int) -> int:
    """The fewest batches a timed block (a trial's or a race turn's) holds: ``BURSTS`` rounds of one
    batch per worker. Workers deliver in bursts, and a block of one or two rounds times the luck of
    where its ends fell among them: loaders of 16-64 workers waiting on jittery storage read blocks
    7-15% apart (median deviation) in rounds of two and 4-7% in rounds of four, and a race of two
    identical 64-worker loaders ended at +-19% instead of +-5% (benchmarks/RESULTS.md, "Many workers")."""
    return max(1, BURSTS * workers)


class Meter:
    """Drives the loader through phases of a trial and times them."""

    def __init__(self, loader: DataLoader, consume: Callable, sync: Callable, count: SampleCounter,
                 align_s: float = math.inf, restarts: bool = False, cache: CacheSetting | None = None,
                 answers: str | None = None):
        self.loader, self.consume, self.sync, self.count = loader, consume, sync, count
        self.cache = cache  # each block's bytes from storage and from read(), main process and workers
        # cold: the files are dropped again at every epoch boundary, untimed, so that the next epoch's
        # samples, read in the epoch before, come from storage as in training's first epoch
        self.cold = cache is not None and cache.state == "cold"
        self.answers = answers  # cold, with workers: where they answer a release (``WorkerRelease``)
        self.paused = 0.0  # seconds of the current block spent setting the cold state, not the loader's
        self.align_s = align_s  # epochs up to this long are measured whole
        self.restarts = restarts  # every epoch starts its workers again (num_workers > 0, not persistent)
        self.startup_s = 0.0
        self.iterator = None
        self.pending = None
        self.mark = 0.0
        self.aligned = False  # set once a short epoch has ended: phases then end at epoch boundaries
        self.began_inside = False  # the current phase began inside an epoch
        self.cut = False  # the last phase ended at its deadline, before its time, batches or epochs were whole
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

    def mid_epoch(self, block: Block) -> bool:
        """Whether ``block`` was the phase that found the epochs short: it began mid-epoch (cut by
        time before any epoch had ended short: a slow first epoch, a stall) and holds part of one,
        which a whole-epoch measurement must not mix in."""
        return self.aligned and self.began_inside and block.epochs > 0

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
        benchmarks/archetypes/tiny_dataset.py). A phase still lasts ``min_s`` at least. The phase in
        which the first short epoch ends began inside an epoch, cut by time, and holds part of one
        (``mid_epoch``); every later phase starts at an epoch boundary."""
        clock = time.perf_counter
        start, faulted_before, io_before = self.mark, faulted_bytes(), self._io()
        whole = self.epochs_for(min_s) if self.aligned else 0  # epochs this phase spans
        self.began_inside = self.iterator is not None and self.pending is None  # (the first batch pends at an epoch's start)
        samples = batches = epochs = 0
        waited = asked = 0.0  # host time inside next(): what a CPU consumer waits for data
        consume, time_waits = self._begin_block()
        self.cut = False
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
                    if self.cold:
                        self.paused += self._set_cold()
                    done = batches >= min_batches and epochs >= whole and now - start >= min_s
                    if done or now > deadline:
                        self.cut = not done
                        break
                    continue
            if consume is not None:
                consume(batch)
            samples += self.count(batch)
            batches += 1
            now = clock()
            done = (not self.aligned and batches >= min_batches and now - start >= min_s
                    and batches % multiple == 0 and settled())
            if done or now > deadline:
                self.cut = not done
                break
        return self._end_block(start, samples, batches, epochs, waited, faulted_before, io_before)

    def _set_cold(self) -> float:
        """Drop the files between two epochs, where no worker is busy (the next epoch has not been asked
        for); returns how long it took, which the block does not count."""
        began = time.perf_counter()
        self.release()
        self.cache.before_run()
        return time.perf_counter() - began

    def release(self) -> None:
        """Between timed blocks in a cold state: this process and the loader's live workers forget their
        mappings of the dataset's files, so that the next drop leaves none of their pages cached."""
        if self.cache is not None:
            self.cache.release(worker_pids(self.loader_iterator) if self.answers else (), self.answers)

    def _io(self) -> IOCount | None:
        """The tree's read counters now (``count_io``): outside the hot loop, a /proc read per worker."""
        return tree_io(worker_pids(self.loader_iterator)) if self.cache is not None else None

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
                   faulted_before: int | None, io_before: IOCount | None = None) -> Block:
        """Synchronise the device once; the block ends there, where the next one begins."""
        self.sync()
        self.mark = time.perf_counter()
        start += self.paused  # the drops between epochs are the scan's time, not the loader's
        self.paused = 0.0
        wait_s = h2d_bytes = None
        if self.stats is not None:
            wait_s, h2d_bytes = self.stats.end_block(waited)
        end = faulted_bytes()
        faulted = end - faulted_before if end is not None and faulted_before is not None else None
        io_after = self._io() if io_before is not None else None
        io = io_after - io_before if io_after is not None else None
        return Block(samples, batches, self.mark - start, epochs, wait_s, h2d_bytes, faulted,
                     io.storage if io else None, io.read if io else None)


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


def build_meter(spec: LoadedSpec, config: TrialConfig, device: torch.device, timing: Timing,
                options: LoaderOptions, workload: StepWorkload | None, shard: Shard | None,
                whole_epochs: bool = True) -> Meter:
    """The trial's consumer and loader (a prefetcher over it with the ``stream`` strategy) in a Meter;
    the device's memory peaks count from here, once both are built. ``whole_epochs`` False: blocks are
    cut by time even where an epoch is short or restarts its workers (the race's turns must stay
    short and alike, whatever the loaders' epochs)."""
    consumer = make_consumer(spec, config, device, workload.build(device) if workload else None)
    loader = make_loader(spec, config, options, shard)
    answers = None
    if timing.cache is not None and timing.cache.state == "cold" and config.num_workers > 0:
        answers = answer_file()
        loader.worker_init_fn = WorkerRelease(timing.cache, answers, loader.worker_init_fn)
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
                 restarts=whole_epochs and config.num_workers > 0 and not config.persistent_workers,
                 cache=timing.cache, answers=answers)
