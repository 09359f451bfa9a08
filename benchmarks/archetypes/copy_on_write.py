"""Archetype: a dataset held as a Python list of a million and a half small dicts.

The shape of many home-grown datasets: annotations parsed from JSON or CSV into dicts, one per
sample, kept in a list on the dataset object. Each worker gets the list copy-on-write at fork; reading
a dict touches its reference count, so each page a worker reads from is copied into that worker the
first time (the "memory leak" of many workers); a record holding a list is tracked by the garbage
collector, whose full collections touch every one. A sample costs a little CPU (a small tensor built from
its record), so workers help, but each one pays for the pages it copies, and the main process of a
loader without workers pays for none: which of the two wins, and by how much, is the dataset's.

Deterministic: the records are built from their index.
"""

import torch
from torch.utils.data import Dataset

LENGTH = 1_500_000  # about 1 GiB of dicts: far more pages than one epoch of a trial touches
WORK = 24  # rounds of a small tensor op per sample (about 0.5 ms in all): enough CPU that two workers pay


class RecordsDataset(Dataset):
    def __init__(self, length: int = LENGTH, work: int = WORK):
        self.records = [{"id": i, "label": i % 10, "scale": 1.0 + (i % 7) / 10, "path": f"img/{i:07d}.jpg",
                         "box": [i % 13, i % 17, 8, 8]} for i in range(length)]
        self.work = work

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int):
        if torch.get_num_threads() != 1:
            torch.set_num_threads(1)
        record = self.records[index]
        x = torch.full((16, 16), record["scale"])
        for _ in range(self.work):
            x = torch.tanh(x * 0.5 + 0.1)
        return x, record["label"]


def dataset() -> RecordsDataset:
    return RecordsDataset()


loadtune_options = {"batch_size": 32}
