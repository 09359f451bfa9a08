"""A tiny map-style dataset: a little CPU work per sample, so workers matter a bit."""

import torch
from torch.utils.data import Dataset


class Squares(Dataset):
    def __init__(self, n: int = 512, dim: int = 16):
        self.n, self.dim = n, dim

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.full((self.dim,), float(i))
        return x * x, i % 10


def dataset():
    return Squares()


loadtune_options = {"batch_size": 32}
