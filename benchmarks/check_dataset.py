"""A CPU-bound dataset whose per-sample work is set by a dial: ``LOADTUNE_BENCH_SLOWDOWN`` (0.10: each
sample costs 1/0.9 of the work, so a CPU-bound loader delivers 10% fewer samples/s). The work is counted
in operations, not seconds: under contention it slows down as a real dataset does. The subject of
``benchmarks/check_alarms.py``; its mix of small matmuls and Python arithmetic is deliberately unlike
the calibration workload's operations."""

import os

import torch
from torch.utils.data import Dataset

SLOWDOWN = float(os.environ.get("LOADTUNE_BENCH_SLOWDOWN", "0"))
BASE_ITERATIONS = 16  # about 0.5 ms of CPU a sample on the development machine


def iterations(slowdown: float = SLOWDOWN) -> int:
    return round(BASE_ITERATIONS / (1 - slowdown))


class DialWork(Dataset):
    def __init__(self):
        self.iterations = iterations()

    def __len__(self):
        return 20_000

    def __getitem__(self, i):
        x = torch.full((12, 12), 0.01 * (i % 13))
        acc = 0
        for j in range(self.iterations):
            x = torch.relu(x @ x.T * 0.1 + 0.01)
            acc += (j * i) % 7
        return torch.cat([x.flatten()[:15], torch.tensor([float(acc)])])


def dataset():
    return DialWork()


loadtune_options = {"batch_size": 32, "workers": [0, 1, 2, 4], "prefetch": [2], "persistent": True}
