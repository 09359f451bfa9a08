"""Timing the live training loop. The loop asks for a batch, trains on it, asks for the next: the
time between two requests is the real step plus the wait for data, and the wait is the part spent
inside the loader. A window is one config's stretch of that loop: its start-up (``iter`` and the wait
for its first batch), a warm-up of the batches its workers made while starting (discarded: they
arrive faster than the config can make them), then timed blocks, as in a scan's trial."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from loadtune.engine.trial.pagecache import IOCount, family_io
from loadtune.model.config import DEFAULT_PREFETCH, TrialConfig
from loadtune.model.trial import Block, Trial

MIN_BLOCK_BATCHES = 2
MAX_BLOCK_BATCHES = 256
BLOCK_CV = 0.15  # a block holds enough batches that the step's own variation averages down to about this
WARMUP_EXTRA = 2  # batches past the start-up backlog before timing starts


def warmup_batches(config: TrialConfig) -> int:
    """The backlog a config's workers build while it starts (``prefetch_factor`` batches each), then one
    more batch per worker (a couple without workers): until the backlog is consumed the loop runs ahead
    of the config's real pace, and once it is, the workers, started together, deliver in bursts of one
    batch each; timing starts at the end of one."""
    workers = config.num_workers
    return (config.prefetch_factor or DEFAULT_PREFETCH) * workers + max(WARMUP_EXTRA, workers)


def block_batches(steps: Sequence[float], interval: float, block_s: float, workers: int = 0) -> int:
    """Batches per timed block: enough for ``block_s`` seconds at ``interval`` (the config's time per
    batch in its warm-up), and enough that the step's own variation averages out: ``steps`` are the
    per-batch step times seen so far, and a block of n batches varies about cv / sqrt(n), so a step
    with a coefficient of variation cv (its spread against its mean, or the batch's whole interval
    when that is longer) asks for (cv / BLOCK_CV)^2 batches. With ``workers``, at least
    two batches each and whole bursts of one per worker: workers that started together deliver their
    batches together, and a block of a few batches held a burst or a gap (16 workers timed in blocks
    of 9 batches read ±110%)."""
    by_time = math.ceil(block_s / interval) if interval > 0 else MIN_BLOCK_BATCHES
    by_noise = 1
    if len(steps) >= 3:
        scale = max(statistics.fmean(steps), interval)  # a step of next to nothing varies much, and moves no block
        if scale > 0:
            by_noise = math.ceil((statistics.stdev(steps) / scale / BLOCK_CV) ** 2)
    size = max(MIN_BLOCK_BATCHES, min(MAX_BLOCK_BATCHES, max(by_time, by_noise)))
    return whole_bursts(size, workers)


def whole_bursts(size: int, workers: int) -> int:
    """``size`` raised to whole bursts of one batch per worker, two at least (unchanged without workers)."""
    if workers <= 0:
        return size
    return max(2, math.ceil(size / workers)) * workers


@dataclass
class Pending:
    """The stretch being filled: a warm-up or a block."""

    samples: int = 0
    batches: int = 0
    seconds: float = 0.0
    wait: float = 0.0
    # what the training process and its loaders' workers had read when the stretch began: a window that
    # reads from storage (a first epoch) and one that reads from the page cache (a later one) differ
    io: IOCount | None = field(default_factory=family_io)

    def add(self, interval: float, wait: float, samples: int) -> None:
        self.samples += samples
        self.batches += 1
        self.seconds += interval
        self.wait += wait

    def block(self) -> Block:
        now = family_io() if self.io is not None else None
        read = now - self.io if now is not None else None
        return Block(self.samples, self.batches, self.seconds, wait_s=self.wait,
                     storage_bytes=read.storage if read else None, read_bytes=read.read if read else None)


@dataclass
class Window:
    """One config measured on the live loop. ``warmup_left`` batches are discarded first (0: the loader
    was already running at its pace), then blocks of ``block_batches`` batches are timed."""

    config: TrialConfig
    round: int
    warmup_left: int
    opened: float  # clock time the window began (start-up included)
    startup_s: float | None = None
    warmup: Block | None = None
    block_batches: int = 0
    blocks: list[Block] = field(default_factory=list)
    intervals: list[float] = field(default_factory=list)  # this window's warm-up, per batch
    pending: Pending = field(default_factory=Pending)

    def add(self, interval: float, wait: float, samples: int) -> str | None:
        """One batch's interval (request to next request) and the wait inside it. Returns "warmup" when
        the warm-up has just ended (set ``block_batches`` then) and "block" when a block is full."""
        self.pending.add(interval, wait, samples)
        if self.warmup_left > 0:
            self.intervals.append(interval)
            self.warmup_left -= 1
            return "warmup" if self.warmup_left == 0 else None
        if self.block_batches and self.pending.batches >= self.block_batches:
            return "block"
        return None

    def take(self) -> Block:
        """The filled stretch, as a block, and a fresh one begun."""
        block, self.pending = self.pending.block(), Pending()
        return block

    @property
    def typical_interval(self) -> float:
        """Seconds a batch at the config's pace, from the warm-up: with workers, the mean over its last
        burst (one batch per worker, after the backlog, which arrives faster than they make it); without,
        the median batch."""
        workers = self.config.num_workers
        if workers and len(self.intervals) >= workers:
            return statistics.fmean(self.intervals[-workers:])
        return statistics.median(self.intervals) if self.intervals else 0.0

    def trial(self, closed: float) -> Trial:
        return Trial(self.config, "ok", startup_s=self.startup_s, warmup=self.warmup, blocks=list(self.blocks),
                     wall_s=closed - self.opened, round=self.round)
