"""Archetype 1, CPU-bound: every sample costs a few milliseconds of single-threaded torch compute.

Stands in for decode + augmentation (an ImageFolder with the usual transforms): the work is pure
CPU, so worker processes add throughput until the usable cores run out, and more workers than cores
only add contention. The expected best is near ``num_workers = usable cores``.

The work runs on one thread in every process (DataLoader workers already use one; the main process
is set to one too, the first time it loads a sample) so that ``num_workers=0`` is not secretly
parallel through torch's intra-op threads and the per-sample cost is the same in every process.

Deterministic: each sample is drawn from a ``torch.Generator`` seeded by its index.
"""

import torch
from torch.utils.data import Dataset

LENGTH = 20_000  # tens of seconds of loading: no epoch ends inside a trial, even a 10x-long one
SIZE = 64  # the transform works on SIZE x SIZE matrices
ITERATIONS = 100  # matmul + tanh rounds per sample: about 3 ms on one idle core of a 2020s x86 CPU


def one_thread() -> None:
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


class CpuBoundDataset(Dataset):
    def __init__(self, length: int = LENGTH, iterations: int = ITERATIONS, size: int = SIZE):
        self.length, self.iterations, self.size = length, iterations, size

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        one_thread()
        g = torch.Generator().manual_seed(index)
        x = torch.rand(self.size, self.size, generator=g)
        w = torch.rand(self.size, self.size, generator=g) / self.size
        for _ in range(self.iterations):
            x = torch.tanh(x @ w + x)
        return x, index % 10


def dataset() -> CpuBoundDataset:
    return CpuBoundDataset()


loadtune_options = {"batch_size": 32}
