"""Batches over 32 MiB collated by a loader without workers: glibc maps each one afresh by default,
so its main process faults every page of every batch in anew (the allocator's state, not a knob)."""

import torch
from torch.utils.data import Dataset

SAMPLE = 256 * 1024  # float32 values: 1 MiB a sample, 40 MiB a batch of 40


class Big(Dataset):
    def __init__(self):
        self.cached = torch.rand(4, SAMPLE, generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        return self.cached[i % 4].clone()


def dataset():
    return Big()


loadtune = {"batch_size": 40}
