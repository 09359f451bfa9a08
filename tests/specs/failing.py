"""A dataset whose __getitem__ raises at one index: the trial must fail with the dataset's own error."""

import torch
from torch.utils.data import Dataset


class Faulty(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        if i == 77:
            raise ValueError(f"corrupt record at index {i}")
        return torch.zeros(4)


def dataset():
    return Faulty()


loadtune_options = {"batch_size": 16, "shuffle": False}
