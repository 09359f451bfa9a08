"""A Hugging Face ``datasets.Dataset`` with ``.with_format("torch")``, scanned as a dataset.

A ``datasets.Dataset`` has ``__len__`` and ``__getitem__`` (and ``__getitems__``, which the
DataLoader uses to fetch a whole batch at once), so it is a dataset to loadtune like any other:
``dataset()`` returns it, and loadtune builds the DataLoader. ``with_format("torch")`` makes it
return tensors; ``.map`` work done beforehand is cached in the Arrow table, while
``with_transform`` work runs per batch in the loader, which is what the scan then measures.

The table is built in memory here (``Dataset.from_dict``): nothing is downloaded. With
``load_dataset(...)``, download in the spec at import (once, into the HF cache) or beforehand.

Needs ``pip install datasets`` (it does not replace torch).

Try it:

    loadtune scan examples/hf_datasets.py
"""

import functools

import torch
from datasets import Dataset

N, FEATURES = 20_000, 128


@functools.cache
def table() -> Dataset:
    g = torch.Generator().manual_seed(0)
    return Dataset.from_dict({"features": torch.randn(N, FEATURES, generator=g).numpy(),
                              "label": torch.randint(0, 10, (N,), generator=g).numpy()})


def dataset():
    return table().with_format("torch")


loadtune_options = {"batch_size": 128}
