"""Turning a trial's failure into one clear paragraph: what happened, where, and what to do.

Runs in the trial process, where the exception object and the dataset are still at hand. PyTorch
re-raises a worker's exception in the main process wrapped in text ("Caught ValueError in
DataLoader worker process 0. Original Traceback ..."); the dataset's own type and message are
recovered from it, and the failing index is found by replaying ``__getitem__`` in-process.

A worker that dies is judged on every sign at hand, never on whichever death PyTorch noticed first:
the exit status of each of the loader's workers, and every line of PyTorch's text.
"""

from __future__ import annotations

import re
import signal
import time
import traceback
from multiprocessing.process import BaseProcess
from typing import Any

from loadtune.model.trial import TrialError

WORKER_CAUGHT = re.compile(r"Caught (\w+) in DataLoader worker process (\d+)")
WORKER_SIGNAL = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.\n]+)")
WORKER_EXITED = re.compile(r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) exited unexpectedly")
# PyTorch's words for a worker out of shared memory: its SIGCHLD handler's ("... is killed by signal:
# Bus error. It is possible that dataloader's workers are out of shared memory") and the worker's own
OUT_OF_SHM = re.compile(r"shared memory|bus error|\bshm\b", re.IGNORECASE)
LOCATE_BUDGET_S = 10.0
DEATH_GRACE_S = 0.5  # workers hit by one cause (a full /dev/shm) die within moments of each other

SIGNAL_HINTS = {
    "SIGKILL": "SIGKILL, often the kernel's out-of-memory killer: try fewer workers, a smaller batch or "
    "prefetch_factor, or a dataset that holds its data in tensors rather than Python objects",
    "SIGBUS": "SIGBUS, usually /dev/shm too small for the batches in flight: raise it (docker run "
    "--shm-size=8g, or a larger tmpfs), lower num_workers x prefetch_factor, or call "
    "torch.multiprocessing.set_sharing_strategy('file_system')",
    "SIGSEGV": "SIGSEGV, a crash in native code called by the dataset (an image or "
    "compression library, or a library not safe to use after fork: try multiprocessing_context='spawn')",
}
# PyTorch names a signal as strsignal() does ("Bus error"): back to its name ("SIGBUS")
SIGNAL_BY_TEXT = {signal.strsignal(s): s.name for s in signal.Signals if signal.strsignal(s)}


def original_error(exc: BaseException) -> tuple[str, str, int | None]:
    """(type name, message, worker id) of the dataset's own exception, unwrapped from PyTorch's text."""
    text = str(exc)
    caught = WORKER_CAUGHT.search(text)
    if not caught:
        return type(exc).__name__, text.strip() or type(exc).__name__, None
    name, worker = caught.group(1), int(caught.group(2))
    lines = [line for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    message = last.split(": ", 1)[1] if last.startswith(name) and ": " in last else last
    return name, message.strip() or name, worker


def exception_chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from: PyTorch reports a killed worker as "exited
    unexpectedly", caused by the message that names the signal."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain


def chain_text(exc: BaseException) -> str:
    """The messages of ``exc`` and of the exceptions it was raised from."""
    return "\n".join(str(link) for link in exception_chain(exc))


def loader_workers(exc: BaseException) -> list:
    """The worker processes of the DataLoader iterator the exception came through. torch keeps them
    in the iterator's ``_workers``; the iterator is ``self`` in a frame of the traceback, which keeps
    it (and each worker's exit status) alive."""
    for link in exception_chain(exc):
        tb = link.__traceback__
        while tb is not None:
            workers = getattr(tb.tb_frame.f_locals.get("self"), "_workers", None)
            if isinstance(workers, list) and workers and all(isinstance(w, BaseProcess) for w in workers):
                return workers
            tb = tb.tb_next
    return []


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def signalled(workers: list, grace_s: float = 0.0) -> list[tuple[str, str]]:
    """(pid, signal name) of each worker killed by a signal, read from its exit status. Workers
    still alive get ``grace_s`` in all to finish dying."""
    deadline = time.monotonic() + grace_s
    deaths = []
    for worker in workers:
        try:
            if grace_s > 0:
                worker.join(max(0.0, deadline - time.monotonic()))
            code = worker.exitcode
        except (AssertionError, ValueError, OSError):  # never started, closed, or not this process's child
            continue
        if code is not None and code < 0:
            deaths.append((str(worker.pid), signal_name(-code)))
    return deaths


def worker_death(exc: BaseException, text: str, tb: str) -> TrialError | None:
    """The TrialError for DataLoader workers that died, or None when none did. Every sign counts:
    the signal that killed each worker, and each signal and word of PyTorch's text. SIGBUS from any
    worker, or PyTorch's words for shared memory, point at /dev/shm whichever death it noticed first."""
    workers = loader_workers(exc)
    said = [(pid, SIGNAL_BY_TEXT.get(sig.strip(), sig.strip())) for pid, sig in WORKER_SIGNAL.findall(text)]
    exited = WORKER_EXITED.search(text)
    if not (said or exited or signalled(workers)):
        return None
    deaths = signalled(workers, DEATH_GRACE_S) + said
    shm = [pid for pid, name in deaths if name == "SIGBUS"]
    if shm or OUT_OF_SHM.search(text):
        pids = shm or [pid for pid, _ in deaths] or [exited.group(1).strip()]
        return killed(pids[0], "SIGBUS", exc, tb)
    if deaths:
        return killed(*deaths[0], exc, tb)
    return TrialError(kind="worker_killed", message=f"DataLoader worker(s) {exited.group(1)} exited unexpectedly "
                      "(killed from outside, or out of memory): try fewer workers", exception_type=type(exc).__name__, traceback=tb)


def killed(pid: str, name: str, exc: BaseException, tb: str) -> TrialError:
    who = f"DataLoader workers (pids {pid}) were" if "," in pid else f"a DataLoader worker (pid {pid}) was"
    return TrialError(kind="worker_killed", message=f"{who} killed by {SIGNAL_HINTS.get(name, name)}",
                      exception_type=type(exc).__name__, traceback=tb)


def in_collate(exc: BaseException) -> bool:
    """Did the failure happen while collating samples into a batch (not in the dataset)?"""
    text = str(exc)
    if "Original Traceback" in text:  # from a worker: its traceback is in the message
        tail = text.split("Original Traceback", 1)[1]
    else:
        tail = "".join(traceback.format_tb(exc.__traceback__))
    frames = re.findall(r'File "([^"]+)", line \d+, in (\w+)', tail)
    return bool(frames) and ("collate" in frames[-1][0] or "collate" in frames[-1][1])


def locate_index(dataset: Any, exc_type: str, budget_s: float = LOCATE_BUDGET_S) -> int | None:
    """Replay ``dataset[i]`` in order until it raises the same exception type (bounded in time)."""
    try:
        n = len(dataset)
    except TypeError:
        return None  # an IterableDataset has no index
    deadline = time.monotonic() + budget_s
    for i in range(n):
        if time.monotonic() > deadline:
            return None
        try:
            dataset[i]
        except Exception as exc:  # noqa: BLE001 - we are looking for it
            if type(exc).__name__ == exc_type:
                return i
            return None
    return None


def diagnose(exc: BaseException, dataset: Any = None, batch_size: int | None = None, consumer: bool = False) -> TrialError:
    """A TrialError whose message is one paragraph a user can act on. ``consumer``: the exception came
    from moving the batch to the device or from the spec's ``step``, not from the loader."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]
    text = chain_text(exc)
    if type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in text:
        return TrialError(
            kind="cuda_oom",
            message=f"CUDA out of memory at batch size {batch_size}: smaller batch sizes are still measured; "
            "free GPU memory or lower the batch size",
            exception_type=type(exc).__name__,
            traceback=tb,
        )
    died = worker_death(exc, text, tb)
    if died is not None:
        return died
    if consumer:
        return TrialError(
            kind="step",
            message=f"the spec's step(batch) (or the copy of the batch to the device) raised {type(exc).__name__}: "
            f"{str(exc).strip() or type(exc).__name__}",
            exception_type=type(exc).__name__,
            traceback=tb,
        )
    name, message, worker = original_error(exc)
    where = f" in worker {worker}" if worker is not None else " in the main process"
    if in_collate(exc):
        return TrialError(
            kind="collate",
            message=f"samples could not be collated into a batch{where}: {name}: {message}. Define collate_fn in "
            "the spec (e.g. padding variable-length tensors with torch.nn.utils.rnn.pad_sequence)",
            exception_type=name,
            traceback=tb,
        )
    index = locate_index(dataset, name) if dataset is not None else None
    at = f" at index {index}" if index is not None else ""
    return TrialError(
        kind="exception",
        message=f"the dataset raised {name}{at}{where}: {message}",
        exception_type=name,
        traceback=tb,
        index=index,
    )


def first_tensor(batch: Any):
    """The first tensor leaf of a batch, or None."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch
    values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for value in values:
        found = first_tensor(value)
        if found is not None:
            return found
    return None


class DuplicateDetector:
    """Spots an IterableDataset that every worker replays in full (no sharding by worker id).

    With ``in_order`` batch i comes from worker i mod W. If worker 1's first batch equals worker 0's
    while worker 0's first two batches differ (the data is not simply constant), the workers are
    yielding the same samples, and the throughput counts copies."""

    def __init__(self, num_workers: int):
        self.num_workers = num_workers
        self.first: list[Any] = []

    def see(self, batch: Any) -> None:
        """Keep a host copy of the batch's first tensor. With the ``stream`` strategy the batch is
        already on the GPU: a copy kept there would count in the trial's device memory peak."""
        if len(self.first) < 2 * self.num_workers:
            tensor = first_tensor(batch)
            if tensor is not None:
                tensor = tensor.detach()
                self.first.append(tensor.clone() if tensor.device.type == "cpu" else tensor.cpu())

    @property
    def duplicated(self) -> bool:
        import torch

        same = lambda a, b: a.shape == b.shape and torch.equal(a, b)  # noqa: E731
        w, seen = self.num_workers, self.first
        if len(seen) < w + 1 or same(seen[0], seen[w]):
            return False  # too little seen, or worker 0 repeats itself: constant data proves nothing
        return any(same(seen[0], t) for t in seen[1:w])

    def warning(self) -> str:
        return (
            f"the IterableDataset yields the same samples from each of the {self.num_workers} workers: each "
            "worker replays the whole stream, so training would see duplicates. Shard it in __iter__ with "
            "torch.utils.data.get_worker_info() (id and num_workers)"
        )
