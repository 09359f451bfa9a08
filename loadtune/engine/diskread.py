"""``doctor --storage PATH``: how fast the storage under PATH reads a dataset's files cold, read-only.

A loader's workers read whole files at random, several at once; storage answers many reads in flight
faster than one (an SSD's queues, a network filesystem's round trips overlapped), up to a depth of
its own. So threads read whole files chosen in random order from a sample of the files, at 1, 4, 16
and 64 reads in flight, each level for a fixed time. The sample is dropped from the page cache before
the first level, and the files a pass over it read are dropped again after the pass, outside the time
(a small sample takes several passes): every read is a file's first since its drop, so every read is
cold where the drop works, which a few files read, dropped and checked with ``mincore`` tell first.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from loadtune.analysis.diskread import droppable, level_rates, storage_note
from loadtune.engine.trial.pagecache import (READ_CHUNK, drop, drop_read, files_under, read_file, read_through, resident_share,
                                             total_bytes)
from loadtune.model.storage_read import ReadLevel, StorageReadReport

LEVELS = (1, 4, 16, 64)  # reads in flight
BANDWIDTH_LEVELS = (16, 64)  # the scan's profile: the storage's bandwidth is its rate with many reads in flight
BANDWIDTH_SECONDS = 1.0  # per level there
PIECE = 1 << 20  # a file larger than this is read in pieces of this many bytes, at random offsets
PIECES = 256  # ...at most this many of one file a pass (distinct: every read of a pass is cold)
SECONDS = 1.5  # per level: long enough for windows of a few hundred reads on a disk, short enough for four levels
WINDOWS = 10  # each level's time in this many windows: the median and its interval come from them
MAX_ROUNDS = 50  # passes over a sample that runs out before a level's time (a few files: each pass is short)
SAMPLE = 4096  # files the reads choose from: all dropped first with a write-back (up to a millisecond a file)
PROBE = 16  # files read through, dropped and checked with mincore: does the drop take?


class StorageError(ValueError):
    """A ``--storage`` path with nothing to read: the user's to mend (exit 2)."""


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    device: str


def unescape(text: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) read back."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mountinfo_mounts(text: str) -> list[Mount]:
    """The mounts ``/proc/self/mountinfo`` lists: field 5 the mount point; after `` - `` the type and source."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        head, tail = left.split(), right.split()
        if sep and len(head) >= 5 and len(tail) >= 2:
            mounts.append(Mount(unescape(head[4]), tail[0], unescape(tail[1])))
    return mounts


def mount_of(path: str, mounts: Iterable[Mount]) -> Mount | None:
    """The mount holding the real path ``path``: the longest mount point above it, the last mounted
    where two share a point (the one on top)."""
    best = None
    for m in mounts:
        inside = m.point == "/" or path == m.point or path.startswith(m.point.rstrip("/") + "/")
        if inside and (best is None or len(m.point) >= len(best.point)):
            best = m
    return best


def mounts() -> list[Mount]:
    """This process's mounts: ``/proc/self/mountinfo``, else psutil's partitions."""
    try:
        return mountinfo_mounts(Path("/proc/self/mountinfo").read_text())
    except OSError:
        import psutil

        return [Mount(p.mountpoint, p.fstype, p.device) for p in psutil.disk_partitions(all=True)]


def readable(path: str) -> bool:
    """A file a read can time: it holds data and this process may open it."""
    try:
        return os.stat(path).st_size > 0 and os.access(path, os.R_OK)
    except OSError:
        return False


def sample_files(path: str, size: int, rng: random.Random) -> tuple[int, list[str]]:
    """How many files are under ``path``, and up to ``size`` readable ones of them in random order;
    StorageError where there is nothing to read."""
    how = "name the folder the dataset's files are in, or one of its files (doctor only reads them)"
    if not os.path.exists(path):
        raise StorageError(f"--storage {path}: no such file or folder: {how}.")
    files = files_under([path])
    chosen = [f for f in rng.sample(files, min(size, len(files))) if readable(f)]
    if not chosen:
        held = f"{len(files)} files, none with data this user can read" if files else "no file"
        raise StorageError(f"--storage {path}: holds {held}: {how}.")
    return len(files), chosen


@dataclass(frozen=True)
class Piece:
    """One read: a file whole (``length`` None), or ``length`` bytes of it from ``offset``."""

    path: str
    offset: int = 0
    length: int | None = None


def pieces(files: list[str], rng: random.Random, piece: int = PIECE, most: int = PIECES) -> list[Piece]:
    """The reads of one pass, in random order: each file whole, or, one larger than ``piece``, up to
    ``most`` distinct pieces of it at random offsets. A dataset reads a large file (an array it maps, a
    shard) in parts, and a multi-GiB file read whole would be one read that outlasts a level."""
    out = []
    for path in files:
        size = os.stat(path).st_size if readable(path) else 0
        if size <= piece:
            out.append(Piece(path))
            continue
        slots = size // piece
        out += [Piece(path, k * piece, piece) for k in rng.sample(range(slots), min(most, slots))]
    rng.shuffle(out)
    return out


@dataclass
class Readers:
    """One level's reads: each thread takes the next read of ``order`` and makes it, until the deadline
    or the reads run out; a read counts when it ended by the deadline."""

    order: list[Piece]
    deadline: float = 0.0
    reads: list[tuple[float, int]] = field(default_factory=list)  # (when it ended, bytes)
    taken: Iterator[int] = field(default_factory=itertools.count)  # next() is atomic: no two threads take one file

    def run(self, start_line: threading.Barrier) -> None:
        buffer = bytearray(READ_CHUNK)  # one per thread, reused: no allocation inside the timed reads
        start_line.wait()
        while time.perf_counter() < self.deadline and (i := next(self.taken)) < len(self.order):
            got = self.order[i]
            n = read_file(got.path, buffer, got.offset, got.length)
            done = time.perf_counter()
            if n and done <= self.deadline:
                self.reads.append((done, n))

    def used(self) -> list[str]:
        """The files taken (read, or begun, and so in the cache now)."""
        return sorted({p.path for p in self.order[:min(next(self.taken), len(self.order))]})


def read_round(files: list[str], in_flight: int, seconds: float, rng: random.Random) -> tuple[list[tuple[float, int]], float]:
    """One pass over ``files`` (``pieces``) in a fresh random order by ``in_flight`` threads, for ``seconds`` at most:
    the reads (when each ended, from the round's start; its bytes) and the round's length. The files
    taken are dropped again afterwards, outside the time, so that the next pass reads them cold too."""
    readers = Readers(pieces(files, rng))
    start_line = threading.Barrier(in_flight + 1)
    threads = [threading.Thread(target=readers.run, args=(start_line,), daemon=True) for _ in range(in_flight)]
    for t in threads:
        t.start()
    start = time.perf_counter()
    readers.deadline = start + seconds
    start_line.wait()
    for t in threads:
        t.join()
    span = min(seconds, time.perf_counter() - start)  # the files all read before the deadline: the round ends there
    drop_read(readers.used())  # only read since their drop: nothing to write back
    return [(done - start, n) for done, n in readers.reads], span


def read_level(files: list[str], in_flight: int, seconds: float, rng: random.Random) -> ReadLevel:
    """``in_flight`` reads at a time for ``seconds`` of reading: rounds over the sample (one, unless it
    runs out first), their times laid end to end without the drops between them."""
    reads: list[tuple[float, int]] = []
    active = 0.0
    for _ in range(MAX_ROUNDS):
        got, span = read_round(files, in_flight, seconds - active, rng)
        reads += [(active + t, n) for t, n in got]
        active += span
        if active >= seconds:
            break
    stamps, sizes = [r[0] for r in reads], [r[1] for r in reads]
    files_per_s, mb_per_s = level_rates(stamps, sizes, 0.0, active, WINDOWS)
    return ReadLevel(in_flight, len(stamps), sum(sizes), active, files_per_s, mb_per_s)


def measure(path: str, levels: tuple[int, ...] = LEVELS, seconds: float = SECONDS, sample: int = SAMPLE,
            seed: int = 0) -> StorageReadReport:
    """The storage under ``path``: its mount, whether the page cache lets go of its files, and the cold
    random-read rate of whole files at each of ``levels`` reads in flight. Writes nothing."""
    rng = random.Random(seed)
    found, files = sample_files(path, sample, rng)
    probe = files[:PROBE]
    read_through(probe)
    after_read = resident_share(probe)
    asked = drop(files)
    after_drop = resident_share(probe)
    drops = droppable(after_drop, asked)
    where = mount_of(os.path.realpath(path), mounts())
    fstype = where.fstype if where else None
    return StorageReadReport(
        path=os.path.abspath(path), filesystem=fstype, mount_point=where.point if where else None,
        device=where.device if where else None, files_found=found, sample_files=len(files), sample_bytes=total_bytes(files),
        resident_after_read=after_read, resident_after_drop=after_drop, droppable=drops,
        levels=[read_level(files, n, seconds, rng) for n in levels],
        note=storage_note(drops, after_read, after_drop, fstype),
        piece_bytes=PIECE if any(os.stat(f).st_size > PIECE for f in files) else None,
    )


def read_bandwidth(files: Iterable[str], levels: tuple[int, ...] = BANDWIDTH_LEVELS, seconds: float = BANDWIDTH_SECONDS,
                   sample: int = SAMPLE, seed: int = 0) -> ReadLevel | None:
    """The storage's bandwidth for a dataset's ``files``: cold reads of them (whole, or in pieces) at
    each of ``levels`` reads in flight, and the level that read the most MB/s; None without a file to
    read. The files read are dropped again afterwards (every one was cold before: nothing is written
    back). A scan's bound divides it by the bytes a sample makes storage fetch."""
    rng = random.Random(seed)
    files = [f for f in files if readable(f)]
    if not files:
        return None
    chosen = rng.sample(files, min(sample, len(files)))
    drop_read(chosen)
    read = [read_level(chosen, n, seconds, rng) for n in levels]
    return max(read, key=lambda level: level.mb_per_s.median)
