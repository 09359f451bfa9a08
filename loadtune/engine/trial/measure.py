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

Here the phases run in order and are reported; ``meter.py`` times each phase, and ``setup.py`` holds
what a trial measures with (its timing, loader and consumer).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from loadtune.engine.spec import LoadedSpec
from loadtune.engine.trial import gpu
from loadtune.engine.trial.cpu import tree_cpu_s
from loadtune.engine.trial.faults import DuplicateDetector
from loadtune.engine.trial.load import LoadMeter
from loadtune.engine.trial.meter import Meter, SampleCounter, SizeTally, build_meter, burst_batches, ready_batches
from loadtune.engine.trial.setup import LoaderOptions, Shard, Timing, open_device
from loadtune.engine.trial.transfer import batch_info, unmoved_note
from loadtune.engine.trial.workload import StepWorkload
from loadtune.model.batch import BatchInfo
from loadtune.model.config import DEFAULT_PREFETCH, TrialConfig

DRAIN_SHARE = 0.25  # at most this share of a trial's time goes on consuming the start-up backlog


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
    block_batches = burst_batches(config.num_workers)
    if meter.count.sizes is not None:
        meter.count.sizes = SizeTally()  # the batches timed, not the warm-up's
    cpu_start = tree_cpu_s(meter.loader_iterator)  # twice per trial, outside the hot loop and the blocks:
    meter.mark = time.perf_counter()  # reading 64 workers' counters takes milliseconds, which are not the loader's
    while not enough(rates) and time.perf_counter() < deadline:
        block = meter.phase(timing.block_s, block_batches, deadline)
        if meter.cut and rates:
            break  # cut short by the deadline: its batches need not be whole bursts, and whole blocks exist
        if meter.mid_epoch(block):  # part of an epoch, before the first short one ended: warm-up
            if meter.count.sizes is not None:
                meter.count.sizes.forget(block.samples, block.batches)
        elif block.batches:
            rates.append(block.rate)
            emit("block", block)
    batch_sizes(meter.count, config.batch_size, emit)
    cpu_end = tree_cpu_s(meter.loader_iterator)
    if (rates and cpu_start[0] is not None and cpu_end[0] is not None and cpu_start[1] == cpu_end[1]
            and len(cpu_end[1]) == config.num_workers):
        emit("cpu", cpu_end[0] - cpu_start[0])  # the same workers throughout: none of their CPU went uncounted
