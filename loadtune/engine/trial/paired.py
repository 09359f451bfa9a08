"""Loaders timed in turn in one process (``check``'s config beside its shaped calibration, and
PyTorch's defaults unless the config is them), and the turns' rules that the live processes of
``trial.duet`` (``check --against``, a scan's race) follow too.

Every loader lives in the one trial process, built with its own knobs over the same dataset (the
calibration over a synthetic one), and their timed blocks take turns, so that another process's load,
a machine whose pace changes every few seconds, or drift within the trial hit them alike: the ratio
of neighbouring blocks measures one loader against the other, not the machine's mood. Trials of their
own, seconds apart, could not: a neighbour's job that starts between them moves one and not the other.

While one loader runs, the others rest. Before a resting loader's next timed block, the batches its
workers finished ahead are consumed untimed (``resume``), so every block times steady-state work; after
its block, its workers finish what they were asked for before the next loader's block starts
(``settle``), so a block's rate is its loader's alone, not shared with a neighbour's workers still
busy. A loader whose short epochs are measured whole rests at an epoch boundary and has no backlog.
A scan's race rests its loaders frozen instead (``frozen_turn``): their workers stopped where they
were, nothing made ahead and nothing to wait for.
"""

from __future__ import annotations

import math
import os
import random
import signal
import time
from collections.abc import Callable, Hashable, Iterator
from functools import partial
from typing import Any

import torch

from loadtune.engine.spec import LoadedSpec
from loadtune.engine.trial.cpu import worker_pids
from loadtune.engine.trial.measure import finish_trial, warm_up
from loadtune.engine.trial.meter import Meter, build_meter, burst_batches, queued_batches, ready_batches
from loadtune.engine.trial.setup import LoaderOptions, Timing, open_device
from loadtune.engine.trial.transfer import batch_info
from loadtune.engine.trial.workload import StepWorkload
from loadtune.model.batch import BatchInfo
from loadtune.model.trial import Block
from loadtune.model.config import TrialConfig
from loadtune.model.paired import CALIBRATION, CONFIG, DEFAULTS, alternating, turn_order

MIN_PAIRS = 2  # turns per paired trial at least: one has no spread of its own
KINDS = {CONFIG: "block", CALIBRATION: "calibration", DEFAULTS: "defaults"}  # the message each loader's blocks go out as
SETTLE_POLL_S = 0.002  # how often a loader's in-flight work is looked at after its block
# how long, in blocks (its own, where longer than the turn's time), a loader's workers may take to finish
# their in-flight batches after its block: four workers' eight batches of 64 ms CPU on two cores outlast
# one block, and a cap of one left them computing through the next loader's block (which read up to 3x slow)
SETTLE_BLOCKS = 4
STOP_WAIT_S = 0.1  # how long a frozen loader's workers may take to stop, at most


def pairs_for(timing: Timing) -> int:
    """Turns a paired trial times: half as many as a trial of one loader has blocks, each block half
    as long (short neighbours share more of the machine's moods). A round is short, since what limits
    a check is the spread between rounds (fresh processes), which only more rounds narrow."""
    return max(MIN_PAIRS, timing.blocks // 2)


Loaders = dict[Hashable, tuple[LoadedSpec, TrialConfig]]  # each loader of the trial, by its role


def open_meters(loaders: Loaders, device: torch.device, timing: Timing, options: LoaderOptions,
                workload: StepWorkload | None, deadline: float,
                emit: Callable[[Hashable, str, Any], None],
                whole_epochs: bool = True) -> tuple[dict[Hashable, Meter], dict[Hashable, BatchInfo]]:
    """Every loader built, started (``emit(role, "startup", s)``) and warmed up (``emit(role, "warmup",
    Block)``), one after the other, before any is timed; ``emit(role, "batch", BatchInfo)`` once each.
    Returns the meters and each loader's first batch. ``whole_epochs``: as ``meter.build_meter``."""
    if device.type == "cuda":
        open_device(device)
    meters = {role: build_meter(s, c, device, timing, options, workload, None, whole_epochs) for role, (s, c) in loaders.items()}
    firsts = {}
    for role, meter in meters.items():
        spec, config = loaders[role]
        emit(role, "startup", meter.startup())
        firsts[role] = batch_info(meter.pending)
        emit(role, "batch", firsts[role])
        warm_up(meter, spec, config, timing, deadline, lambda kind, payload, r=role: emit(r, kind, payload))
    return meters, firsts


def take_turns(meters: dict[Hashable, Meter], loaders: Loaders, orders: Iterator[tuple[Hashable, ...]], block_s: float,
               deadline: float, emit: Callable[[Hashable, str, Any], None]) -> None:
    """One timed block per loader per turn, in each turn's order, until the orders or the time run
    out; a turn cut by the deadline is not finished."""
    for order in orders:
        for role in order:
            meter, config = meters[role], loaders[role][1]
            emit(role, "block", timed_turn(meter, config, block_s, deadline))
        if time.perf_counter() > deadline:
            return


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
    loaders: Loaders = {CONFIG: (spec, config), CALIBRATION: (other, config)} | ({DEFAULTS: (spec, defaults)} if defaults else {})

    def relay(role: Hashable, kind: str, payload: Any) -> None:
        if role == CONFIG:  # the trial's own figures are the config's
            emit(kind, payload)
        elif kind == "block":
            emit(KINDS[role], payload)

    meters, firsts = open_meters(loaders, device, timing, options, workload, deadline, relay)
    orders = iter(alternating(turn_order(defaults is not None, config_first), pairs_for(timing)))
    finish_trial(partial(take_turns, meters, loaders, orders, timing.block_s / 2, deadline, relay), device, config,
                 firsts[CONFIG], emit, measured)
    del meters  # with them the loaders: workers shut down inside the trial


def race_orders(count: int, pairs: int, seed: int) -> Iterator[tuple[int, ...]]:
    """The race's turns: a shuffled order of the ``count`` loaders, then its reverse (``alternating``),
    ``pairs`` times, each pair shuffled afresh."""
    rng = random.Random(seed)
    for _ in range(pairs):
        order = list(range(count))
        rng.shuffle(order)
        yield from alternating(tuple(order), 2)


def timed_turn(meter: Meter, config: TrialConfig, block_s: float, deadline: float) -> Block:
    """One timed block of a loader that rested: ``resume`` it, then time at least ``block_s``, two
    batches per worker (as many as it prefetches, where more: every batch in flight at the block's end
    was asked for inside it), whole bursts of one batch per worker, and until no more batches wait
    finished than at its start (``back_to_level``)."""
    resume(meter, config.num_workers, deadline)
    per_worker = max(2, config.prefetch_factor or 0)
    return meter.phase(block_s, max(1, per_worker * config.num_workers), deadline, settled=back_to_level(meter),
                       multiple=max(1, config.num_workers))


def back_to_level(meter: Meter) -> Callable[[], bool]:
    """Whether the loader's finished-but-untaken batches are down to their number at the block's start
    (none, after ``resume``, unless the main process sets the pace); checked once the block's other
    ends are met, and given up once the block has run as long again.

    A block starts with nothing finished ahead, and its workers, restarted together, drift apart
    within it: one runs a batch ahead, and that batch, made inside the block, waited in the queue at
    its end to be taken untimed before the next block. Ended at the first whole burst past its time,
    two workers' blocks on a CPU-bound dataset read 2-3% below the loader's rate alone (benchmarks/HISTORY.md).
    Ended where it started, a block counts what its workers made in it."""
    level = ready_batches(meter.loader_iterator)  # None without workers (nothing can wait)
    if level is None:
        return lambda: True
    begun, met = time.perf_counter(), None

    def settled() -> bool:
        nonlocal met
        now = time.perf_counter()
        met = met or now
        ready = ready_batches(meter.loader_iterator)
        return ready is None or ready <= level or now - met > met - begun

    return settled


def resume(meter: Meter, workers: int, deadline: float) -> None:
    """Consume, untimed, the batches the loader's workers finished ahead while it rested, then their
    first new batch each; the next phase is timed from there.

    Taking the finished batches hands every worker new work at once, so the workers restart together
    and their batches arrive in bursts of one per worker. Timing from the end of the first burst to the
    end of a later one (``Meter.phase``'s ``multiple``) covers whole rounds of every worker. Timed from
    the end of the backlog to the first batch past the block's time, a block held the workers' head
    start while the backlog was taken and one batch of its last burst for the time of all of it: on a
    CPU-bound dataset two workers read 12% slow against one, beside long runs of a plain DataLoader
    (benchmarks/HISTORY.md).

    Without workers nothing is ahead, but the first batch after a rest pays for the rest itself (caches
    a neighbour's workers filled, the turn's handshake), which a loop that never rests does not: that
    batch is taken untimed too (its "burst" is that one batch, and nothing is ready or caught up). Timed
    from the turn's start, a loader without workers raced beside one with two read 2-6% below its rate
    alone."""
    meter.mark = time.perf_counter()
    if meter.between_epochs:  # resting at an epoch boundary: nothing was done ahead
        return
    iterator = meter.loader_iterator
    ahead = ready_batches(iterator) if iterator is not None else None
    meter.phase(0.0, max(1, ahead or 0) + workers, deadline)
    catch_up(meter, deadline)


def catch_up(meter: Meter, deadline: float) -> None:
    """Consume, untimed, the batches the workers finished while the backlog was being taken, until
    none is ready, or twice running no fewer than at their lowest (the main process then sets the
    pace, and a full queue is its steady state).

    Taking a backlog is not instant: each batch comes through shared memory, and 64 workers' 256
    batches took longer than one batch takes a worker. Meanwhile the workers, handed new work as the
    backlog went, made more, and a block timed from there counted that head start: 64 workers waiting
    on storage with 4 batches prefetched each read 1.5-1.7x their rate alone (benchmarks/HISTORY.md)."""
    iterator = meter.loader_iterator
    low, stalls = math.inf, 0
    while stalls < 2 and time.perf_counter() < deadline and (ready := ready_batches(iterator) or 0) > 0:
        stalls = 0 if ready < low else stalls + 1
        low = min(low, ready)
        meter.phase(0.0, ready, deadline)


def in_flight(iterator: Any) -> int:
    """Batches the loader's workers were asked for and are still making (0 without workers, or where
    this torch keeps them elsewhere). The DataLoader's count of outstanding tasks already leaves out
    the batches it took from the queue out of order, so only the queued ones are subtracted."""
    queued = queued_batches(iterator)
    outstanding = getattr(iterator, "_tasks_outstanding", None)
    if queued is None or not isinstance(outstanding, int):
        return 0
    return max(0, outstanding - queued)


def settle(meter: Meter, until: float) -> None:
    """Wait, untimed, until the loader's workers have finished the batches they were asked for (or
    ``until``): a resting loader's workers must not share the cores with the next loader's block."""
    iterator = meter.loader_iterator
    if iterator is None:
        return
    while in_flight(iterator) and time.perf_counter() < until:
        time.sleep(SETTLE_POLL_S)


def freezable(meter: Meter, config: TrialConfig) -> bool:
    """Whether the loader can rest frozen: it has no workers, or its workers can be found."""
    return not config.num_workers or bool(worker_pids(meter.loader_iterator))


def freeze(meter: Meter, stop: bool = True) -> None:
    """Stop the loader's workers where they are (``SIGSTOP``), and wait until they have (a signal is
    delivered when the kernel next looks at the process); or (``stop`` False) let them go on."""
    iterator = meter.loader_iterator
    pids = worker_pids(iterator) if iterator is not None else []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP if stop else signal.SIGCONT)
        except ProcessLookupError:  # a worker gone with its epoch
            pass
    deadline = time.perf_counter() + STOP_WAIT_S
    while stop and time.perf_counter() < deadline and not all(stopped(pid) for pid in pids):
        time.sleep(SETTLE_POLL_S / 4)


def stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal, or gone (``/proc``: its state after the command name)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"T", b"t", b"Z", b"X")


def frozen_turn(meter: Meter, config: TrialConfig, block_s: float, deadline: float) -> Block:
    """One timed block of a loader frozen since its last one (``freeze``): thawed, one batch per worker
    taken untimed (the rest left its caches cold), then at least ``block_s`` and ``burst_batches``,
    in whole bursts of one batch per worker, and frozen again at once.

    A loader frozen between its blocks neither shares the cores with a neighbour's block nor makes
    anything ahead of its own next one, and goes on from the very state its last block ended in: its
    blocks are windows of one continuous run, each from a batch's arrival to a later one over whole
    rounds of its workers. Nothing needs draining or waiting for, as it did when a resting loader's
    workers ran on (``timed_turn``, ``settle``), and what that left (half-made work no block counted, a
    worker a batch ahead) cannot arise: legs read no workers against two within 0.9-1.7% of their
    ratio alone, where settled turns read 2.5-2.6% off, and a leg of 64-worker loaders took 19 s
    instead of 52 (benchmarks/RESULTS.md, "Frozen turns")."""
    workers = max(1, config.num_workers)
    freeze(meter, stop=False)
    meter.mark = time.perf_counter()
    if not meter.between_epochs:  # (at an epoch boundary nothing is half made)
        meter.phase(0.0, workers, deadline)
    block = meter.phase(block_s, burst_batches(workers), deadline, multiple=workers)
    meter.release()  # a cold state: no page this loader mapped may outlive the drop before the next turn
    freeze(meter)  # not on failure: a failed loader's workers must hear its shutdown
    return block
