"""An IterableDataset that forgets to shard by worker: every worker yields the whole stream.
``dataset:sharded`` is the correct version, for comparison."""

import torch
from torch.utils.data import IterableDataset, get_worker_info


class Stream(IterableDataset):
    def __init__(self, n=512, shard=False):
        self.n, self.shard = n, shard

    def __iter__(self):
        start, step = 0, 1
        info = get_worker_info()
        if self.shard and info is not None:
            start, step = info.id, info.num_workers
        for i in range(start, self.n, step):
            yield torch.tensor([float(i)])


def dataset():
    return Stream()


def sharded():
    return Stream(shard=True)


loadtune_options = {"batch_size": 16}


def long_sharded():
    """An epoch far longer than a quick trial: the warm-up then ends on its backlog check, not an epoch's end."""
    return Stream(n=10_000_000, shard=True)
