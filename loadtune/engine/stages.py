"""Where the time goes: one profiling run per scan that times each stage of the data path alone.

The timed trials are never instrumented: their loop's overhead must stay negligible against a bare
loop. Instead, once per scan, a profiling run in its own isolated process (the runner's machinery,
with ``profile_trial`` as the child's entry) drives the user's own dataset, ``collate_fn`` and
``step`` through each stage in turn, without changing any of them:

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
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from loadtune.engine.loaders import start
from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.cpu import process_cpu_s, runqueue_s, worker_pids
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.diskread import BANDWIDTH_LEVELS, BANDWIDTH_SECONDS, read_bandwidth
from loadtune.engine.trial.pagecache import CacheSetting, drop_read, io_of
from loadtune.engine.trial.setup import LoaderOptions, Timing, TrialFailure, device_sync, make_consumer, make_loader, open_device
from loadtune.engine.trial.protocol import Kind, TrialRequest, TrialRun
from loadtune.engine.trial.transfer import move_to, nbytes_of
from loadtune.model.config import TrialConfig, transfer_for
from loadtune.model.storage import COLD
from loadtune.model.storage_read import ReadLevel
from loadtune.model.stages import StageCost, StageCosts

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
    def from_timing(cls, timing: Timing) -> StageTiming:
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
        loader = make_loader(spec, replace(config, num_workers=0), options)  # the scan's (or the user's) sampler, seed, collate
        if not isinstance(loader, DataLoader) or loader.batch_sampler is None:
            raise TrialFailure("the loader batches by itself (a pre-batched stream, or not a DataLoader): the stage "
                               "profile fetches samples one by one, which such a loader does not expose")
        self.dataset, self.collate = loader.dataset, loader.collate_fn
        self.batch_size, self.iterable = loader.batch_size or config.batch_size, isinstance(loader.dataset, IterableDataset)
        self.stream = None
        self.length = len(self.dataset) if not self.iterable and hasattr(self.dataset, "__len__") else None
        if not self.iterable:
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
    run = Profiler(spec, config, device, timing, options)
    run.warm_up()
    if run.threads > 1:  # num_workers=0 fetches with the main process's intra-op threads
        run.fetch_in_main()
    run.fetch_as_worker()
    if timing.cache is not None:
        run.fetch_from_storage(timing.cache)
    step_fn = workload.build(device) if workload is not None else spec.step
    run.consumer_stages(step_fn)
    if device.type == "cuda":
        run.cuda_stages(step_fn)
    emit("stages", run.costs())


@dataclass
class StageRecorders:
    """What the profiling run has measured so far: one Recorder per stage (named as in
    ``StageCosts``), and notes on how far to trust them."""

    fetch_cpu: Recorder = field(default_factory=Recorder)
    fetch_wall: Recorder = field(default_factory=Recorder)
    collate: Recorder = field(default_factory=Recorder)
    fetch_main: Recorder = field(default_factory=Recorder)
    handoff: Recorder = field(default_factory=Recorder)
    receive: Recorder = field(default_factory=Recorder)
    consumer: Recorder = field(default_factory=Recorder)
    consumer_received: Recorder = field(default_factory=Recorder)
    pin: Recorder = field(default_factory=Recorder)
    copy: Recorder = field(default_factory=Recorder)
    step: Recorder = field(default_factory=Recorder)
    storage_read: Recorder = field(default_factory=Recorder)
    notes: list[str] = field(default_factory=list)

    def costs(self, **run: Any) -> StageCosts:
        """Every stage's cost (None where it was not measured), with the run's own figures."""
        stages = {f.name: getattr(self, f.name).cost() for f in fields(self) if f.name != "notes"}
        return StageCosts(**stages, notes=self.notes, **run)


def timed(recorder: Recorder, call: Callable[[], Any], sync: Callable[[], None] | None = None) -> Callable[[], None]:
    """``call`` as one unit for ``repeat``: its wall time, up to the end of the device work it queued."""

    def once() -> None:
        start = time.perf_counter()
        call()
        if sync is not None:
            sync()
        recorder.add(time.perf_counter() - start)

    return once


class Profiler:
    """One profiling run, phase by phase. The phases share the fetcher, the latest batch (its samples
    as fetched and their collation here), the deadline of the whole run and the recorders."""

    def __init__(self, spec: LoadedSpec, config: TrialConfig, device: torch.device, timing: Timing,
                 options: LoaderOptions):
        self.started = time.perf_counter()
        self.st = StageTiming.from_timing(timing)
        self.deadline = self.started + self.st.max_s
        self.spec, self.config, self.device = spec, config, device
        if device.type == "cuda":
            open_device(device)
        self.threads = torch.get_num_threads()
        self.fetcher = Fetcher(spec, config, options)
        self.collate = self.fetcher.collate  # the loader's own: the spec's collate_fn, or default_collate
        self.rec = StageRecorders()
        self.samples: list = []  # the latest batch, as fetched ...
        self.local: Any = None  # ... and as collated in this process
        self.storage_bytes: float | None = None  # bytes storage fetched a sample, read cold
        self.bandwidth: ReadLevel | None = None  # the storage's, on the dataset's files

    def warm_up(self) -> None:
        """Lazily opened files, caches, per-process set-up; also the first batch for what follows."""
        self.samples = self.fetcher.batch()
        self.local = self.collate(self.samples)
        warm_end = time.perf_counter() + self.st.warmup_s
        while time.perf_counter() < warm_end and time.perf_counter() < self.deadline:
            self.samples = self.fetcher.batch()
            self.local = self.collate(self.samples)

    def fetch_in_main(self) -> None:
        """The fetch with this process's own torch threads, as ``num_workers=0`` runs it."""
        fetch, recorder = self.fetcher.batch, self.rec.fetch_main

        def once() -> None:
            start, queued = time.perf_counter(), runqueue_s()
            got = fetch()
            recorder.add(time.perf_counter() - start - (runqueue_s() - queued), len(got))

        repeat(once, self.st.phase_s / 2, self.deadline)

    def fetch_as_worker(self) -> None:
        """Fetch, then collate, with one torch thread as in a DataLoader worker, until both fetch means
        settle: CPU and wall time per sample (the wall time less any wait for a core), collation
        per batch. Notes a fetch that other processes kept waiting for a core."""
        fetch, collate, rec = self.fetcher.batch, self.collate, self.rec
        waited = 0.0  # seconds this process was runnable but had no core

        def once() -> None:
            nonlocal waited
            cpu, wall, queued = time.process_time(), time.perf_counter(), runqueue_s()
            got = fetch()
            wall_end, cpu_end, queued_end = time.perf_counter(), time.process_time(), runqueue_s()
            waited += queued_end - queued
            rec.fetch_cpu.add(cpu_end - cpu, len(got))
            rec.fetch_wall.add(max(cpu_end - cpu, wall_end - wall - (queued_end - queued)), len(got))
            wall = time.perf_counter()
            local = collate(got)
            rec.collate.add(time.perf_counter() - wall)
            self.samples, self.local = got, local

        set_threads(1)  # as in a DataLoader worker
        try:
            repeat(once, self.st.phase_s, self.deadline, settled=lambda: rec.fetch_cpu.settled() and rec.fetch_wall.settled())
        finally:
            set_threads(self.threads)
        if not rec.fetch_cpu.seconds:
            raise TrialFailure("the profiling run had no time left to fetch a batch; raise --timeout")
        cpu_s = sum(rec.fetch_cpu.seconds)
        if cpu_s > 0 and waited > BUSY * cpu_s:
            rec.notes.append(f"other processes kept the fetch waiting for a core ({waited / cpu_s:.0%} of its CPU time): "
                             "CPU costs read high on a busy machine, and the bound with them")

    def fetch_from_storage(self, cache: CacheSetting) -> None:
        """The fetch again, one thread, with the dataset's files dropped from the page cache first: its
        wall time per sample is what a sample costs from storage (the next samples of the sampler's
        order, dropped again where it comes round: an epoch reads no sample twice), and the bytes a
        sample made storage fetch (``/proc/self/io``). Then, cold, the storage's bandwidth on the same files.
        The scan sets its own state again afterwards."""
        fetch, recorder = self.fetcher.batch, self.rec.storage_read
        length = self.fetcher.length
        drop_read(cache.files)
        before, since_drop = io_of("self"), 0

        def once() -> None:
            nonlocal since_drop
            if length and since_drop + self.fetcher.batch_size > length:  # the order comes round: drop again, untimed
                drop_read(cache.files)
                since_drop = 0
            start, queued = time.perf_counter(), runqueue_s()
            got = fetch()
            recorder.add(time.perf_counter() - start - (runqueue_s() - queued), len(got))
            since_drop += len(got)

        set_threads(1)
        try:
            repeat(once, self.st.phase_s / 2, self.deadline)
        finally:
            set_threads(self.threads)
        after, samples = io_of("self"), sum(recorder.units)
        if before is not None and after is not None and samples:
            self.storage_bytes = (after - before).storage / samples
        self.storage_bandwidth(cache)

    def storage_bandwidth(self, cache: CacheSetting) -> None:
        """The storage's bandwidth on the dataset's own files (``engine.diskread.read_bandwidth``), where
        the fetch made it read: with the bytes a sample fetched, the bound's cap for storage."""
        seconds = BANDWIDTH_SECONDS * len(BANDWIDTH_LEVELS)
        if cache.state != COLD or not self.storage_bytes or time.perf_counter() + 2 * seconds > self.deadline:
            return  # (only a cold scan's bound has a cap for storage)
        try:
            self.bandwidth = read_bandwidth(cache.files)
        except OSError as exc:  # the figure is missing; the rest of the profile stands
            self.rec.notes.append(f"storage bandwidth not measured: {exc}")

    def consumer_stages(self, step_fn: Callable[[Any], Any] | None) -> None:
        """The consumer (the copy to the device and ``step``), timed on a batch received from a worker
        (in the hand-off) and on one collated here: the difference is the first touch of the shared
        pages. With neither a step nor an accelerator nothing consumes a batch: the hand-off alone."""
        cuda = self.device.type == "cuda"
        config = replace(self.config, num_workers=0, pin_memory=False, transfer=transfer_for(False, cuda))
        consume = make_consumer(self.spec, config, self.device, step_fn) if step_fn is not None or cuda else None
        sync = device_sync(self.device)
        try:
            self.hand_off(consume, sync)
        except Exception as exc:  # noqa: BLE001 - the rest of the profile still stands
            self.rec.notes.append(f"hand-off not measured: {type(exc).__name__}: {exc}")
        if consume is not None:
            local = self.local
            repeat(timed(self.rec.consumer, lambda: consume(local), sync), self.st.phase_s / 2, self.deadline)

    def hand_off(self, consume: Callable[[Any], Any] | None, sync: Callable[[], None]) -> None:
        """One worker replays the latest samples, so that its only work is to collate into shared
        memory and send; ``Receiver`` times both sides of the hand-off."""
        kwargs = {"multiprocessing_context": self.config.start_method} if self.config.start_method else {}
        loader = DataLoader(Replay(self.samples), batch_size=len(self.samples), num_workers=1, prefetch_factor=2,
                            collate_fn=self.collate, **kwargs)
        receiver = Receiver(start(loader), consume, sync, self.rec)
        try:
            receiver.start()
            repeat(receiver, self.st.phase_s, self.deadline)
        finally:
            receiver.close()

    def cuda_stages(self, step_fn: Callable[[Any], Any] | None) -> None:
        """Pinning (what the DataLoader's pin thread does), the pinned ``non_blocking`` copy, and the
        step on a batch already on the device."""
        from torch.utils.data._utils.pin_memory import pin_memory as pin_batch

        device, local, rec, phase_s = self.device, self.local, self.rec, self.st.phase_s / 2
        sync = device_sync(device)
        pinned = pin_batch(local, device)
        repeat(timed(rec.pin, lambda: pin_batch(local, device)), phase_s, self.deadline)
        repeat(timed(rec.copy, lambda: move_to(pinned, device, non_blocking=True), sync), phase_s, self.deadline)
        if step_fn is None:
            rec.notes.append("no step in the spec: the consumer is the copy alone")
            return
        on_device = move_to(local, device)
        sync()
        repeat(timed(rec.step, lambda: step_fn(on_device), sync), phase_s, self.deadline)

    def costs(self) -> StageCosts:
        bandwidth = self.bandwidth
        return self.rec.costs(batch_size=self.config.batch_size, device=str(self.device),
                              batch_bytes=nbytes_of(self.local), torch_threads=self.threads,
                              storage_bytes=self.storage_bytes,
                              storage_mb_s=bandwidth.mb_per_s if bandwidth is not None else None,
                              storage_in_flight=bandwidth.in_flight if bandwidth is not None else None,
                              wall_s=time.perf_counter() - self.started)


class Receiver:
    """The hand-off from a one-worker loader, one batch per call: the worker's CPU per batch is its
    side (collating into shared memory, pickling, sending); this thread's CPU per ``next()`` is the
    receiving side; with a consumer, its time on the received batch."""

    def __init__(self, iterator: Any, consume: Callable[[Any], Any] | None, sync: Callable[[], None],
                 rec: StageRecorders):
        self.iterator, self.consume, self.sync, self.rec = iterator, consume, sync, rec
        self.batch: Any = None
        self.pid: int | None = None
        self.last: float | None = None  # the worker's CPU seconds after the previous batch

    def start(self) -> None:
        for _ in range(3):  # the worker is up and the queue is full
            self.batch = next(self.iterator)
        self.pid = next(iter(worker_pids(self.iterator)), None)
        self.last = process_cpu_s(self.pid) if self.pid else None

    def __call__(self) -> None:
        cpu = time.thread_time()
        self.batch = None  # dropping the previous batch (unmapping its shared memory) is part of receiving
        self.batch = next(self.iterator)
        self.rec.receive.add(time.thread_time() - cpu)
        if self.last is not None:
            now = process_cpu_s(self.pid)
            self.rec.handoff.add(now - self.last)
            self.last = now
        if self.consume is not None:
            start = time.perf_counter()
            self.consume(self.batch)
            self.sync()
            self.rec.consumer_received.add(time.perf_counter() - start)

    def close(self) -> None:
        """Drop the iterator, the only reference to it: its worker shuts down now, not at interpreter exit."""
        self.iterator = self.batch = None


def run_profile(source: SpecRef | LoadedSpec, request: TrialRequest) -> tuple[StageCosts | None, str | None]:
    """The profiling run in an isolated process: ``run_trial`` with ``profile_trial`` as the child's
    entry. Returns the costs, or None and why the run failed."""
    got: dict[str, StageCosts] = {}
    trial = run_trial(source, replace(request, entry=profile_trial, needs_blocks=False),
                      lambda kind, payload: got.__setitem__("stages", payload) if kind is Kind.STAGES else None)
    if "stages" in got:
        costs = got["stages"]
        costs.wall_s = trial.wall_s
        return costs, None
    return None, trial.error.message if trial.error else "the profiling run reported nothing"


def profile_trial(run: TrialRun) -> None:
    """The child's entry for the profiling run: ``profile`` in the trial's own process, never inside a trial."""
    request = run.request
    profile(run.spec, request.config, torch.device(request.device), request.timing, request.options, run.emit,
            workload=request.workload)
