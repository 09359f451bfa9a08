"""A folder of small files, one a sample, in the folder ``LOADTUNE_TEST_FILES`` names: the page cache's
state moves its speed, and a trial's bytes from storage tell which state it read in."""

import os

import torch
from torch.utils.data import Dataset

FILE_BYTES = 16 * 1024


def write(folder: str, count: int = 400) -> list[str]:
    """The files, written and synced (clean pages can be dropped from the cache)."""
    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(folder, f"{i:05d}.bin") for i in range(count)]
    for i, path in enumerate(paths):
        with open(path, "wb") as f:
            f.write(bytes([i % 251]) * FILE_BYTES)
    os.sync()
    return paths


class Files(Dataset):
    def __init__(self, folder: str):
        self.paths = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".bin"))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).float().mean(), i % 10


def dataset():
    return Files(os.environ["LOADTUNE_TEST_FILES"])


loadtune_options = {"batch_size": 16}
