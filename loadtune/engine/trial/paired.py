"""Two loaders timed in turn in one process: ``check``'s config beside its shaped calibration.

Both loaders are built with the same knobs, consumer and device, and live in one trial process. Their
timed blocks alternate (A B, B A, A B, ...), so that another process's load, a machine whose pace
changes every few seconds, or drift within the round hit both alike: the ratio of neighbouring blocks
measures the dataset against a fixed workload, not the machine's mood. Trials of their own, seconds
apart, could not: a neighbour's job that starts between them moves one and not the other.

While one loader runs, the other's workers finish what they were asked for and wait; before its next
timed block, the batches finished ahead are consumed untimed, so every block times steady-state work.
A loader whose short epochs are measured whole rests at an epoch boundary and has no backlog.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from loadtune.engine.spec import LoadedSpec
from loadtune.engine.trial import gpu
from loadtune.engine.trial.load import LoadMeter
from loadtune.engine.trial.measure import (
    LoaderOptions,
    Meter,
    Timing,
    build_meter,
    open_device,
    ready_batches,
    warm_up,
)
from loadtune.engine.trial.transfer import batch_info
from loadtune.engine.trial.workload import StepWorkload
from loadtune.model.config import TrialConfig

MIN_PAIRS = 2  # block pairs per paired trial at least: one pair has no spread of its own


def pairs_for(timing: Timing) -> int:
    """Block pairs a paired trial times: half as many as a trial of one loader has blocks, each block
    half as long (short neighbours share more of the machine's moods). A round is short, since what
    limits a check is the spread between rounds (fresh processes), which only more rounds narrow."""
    return max(MIN_PAIRS, timing.blocks // 2)


def measure_alternating(
    spec: LoadedSpec,
    other: LoadedSpec,
    config: TrialConfig,
    device: torch.device,
    timing: Timing,
    options: LoaderOptions,
    emit: Callable[[str, Any], None],
    config_first: bool = True,
    workload: StepWorkload | None = None,
    measured: Callable[[], None] = lambda: None,
) -> None:
    """Time ``spec``'s loader and ``other``'s in alternating blocks: ``("block", Block)`` for the
    first, ``("calibration", Block)`` for the second, a pair at a time, the order of each pair the
    reverse of the one before (``config_first``: the first pair's)."""
    deadline = time.perf_counter() + timing.max_s
    if device.type == "cuda":
        open_device(device)
    meters = [build_meter(s, config, device, timing, options, workload, None) for s in (spec, other)]
    emit("startup", meters[0].startup())
    meters[1].startup()
    first = batch_info(meters[0].pending)
    emit("batch", first)
    warm_up(meters[0], spec, config, timing, deadline, emit)
    warm_up(meters[1], other, config, timing, deadline, lambda kind, payload: None)
    load = LoadMeter()
    load.start()
    kinds = ("block", "calibration")
    block_s, block_batches = timing.block_s / 2, max(1, 2 * config.num_workers)
    for i in range(pairs_for(timing)):
        order = (0, 1) if (i % 2 == 0) == config_first else (1, 0)
        for which in order:
            resume(meters[which], deadline)
            emit(kinds[which], meters[which].phase(block_s, block_batches, deadline))
        if time.perf_counter() > deadline:
            break
    reading = load.stop()
    if reading is not None:
        emit("load", reading)
    if device.type == "cuda":
        emit("gpu_memory", gpu.usage(device, config, first))
    measured()
    del meters  # with them the loaders: workers shut down inside the trial


def resume(meter: Meter, deadline: float) -> None:
    """Consume, untimed, the batches the loader's workers finished ahead while it rested; the next
    phase is timed from where this one ends."""
    meter.mark = time.perf_counter()
    if meter.aligned and meter.iterator is None:  # resting at an epoch boundary: nothing was done ahead
        return
    iterator = meter.loader_iterator
    ahead = ready_batches(iterator) if iterator is not None else None
    meter.phase(0.0, max(1, ahead or 0), deadline)
