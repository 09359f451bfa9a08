"""Trials in isolated processes: a crash, hang or leak in the dataset cannot take the scan down.

Each trial runs in a fresh child process, in a session of its own so that the child and every
DataLoader worker it starts can be killed together. Children come from a fork server that has
already imported torch (a fresh interpreter per trial would spend ~1.5 s importing it); datasets
given as Python objects rather than spec files are inherited by ``fork`` instead. The parent
streams the child's figures as they come, samples the tree's memory from outside, and enforces the
per-trial timeout.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import psutil

from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.child import (
    Parcel,
    _child,
    exit_error,
    scratch_dir,
)
from loadtune.engine.trial.setup import TrialFailure
from loadtune.engine.trial.memory import MemorySampler
from loadtune.engine.trial.nvml import UtilisationSampler
from loadtune.engine.trial.protocol import Kind, Message, TrialRequest, apply
from loadtune.engine.trial.server import fork_server_context, main_module_hidden
from loadtune.model.load import LoadReading
from loadtune.model.trial import GPUUsage, Trial, TrialError

OnEvent = Callable[[Kind, Any], None]
LOG_TAIL_CHARS = 2000


def context_for(source: SpecRef | LoadedSpec, device: str = "cpu", environment: dict[str, str] | None = None):
    """forkserver (torch preloaded) for spec files; fork for in-memory objects, which may not pickle —
    except on a CUDA device: CUDA does not survive a fork from a process that has used it (as the
    caller's usually has), so there in-memory objects are pickled too (``plan.prepare`` checks they can be).
    Specs known to pickle (``LoadedSpec.picklable``) always go through the fork server: a fork inherits
    the caller's torch thread pools, which deadlock in the child once the caller has used them.
    A config with ``environment`` (the heap setting's ``MALLOC_*`` variables) starts a fresh interpreter
    (spawn) with them exported, as the user's training process starts; only an in-memory object that must
    be forked gets them through ``mallopt`` in the running child instead (``child._child``)."""
    methods = multiprocessing.get_all_start_methods()
    if isinstance(source, LoadedSpec) and not source.picklable and "fork" in methods and not device.startswith("cuda"):
        return multiprocessing.get_context("fork")
    if environment:
        return multiprocessing.get_context("spawn")
    return fork_server_context() or multiprocessing.get_context("spawn")


@contextlib.contextmanager
def exported(environment: dict[str, str]):
    """``environment`` in this process's environment for the instant a spawned child starts (it inherits
    it at exec, its workers from it), as it was before afterwards."""
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def sigint_held():
    """Hold a Ctrl-C that lands while a trial process is being started until ``start()`` returns.

    Raised inside ``start()``, it could leave multiprocessing's fork server and resource tracker half
    set up and outliving the CLI, holding its stdout and stderr open (a pipe reader then waits
    forever). Held, it is raised just after, where the caller's clean-up kills the trial's group."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and previous is signal.default_int_handler:
            raise KeyboardInterrupt
        if caught and callable(previous):
            previous(signal.SIGINT, None)


def kill_group(pid: int, wait_s: float = 5.0) -> None:
    """SIGKILL the trial's whole session (the child and every worker it started) and wait until
    they are dead: no process of the trial outlives ``run_trial``. Waited for are the group's members
    as well as the child's descendants: a worker whose parent died first is init's child by then, and
    a large process can take a while to unmap its memory after SIGKILL."""
    try:
        members = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        members = []
    members += group_members(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    deadline = time.monotonic() + wait_s
    while any(still_running(p) for p in members) and time.monotonic() < deadline:
        time.sleep(0.01)


def group_members(pgid: int) -> list[psutil.Process]:
    """The processes of process group ``pgid``, whoever their parent is now."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                found.append(proc)
        except (ProcessLookupError, PermissionError):
            pass
    return found


def remove_orphaned_shared_memory(since: float) -> None:
    """Unlink torch's /dev/shm files made since ``since`` whose creator is dead. torch makes one per
    batch handed between processes and unlinks it once received; a worker killed in between (by a
    signal, a timeout, the OOM killer) leaves it behind for good, holding RAM. A creator killed but not
    yet reaped is dead too: its segment was otherwise left behind whenever the reaping came late."""
    for path in Path("/dev/shm").glob("torch_*"):
        pid = path.name.split("_")[1]
        try:
            if pid.isdigit() and not pid_running(int(pid)) and path.stat().st_mtime >= since:
                path.unlink()
        except OSError:
            pass


def still_running(proc: psutil.Process) -> bool:
    """Not yet dead; a zombie is dead (it waits only for its new parent, init, to reap it)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pid_running(pid: int) -> bool:
    """``still_running`` by process id: False for a process that is gone or a zombie."""
    try:
        return still_running(psutil.Process(pid))
    except psutil.Error:
        return False


def read_tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_CHARS))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def timeout_error(timeout_s: float) -> TrialError:
    return TrialError(kind="timeout", message=f"no result within the {timeout_s:g} s trial timeout (a hang, or a "
                      "loader too slow for the timeout: raise --timeout)")


class Ending(Enum):
    """How the child's stream of messages ended."""

    DONE = "done"  # it reported its result
    FAILED = "failed"  # it reported an error
    SILENT = "silent"  # its pipe closed without a word: it died
    TIMEOUT = "timeout"  # the trial's time ran out first
    PAUSED = "paused"  # the caller's ``until`` was met: the child lives on, awaiting its next word


@dataclass
class Watch:
    """What the parent measures of a running trial from outside it: the tree's memory, and the GPU's
    utilisation (NVML, when the trial runs on a CUDA device and NVML works; with several ranks, each
    rank's own GPU). Both follow the trial's phases: sparse while blocks are timed, one sample forced
    at steady state."""

    memory: MemorySampler
    gpus: dict = field(default_factory=dict)  # (rank, local rank) or None -> UtilisationSampler of its GPU
    scan_mark: tuple[float, float] | None = None  # this process's CPU and clock when the timed blocks began

    def see(self, message: Message, conn) -> None:
        kind = message.kind
        if kind is Kind.DEVICE:
            self.watch_gpu(message)
        elif kind is Kind.STARTUP and self.memory.startup_index is None:
            self.memory.mark_startup()  # the (first rank's) workers are up: warm-up is untimed
        elif kind is Kind.WARMUP:
            self.set_timed(True)  # blocks are timed from here: sample sparingly
            self.scan_mark = (time.process_time(), time.monotonic())
        elif kind is Kind.LOAD and self.scan_mark is not None and message.rank is None:
            self.add_scan_cpu(message.payload)
        elif kind is Kind.MEASURED:
            self.set_timed(False)
            self.memory.maybe_sample(force=True)  # steady state, nothing timed now
            conn.send(Message(Kind.ACK))

    def watch_gpu(self, message: Message) -> None:
        key = None if message.rank is None else (message.rank, message.local_rank)
        found = message.payload
        sampler = UtilisationSampler.for_device(found.get("uuid"), found.get("index"), found.get("pci_bus_id"))
        if sampler is not None and key not in self.gpus:
            self.gpus[key] = sampler

    def add_scan_cpu(self, reading: LoadReading) -> None:
        """This process's CPU over the timed blocks (the samplers, the progress display): the scan's
        own, not outside load. Read from its messages, so over a window a poll late at both ends."""
        cpu, clock = self.scan_mark
        reading.scan_s, reading.scan_window_s = time.process_time() - cpu, time.monotonic() - clock

    def set_timed(self, timed: bool) -> None:
        self.memory.timed = timed
        for sampler in self.gpus.values():
            sampler.timed = timed

    def tick(self) -> None:
        self.memory.maybe_sample()
        for sampler in self.gpus.values():
            sampler.maybe_sample()

    def record(self, trial: Trial) -> None:
        trial.memory = self.memory.result()
        for key, sampler in self.gpus.items():
            if not sampler.samples:
                continue
            figures = trial if key is None else trial.rank_figures(*key)
            figures.gpu = figures.gpu or GPUUsage()
            figures.gpu.utilisation = sampler.samples


class TrialProcess:
    """One trial's child, from its start to its clean-up: its pipe, its log file, the parent's watch."""

    def __init__(self, source: SpecRef | LoadedSpec, request: TrialRequest):
        """Raises ``TrialFailure`` when what the trial runs cannot be pickled for its start method."""
        self.request = request
        self.ctx = context_for(source, request.device, request.config.environment)
        method = self.ctx.get_start_method()
        args = (source, request) if method == "fork" else (Parcel.pack(source, request, method), None)
        self.conn, self.child_end = self.ctx.Pipe()  # duplex: the parent acknowledges the child's MEASURED
        fd, log_name = tempfile.mkstemp(prefix="loadtune-trial-", suffix=".log")
        os.close(fd)
        self.log_path = Path(log_name)
        self.started, self.started_wall = time.monotonic(), time.time() - 1
        self.proc = self.ctx.Process(target=_child, args=(*args, self.child_end, str(self.log_path)),
                                     name="loadtune-trial")
        self.watch: Watch | None = None

    def start(self, on_event: OnEvent | None) -> None:
        if self.request.timing.cache is not None:  # the page cache's state the trial is timed in, set before it starts
            self.request.timing.cache.before_run()
        method = self.ctx.get_start_method()
        forked = method == "fork"  # a fork imports nothing; hidden in it, ``__main__`` would stay hidden
        environment = self.request.config.environment if method == "spawn" else {}
        with main_module_hidden() if not forked else contextlib.nullcontext(), sigint_held(), exported(environment):
            self.proc.start()
        self.child_end.close()
        if on_event:
            on_event(Kind.PROCESS, self.proc.pid)  # the trial's session id too: its whole tree is killed by it
        self.watch = Watch(MemorySampler(self.proc.pid, include_parent=self.ctx.get_start_method() == "forkserver"))

    def receive(self, trial: Trial, on_event: OnEvent | None, until: Callable[[Message], bool] | None = None,
                watch: bool = True) -> Ending:
        """Apply the child's messages to ``trial`` as they come, until its last one or the timeout (or,
        ``until``, the first message it accepts: a child driven turn by turn, ``trial.duet``). ``watch``
        False: no memory or GPU sample meanwhile (the caller samples between the child's blocks)."""
        deadline = self.started + self.request.timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            if self.conn.poll(min(0.05, remaining)):
                try:
                    message: Message = self.conn.recv()
                except EOFError:
                    return Ending.SILENT
                apply(trial, message)
                if on_event:
                    on_event(*message.event())
                if message.kind.final:
                    return Ending.DONE if message.kind is Kind.DONE else Ending.FAILED
                self.watch.see(message, self.conn)
                if until is not None and until(message):
                    return Ending.PAUSED
            if watch:
                self.watch.tick()
        trial.error = timeout_error(self.request.timeout_s)
        return Ending.TIMEOUT

    def close(self, trial: Trial) -> str:
        """Kill whatever is left of the trial (also on Ctrl-C: nothing of it survives), remove its
        files, and keep what the parent measured. Returns the tail of the child's log."""
        if self.proc.pid is not None:
            kill_group(self.proc.pid)
            self.proc.join(5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
        remove_orphaned_shared_memory(self.started_wall)
        shutil.rmtree(scratch_dir(self.log_path), ignore_errors=True)
        self.conn.close()
        self.child_end.close()
        trial.wall_s = time.monotonic() - self.started
        if self.watch is not None:
            self.watch.record(trial)
        log_tail = read_tail(self.log_path)
        self.log_path.unlink(missing_ok=True)
        return log_tail


def settle(trial: Trial, request: TrialRequest, ending: Ending, exitcode: int | None, log_tail: str) -> None:
    """The trial's status, and its error when the child gave none."""
    trial.settle_ranks()
    if ending is Ending.DONE and (trial.blocks or not request.needs_blocks):
        trial.status = "ok"
    elif ending is Ending.TIMEOUT and len(trial.blocks) >= request.timing.min_blocks:
        trial.status = "ok"  # enough was measured before the limit: keep it, and say so
        trial.warnings.append(f"stopped by the {request.timeout_s:g} s trial timeout after {len(trial.blocks)} blocks")
        trial.error = None
    elif trial.error is None:
        trial.error = exit_error(exitcode, log_tail) if ending is not Ending.DONE else TrialError(
            kind="failure", message="no timed block completed within the time allowed; raise --timeout"
        )
    if trial.error is not None and trial.error.log_tail is None:
        trial.error.log_tail = log_tail or None


def run_trial(source: SpecRef | LoadedSpec, request: TrialRequest, on_event: OnEvent | None = None) -> Trial:
    """Run one trial in a child process and return what it measured, failed or not. ``on_event`` hears
    every message as ``(Kind, payload)`` (``Kind`` is a ``str``), and first ``Kind.PROCESS`` with the pid."""
    trial = Trial(config=request.config, status="failed")
    try:
        child = TrialProcess(source, request)
    except TrialFailure as exc:
        trial.error = TrialError(kind="failure", message=str(exc))
        return trial
    try:
        child.start(on_event)
        ending = child.receive(trial, on_event)
        if ending is not Ending.TIMEOUT:
            child.proc.join(10)
    finally:
        log_tail = child.close(trial)
    settle(trial, request, ending, child.proc.exitcode, log_tail)
    return trial
