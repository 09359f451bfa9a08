"""A near-no-op map-style dataset for measuring loadtune's own loop overhead (benchmarks/overhead.py).

``__getitem__`` returns one small tensor allocated once, so a batch costs only what the DataLoader
itself costs (sampling, fetching, collating, and for workers the queue). Any time loadtune's loop
adds shows up against a bare loop instead of drowning in dataset work.

It is also a valid loadtune spec file (``dataset()`` factory), and a module that DataLoader workers
can import by name, whatever their start method.
"""

import torch
from torch.utils.data import Dataset

DEFAULT_LENGTH = 20_000  # not a multiple of 64 or 256: the short last batch is counted too
FEATURES = 8


class NoopDataset(Dataset):
    def __init__(self, length: int = DEFAULT_LENGTH, features: int = FEATURES):
        self.length = length
        self.item = torch.zeros(features)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.item


def dataset() -> NoopDataset:
    return NoopDataset()
