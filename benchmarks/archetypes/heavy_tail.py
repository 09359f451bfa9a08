"""Archetype 5, heavy-tailed per-sample cost: most samples are cheap, a few cost 10-60x the median.

Stands in for variable-size inputs (images of very different resolutions, documents of very
different lengths): the CPU work of sample ``i`` is drawn from a Pareto distribution (shape 1.5,
capped) seeded by ``i``, so it is the same in every run and every process. With ``in_order``
delivery a slow sample holds up the batches behind it, so prefetching and more workers smooth the
stalls as well as add cores; block-to-block noise is high, which makes the estimate harder.
"""

import random

import torch
from torch.utils.data import Dataset

LENGTH = 40_000  # no epoch ends inside a trial, even a 10x-long one
SIZE = 64
SHAPE = 1.5  # Pareto tail index: finite mean, infinite variance before the cap
SCALE = 20  # iterations of the cheapest sample (each about 0.025 ms on an idle core): median ~0.8 ms, mean ~1.5 ms
CAP = 2000  # iterations of the most costly sample (about 50 ms)


def one_thread() -> None:
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def iterations(index: int) -> int:
    return min(CAP, int(SCALE * random.Random(index).paretovariate(SHAPE)))


class HeavyTailDataset(Dataset):
    def __init__(self, length: int = LENGTH):
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        one_thread()
        g = torch.Generator().manual_seed(index)
        x = torch.rand(SIZE, SIZE, generator=g)
        w = torch.rand(SIZE, SIZE, generator=g) / SIZE
        for _ in range(iterations(index)):
            x = torch.tanh(x @ w + x)
        return x, index % 10


def dataset() -> HeavyTailDataset:
    return HeavyTailDataset()


loadtune_options = {"batch_size": 32}
