"""A cheap dataset consumed by a slow step (20 ms per batch, as a model's forward pass): the consumer is the bound."""

import time

import torch
from torch.utils.data import Dataset


class Cheap(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        return torch.full((8,), float(i))


def dataset():
    return Cheap()


def step(batch):
    time.sleep(0.02)


loadtune_options = {"batch_size": 32}
