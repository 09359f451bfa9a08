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
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import psutil

from .faults import diagnose
from .measure import ConsumerError, LoaderOptions, Timing, TrialFailure, measure
from .memory import MemorySampler
from .nvml import UtilisationSampler
from .plan import TrialConfig
from .results import GPUUsage, Trial, TrialError
from .spec import LoadedSpec, SpecRef, load_spec
from .workload import StepWorkload

if TYPE_CHECKING:
    from .distributed import RankSetup

LOG_TAIL_CHARS = 2000


@dataclass(frozen=True)
class TrialRequest:
    """Everything a child needs to run one trial."""

    config: TrialConfig
    device: str
    timing: Timing
    options: LoaderOptions
    timeout_s: float
    start_method: str  # how DataLoader workers start in the user's training (a forkserver child would inherit forkserver)
    workload: StepWorkload | None = None  # the calibrated synthetic step of --step-ms, in place of the spec's
    ranks: RankSetup | None = None  # several ranks per trial, launched by torch.distributed's elastic agent
    task: str = "measure"  # "measure": the timed trial; "stages": the profiling run of stages.py (emits "stages")


def context_for(source: SpecRef | LoadedSpec, device: str = "cpu"):
    """forkserver (torch preloaded) for spec files; fork for in-memory objects, which may not pickle —
    except on a CUDA device: CUDA does not survive a fork from a process that has used it (as the
    caller's usually has), so there in-memory objects are pickled too (``scan.prepare`` checks they can be)."""
    methods = multiprocessing.get_all_start_methods()
    if isinstance(source, LoadedSpec) and "fork" in methods and not device.startswith("cuda"):
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["loadtune.runner"])
        return ctx
    return multiprocessing.get_context("spawn")


@contextlib.contextmanager
def main_module_hidden():
    """Start children without making them re-import the caller's ``__main__``.

    forkserver (like spawn) re-runs the parent's main script in each child; a trial needs nothing
    from it, and a user's notebook-style script without an ``if __name__ == "__main__"`` guard would
    run again inside every trial. Hiding the attributes it keys on, for the instant of ``start()``,
    leaves the child's ``__main__`` empty."""
    main = sys.modules.get("__main__")
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if main and name in main.__dict__}
    if "__file__" in saved:
        del main.__file__
    if "__spec__" in saved:
        main.__spec__ = None
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(main, name, value)


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


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent (the fork server, which exits with the CLI) dies,
    so a CLI killed without a chance to clean up leaves no trial behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _child(source: SpecRef | LoadedSpec, request: TrialRequest, conn, log_path: str) -> None:
    """Trial process entry: own session, output to a log file, figures to the parent as they come."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # forked while the parent held Ctrl-C
    die_with_parent()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    spec = None
    try:
        import torch

        multiprocessing.set_start_method(request.start_method, force=True)
        loading = time.perf_counter()
        spec = load_spec(source) if isinstance(source, SpecRef) else source
        # the soft limit counts from here, as the parent's hard one does: a slow dataset build uses it up too
        timing = replace(request.timing, max_s=request.timing.max_s - (time.perf_counter() - loading))
        emit = lambda kind, payload: conn.send((kind, payload))  # noqa: E731

        def measured() -> None:
            """Let the parent take its memory sample of the whole tree, untimed, before teardown."""
            conn.send(("measured", None))
            if conn.poll(10):
                conn.recv()

        if request.task == "stages":
            from .stages import profile  # the profiling run: its own process, like a trial, never inside one

            profile(spec, request.config, torch.device(request.device), timing, request.options, emit,
                    workload=request.workload)
        elif request.ranks is not None:  # this process becomes the ranks' elastic agent, as torchrun's is
            from .distributed import run_ranks

            run_ranks(source, spec, replace(request, timing=timing), conn, ranks_dir(log_path))
            return
        else:
            measure(spec, request.config, torch.device(request.device), timing, request.options, emit, measured,
                    workload=request.workload)
        conn.send(("done", None))
    except BaseException as exc:  # noqa: BLE001 - everything is reported, nothing escapes
        error = error_for(exc, spec, request.config.batch_size)
        try:
            conn.send(("error", error))
        except (OSError, ValueError):
            pass
    finally:
        conn.close()


def error_for(exc: BaseException, spec: LoadedSpec | None, batch_size: int) -> TrialError:
    """The TrialError for an exception raised while measuring: the dataset's, the consumer's, or ours."""
    if isinstance(exc, TrialFailure):
        return TrialError(kind="failure", message=str(exc))
    if isinstance(exc, ConsumerError):
        return diagnose(exc.__cause__, batch_size=batch_size, consumer=True)
    return diagnose(exc, spec.dataset if spec else None, batch_size)


def ranks_dir(log_path: str | Path) -> Path:
    """Where the ranks' elastic agent keeps its files (error records, logs); removed with the trial."""
    return Path(f"{log_path}.ranks")


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


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def exit_error(exitcode: int | None, log_tail: str, who: str = "trial process") -> TrialError:
    """Why a child ended without reporting: killed by a signal, or exited early."""
    if exitcode is not None and exitcode < 0:
        name = signal_name(exitcode)
        hint = {
            "SIGKILL": " (often the kernel's out-of-memory killer: try fewer workers or a smaller batch)",
            "SIGBUS": " (often /dev/shm too small for the batches in flight)",
            "SIGSEGV": " (a crash in native code of the dataset or a library it calls)",
        }.get(name, "")
        return TrialError(kind="killed", message=f"{who} killed by {name}{hint}", log_tail=log_tail)
    return TrialError(kind="crashed", message=f"{who} exited with code {exitcode} without a result", log_tail=log_tail)


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
