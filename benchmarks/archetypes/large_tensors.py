"""Archetype 3, large tensors: 3 x 224 x 224 float32 samples (588 KiB each) with trivial compute.

A sample is a copy of a preloaded image (as from a cache of decoded, normalised images), so making
it costs a memcpy. What costs is moving the bytes: collating a batch of 32 (19 MiB) and, with
workers, writing it to shared memory in the worker and mapping it in the main process, where the
consumer's first read of every page faults it in. ``step`` stands for the consumer reading the
batch once (as the host-to-device copy does on a machine with a GPU; here there is none). Whether
workers pay for their transfer is what the scan has to find out: no rule of thumb says.

Every batch is fresh memory (19 MiB), so the figures follow the cost of page faults, which on a
virtual machine whose host reclaims guest memory can change by 10-100x from one minute to the next:
compare this archetype's numbers only within one run.

Deterministic: the cached images are drawn from a seeded generator at construction.
"""

import torch
from torch.utils.data import Dataset

LENGTH = 100_000  # samples are made on demand: no epoch ends inside a trial, even a 10x-long one
SHAPE = (3, 224, 224)
CACHED = 8  # distinct images kept in memory (4.6 MiB); sample i is a copy of image i % CACHED


class LargeTensorDataset(Dataset):
    def __init__(self, length: int = LENGTH, shape: tuple = SHAPE, cached: int = CACHED):
        self.length = length
        g = torch.Generator().manual_seed(0)
        self.images = torch.rand((cached, *shape), generator=g)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.images[index % len(self.images)].clone(), index % 10


def dataset() -> LargeTensorDataset:
    return LargeTensorDataset()


def step(batch) -> None:
    """The consumer reads the batch once, as a host-to-device copy would."""
    images, _ = batch
    images.sum()


loadtune_options = {"batch_size": 32}
