"""Archetype 4, tiny dataset with a costly worker start-up: 200 samples, an epoch is a fraction of a second.

Each process that loads samples first sets itself up (opens an index or a database connection,
builds a lookup table): about 0.2 s of waiting plus ~0.1 s of CPU, paid on the first
``__getitem__`` in that process. Without ``persistent_workers`` the DataLoader starts its workers
anew at every epoch and pays this again each time; epochs are short here, so epochs end many times
inside one trial and the knob decides the throughput. The main process (``num_workers=0``) sets
itself up once per trial only.

Deterministic: the lookup table and every sample come from generators seeded by fixed numbers.
"""

import os
import time

import torch
from torch.utils.data import Dataset

LENGTH = 200
SETUP_WAIT_S = 0.2  # e.g. opening files, connecting: waiting, not computing
SETUP_TABLE = 384  # a SETUP_TABLE x SETUP_TABLE table built with matmuls: about 0.1 s of CPU
ITERATIONS = 70  # per-sample work: about 2 ms on one idle core, so that workers pay off


def one_thread() -> None:
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


class TinyDataset(Dataset):
    def __init__(self, length: int = LENGTH):
        self.length = length
        self.table = None
        self.owner_pid = None  # the process the table was built in; a new worker builds its own

    def __len__(self) -> int:
        return self.length

    def setup(self) -> None:
        time.sleep(SETUP_WAIT_S)
        g = torch.Generator().manual_seed(1)
        t = torch.rand(SETUP_TABLE, SETUP_TABLE, generator=g) / SETUP_TABLE
        for _ in range(12):
            t = torch.tanh(t @ t + t)
        self.table = t[:64, :64].contiguous()
        self.owner_pid = os.getpid()

    def __getitem__(self, index: int):
        one_thread()
        if self.owner_pid != os.getpid():
            self.setup()
        g = torch.Generator().manual_seed(index)
        x = torch.rand(64, 64, generator=g)
        for _ in range(ITERATIONS):
            x = torch.tanh(x @ self.table + x)
        return x, index % 10


def dataset() -> TinyDataset:
    return TinyDataset()


loadtune_options = {"batch_size": 16}
