"""The C allocator as a knob: where a loader without workers takes each batch's pages fresh from the
kernel, the search measures it again with its batches kept in the heap.

Its speed then follows the allocator's state, not only its knobs: glibc maps a batch over 32 MiB afresh
every time, and smaller ones whenever the heap was trimmed after a free, which depends on the process's
history; faulted in anew, a loader without workers ran at a third to a quarter of its speed with the
batches kept (benchmarks/RESULTS.md, "Fresh pages"). Rather than report a figure that rests on that
state, the search sets it: the same config with glibc's thresholds sized from its batch
(``TrialConfig.heap``), measured and raced like any other config.
"""

from __future__ import annotations

from loadtune.model.config import HEAP_MIN_BATCH, heap_for
from loadtune.model.results import ScanResult
from loadtune.search.strategy import Proposal, measured, skipped_keys


def heap_trials(result: ScanResult) -> list[Proposal]:
    """The configs without workers the search measured whose batches glibc could map afresh
    (``HEAP_MIN_BATCH`` or more), each with the heap setting for its batch, where not yet measured.
    Not only those whose run took fresh pages (``footprint.takes_fresh_pages``): a run in the reusing
    state says nothing of the next process, which may fault every batch in anew (on the README's
    example, the screening's run of ``w0`` took none in scans whose race legs then ran in both states)."""
    done, skipped = measured(result), skipped_keys(result)
    wanted = []
    for c in done.values():
        if c.config.heap or c.config.num_workers or c.batch is None or c.batch.nbytes < HEAP_MIN_BATCH:
            continue
        kept = c.config.with_knobs(heap=heap_for(c.batch.nbytes))
        if kept.heap and kept not in done and kept.key not in skipped and kept not in wanted:
            wanted.append(kept)
    return [Proposal(c) for c in wanted]
