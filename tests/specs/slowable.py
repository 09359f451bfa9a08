"""The same dataset, fast or slowed: LOADTUNE_TEST_SLEEP_MS adds a sleep per sample, as a change to
the dataset's code would, so ``check`` can be shown to catch a real slowdown."""

import os
import time

import torch
from torch.utils.data import Dataset

SLEEP_S = float(os.environ.get("LOADTUNE_TEST_SLEEP_MS", "0")) / 1000


class Records(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        if SLEEP_S:
            time.sleep(SLEEP_S)
        return torch.full((8,), float(i))


def dataset():
    return Records()


loadtune_options = {"batch_size": 16, "workers": [0, 1], "prefetch": [2], "persistent": True,
            "warmup": 0.2, "block_time": 0.1, "blocks": 3}
