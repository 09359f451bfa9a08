"""Where the time goes (SPEC §6): one profiling run per scan that times each stage of the data path alone.

The timed trials are never instrumented: their loop's overhead must stay negligible against a bare
loop. Instead, once per scan, a profiling run in its own isolated process (the runner's machinery,
``task="stages"``) drives the user's own dataset, ``collate_fn`` and ``step`` through each stage in
turn, without changing any of them:

- fetch: ``dataset[i]`` over the sampler's indices (``__getitems__`` where defined), or ``next()`` of
  the stream, with one torch thread as in a worker: CPU (``process_time``) and wall time per sample.
  Wall minus CPU is waiting (storage, network), which more workers than cores can hide. It runs on
  until the means are known to within 5% (up to 4x its set length: heavy tails need more samples).
  Once more with the main process's own torch threads, as ``num_workers=0`` runs it;
- collation per batch;
- hand-off: a DataLoader with one worker that replays already-fetched samples, so the worker's only
  work is to collate into shared memory and send. Its CPU per batch is read from ``/proc``; the main
  thread's CPU per ``next()`` is ``thread_time`` (waiting for the worker costs none);
- the consumer (host-to-device copy and ``step``) on a batch collated here and on one received from
  the worker: the difference is the first touch of the shared pages;
- with CUDA: pinning, the pinned ``non_blocking`` copy, and ``step`` on a batch already on the device.

Each stage runs alone and is synchronised per call: the aim is its cost, not the overlap (that is
what the timed trials measure). ``bound.py`` turns the costs into the highest reachable throughput.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from loadtune.engine.trial.cpu import process_cpu_s, runqueue_s, worker_pids
from loadtune.engine.trial.measure import LoaderOptions, Timing, TrialFailure, device_sync, make_consumer, make_loader
from loadtune.model.config import TrialConfig, transfer_for
from loadtune.model.results import StageCost, StageCosts
from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.transfer import move_to, nbytes_of

MIN_UNITS = 5  # per phase, at least (a noise estimate needs a few)
MAX_UNITS = 400  # per phase, at most: cheap stages end early, and the JSON stays small
SETTLED = 0.05  # the fetch phase goes on while its mean's 95% interval is wider than this (relative) ...
STRETCH = 4  # ... up to this many times its set length: heavy-tailed costs need more samples
BUSY = 0.2  # a note when the fetch waited for a core this much of its CPU time (another process's load)


@dataclass(frozen=True)
class StageTiming:
    """How long each phase of the profile runs: derived from the scan's own timing settings."""

    warmup_s: float = 0.5
    phase_s: float = 1.0
    max_s: float = 60.0  # soft limit for the whole profile

    @classmethod
    def from_timing(cls, timing: Timing) -> "StageTiming":
        return cls(warmup_s=min(timing.warmup_s, 1.0), phase_s=max(2 * timing.block_s, 0.2), max_s=timing.max_s)


@dataclass
class Recorder:
    """Seconds per unit for one stage, as they are measured."""

    seconds: list[float] = field(default_factory=list)
    units: list[int] = field(default_factory=list)

    def add(self, seconds: float, units: int = 1) -> None:
        self.seconds.append(max(0.0, seconds))
        self.units.append(units)

    def cost(self) -> StageCost | None:
        return StageCost(self.seconds, self.units) if self.seconds else None

    def settled(self) -> bool:
        """The mean is known to within ``SETTLED`` (relative half-width of its 95% interval)."""
        cost = self.cost()
        return cost is not None and cost.mean > 0 and cost.halfwidth <= SETTLED * cost.mean


def repeat(once: Callable[[], Any], phase_s: float, deadline: float, min_units: int = MIN_UNITS,
           settled: Callable[[], bool] | None = None) -> int:
    """Call ``once`` for ``phase_s`` (at least ``min_units`` times, at most ``MAX_UNITS``) or until the
    deadline; with ``settled``, go on until it holds, up to ``STRETCH`` times ``phase_s``."""
    start = time.perf_counter()
    end, longest = start + phase_s, start + STRETCH * phase_s
    n = 0
    while n < MAX_UNITS:
        now = time.perf_counter()
        if now > deadline or (n >= min_units and now > end and (settled is None or now > longest or settled())):
            break
        once()
        n += 1
    return n


class Fetcher:
    """Samples one batch at a time, as a DataLoader worker fetches them (without collating)."""

    def __init__(self, spec: LoadedSpec, config: TrialConfig, options: LoaderOptions):
        self.dataset, self.batch_size, self.iterable = spec.dataset, config.batch_size, spec.iterable
        self.stream = None
        if not self.iterable:
            loader = make_loader(spec, replace(config, num_workers=0), options)  # the scan's sampler and seed
            self.indices = self._cycle(loader.batch_sampler)
            self.getitems = getattr(self.dataset, "__getitems__", None)

    @staticmethod
    def _cycle(batch_sampler):
        while True:
            empty = True
            for indices in batch_sampler:
                empty = False
                yield indices
            if empty:
                raise TrialFailure("the sampler yielded no batch")

    def batch(self) -> list:
        if not self.iterable:
            indices = next(self.indices)
            return self.getitems(indices) if self.getitems else [self.dataset[i] for i in indices]
        out: list = []
        restarts = 0
        while len(out) < self.batch_size:
            if self.stream is None:
                self.stream = iter(self.dataset)
            try:
                out.append(next(self.stream))
            except StopIteration:
                self.stream = None
                restarts += 1
                if out or restarts > 1:
                    break  # a short last batch, as the loader yields it
        if not out:
            raise TrialFailure("the dataset's stream yielded no sample")
        return out


class Replay(Dataset):
    """Already-fetched samples, served again: a worker over it only collates into shared memory and sends."""

    def __init__(self, samples: list):
        self.samples = samples

    def __len__(self) -> int:
        return 2**31 - 1

    def __getitem__(self, index: int) -> Any:
        return self.samples[index % len(self.samples)]


def set_threads(n: int) -> None:
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def profile(
    spec: LoadedSpec,
    config: TrialConfig,
    device: torch.device,
    timing: Timing,
    options: LoaderOptions,
    emit: Callable[[str, Any], None],
    workload: Any = None,
) -> None:
    """Run every phase in this (isolated) process and ``emit("stages", StageCosts)``. ``workload``:
    ``--step-ms``'s synthetic step, which is then the consumer in place of the spec's ``step``."""
    started = time.perf_counter()
    st = StageTiming.from_timing(timing)
    deadline = started + st.max_s
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.zeros(1, device=device)
        torch.cuda.synchronize(device)
    threads = torch.get_num_threads()
    collate = spec.collate_fn or default_collate
    fetcher = Fetcher(spec, config, options)
    notes: list[str] = []

    # warm-up: lazily opened files, caches, per-process set-up; also the first batch for what follows
    samples = fetcher.batch()
    local = collate(samples)
    warm_end = time.perf_counter() + st.warmup_s
    while time.perf_counter() < warm_end and time.perf_counter() < deadline:
        samples = fetcher.batch()
        local = collate(samples)

    fetch_main = Recorder()
    if threads > 1:  # num_workers=0 fetches with the main process's intra-op threads

        def fetch_in_main() -> None:
            start, queued = time.perf_counter(), runqueue_s()
            got = fetcher.batch()
            fetch_main.add(time.perf_counter() - start - (runqueue_s() - queued), len(got))

        repeat(fetch_in_main, st.phase_s / 2, deadline)

    fetch_cpu, fetch_wall, collation = Recorder(), Recorder(), Recorder()
    waited = 0.0  # seconds this process was runnable but had no core

    def fetch_as_worker() -> None:
        nonlocal samples, local, waited
        cpu, wall, queued = time.process_time(), time.perf_counter(), runqueue_s()
        got = fetcher.batch()
        wall_end, cpu_end, queued_end = time.perf_counter(), time.process_time(), runqueue_s()
        waited += queued_end - queued
        fetch_cpu.add(cpu_end - cpu, len(got))
        fetch_wall.add(max(cpu_end - cpu, wall_end - wall - (queued_end - queued)), len(got))
        wall = time.perf_counter()
        local = collate(got)
        collation.add(time.perf_counter() - wall)
        samples = got

    set_threads(1)  # as in a DataLoader worker
    try:
        repeat(fetch_as_worker, st.phase_s, deadline, settled=lambda: fetch_cpu.settled() and fetch_wall.settled())
    finally:
        set_threads(threads)
    if not fetch_cpu.seconds:
        raise TrialFailure("the profiling run had no time left to fetch a batch; raise --timeout")
    cpu_s = sum(fetch_cpu.seconds)
    if cpu_s > 0 and waited > BUSY * cpu_s:
        notes.append(f"other processes kept the fetch waiting for a core ({waited / cpu_s:.0%} of its CPU time): "
                     "CPU costs read high on a busy machine, and the bound with them")

    step_fn = workload.build(device) if workload is not None else spec.step
    needs_consumer = step_fn is not None or device.type == "cuda"
    consumer_config = replace(config, num_workers=0, pin_memory=False, transfer=transfer_for(False, device.type == "cuda"))
    consume = make_consumer(spec, consumer_config, device, step_fn) if needs_consumer else None
    sync = device_sync(device)
    handoff, receive, consumer_received = Recorder(), Recorder(), Recorder()
    try:
        hand_off(samples, spec, config, st, deadline, consume, sync, handoff, receive, consumer_received)
    except Exception as exc:  # noqa: BLE001 - the rest of the profile still stands
        notes.append(f"hand-off not measured: {type(exc).__name__}: {exc}")

    consumer = Recorder()
    if consume is not None:
        def consume_local() -> None:
            start = time.perf_counter()
            consume(local)
            sync()
            consumer.add(time.perf_counter() - start)

        repeat(consume_local, st.phase_s / 2, deadline)

    pin, copy, step = Recorder(), Recorder(), Recorder()
    if device.type == "cuda":
        cuda_stages(local, step_fn, device, st, deadline, pin, copy, step, notes)

    emit("stages", StageCosts(
        batch_size=config.batch_size,
        device=str(device),
        fetch_cpu=fetch_cpu.cost(),
        fetch_wall=fetch_wall.cost(),
        collate=collation.cost(),
        fetch_main=fetch_main.cost(),
        handoff=handoff.cost(),
        receive=receive.cost(),
        consumer=consumer.cost(),
        consumer_received=consumer_received.cost(),
        pin=pin.cost(),
        copy=copy.cost(),
        step=step.cost(),
        batch_bytes=nbytes_of(local),
        torch_threads=threads,
        wall_s=time.perf_counter() - started,
        notes=notes,
    ))


def hand_off(samples: list, spec: LoadedSpec, config: TrialConfig, st: StageTiming, deadline: float,
             consume: Callable | None, sync: Callable, handoff: Recorder, receive: Recorder,
             consumer_received: Recorder) -> None:
    """One worker replays ``samples``: its CPU per batch is the hand-off's worker side (collating into
    shared memory, pickling, sending); the main thread's CPU per ``next()`` is the receiving side."""
    kwargs = {"multiprocessing_context": config.start_method} if config.start_method else {}
    loader = DataLoader(Replay(samples), batch_size=len(samples), num_workers=1, prefetch_factor=2,
                        collate_fn=spec.collate_fn, **kwargs)
    iterator = iter(loader)
    try:
        batch = None
        for _ in range(3):  # the worker is up and the queue is full
            batch = next(iterator)
        pid = next(iter(worker_pids(iterator)), None)
        last = process_cpu_s(pid) if pid else None

        def once() -> None:
            nonlocal batch, last
            cpu = time.thread_time()
            batch = None  # dropping the previous batch (unmapping its shared memory) is part of receiving
            batch = next(iterator)
            receive.add(time.thread_time() - cpu)
            if last is not None:
                now = process_cpu_s(pid)
                handoff.add(now - last)
                last = now
            if consume is not None:
                start = time.perf_counter()
                consume(batch)
                sync()
                consumer_received.add(time.perf_counter() - start)

        repeat(once, st.phase_s, deadline)
    finally:
        del iterator, loader  # shut the worker down here, not at interpreter exit


def cuda_stages(local: Any, step_fn: Callable[[Any], Any] | None, device: torch.device, st: StageTiming, deadline: float,
                pin: Recorder, copy: Recorder, step: Recorder, notes: list[str]) -> None:
    """Pinning (what the DataLoader's pin thread does), the pinned copy, and the step on the device."""
    from torch.utils.data._utils.pin_memory import pin_memory as pin_batch

    sync = device_sync(device)
    pinned = pin_batch(local, device)

    def pin_once() -> None:
        start = time.perf_counter()
        pin_batch(local, device)
        pin.add(time.perf_counter() - start)

    def copy_once() -> None:
        start = time.perf_counter()
        move_to(pinned, device, non_blocking=True)
        sync()
        copy.add(time.perf_counter() - start)

    repeat(pin_once, st.phase_s / 2, deadline)
    repeat(copy_once, st.phase_s / 2, deadline)
    if step_fn is not None:
        on_device = move_to(local, device)
        sync()

        def step_once() -> None:
            start = time.perf_counter()
            step_fn(on_device)
            sync()
            step.add(time.perf_counter() - start)

        repeat(step_once, st.phase_s / 2, deadline)
    else:
        notes.append("no step in the spec: the consumer is the copy alone")


def run_profile(source: SpecRef | LoadedSpec, request) -> tuple[StageCosts | None, str | None]:
    """The profiling run in an isolated process (``runner.run_trial`` with ``task="stages"``).
    Returns the costs, or None and why the run failed."""
    from loadtune.engine.trial.harness import run_trial  # runner starts this module's ``profile`` in its child

    got: dict[str, StageCosts] = {}
    trial = run_trial(source, replace(request, task="stages"),
                      lambda kind, payload: got.__setitem__("stages", payload) if kind == "stages" else None)
    if "stages" in got:
        costs = got["stages"]
        costs.wall_s = trial.wall_s
        return costs, None
    return None, trial.error.message if trial.error else "the profiling run reported nothing"
