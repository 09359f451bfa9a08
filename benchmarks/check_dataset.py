"""A CPU-bound dataset whose per-sample cost is set by LOADTUNE_BENCH_WORK (1.0 = baseline, 1.25 =
25% more work, i.e. 20% fewer samples/s): the subject of benchmarks/check_alarms.py."""

import os
import time

import torch
from torch.utils.data import Dataset

SAMPLE_S = 0.001 * float(os.environ.get("LOADTUNE_BENCH_WORK", "1.0"))


class SpinWork(Dataset):
    """Each sample spins the CPU for SAMPLE_S: compute-like, deterministic in cost."""

    def __len__(self):
        return 20_000

    def __getitem__(self, i):
        end = time.perf_counter() + SAMPLE_S
        while time.perf_counter() < end:
            pass
        return torch.full((16,), float(i))


def dataset():
    return SpinWork()


loadtune = {"batch_size": 32, "workers": [0, 1, 2, 4], "prefetch": [2], "persistent": True}
