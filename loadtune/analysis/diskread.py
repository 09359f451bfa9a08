"""What ``doctor --storage`` decides from its readings: whether the page cache let go of the files,
the read rates of a level from the reads' stamps, and what the cache's behaviour means in words.

``POSIX_FADV_DONTNEED`` is advice: local filesystems drop a file's clean pages, some network and FUSE
filesystems ignore it, and a file that stays cached reads at memory's pace, not storage's. So the
drop is judged by what ``mincore`` sees afterwards, never by the call succeeding.
"""

from __future__ import annotations

from loadtune.analysis.pace import window_sums
from loadtune.model.estimate import Estimate, estimate

DROPPED = 0.05  # at most this share of the dropped files' bytes still cached: the drop took (a scan judges it so too)
CACHED = 0.5  # under this share of a file just read in the cache: the filesystem reads past the page cache
MB = 1e6


def droppable(after_drop: float | None, asked: int) -> bool | None:
    """Whether dropping worked: the kernel took the advice for some file (``asked``) and at most
    ``DROPPED`` of the files' bytes stayed cached; None where ``mincore`` could not tell."""
    if asked == 0:
        return False
    if after_drop is None:
        return None
    return after_drop <= DROPPED


def level_rates(stamps: list[float], sizes: list[int], start: float, end: float, windows: int) -> tuple[Estimate, Estimate]:
    """Files/s and MB/s of the reads that ended at ``stamps`` (``sizes`` their bytes), as the median of
    ``windows`` equal windows from ``start`` to ``end``: a stall shows as a spread, not as a lower mean."""
    window_s = (end - start) / windows
    files = window_sums(stamps, [1] * len(stamps), window_s, start, windows)
    data = window_sums(stamps, list(sizes), window_s, start, windows)
    return estimate([n / window_s for n in files]), estimate([b / MB / window_s for b in data])


def storage_note(drops: bool | None, after_read: float | None, after_drop: float | None, filesystem: str | None) -> str | None:
    """What the page cache's behaviour on this filesystem means for the figures and for a scan; None
    where dropping worked as on a local disk."""
    where = filesystem or "this filesystem"
    if drops is False:
        kept = f"kept {after_drop:.0%} of the files' bytes" if after_drop is not None else "refused the advice for every file"
        return (f"{where} {kept} in the page cache after they were dropped (POSIX_FADV_DONTNEED; some network "
                "filesystems ignore it): the reads above are warm, not cold. A scan's cold state cannot be set here: "
                "it measures warm and says the cold figures could not be measured.")
    if drops is None:
        return "mincore could not tell what stayed in the page cache: whether the reads above were cold is not known."
    if after_read is not None and after_read < CACHED:
        return (f"{where} kept {after_read:.0%} of a file just read in the page cache: reads there pass it by, so every "
                "read comes from storage, warm or cold, and a scan's two states measure the same.")
    return None
