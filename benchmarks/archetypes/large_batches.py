"""Archetype 7, large batches without much work: 3 MiB samples (786,432 float32 values) with trivial
compute, batch 32: a 96 MiB batch.

A sample is a copy of a preloaded array (as from a cache of decoded features), so making it costs a
memcpy. A loader without workers collates each batch in the main process: over glibc's 32 MiB ceiling
for its moving mmap threshold, every batch is mapped afresh by default and each of its pages faulted
in anew, unless the environment keeps batches in the heap (``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` both raised). With workers, batches reach the main process through shared
memory. Which wins depends on the allocator's state as much as on the knobs: the case the scan must
control rather than report as a property of ``num_workers=0``.

Deterministic: the cached arrays are drawn from a seeded generator at construction.
"""

import torch
from torch.utils.data import Dataset

LENGTH = 100_000  # samples are made on demand: no epoch ends inside a trial
VALUES = 3 * 256 * 1024  # float32 values per sample: 3 MiB
CACHED = 4


class LargeBatchDataset(Dataset):
    def __init__(self, length: int = LENGTH, values: int = VALUES, cached: int = CACHED):
        self.length = length
        self.cached = torch.rand((cached, values), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.cached[index % len(self.cached)].clone()


def dataset() -> LargeBatchDataset:
    return LargeBatchDataset()


loadtune_options = {"batch_size": 32}
