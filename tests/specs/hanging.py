"""A dataset whose samples hang in worker processes (not in the main process): a trial timeout case."""

import time

import torch
from torch.utils.data import Dataset, get_worker_info


class HangsInWorkers(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if get_worker_info() is not None:
            time.sleep(3600)
        return torch.zeros(4)


def dataset():
    return HangsInWorkers()


loadtune_options = {"batch_size": 8}
