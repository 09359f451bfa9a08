"""Trials in isolated processes (SPEC §5): a crash, hang or leak in the dataset cannot take the scan down.

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
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import psutil

from loadtune.engine.trial.memory import MemorySampler
from loadtune.engine.trial.nvml import UtilisationSampler
from loadtune.model.results import GPUUsage, Trial, TrialError
from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.child import _child, exit_error, main_module_hidden, ranks_dir
from loadtune.engine.trial.protocol import TrialRequest

if TYPE_CHECKING:
    pass

LOG_TAIL_CHARS = 2000


def context_for(source: SpecRef | LoadedSpec, device: str = "cpu"):
    """forkserver (torch preloaded) for spec files; fork for in-memory objects, which may not pickle —
    except on a CUDA device: CUDA does not survive a fork from a process that has used it (as the
    caller's usually has), so there in-memory objects are pickled too (``scan.prepare`` checks they can be)."""
    methods = multiprocessing.get_all_start_methods()
    if isinstance(source, LoadedSpec) and "fork" in methods and not device.startswith("cuda"):
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["loadtune.engine.trial.child"])
        return ctx
    return multiprocessing.get_context("spawn")


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
    they are dead: no process of the trial outlives ``run_trial``."""
    try:
        members = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        members = []
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    deadline = time.monotonic() + wait_s
    while any(still_running(p) for p in members) and time.monotonic() < deadline:
        time.sleep(0.01)


def remove_orphaned_shared_memory(since: float) -> None:
    """Unlink torch's /dev/shm files made since ``since`` whose creator is dead. torch makes one per
    batch handed between processes and unlinks it once received; a worker killed in between (by a
    signal, a timeout, the OOM killer) leaves it behind for good, holding RAM."""
    for path in Path("/dev/shm").glob("torch_*"):
        pid = path.name.split("_")[1]
        try:
            if pid.isdigit() and not psutil.pid_exists(int(pid)) and path.stat().st_mtime >= since:
                path.unlink()
        except OSError:
            pass


def still_running(proc: psutil.Process) -> bool:
    """Not yet dead; a zombie is dead (it waits only for its new parent, init, to reap it)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
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


def run_trial(
    source: SpecRef | LoadedSpec,
    request: TrialRequest,
    on_event: Callable[[str, object], None] | None = None,
) -> Trial:
    """Run one trial in a child process and return what it measured, failed or not."""
    ctx = context_for(source, request.device)
    recv, send = ctx.Pipe()  # duplex: the parent acknowledges the child's "measured"
    fd, log_name = tempfile.mkstemp(prefix="loadtune-trial-", suffix=".log")
    os.close(fd)
    log_path = Path(log_name)
    trial = Trial(config=request.config, status="failed")
    started, started_wall = time.monotonic(), time.time() - 1
    proc = ctx.Process(target=_child, args=(source, request, send, str(log_path)), name="loadtune-trial")
    finished = False
    sampler = None
    gpu_sampler: UtilisationSampler | None = None  # NVML, when the trial runs on a CUDA device and NVML works
    try:
        with main_module_hidden(), sigint_held():
            proc.start()
        send.close()
        if on_event:
            on_event("process", proc.pid)  # the trial's session id too: its whole tree is killed by it
        sampler = MemorySampler(proc.pid, include_parent=ctx.get_start_method() == "forkserver")
        deadline = started + request.timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                trial.error = TrialError(
                    kind="timeout",
                    message=f"no result within the {request.timeout_s:g} s trial timeout (a hang, or a loader "
                    "too slow for the timeout: raise --timeout)",
                )
                break
            if recv.poll(min(0.05, remaining)):
                try:
                    kind, payload = recv.recv()
                except EOFError:
                    break
                if kind == "startup":
                    trial.startup_s = payload
                elif kind == "warmup":
                    trial.warmup = payload
                elif kind == "block":
                    trial.blocks.append(payload)
                elif kind == "warning":
                    trial.warnings.append(payload)
                elif kind == "rank":  # (rank, local rank, kind, figure) from one rank of several
                    trial.record_rank(*payload)
                    if payload[2] == "startup" and sampler.startup_index is None:
                        sampler.mark_startup()  # the first rank's workers are up
                    elif payload[2] == "warmup":
                        sampler.timed = True  # a rank's window has begun: sample sparingly
                elif kind == "error":
                    trial.error = payload
                elif kind == "done":
                    finished = True
                elif kind == "device":
                    gpu_sampler = UtilisationSampler.for_device(payload.get("uuid"), payload.get("index"))
                elif kind == "batch":
                    trial.batch = payload
                elif kind == "cpu":
                    trial.cpu_s = payload
                elif kind == "gpu_memory":
                    trial.gpu = payload
                if on_event:
                    on_event(kind, payload)
                if kind in ("done", "error"):
                    break
                if kind == "warmup":
                    sampler.timed = True  # blocks are timed from here: sample sparingly
                    if gpu_sampler is not None:
                        gpu_sampler.timed = True
                elif kind == "measured":
                    sampler.timed = False
                    if gpu_sampler is not None:
                        gpu_sampler.timed = False
                    sampler.maybe_sample(force=True)  # steady state, nothing timed now
                    recv.send("ack")
                elif kind == "startup":
                    sampler.mark_startup()  # the workers are up: warm-up is untimed
            sampler.maybe_sample()
            if gpu_sampler is not None:
                gpu_sampler.maybe_sample()
        if trial.error is None or trial.error.kind != "timeout":
            proc.join(10)
    finally:  # also on Ctrl-C: nothing of the trial survives it
        if proc.pid is not None:
            kill_group(proc.pid)
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        remove_orphaned_shared_memory(started_wall)
        shutil.rmtree(ranks_dir(log_path), ignore_errors=True)
        recv.close()
        trial.wall_s = time.monotonic() - started
        trial.memory = sampler.result() if sampler else None
        if gpu_sampler is not None and gpu_sampler.samples:
            trial.gpu = trial.gpu or GPUUsage()
            trial.gpu.utilisation = gpu_sampler.samples
        log_tail = read_tail(log_path)
        log_path.unlink(missing_ok=True)
    trial.settle_ranks()
    if finished and (trial.blocks or request.task != "measure"):
        trial.status = "ok"
    elif trial.error is not None and trial.error.kind == "timeout" and len(trial.blocks) >= request.timing.min_blocks:
        trial.status = "ok"  # enough was measured before the limit: keep it, and say so
        trial.warnings.append(f"stopped by the {request.timeout_s:g} s trial timeout after {len(trial.blocks)} blocks")
        trial.error = None
    elif trial.error is None:
        trial.error = exit_error(proc.exitcode, log_tail) if not finished else TrialError(
            kind="failure", message="no timed block completed within the time allowed; raise --timeout"
        )
    if trial.error is not None and trial.error.log_tail is None:
        trial.error.log_tail = log_tail or None
    return trial
