"""Archetype: many workers waiting on storage whose latency has a heavy tail.

Stands in for a training job reading an object store or a shared network disk with 16-64 workers:
most reads take ~10 ms, one in twenty waits 5-10 times as long (a cold object, a retried request).
Waiting workers leave their core free, so throughput grows with ``num_workers`` far past the cores;
but with batches made in order, a slow read holds up its whole batch, and the batches arrive at the
main process in bursts. The within-trial and turn-pair spread of such loaders, against the number of
workers and the block length, is what ``benchmarks/many_workers.py`` measures.

Deterministic: latencies and payloads come from a ``random.Random`` / ``torch.Generator`` seeded by
the index.
"""

import random
import time

import torch
from torch.utils.data import Dataset

LENGTH = 200_000  # no epoch ends inside a trial, even at 64 workers
LATENCY_S = 0.010  # a typical read
TAIL_SHARE = 0.05  # reads that wait long ...
TAIL_S = (0.050, 0.100)  # ... this long
FEATURES = 1024  # a 4 KiB float32 sample


class JitteryStorageDataset(Dataset):
    def __init__(self, length: int = LENGTH):
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        rng = random.Random(index)
        wait = rng.uniform(*TAIL_S) if rng.random() < TAIL_SHARE else LATENCY_S * (0.8 + 0.4 * rng.random())
        time.sleep(wait)  # waiting on storage, not computing
        g = torch.Generator().manual_seed(index)
        return torch.rand(FEATURES, generator=g), index % 10


def dataset() -> JitteryStorageDataset:
    return JitteryStorageDataset()


loadtune_options = {"batch_size": 32}
