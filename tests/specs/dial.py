"""A CPU-bound dataset with a slowdown dial: LOADTUNE_TEST_SLOWDOWN=0.2 makes each sample cost 1/0.8 of
the operations, so a CPU-bound loader delivers 20% fewer samples/s, as a costlier transform would. The
work is counted in operations, not seconds: another process's load slows it as it slows real code."""

import os

import torch
from torch.utils.data import Dataset

ITERATIONS = round(12 / (1 - float(os.environ.get("LOADTUNE_TEST_SLOWDOWN", "0"))))


class Dial(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = torch.full((12, 12), 0.01 * (i % 11))
        for _ in range(ITERATIONS):
            x = torch.relu(x @ x.T * 0.1 + 0.01)
        return x.flatten()[:16]


def dataset():
    return Dial()


loadtune_options = {"batch_size": 32, "workers": [0, 1, 2], "prefetch": [2], "persistent": True,
            "warmup": 0.3, "block_time": 0.4, "blocks": 6, "min_blocks": 3}
