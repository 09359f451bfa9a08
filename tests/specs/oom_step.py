"""A consumer that runs out of CUDA memory from batch size 16 up (raised as torch does, so the
CPU-only test machine exercises the same path a GPU would)."""

import torch
from torch.utils.data import TensorDataset


def dataset():
    return TensorDataset(torch.zeros(256, 4))


def step(batch):
    (x,) = batch
    if x.shape[0] >= 16:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
