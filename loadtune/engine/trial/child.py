"""The trial's child process: what runs between ``harness.run_trial`` starting it and its last message.

The child isolates itself (a session of its own, so that the parent's kill reaches every DataLoader
worker; output to a log file; death with its parent), loads the spec, and runs the request's entry:
the timed measurement by default, or whatever the layer above passed (the profiling run, the ranks'
agent). It then reports ``done``, or the error in the dataset's own words: nothing it raises escapes
unreported. The error helpers here are shared with the ranks, which fail the same ways.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

from loadtune.engine.spec import LoadedSpec, SpecRef, load_spec
from loadtune.engine.trial.faults import diagnose
from loadtune.engine.trial.measure import ConsumerError, TrialFailure, measure
from loadtune.engine.trial.protocol import Kind, Message, TrialRequest, TrialRun
from loadtune.model.results import TrialError


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


def isolate(log_path: str) -> None:
    """Own session (the parent kills the whole group by it), output to the trial's log file."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # forked while the parent held Ctrl-C
    die_with_parent()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)


def _child(source: SpecRef | LoadedSpec, request: TrialRequest, conn, log_path: str) -> None:
    """Trial process entry: isolated, the request's entry run, figures to the parent as they come."""
    isolate(log_path)
    spec = None
    try:
        multiprocessing.set_start_method(request.start_method, force=True)
        loading = time.perf_counter()
        spec = load_spec(source, prepare_data=False) if isinstance(source, SpecRef) else source  # downloads ran in the scan's process
        # the soft limit counts from here, as the parent's hard one does: a slow dataset build uses it up too
        timing = replace(request.timing, max_s=request.timing.max_s - (time.perf_counter() - loading))
        run = TrialRun(source, spec, replace(request, timing=timing), conn, scratch_dir(log_path))
        error = (request.entry or measure_trial)(run)
        conn.send(Message(Kind.DONE) if error is None else Message(Kind.ERROR, error))
    except BaseException as exc:  # noqa: BLE001 - everything is reported, nothing escapes
        try:
            conn.send(Message(Kind.ERROR, error_for(exc, spec, request.config.batch_size)))
        except (OSError, ValueError):
            pass
    finally:
        conn.close()


def measure_trial(run: TrialRun) -> None:
    """The default entry: the timed measurement of one loader."""
    import torch

    request = run.request
    measure(run.spec, request.config, torch.device(request.device), request.timing, request.options, run.emit,
            run.measured, workload=request.workload)


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


def scratch_dir(log_path: str | Path) -> Path:
    """A folder of the trial's own, next to its log (the ranks' agent keeps its error records and logs
    there); the harness removes it with the trial."""
    return Path(f"{log_path}.ranks")
