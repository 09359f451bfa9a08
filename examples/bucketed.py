"""Your own batch_sampler and worker_init_fn: token sequences batched by length.

Padding every batch to its longest sequence wastes work when short and long documents share a
batch, so many language-model pipelines batch by length: a ``batch_sampler`` groups documents of
similar length, and the order of the batches is shuffled every epoch. Such a loader is not
``DataLoader(dataset, batch_size=..., shuffle=True)``, and measuring that instead would measure
another loader (other batches, other padding, other collate cost).

``loader_kwargs()`` hands loadtune every DataLoader argument it does not search: here the
``batch_sampler`` and a ``worker_init_fn``. loadtune calls it afresh for every loader it builds and
varies only num_workers, prefetch_factor, persistent_workers and pin_memory around them. The batch
size is the sampler's own (32), so it is not searched, and the table says so.

``validation`` is a second factory in the same file. By the naming convention
``<factory>_loader_kwargs`` / ``<factory>_collate_fn`` / ``<factory>_options`` it has its own
arguments: ``validation_loader_kwargs = None`` turns the training sampler off for it (a plain
sequential loader over the validation documents, batch size searched), while ``collate_fn`` is
shared (no ``validation_collate_fn``).

Try it:

    loadtune scan examples/bucketed.py
    loadtune scan examples/bucketed.py:validation
    loadtune scan examples/bucketed.py --current "num_workers=2,persistent_workers=True"
"""

import functools
import random

import torch
from torch.utils.data import Sampler

from tokens import PretokenizedDocuments, collate_fn  # noqa: F401 - collate_fn is the spec's hook

BATCH_SIZE = 32


class LengthBuckets(Sampler[list[int]]):
    """Batches of indices of similar length, their order shuffled anew each epoch (seeded).

    ``batch_size`` is an attribute, as on torch's ``BatchSampler``: loadtune reads it to label the
    results (a sampler without it needs ``batch_size`` in ``loadtune_options``)."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int = 0):
        self.batch_size, self.seed, self.epoch = batch_size, seed, 0
        by_length = sorted(range(len(lengths)), key=lengths.__getitem__)
        self.batches = [by_length[i:i + batch_size] for i in range(0, len(by_length), batch_size)]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        order = list(range(len(self.batches)))
        random.Random(self.seed + self.epoch).shuffle(order)
        self.epoch += 1
        return (self.batches[i] for i in order)


def worker_init_fn(worker_id: int) -> None:
    """Seed Python's own RNG per worker (torch already seeds itself per worker)."""
    random.seed(torch.initial_seed() % 2**32)


@functools.cache
def documents() -> PretokenizedDocuments:
    """One dataset per process: the sampler is built over the same documents the loader reads."""
    return PretokenizedDocuments(n=5000)


def dataset():
    return documents()


def loader_kwargs() -> dict:
    """Everything DataLoader takes that loadtune does not search; called afresh for every loader."""
    return {"batch_sampler": LengthBuckets(documents().lengths, BATCH_SIZE), "worker_init_fn": worker_init_fn}


def validation():
    return PretokenizedDocuments(n=1000, seed=1)


validation_loader_kwargs = None  # no bucketing for validation: loadtune's own sequential loader
validation_options = {"shuffle": False, "batch_size": 64}
