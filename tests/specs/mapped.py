"""The folder of small files that ``files.py`` reads, each sample's file memory-mapped instead, the
mapping kept for the life of the process that reads it (as a numpy memmap or Arrow files are): a
worker that persists across epochs maps every file it has read."""

import mmap
import os

import torch
from torch.utils.data import Dataset


class Mapped(Dataset):
    def __init__(self, folder: str):
        self.paths = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".bin"))
        self.maps: dict[int, mmap.mmap] = {}  # each process its own (a worker forks before it maps)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        if i not in self.maps:
            with open(self.paths[i], "rb") as f:
                self.maps[i] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return torch.frombuffer(bytearray(self.maps[i][:]), dtype=torch.uint8).float().mean(), i % 10


def dataset():
    return Mapped(os.environ["LOADTUNE_TEST_FILES"])


loadtune_options = {"batch_size": 16}
