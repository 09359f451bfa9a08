"""Archetype 2, storage latency: every sample waits a few milliseconds on I/O and computes little.

Stands in for reads from an object store, NFS or a busy network disk: a ``time.sleep`` blocks the
way a socket read does, without using the CPU. Waiting workers leave their core free, so the
throughput grows with ``num_workers`` well past the number of cores (roughly workers / latency)
until the main process or the little CPU work becomes the bound: more workers than cores should win,
and a search that stops at "workers = cores" leaves most of the throughput on the table.

Deterministic: the latency and the payload come from a ``random.Random`` / ``torch.Generator``
seeded by the index.
"""

import random
import time

import torch
from torch.utils.data import Dataset

LENGTH = 100_000  # ~30 s to load at 16 workers: no epoch ends inside a trial, even a 10x-long one
LATENCY_S = 0.004  # fixed cost of a request
JITTER_S = 0.001  # up to this much on top, per sample
FEATURES = 1024  # a 4 KiB float32 sample


class StorageLatencyDataset(Dataset):
    def __init__(self, length: int = LENGTH, latency_s: float = LATENCY_S, jitter_s: float = JITTER_S):
        self.length, self.latency_s, self.jitter_s = length, latency_s, jitter_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        rng = random.Random(index)
        time.sleep(self.latency_s + rng.random() * self.jitter_s)  # waiting on storage, not computing
        g = torch.Generator().manual_seed(index)
        return torch.rand(FEATURES, generator=g), index % 10


def dataset() -> StorageLatencyDataset:
    return StorageLatencyDataset()


def object_store() -> StorageLatencyDataset:
    """``storage_latency.py:object_store``: a 20-25 ms first byte, as from an object store. At 4 ms a
    sample, 64 workers on 2 cores use most of the CPU (the waits and the CPU limit together); at 20 ms
    the waits stay the bound up to the 8 x cores workers the search may reach, on any machine."""
    return StorageLatencyDataset(latency_s=0.020, jitter_s=0.005)


loadtune_options = {"batch_size": 32}
