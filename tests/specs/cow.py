"""The same data held two ways. ``python_objects``: a list of six million Python floats, each sample
built from a slice of it, so a worker that reads a sample writes the reference counts of its floats
and copies their pages (copy-on-write). ``tensor``: one float64 tensor, whose pages workers only read."""

import torch
from torch.utils.data import Dataset

N = 6_000_000
SAMPLES = 256
CHUNK = N // SAMPLES


class PythonObjects(Dataset):
    def __init__(self):
        self.items = [float(i) for i in range(N)]

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return torch.tensor(self.items[i * CHUNK:(i + 1) * CHUNK])


class TensorBacked(Dataset):
    def __init__(self):
        self.data = torch.arange(N, dtype=torch.float64)

    def __len__(self):
        return SAMPLES

    def __getitem__(self, i):
        return self.data[i * CHUNK:(i + 1) * CHUNK].clone()


def python_objects():
    return PythonObjects()


def tensor():
    return TensorBacked()


dataset = python_objects
loadtune_options = {"batch_size": 16}
