"""The page cache's state for a dataset's files, and the bytes a process tree read from storage.

A dataset read from files runs many times faster from the page cache than from storage, so every
config of a scan is measured with the files in one state (docs/measuring.md, "Storage"): read through
once (warm), or dropped from the cache before every trial and every turn of a race (cold). Dropping
uses ``posix_fadvise(POSIX_FADV_DONTNEED)``: per file, no root needed; the kernel keeps pages that a
live process maps or that are dirty, and some network filesystems ignore the advice, which is why
``resident_bytes`` (``mincore``) checks what it did.

``/proc/<pid>/io`` counts ``read_bytes`` (what the process made storage fetch) apart from ``rchar``
(every byte ``read()`` returned, cached or not). A worker's counters pass to the main process when it
is reaped, so the main process's reading plus its live workers' covers workers that came and went.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import mmap
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

READ_CHUNK = 1 << 20  # read-through in chunks of this many bytes
PAGE = mmap.PAGESIZE


def files_under(roots: Iterable[str], suffixes: Iterable[str] = (), recursive: bool = True) -> tuple[str, ...]:
    """Every regular file under ``roots`` (a root may be a file, always kept), sorted; only those whose
    name ends in one of ``suffixes`` where any are given; ``recursive`` False: a folder's own files only.
    Links are followed to files, never to folders (a link loop must not hang a scan)."""
    found: list[str] = []
    ends = tuple(suffixes)
    for root in roots:
        if os.path.isfile(root):
            found.append(os.path.abspath(root))
            continue
        for folder, subfolders, names in os.walk(root):
            found += [os.path.join(folder, n) for n in names
                      if (not ends or n.endswith(ends)) and os.path.isfile(os.path.join(folder, n))]
            if not recursive:
                subfolders.clear()
    return tuple(sorted(set(found)))


@lru_cache(maxsize=4)
def cached_files(roots: tuple[str, ...], suffixes: tuple[str, ...] = (), recursive: bool = True) -> tuple[str, ...]:
    """``files_under``, listed once per process: a folder of 20,000 files takes a tenth of a second to walk."""
    return files_under(roots, suffixes, recursive)


def total_bytes(files: Iterable[str]) -> int:
    """The files' size on storage (their apparent size: what reading them fetches)."""
    total = 0
    for path in files:
        try:
            total += os.stat(path).st_size
        except OSError:
            continue
    return total


def drop(files: Iterable[str]) -> int:
    """Ask the kernel to drop each file's clean pages from the page cache; returns how many files it
    could ask for (a file that vanished or cannot be opened is skipped)."""
    return _drop(files, write_back=True)


def drop_read(files: Iterable[str]) -> int:
    """``drop`` for files only read since they were last dropped: their pages are clean, so none is
    written back first (``fdatasync`` can flush the disk's cache even for a clean file, up to a
    millisecond a file while the journal commits)."""
    return _drop(files, write_back=False)


def _drop(files: Iterable[str], write_back: bool) -> int:
    asked = 0
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            if write_back:
                os.fdatasync(fd)  # dirty pages (a dataset just written) are never dropped; written back, they are
        except OSError:
            pass
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            asked += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return asked


def read_through(files: Iterable[str]) -> int:
    """Read every file once from start to end, so that its pages are in the page cache; returns the
    bytes read."""
    buffer = bytearray(READ_CHUNK)
    return sum(read_file(path, buffer) for path in files)


def read_file(path: str, buffer: bytearray, offset: int = 0, length: int | None = None) -> int:
    """Read one file through ``buffer`` (reused: a timed read allocates nothing), from ``offset`` for
    ``length`` bytes (None: to its end); returns the bytes read, 0 for a file that cannot be opened."""
    total = 0
    view = memoryview(buffer)
    try:
        with open(path, "rb", buffering=0) as f:
            if length is not None and hasattr(os, "posix_fadvise"):  # a piece: no readahead past it
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
            if offset:
                f.seek(offset)
            while length is None or total < length:
                n = f.readinto(view if length is None else view[:min(len(view), length - total)])
                if not n:
                    break
                total += n
    except OSError:
        pass
    return total


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


MAP_FAILED = ctypes.c_void_p(-1).value


def resident_bytes(path: str) -> int | None:
    """Bytes of ``path`` in the page cache now (``mincore`` over a read-only mapping, which reads no
    page in); None where it cannot be told (no libc, a file that cannot be opened or mapped)."""
    libc = _libc()
    if libc is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address is None or address == MAP_FAILED:
            return None
        try:
            pages = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(address, size, vec) != 0:
                return None
            return min(size, sum(v & 1 for v in vec) * PAGE)
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


def resident_share(files: Sequence[str], limit: int = 2000) -> float | None:
    """The share of the files' bytes in the page cache now, judged on at most ``limit`` files spread
    evenly over them (mapping 100,000 files would take seconds); None where it cannot be told."""
    if not files:
        return None
    step = max(1, len(files) // limit)
    resident = size = 0
    for path in files[::step]:
        got = resident_bytes(path)
        if got is None:
            return None
        resident += got
        try:
            size += os.stat(path).st_size
        except OSError:
            continue
    return resident / size if size else None


MADV_DONTNEED = 4  # Linux: forget the range's page-table entries; a file mapping refaults from the file


@lru_cache(maxsize=4)
def _real_paths(files: tuple[str, ...]) -> frozenset[str]:
    return frozenset(os.path.realpath(f) for f in files)


def release_mappings(files: tuple[str, ...], maps: str = "/proc/self/maps") -> int:
    """Forget this process's page-table entries for its read-only mappings of ``files`` (``madvise
    MADV_DONTNEED``), so that a drop can evict the pages only it mapped: the kernel keeps a mapped page
    however it is advised, and a memory-mapped dataset (a numpy memmap, Arrow files) maps its files in
    the process that reads them. The mapping stays valid: the next access faults the page in again,
    from storage once it is dropped. A writable mapping is left alone (forgetting a private page that
    was written would lose the write). Returns the bytes released; 0 where nothing maps the files."""
    libc = _libc()
    try:
        lines = Path(maps).read_text().splitlines()
    except OSError:
        return 0
    wanted = None
    released = 0
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or parts[1][1] == "w" or not parts[5].startswith("/"):
            continue
        wanted = _real_paths(files) if wanted is None else wanted
        if parts[5] not in wanted or libc is None:
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        if libc.madvise(start, end - start, MADV_DONTNEED) == 0:
            released += end - start
    return released


# ---- bytes read by a process tree --------------------------------------------------------------------


@dataclass(frozen=True)
class IOCount:
    """What a process (or a tree) has read so far: bytes fetched from storage, bytes ``read()`` returned."""

    storage: int
    read: int

    def __sub__(self, other: "IOCount") -> "IOCount":
        return IOCount(max(0, self.storage - other.storage), max(0, self.read - other.read))

    def __add__(self, other: "IOCount") -> "IOCount":
        return IOCount(self.storage + other.storage, self.read + other.read)


def io_of(pid: int | str = "self") -> IOCount | None:
    """``/proc/<pid>/io``'s ``read_bytes`` and ``rchar``; None where it cannot be read (another
    platform, a process that ended, no permission)."""
    try:
        text = Path(f"/proc/{pid}/io").read_text()
    except OSError:
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    try:
        return IOCount(int(fields["read_bytes"]), int(fields["rchar"]))
    except (KeyError, ValueError):
        return None


def tree_io(pids: Iterable[int]) -> IOCount | None:
    """This process's counters (reaped workers' included) plus those of its live workers ``pids``;
    None where this process's cannot be read. A worker that cannot be read (it was exiting) counts 0."""
    total = io_of("self")
    if total is None:
        return None
    for pid in pids:
        got = io_of(pid)
        if got is not None:
            total = total + got
    return total


@dataclass(frozen=True)
class CacheSetting:
    """The page cache's state a scan measures in, as the parent sets it before each run: ``cold`` drops
    the dataset's files before every trial and every timed turn; ``warm`` leaves them cached (the
    scan read them through once before its first trial). ``roots``: the dataset's files or folders."""

    state: str  # "warm" | "cold"
    roots: tuple[str, ...]
    suffixes: tuple[str, ...] = ()  # only files named so (those the dataset was seen to read); none: every file
    recursive: bool = True

    @property
    def files(self) -> tuple[str, ...]:
        return cached_files(self.roots, self.suffixes, self.recursive)

    def before_run(self) -> None:
        """Before a trial's process starts or a turn is timed: a cold state drops the files again. Without a
        write-back: the scan wrote them back once when it set the state (``engine.storage.set_up``), and
        since then they were only read (with one, 20,000 files took 2.5 s a drop here; without, 0.04 s)."""
        if self.state == "cold":
            drop_read(self.files)

    def release(self, workers: Sequence[int] = (), ack: str | None = None) -> None:
        """In a process that reads the dataset, between its timed blocks: a cold state forgets the
        process's own mappings of the files (``release_mappings``), which would keep their pages cached
        through every drop, and has its loader's live ``workers`` forget theirs (``release_workers``:
        they map the files too where a worker reads them, and a worker that persists across epochs, or
        rests between a race's turns, would otherwise read warm every epoch after its first)."""
        if self.state == "cold":
            release_mappings(self.files)
            if workers and ack is not None:
                release_workers(workers, ack)


# ---- a loader's workers forget their mappings too ------------------------------------------------------

RELEASE_SIGNAL = signal.SIGUSR2  # asks a worker to forget its mappings of the dataset's files
RELEASE_WAIT_S = 1.0  # the longest a release waits for its workers (a worker busy in C code answers late)


@dataclass(frozen=True)
class WorkerRelease:
    """A loader's ``worker_init_fn`` in a cold state: each worker answers ``RELEASE_SIGNAL`` by forgetting
    its own mappings of the files and appending a byte to ``ack``, then runs the loader's own
    ``worker_init_fn`` (``then``). No process can forget another's mappings, so the worker is asked; a
    file, not a pipe, carries the answer so that it works with every start method."""

    setting: CacheSetting
    ack: str
    then: Callable[[int], None] | None = None

    def __call__(self, worker_id: int) -> None:
        signal.signal(RELEASE_SIGNAL, self.answer)
        if self.then is not None:
            self.then(worker_id)

    def answer(self, signum: int, frame: object) -> None:
        release_mappings(self.setting.files)
        fd = os.open(self.ack, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, b".")
        finally:
            os.close(fd)


def answer_file() -> str:
    """A new empty file for workers' answers (``WorkerRelease``), removed when this process exits; the
    process ignores ``RELEASE_SIGNAL`` from now on, so that a worker it forks ignores one that comes
    before its ``worker_init_fn`` has run, instead of ending (the signal's default)."""
    fd, path = tempfile.mkstemp(prefix="loadtune-release-", suffix=".answers")
    os.close(fd)
    atexit.register(_remove, path)
    try:
        signal.signal(RELEASE_SIGNAL, signal.SIG_IGN)
    except ValueError:  # not the main thread: a signal's handler is the main thread's to set
        pass
    return path


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def release_workers(pids: Sequence[int], ack: str, wait_s: float = RELEASE_WAIT_S) -> int:
    """Ask each worker (``WorkerRelease`` installed) to forget its mappings, and wait until every one
    asked has answered or ``wait_s`` passed; returns how many answered. A worker that is gone is skipped."""
    with open(ack, "wb"):
        pass  # no answers yet
    asked = 0
    for pid in pids:
        try:
            os.kill(pid, RELEASE_SIGNAL)
            asked += 1
        except ProcessLookupError:
            continue
    deadline = time.perf_counter() + wait_s
    while (answered := os.path.getsize(ack)) < asked and time.perf_counter() < deadline:
        time.sleep(0.001)
    return answered


def family_io() -> IOCount | None:
    """This process's counters and those of every live process below it (a training loop's loaders'
    workers, however many loaders are alive); None where this process's cannot be read."""
    import psutil

    try:
        pids = [p.pid for p in psutil.Process().children(recursive=True)]
    except psutil.Error:
        pids = []
    return tree_io(pids)
