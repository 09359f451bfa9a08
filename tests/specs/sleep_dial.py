"""Samples that each wait 3 ms (as on storage), with no CPU work to speak of: two workers deliver about
twice what one does, whatever else the machine runs. The race's end-to-end test knows the answer."""

import time

import torch
from torch.utils.data import Dataset


class Waiting(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.full((4,), float(i % 7))


def dataset():
    return Waiting()


loadtune_options = {"batch_size": 8, "workers": [1, 2], "prefetch": [2], "persistent": True,
                    "warmup": 0.3, "block_time": 0.4, "blocks": 4, "min_blocks": 3, "diagnose": False}
