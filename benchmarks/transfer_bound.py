"""Spec files for benchmarks/gpu_achieved.py: datasets whose bound is the copy to the GPU.

``dataset()``: every item is a whole 64 MiB batch, already in pinned memory in the trial's main
process (allocated lazily there: pinning in the scan's own process would create a CUDA context
before trials are forked). Nothing but the host-to-device copy costs time, so a loader that
measures right must report close to the link's pinned peak. In DataLoader workers the batches are
plain (pageable) tensors, handed over through shared memory and pinned again by the loader.

``samples()``: float32 images, 3x224x224, collated by the loader: the realistic case, where the
collation and the pinning copy on the host compete with the link for the bound.
"""

import torch
from torch.utils.data import Dataset, get_worker_info

BATCH_BYTES = 64 << 20
BATCHES = 8


class PrepinnedBatches(Dataset):
    def __init__(self):
        self.batches = None

    def __len__(self):
        return BATCHES

    def __getitem__(self, i):
        if self.batches is None:
            pin = get_worker_info() is None and torch.cuda.is_available()
            self.batches = [torch.full((BATCH_BYTES // 4,), float(b), pin_memory=pin) for b in range(BATCHES)]
        return self.batches[i]


def collate_fn(items):
    return items[0] if len(items) == 1 else torch.stack(items)


def dataset():
    return PrepinnedBatches()


class Images(Dataset):
    def __init__(self, n=512):
        self.data = torch.rand(n, 3, 224, 224)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i], i % 1000


def samples():
    return Images()
