"""The state a run was measured in: what beside the knobs moved its speed, read off its own record.

A config's speed depends on more than its knobs: its allocator's state (whether its main process
takes each batch's pages fresh from the kernel, which glibc decides per process), the page cache's
(whether the dataset's files came from memory or from storage) and the load other processes put on
the machine. Each run records what it saw: its blocks' pages taken fresh (``Block.faulted_bytes``)
and bytes fetched from storage (``Block.storage_bytes``), and its ``LoadReading``. This module reads
them into one ``RunState`` and says which runs may be compared: never two in different page-cache
states, and a config whose runs took pages in two states of its allocator has no single speed (its
figures are a range, ``analysis.footprint``, ``analysis.recommend``).

The scan sets the page cache's state (``engine/storage.py``) and measures outside load; the
allocator's state it sets only where a config carries the heap setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadtune.analysis.load import excess_cores
from loadtune.model.storage import COLD, WARM
from loadtune.model.trial import Trial

MIXED = "mixed"
COLD_SHARE = 0.5  # a run that fetched at least this share of the bytes a sample holds from storage read cold
WARM_SHARE = 0.1  # ...and at most this share: warm; between the two, mixed
# Of each batch's bytes, the share a main process that collates its own batches takes fresh from the
# kernel, above which its allocator hands freed batches back: about 1% in a process that reuses them
# (the loop's own small allocations), 20-100% in one that does not (benchmarks/RESULTS.md, "Fresh pages")
FRESH_SHARE = 0.10
# How much more of a batch one run took fresh than another for the two to be two states of the allocator:
# a run's blocks agree within a few percent of a batch; glibc giving the samples' pages back after each
# batch, or keeping them, moved a run by the samples' bytes (96 or 192 MiB per 96 MiB batch,
# benchmarks/RESULTS.md, "Fresh pages")
REGIME_SHARE = 0.25


@dataclass(frozen=True)
class ReadFigures:
    """What a run read, per sample: fetched from storage, and returned by ``read()`` (cached or not)."""

    storage: float
    read: float


def read_figures(trials: list[Trial]) -> ReadFigures | None:
    """Bytes per sample over the runs' timed blocks; None where they were not counted."""
    blocks = [b for t in trials if t.ok for b in t.blocks if b.storage_bytes is not None]
    samples = sum(b.samples for b in blocks)
    if not samples:
        return None
    return ReadFigures(sum(b.storage_bytes for b in blocks) / samples, sum(b.read_bytes or 0 for b in blocks) / samples)


def fresh_share(trial: Trial, batch_bytes: int | None) -> float | None:
    """The share of a batch's bytes the run's main process took fresh from the kernel per batch (the
    median over its blocks); None where faults or the batch's bytes were not recorded."""
    if not trial.ok or not batch_bytes or batch_bytes <= 0:
        return None
    shares = sorted(b.faulted_bytes / b.batches / batch_bytes for b in trial.blocks if b.faulted_bytes is not None and b.batches)
    if not shares:
        return None
    mid = len(shares) // 2
    return shares[mid] if len(shares) % 2 else (shares[mid - 1] + shares[mid]) / 2


def cache_state(trial: Trial, sample_bytes: float | None) -> str | None:
    """The page-cache state a run read in: cold where it fetched most of what a sample holds on storage,
    warm where next to none, mixed between; None where nothing was counted or a sample's size is unknown."""
    figures = read_figures([trial])
    if figures is None or not sample_bytes:
        return None
    share = figures.storage / sample_bytes
    return COLD if share >= COLD_SHARE else WARM if share <= WARM_SHARE else MIXED


@dataclass(frozen=True)
class RunState:
    """What a run was measured in, beside its knobs (None: not recorded, or not applicable)."""

    fresh: float | None  # share of each batch its main process took fresh from the kernel (the allocator's state)
    cache: str | None  # "warm" | "cold" | "mixed": how it read the dataset's files (the page cache's state)
    outside: float | None  # cores' worth of CPU other processes took while it was timed (outside load)


def state_of(trial: Trial, batch_bytes: int | None = None, sample_bytes: float | None = None) -> RunState:
    """A run's states, from its own record. ``batch_bytes``: a batch's size (the allocator's share is
    counted only for a loader without workers, whose main process collates each batch itself)."""
    fresh = fresh_share(trial, batch_bytes) if trial.config.num_workers == 0 else None
    return RunState(fresh, cache_state(trial, sample_bytes), excess_cores(trial.load) if trial.load else None)


def comparable(a: RunState, b: RunState) -> bool:
    """Two runs may be compared: they read the dataset in one page-cache state (mixed or uncounted
    compares with any), and, where both took pages fresh, in one state of their allocator."""
    if a.cache in (WARM, COLD) and b.cache in (WARM, COLD) and a.cache != b.cache:
        return False
    return not allocator_split([s.fresh for s in (a, b) if s.fresh is not None])


def allocator_split(shares: list[float]) -> bool:
    """Runs whose allocator was in two states that no knob of the scan set: some took each batch's pages
    fresh (``FRESH_SHARE`` or more) and others did not (under half that), or all took some fresh but
    ``REGIME_SHARE`` of a batch more in some runs than in others (glibc gave the samples' pages back
    after each batch in some processes and kept them in others)."""
    if not shares or max(shares) < FRESH_SHARE:
        return False
    return min(shares) < FRESH_SHARE / 2 or max(shares) - min(shares) >= REGIME_SHARE


def off_state(trial: Trial, state: str | None, sample_bytes: float | None) -> bool:
    """The run read in the other page-cache state than the scan set (a warm run of a cold scan: the drop
    did not hold; a cold run of a warm scan: the cache lost the files meanwhile)."""
    got = cache_state(trial, sample_bytes)
    return state is not None and got in (WARM, COLD) and got != state
