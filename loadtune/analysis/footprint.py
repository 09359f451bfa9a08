"""What a config costs in host memory, as pure functions of what the trials sampled.

``memory.py`` samples the trial's process tree from outside (PSS: shared pages split between their
sharers). Here: the growth during a trial, measured from the sample taken when the workers were up;
copy-on-write growth, which workers cause when they touch Python objects the dataset holds (every
read writes a reference count, so the page holding the object gets copied into that worker); the
/dev/shm segments of batches in flight; an estimate of pinned memory; the ``--max-memory`` limit; and
a main process that takes each batch's memory fresh from the kernel (``fresh_pages``).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

from loadtune.analysis import state
from loadtune.model.config import DEFAULT_PREFETCH, HEAP_MIN_BATCH, HEAP_TRIM, TrialConfig, heap_for
from loadtune.model.results import ConfigResult, ScanResult
from loadtune.model.trial import MemoryUsage, Trial

MiB = 2**20
GROWTH_NOISE = 16 * MiB  # growth below this is the sampling's and the allocator's noise, not a trend
# Growth per worker beyond the in-process loader's that is called copy-on-write. A forked worker copies
# some of the interpreter's own pages whatever the dataset holds (a garbage-collector pass writes the
# header of every tracked object): up to ~20 MiB per worker with torch imported, seen on a loaded
# 2-core machine for a dataset held in one tensor. Below twice that, growth says nothing about the data.
COW_PER_WORKER = 40 * MiB
UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str | int | float) -> int:
    """``"8G"``, ``"512M"``, ``"1.5GiB"``, ``"2048"`` (bytes) -> bytes. Binary units: G is GiB."""
    if isinstance(text, bool):
        raise ValueError(f"expected a size like 8G or 512M, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", str(text), re.IGNORECASE)
        if not match:
            raise ValueError(f"expected a size like 8G, 512M or 1.5GiB, got {text!r}")
        value = float(match.group(1)) * UNITS[match.group(2).lower()]
    if value <= 0:
        raise ValueError(f"a memory limit must be more than 0, got {text!r}")
    return int(value)


def size_text(n: int | float) -> str:
    """``1.3 GiB``, ``412 MiB``: for sentences (the table has its own compact form)."""
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    if n < MiB:
        return f"{n / 2**10:.0f} KiB"
    return f"{n / MiB:.0f} MiB"


@dataclass(frozen=True)
class Growth:
    """Memory gained from the sample taken when the workers were up to the highest after it."""

    bytes: int
    seconds: float
    workers: int

    @property
    def significant(self) -> bool:
        """Growth beyond the sampling's and the allocator's noise."""
        return self.bytes >= GROWTH_NOISE

    @property
    def per_worker(self) -> float:
        return self.bytes / self.workers if self.workers else float(self.bytes)


def growth(memory: MemoryUsage | None, workers: int) -> Growth | None:
    """None without at least one sample after the workers were up."""
    if memory is None or len(memory.samples) < 2:
        return None
    start = memory.startup_index if memory.startup_index is not None else 0
    if start >= len(memory.samples) - 1:
        return None
    t0, base = memory.samples[start]
    t1, top = max(memory.samples[start + 1:], key=lambda s: s[1])
    return Growth(max(0, top - base), t1 - t0, workers)


def trial_growth(trial: Trial) -> Growth | None:
    return growth(trial.memory, trial.config.num_workers)


def config_growth(config: ConfigResult) -> Growth | None:
    """The largest growth of a config's runs (each run starts its workers afresh)."""
    grown = [g for t in config.trials if t.ok and (g := trial_growth(t)) is not None]
    return max(grown, key=lambda g: g.bytes) if grown else None


def copy_on_write(configs: list[ConfigResult], short: bool = False) -> str | None:
    """A note when memory grew with the workers beyond the in-process loader's growth: workers copying
    the pages of Python objects they touch. None when nothing grew beyond the noise. ``short``: the
    finding and the cure in a line."""
    in_process = [g.bytes for c in configs if c.ok and not c.config.num_workers and (g := config_growth(c))]
    reference = max(in_process, default=0)
    suspects = []
    for c in configs:
        g = config_growth(c) if c.ok and c.config.num_workers else None
        if g is None:
            continue
        excess = g.bytes - reference
        if excess >= GROWTH_NOISE and excess / c.config.num_workers >= COW_PER_WORKER:
            suspects.append((excess / c.config.num_workers, c, g))
    if not suspects:
        return None
    per_worker, worst, g = max(suspects, key=lambda s: (s[1].config.num_workers, s[0]))
    if short:
        return (f"memory grows with the workers ({worst.config.label()}: about {size_text(per_worker)} a worker, copy-on-write "
                "of Python objects): hold the data in numpy arrays or tensors")
    return (
        f"memory grew during the trials with workers: {worst.config.label()} gained {size_text(g.bytes)} in "
        f"{g.seconds:.1f} s, about {size_text(per_worker)} per worker beyond the in-process loader's growth. "
        "That is copy-on-write: each worker starts sharing the dataset's pages with the main process, and "
        "copies every page holding a Python object it touches (reading an object writes its reference count). "
        "Over a long epoch every worker ends up with its own copy. Hold the data in numpy arrays or torch "
        "tensors (one object each, whose pages stay shared), or in shared arrays, rather than in lists or "
        "dicts of Python objects"
    )


def fresh_share(config: ConfigResult) -> float | None:
    """The share of a batch's bytes that the main process took fresh from the kernel per batch (the
    median over its blocks), for a config without workers: it collates its batches itself. None with
    workers (their batches arrive in shared memory, mapped anew by design) or where page faults or the
    batch's bytes were not recorded."""
    batch = config.batch
    if config.config.num_workers or batch is None or batch.nbytes <= 0:
        return None
    pooled = Trial(config.config, "ok", blocks=[b for t in config.trials if t.ok for b in t.blocks])
    return state.fresh_share(pooled, batch.nbytes)


def takes_fresh_pages(config: ConfigResult) -> bool:
    """Its main process faulted in at least ``state.FRESH_SHARE`` of every batch anew, a batch glibc could map
    (``HEAP_MIN_BATCH`` or more): its speed rests on the allocator's state too."""
    share = fresh_share(config)
    big = config.batch is not None and config.batch.nbytes >= HEAP_MIN_BATCH
    return config.ok and big and share is not None and share >= state.FRESH_SHARE


def run_shares(config: ConfigResult) -> list[float]:
    """Each of its runs' share of a batch taken fresh (``fresh_share``), where recorded."""
    return [s for t in config.trials if t.ok and (s := fresh_share(ConfigResult(config.config, [t]))) is not None]


def fault_regimes(config: ConfigResult) -> bool:
    """Its runs took pages in two states of its allocator that no knob of the scan set
    (``analysis.state.allocator_split``), for a batch glibc could map (``HEAP_MIN_BATCH`` or more)."""
    if config.batch is None or config.batch.nbytes < HEAP_MIN_BATCH:
        return False
    return state.allocator_split(run_shares(config))


def fresh_text(config: ConfigResult) -> str:
    """What it took fresh from the kernel per batch, run by run: one figure where its runs agree, else
    the range (the states of its allocator ``fault_regimes`` tells apart)."""
    shares, nbytes = run_shares(config), config.batch.nbytes if config.batch is not None else 0
    if not shares or nbytes <= 0:
        return f"{config.config.label()} took its batches' pages fresh from the kernel"
    low, high = min(shares), max(shares)
    if not fault_regimes(config):
        return f"{config.config.label()} took {size_text(statistics.median(shares) * nbytes)} of fresh pages from the kernel per batch"
    return (f"{config.config.label()} took {size_text(low * nbytes)} to {size_text(high * nbytes)} of fresh pages from "
            "the kernel per batch from one run to the next")


def fresh_page_takers(configs: list[ConfigResult]) -> list[tuple[float, ConfigResult]]:
    """The configs that take fresh pages (``takes_fresh_pages``), with the share of a batch, the
    largest first."""
    hits = [(fresh_share(c), c) for c in configs if takes_fresh_pages(c)]
    return sorted(hits, key=lambda h: -h[0])


def fresh_pages(configs: list[ConfigResult], short: bool = False) -> str | None:
    """A note when a config without workers faulted in a large share of every batch anew: its speed
    then depends on the C allocator's state too, and on what a page fault costs (on a virtual machine,
    what the host does with the guest's memory); and how to keep batches in the heap. ``short``: the
    finding and the two variables in a line."""
    hits = fresh_page_takers(configs)
    if not hits:
        return None
    share, worst = hits[0]
    nbytes = worst.batch.nbytes
    threshold = heap_for(nbytes)
    others = f" (also {', '.join(c.config.label() for _, c in hits[1:])})" if len(hits) > 1 else ""
    if short:
        return (f"{worst.config.label()}{others} takes {size_text(share * nbytes)} of fresh pages a batch: export "
                f"MALLOC_MMAP_THRESHOLD_={threshold} MALLOC_TRIM_THRESHOLD_={HEAP_TRIM * threshold} keeps batches in the heap")
    return (
        f"{worst.config.label()}{others}: its main process took {size_text(share * nbytes)} of fresh pages from the "
        f"kernel per batch ({share:.0%} of the batch's {size_text(nbytes)}). Its allocator gave freed memory back "
        "and faulted it in anew for the next batch (glibc maps an allocation over 32 MiB afresh every time, and trims its "
        "heap after smaller ones depending on the process's history), so this config's speed depends on the "
        "allocator's state too, and on what a page fault costs, which on a virtual machine changes with the host. "
        f"With glibc, MALLOC_MMAP_THRESHOLD_={threshold} MALLOC_TRIM_THRESHOLD_={HEAP_TRIM * threshold} in the training "
        "job's environment keep batches in the heap (set both: setting one alone fixes the other at its small "
        "default, and batches come fresh again); or preload jemalloc or tcmalloc"
    )


def pinned_estimate(config: TrialConfig, batch_bytes: int) -> int:
    """Pinned host memory of a config, estimated: the batches in flight (prefetch x workers, plus the
    one being consumed) times the bytes of a batch. An estimate: the pinning allocator caches blocks."""
    if not config.pin_memory or batch_bytes <= 0:
        return 0
    in_flight = (config.prefetch_factor or DEFAULT_PREFETCH) * config.num_workers + 1 if config.num_workers else 1
    return in_flight * batch_bytes


def memory_limit(result: ScanResult) -> int | None:
    """The scan's ``--max-memory`` in bytes, or None."""
    return result.settings.options.max_memory


def over_limit(configs: list[ConfigResult], limit: int | None) -> list[ConfigResult]:
    """Configs whose measured peak exceeds ``limit`` (unmeasured memory is not excluded: unknown is not over)."""
    if not limit:
        return []
    return [c for c in configs if c.memory is not None and c.memory.peak_bytes > limit]


def all_over_limit(result: ScanResult) -> bool:
    """Every measured config exceeds ``--max-memory``: why there is no recommendation."""
    over = over_limit(result.configs, memory_limit(result))
    return bool(over) and len(over) == len([c for c in result.configs if c.ok])
