"""Tiny datasets each built to be bound by one stage: CPU work, waiting (sleep, as on storage), or
large tensors whose collation and hand-off between processes dominate. Pick one with the factory:
``bound_by.py:cpu``, ``bound_by.py:waiting``, ``bound_by.py:large``."""

import time

import torch
from torch.utils.data import Dataset


class CpuWork(Dataset):
    """About 1 ms of pure-Python arithmetic per sample: CPU, no waiting."""

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = 0
        for k in range(20_000):
            x += k * k % 7
        return torch.tensor([float(x), float(i)])


class Waiting(Dataset):
    """2 ms of sleep per sample (a read from slow storage) and almost no CPU."""

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.tensor([float(i)])


class Large(Dataset):
    """Views of preloaded 3x224x224 float32 images: fetching is free, every batch is 19 MiB to move."""

    def __init__(self):
        self.images = torch.rand(4, 3, 224, 224, generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        return self.images[i % 4]


def cpu():
    return CpuWork()


def waiting():
    return Waiting()


def large():
    return Large()


dataset = cpu
loadtune_options = {"batch_size": 32}
