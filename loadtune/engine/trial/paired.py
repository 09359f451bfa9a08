"""Loaders timed in turn in one process: ``check``'s config beside its shaped calibration (and
PyTorch's defaults, unless the config is them).

The config and the calibration are built with the same knobs, consumer and device; the defaults with
PyTorch's own knobs over the same dataset. All live in one trial process, and their timed blocks take
turns (``model.paired.turn_order``: D C K, K C D, D C K, ...), so that another process's load, a
machine whose pace changes every few seconds, or drift within the round hit them alike: the ratio of
neighbouring blocks measures the dataset against a fixed workload (and the config against PyTorch's
defaults), not the machine's mood. Trials of their own, seconds apart, could not: a neighbour's job
that starts between them moves one and not the other.

While one loader runs, the others' workers finish what they were asked for and wait; before its next
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
from loadtune.model.paired import CALIBRATION, CONFIG, DEFAULTS, turn_order

MIN_PAIRS = 2  # turns per paired trial at least: one has no spread of its own
KINDS = {CONFIG: "block", CALIBRATION: "calibration", DEFAULTS: "defaults"}  # the message each loader's blocks go out as


def pairs_for(timing: Timing) -> int:
    """Turns a paired trial times: half as many as a trial of one loader has blocks, each block half
    as long (short neighbours share more of the machine's moods). A round is short, since what limits
    a check is the spread between rounds (fresh processes), which only more rounds narrow."""
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
    defaults: TrialConfig | None = None,
) -> None:
    """Time ``spec``'s loader, ``other``'s and (``defaults``: PyTorch's defaults over ``spec``) a third
    in turns: ``("block", Block)`` for the first, ``("calibration", Block)`` for the second,
    ``("defaults", Block)`` for the third, one block each per turn, each turn the reverse order of the
    one before (``config_first``: the config before the calibration in the first)."""
    deadline = time.perf_counter() + timing.max_s
    if device.type == "cuda":
        open_device(device)
    loaders = {CONFIG: (spec, config), CALIBRATION: (other, config)} | ({DEFAULTS: (spec, defaults)} if defaults else {})
    meters = {role: build_meter(s, c, device, timing, options, workload, None) for role, (s, c) in loaders.items()}
    emit("startup", meters[CONFIG].startup())
    first = batch_info(meters[CONFIG].pending)
    emit("batch", first)
    for role, meter in meters.items():
        if role != CONFIG:
            meter.startup()
        s, c = loaders[role]
        warm_up(meter, s, c, timing, deadline, emit if role == CONFIG else lambda kind, payload: None)
    load = LoadMeter()
    load.start()
    block_s = timing.block_s / 2
    for i in range(pairs_for(timing)):
        for role in turn_order(defaults is not None, (i % 2 == 0) == config_first):
            resume(meters[role], deadline)
            emit(KINDS[role], meters[role].phase(block_s, max(1, 2 * loaders[role][1].num_workers), deadline))
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
