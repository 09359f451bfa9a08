"""The C allocator's settings a config asks for (``TrialConfig.heap``), applied in its trial process.

A loader without workers collates every batch in the main process. With glibc's defaults a batch over
its moving mmap threshold (at most 32 MiB) is mapped afresh each time, and smaller ones come fresh too
whenever the heap was trimmed after a free: each page is then faulted in anew, and the loader runs at
one of two speeds depending on the process's history. With the mmap threshold above the batch and the
trim threshold above that, batches stay in the heap. A training job sets both in its environment
(``TrialConfig.environment``) before Python starts, and so does the scan: such a config's trial is a
fresh interpreter started with them exported (``harness.context_for``), so that it is measured as the
user will run it (``benchmarks/heap_env.py`` read the two ways apart by more than the ±5% that would
let one stand for the other). Only a dataset given as an in-memory object that must be forked gets the
same two parameters here, through ``mallopt``, which is what glibc does with the variables at its start.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3


class AllocatorError(RuntimeError):
    """The C library refused the settings: not glibc, or a threshold past what it accepts."""


def keep_in_heap(mmap_threshold: int, trim_threshold: int) -> None:
    """Set glibc's mmap and trim thresholds in this process, as ``MALLOC_MMAP_THRESHOLD_`` and
    ``MALLOC_TRIM_THRESHOLD_`` would at its start; raises ``AllocatorError`` where they cannot be."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        raise AllocatorError("the heap setting needs glibc's mallopt, which this platform's C library lacks") from None
    for param, value, env in ((M_MMAP_THRESHOLD, mmap_threshold, "MALLOC_MMAP_THRESHOLD_"),
                              (M_TRIM_THRESHOLD, trim_threshold, "MALLOC_TRIM_THRESHOLD_")):
        if mallopt(ctypes.c_int(param), ctypes.c_int(min(value, 2**31 - 1))) != 1:
            raise AllocatorError(f"the C library refused {env}={value} (glibc accepts an mmap threshold up to a limit "
                                 "that depends on its version): the heap setting cannot be measured here")
