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
import pickle
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path

from loadtune.engine.trial.allocator import keep_in_heap
from loadtune.engine.spec import LoadedSpec, SpecRef, load_spec
from loadtune.engine.trial.faults import diagnose
from loadtune.engine.trial.measure import measure
from loadtune.engine.trial.setup import ConsumerError, TrialFailure
from loadtune.engine.trial.protocol import Kind, Message, TrialRequest, TrialRun
from loadtune.model.trial import TrialError


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


def forget_inherited_fork_server() -> None:
    """A forked trial inherits multiprocessing's record of the scan's fork server, a process that is
    not its child: a ``forkserver`` DataLoader worker would then fail to start, in ``os.waitpid``, with
    ChildProcessError. Forgotten, the first such worker starts a fork server of the trial's own.
    (multiprocessing has no public way to do this; on a Python without these attributes nothing changes.)"""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if server is None or getattr(server, "_forkserver_pid", None) is None:
        return
    alive = getattr(server, "_forkserver_alive_fd", None)
    with contextlib.suppress(OSError, TypeError):
        os.close(alive)  # the scan's fork server lives on: the scan holds its own end
    for name in ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_forkserver_authkey"):
        if hasattr(server, name):
            setattr(server, name, None)


@dataclass(frozen=True)
class Parcel:
    """What a trial started by ``forkserver`` or ``spawn`` runs, pickled by the parent and unpickled
    by the child once its errors are reported: an object that cannot be rebuilt there (a class of a
    module the child cannot import) then fails the trial with its name and the start method, not
    with an exit code and no word."""

    data: bytes
    what: str  # the pickled object, in the user's words
    start_method: str

    @classmethod
    def pack(cls, source: SpecRef | LoadedSpec, request: TrialRequest, start_method: str) -> "Parcel":
        what = described(source)
        try:
            data = pickle.dumps((source, request))
        except Exception as exc:  # noqa: BLE001 - pickle raises several types for one mistake
            raise TrialFailure(unpicklable(what, start_method, exc, "pickle")) from None
        return cls(data, what, start_method)

    def open(self) -> tuple[SpecRef | LoadedSpec, TrialRequest]:
        try:
            return pickle.loads(self.data)
        except Exception as exc:  # noqa: BLE001 - as above
            raise TrialFailure(unpicklable(self.what, self.start_method, exc, "unpickle")) from None


def described(source: SpecRef | LoadedSpec) -> str:
    """The object a trial is sent, as the user knows it: the spec file, or the dataset given as an object."""
    if isinstance(source, SpecRef):
        return f"the spec {source.path}"
    return f"the dataset {type(source.dataset).__name__}" if source.dataset is not None else f"the loader {source.owner}"


def unpicklable(what: str, start_method: str, exc: BaseException, verb: str) -> str:
    return (f"could not {verb} {what} for a trial process started with {start_method!r}: {type(exc).__name__}: {exc}. "
            "Such a process rebuilds what it runs from a pickle: define the dataset's class (and its collate_fn) "
            "at the top level of an importable module, not in __main__ or inside a function")


def _child(source: SpecRef | LoadedSpec | Parcel, request: TrialRequest | None, conn, log_path: str) -> None:
    """Trial process entry: isolated, the request's entry run, figures to the parent as they come.
    Started by ``forkserver`` or ``spawn``, ``source`` is a ``Parcel`` of both (``request`` None)."""
    isolate(log_path)
    spec = None
    try:
        if isinstance(source, Parcel):
            source, request = source.open()
        else:
            forget_inherited_fork_server()
        multiprocessing.set_start_method(request.start_method, force=True)
        if request.config.heap and not started_with(request.config.environment):  # a forked child: set as glibc
            env = request.config.environment  # would have at its start, before the loader allocates
            keep_in_heap(int(env["MALLOC_MMAP_THRESHOLD_"]), int(env["MALLOC_TRIM_THRESHOLD_"]))
        if request.prelude is not None:
            request.prelude()
        loading = time.perf_counter()
        spec = load_spec(source, prepare_data=False) if isinstance(source, SpecRef) else source  # downloads ran in the scan's process
        # the soft limit counts from here, as the parent's hard one does: a slow dataset build uses it up too
        timing = replace(request.timing, max_s=request.timing.max_s - (time.perf_counter() - loading))
        run = TrialRun(source, spec, replace(request, timing=timing), conn, scratch_dir(log_path))
        error = (request.entry or measure_trial)(run)
        conn.send(Message(Kind.DONE) if error is None else Message(Kind.ERROR, error))
    except BaseException as exc:  # noqa: BLE001 - everything is reported, nothing escapes
        try:
            conn.send(Message(Kind.ERROR, error_for(exc, spec, request.config.batch_size if request else None)))
        except (OSError, ValueError):
            pass
    finally:
        conn.close()


def started_with(environment: dict[str, str]) -> bool:
    """This process was started with ``environment`` exported (``harness.exported``): glibc read it at start."""
    return all(os.environ.get(name) == value for name, value in environment.items())


def measure_trial(run: TrialRun) -> None:
    """The default entry: the timed measurement of one loader."""
    import torch

    request = run.request
    measure(run.spec, request.config, torch.device(request.device), request.timing, request.options, run.emit,
            run.measured, workload=request.workload)


def error_for(exc: BaseException, spec: LoadedSpec | None, batch_size: int | None) -> TrialError:
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
