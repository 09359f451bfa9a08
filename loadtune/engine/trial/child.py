"""TODO docstring."""

from __future__ import annotations




import contextlib
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import replace


from loadtune.engine.trial.faults import diagnose
from loadtune.engine.trial.measure import ConsumerError, TrialFailure, measure
from loadtune.model.results import TrialError
from loadtune.engine.spec import LoadedSpec, SpecRef, load_spec
from loadtune.engine.trial.protocol import TrialRequest
from pathlib import Path


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
            from loadtune.engine.stages import profile  # the profiling run: its own process, like a trial, never inside one

            profile(spec, request.config, torch.device(request.device), timing, request.options, emit,
                    workload=request.workload)
        elif request.ranks is not None:  # this process becomes the ranks' elastic agent, as torchrun's is
            from loadtune.engine.distributed.agent import run_ranks

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


def ranks_dir(log_path: str | Path) -> Path:
    """Where the ranks' elastic agent keeps its files (error records, logs); removed with the trial."""
    return Path(f"{log_path}.ranks")
