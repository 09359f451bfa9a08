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

``token_budget`` batches the same documents to a token budget instead (fairseq's ``max_tokens``):
as many documents per batch as fit ``MAX_TOKENS`` once padded, so batches of short documents hold
many and batches of long ones few. There is no one batch size, and none to give: loadtune reads the
mean off the sampler before the scan, labels the configs by the mean of the batches timed
(``bs~31``) and saves their range in the JSON.

``validation`` is a second factory in the same file. By the naming convention
``<factory>_loader_kwargs`` / ``<factory>_collate_fn`` / ``<factory>_options`` it has its own
arguments: ``validation_loader_kwargs = None`` turns the training sampler off for it (a plain
sequential loader over the validation documents, batch size searched), while ``collate_fn`` is
shared (no ``validation_collate_fn``).

Try it:

    loadtune scan examples/bucketed.py
    loadtune scan examples/bucketed.py:token_budget
    loadtune scan examples/bucketed.py:validation
    loadtune scan examples/bucketed.py --current "num_workers=2,persistent_workers=True"
"""

import functools
import random

import torch
from torch.utils.data import Sampler

from tokens import PretokenizedDocuments, collate_fn  # noqa: F401 - collate_fn is the spec's hook

BATCH_SIZE = 32
MAX_TOKENS = 4096  # token_budget: tokens per batch at most, padding included


class ShuffledBatches(Sampler[list[int]]):
    """Fixed batches of indices (``self.batches``), their order shuffled anew each epoch (seeded)."""

    def __init__(self, batches: list[list[int]], seed: int = 0):
        self.batches, self.seed, self.epoch = batches, seed, 0

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        order = list(range(len(self.batches)))
        random.Random(self.seed + self.epoch).shuffle(order)
        self.epoch += 1
        return (self.batches[i] for i in order)


class LengthBuckets(ShuffledBatches):
    """Batches of ``batch_size`` indices of similar length.

    ``batch_size`` is an attribute, as on torch's ``BatchSampler``: loadtune reads it to label the
    results."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int = 0):
        by_length = sorted(range(len(lengths)), key=lengths.__getitem__)
        super().__init__([by_length[i:i + batch_size] for i in range(0, len(by_length), batch_size)], seed)
        self.batch_size = batch_size


class TokenBudget(ShuffledBatches):
    """Batches of indices of similar length, each as large as ``max_tokens`` allows once padded to its
    longest document: their size varies by design, so there is no ``batch_size`` attribute."""

    def __init__(self, lengths: list[int], max_tokens: int, seed: int = 0):
        batches: list[list[int]] = [[]]
        for i in sorted(range(len(lengths)), key=lengths.__getitem__):  # the longest comes last: it sets the padding
            if batches[-1] and lengths[i] * (len(batches[-1]) + 1) > max_tokens:
                batches.append([])
            batches[-1].append(i)
        super().__init__(batches, seed)


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


def token_budget():
    """The same documents, batched to a token budget (its own ``token_budget_loader_kwargs``)."""
    return documents()


def token_budget_loader_kwargs() -> dict:
    return {"batch_sampler": TokenBudget(documents().lengths, MAX_TOKENS), "worker_init_fn": worker_init_fn}


def validation():
    return PretokenizedDocuments(n=1000, seed=1)


validation_loader_kwargs = None  # no bucketing for validation: loadtune's own sequential loader
validation_options = {"shuffle": False, "batch_size": 64}
