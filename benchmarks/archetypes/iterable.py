"""Archetype 6, an IterableDataset sharded across workers with ``get_worker_info()``.

A stream of records (a sharded file list, a WebDataset-style tar stream) with ~1.5 ms of CPU work
per record. Each worker takes every ``num_workers``-th record from its own offset, so the workers
together yield every record exactly once per epoch; without this sharding each worker would yield
the whole stream (duplicates, which loadtune warns about). No shuffling: an IterableDataset orders
its own stream.

Deterministic: record ``i`` is drawn from a generator seeded by ``i``.
"""

import torch
from torch.utils.data import IterableDataset, get_worker_info

LENGTH = 50_000  # records per epoch: no epoch ends inside a trial, even a 10x-long one
SIZE = 64
ITERATIONS = 50  # per-record work: about 1.5 ms on one idle core


def one_thread() -> None:
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


class ShardedStream(IterableDataset):
    def __init__(self, length: int = LENGTH):
        self.length = length

    def __iter__(self):
        one_thread()
        info = get_worker_info()
        start, stride = (0, 1) if info is None else (info.id, info.num_workers)
        for index in range(start, self.length, stride):
            g = torch.Generator().manual_seed(index)
            x = torch.rand(SIZE, SIZE, generator=g)
            w = torch.rand(SIZE, SIZE, generator=g) / SIZE
            for _ in range(ITERATIONS):
                x = torch.tanh(x @ w + x)
            yield x, index % 10


def dataset() -> ShardedStream:
    return ShardedStream()


loadtune_options = {"batch_size": 32}
