"""Archetype: a memory-mapped array on disk (a numpy memmap, as Hugging Face ``datasets`` maps Arrow
files): each sample is one 48 KiB row, read at a random index and copied out of the mapping.

No ``read()`` call is made: the pages come in by page faults, which ``/proc/<pid>/io`` counts as bytes
from storage (``read_bytes``) but not as bytes read (``rchar``). The file is written once at
``LOADTUNE_MEMMAP`` (default ``/var/tmp/loadtune-memmap.u8``), ``LOADTUNE_MEMMAP_ROWS`` rows (default
20,000: 0.94 GiB).
"""

import os

import numpy as np
import torch
from torch.utils.data import Dataset

SIDE, CHANNELS = 128, 3
ROW = SIDE * SIDE * CHANNELS
PATH = os.environ.get("LOADTUNE_MEMMAP", "/var/tmp/loadtune-memmap.u8")
ROWS = int(os.environ.get("LOADTUNE_MEMMAP_ROWS", "20000"))


def write_array(path: str = PATH, rows: int = ROWS) -> str:
    """The array, written where missing (deterministic bytes, a block of rows at a time) and synced."""
    if os.path.exists(path) and os.path.getsize(path) == rows * ROW:
        return path
    rng = np.random.default_rng(0)
    with open(path + ".part", "wb") as f:
        for start in range(0, rows, 1000):
            f.write(rng.integers(0, 256, size=(min(1000, rows - start), ROW), dtype=np.uint8).tobytes())
    os.replace(path + ".part", path)
    os.sync()
    return path


class Rows(Dataset):
    def __init__(self, path: str, rows: int):
        self.path, self.rows, self.array = path, rows, None

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int):
        if self.array is None:  # mapped in the process that reads (each worker its own mapping)
            self.array = np.memmap(self.path, dtype=np.uint8, mode="r", shape=(self.rows, ROW))
        row = torch.from_numpy(np.array(self.array[index]))
        return row.view(SIDE, SIDE, CHANNELS).permute(2, 0, 1).contiguous(), index % 10


def dataset() -> Rows:
    return Rows(write_array(), ROWS)
