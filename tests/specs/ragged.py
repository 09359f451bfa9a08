"""Variable-length samples and no collate_fn: PyTorch's default collate cannot stack them."""

import torch
from torch.utils.data import Dataset


class Ragged(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.ones(1 + i % 7)


def dataset():
    return Ragged()


loadtune_options = {"batch_size": 8}
