"""A CPU-bound dataset whose per-sample work is set by a dial: ``LOADTUNE_BENCH_SLOWDOWN`` (0.10: each
sample costs 1/0.9 of the work, so a CPU-bound loader delivers about 10% fewer samples/s). The work is
counted in operations, not seconds: under contention it slows down as a real dataset does. The dial is
not rounded to whole iterations: a fixed share of the samples (spread evenly over the indices) runs one
iteration more, so that 5%, 10% and 15% are three different steps, not 16 x 1.10 and 16 x 1.15 both
rounded to 18. The subject of ``benchmarks/check_alarms.py``; its mix of small matmuls and Python arithmetic is deliberately unlike
the calibration workload's operations."""

import os

import torch
from torch.utils.data import Dataset

SLOWDOWN = float(os.environ.get("LOADTUNE_BENCH_SLOWDOWN", "0"))
BASE_ITERATIONS = 16  # about 0.5 ms of CPU a sample on the development machine


GOLDEN = 0.6180339887498949  # i x GOLDEN mod 1 is spread evenly over [0, 1): any batch gets its share


def iterations(slowdown: float = SLOWDOWN) -> float:
    """Loop iterations per sample, on average."""
    return round(BASE_ITERATIONS / (1 - slowdown), 9)  # 0.25 of extra work: 20, not 19.999...


def iterations_of(i: int, mean: float) -> int:
    """Sample ``i``'s iterations: the whole part of ``mean``, plus one for a share of the samples equal
    to its fraction."""
    whole = int(mean)
    return whole + ((i * GOLDEN) % 1.0 < mean - whole)


class DialWork(Dataset):
    def __init__(self):
        self.iterations = iterations()

    def __len__(self):
        return 20_000

    def __getitem__(self, i):
        x = torch.full((12, 12), 0.01 * (i % 13))
        acc = 0
        for j in range(iterations_of(i, self.iterations)):
            x = torch.relu(x @ x.T * 0.1 + 0.01)
            acc += (j * i) % 7
        return torch.cat([x.flatten()[:15], torch.tensor([float(acc)])])


def dataset():
    return DialWork()


loadtune_options = {"batch_size": 32, "workers": [0, 1, 2, 4], "prefetch": [2], "persistent": True}
