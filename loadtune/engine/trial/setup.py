"""What a trial measures with: how long it measures (``Timing``), the DataLoader arguments that are
not searched, a rank's shard, and the loader and consumer built for one config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from loadtune.engine.loaders import LoaderError
from loadtune.engine.spec import LoadedSpec
from loadtune.engine.trial.idle import GPUIdleClock
from loadtune.engine.trial.pagecache import CacheSetting
from loadtune.engine.trial.prefetch import CUDAPrefetcher
from loadtune.engine.trial.transfer import move_to, nbytes_of
from loadtune.model.config import TrialConfig
from loadtune.model.estimate import estimate
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
    # the page cache's state the dataset's files are timed in (None: the dataset reads no files the scan
    # knows of): each block then counts its bytes from storage, and a cold state is set again at every
    # epoch boundary, untimed, so that no timed sample is read from the cache
    cache: CacheSetting | None = None

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
