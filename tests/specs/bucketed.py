"""A dataset with the spec's own batch_sampler and worker_init_fn (loader_kwargs): batches of 3 and 2
samples (50 in 20 batches) although the sampler says batch_size 4, and samples that fail in a worker which
worker_init_fn did not set up."""

import torch
from torch.utils.data import Dataset, Sampler, get_worker_info

READY = {"worker": False}


class Marked(Dataset):
    def __len__(self):
        return 50

    def __getitem__(self, i):
        if get_worker_info() is not None and not READY["worker"]:
            raise RuntimeError("worker_init_fn did not run in this worker")
        return torch.tensor([float(i)])


class Uneven(Sampler):
    batch_size = 4  # what it says; its batches hold 3 and 2

    def __iter__(self):
        return iter([list(range(i, i + 3)) for i in range(0, 50, 5)] + [[i + 3, i + 4] for i in range(0, 50, 5)])

    def __len__(self):
        return 20


def worker_init_fn(worker_id):
    READY["worker"] = True


def dataset():
    return Marked()


def loader_kwargs():
    return {"batch_sampler": Uneven(), "worker_init_fn": worker_init_fn}
