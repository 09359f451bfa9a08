"""A dataset that records which indices each rank fetched (into files next to this spec: copy the
file into a temporary folder first), and can fail on one rank only: raise, or be SIGKILLed."""

import os
import signal
import time
from pathlib import Path

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

HERE = Path(__file__).parent
N = 64


def record(i: int) -> None:
    rank = os.environ.get("RANK", "none")
    with open(HERE / f"fetched-{rank}-{os.getpid()}.txt", "a") as f:
        f.write(f"{i}\n")


class Recorded(Dataset):
    def __init__(self, fail_rank=None, fail_at=None, kill=False, only_in_workers=False, hang=False):
        self.fail_rank, self.fail_at, self.kill, self.only_in_workers = fail_rank, fail_at, kill, only_in_workers
        self.hang = hang

    def __len__(self):
        return N

    def __getitem__(self, i):
        record(i)
        failing = not self.only_in_workers or get_worker_info() is not None
        if failing and os.environ.get("RANK") == str(self.fail_rank) and i == self.fail_at:
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            if self.hang:
                time.sleep(3600)
            raise ValueError(f"bad record {i} on this rank")
        x = torch.full((16, 16), float(i))
        return (x @ x).sum()


class Stream(IterableDataset):
    """Shards itself by rank (RANK/WORLD_SIZE) and by worker, as an IterableDataset under DDP must."""

    def __iter__(self):
        rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for i in range(rank * workers + worker, N, world * workers):
            record(i)
            yield torch.tensor([float(i)])


def dataset():
    return Recorded()


def failing_rank1():
    return Recorded(fail_rank=1, fail_at=7)


def killed_rank1():
    return Recorded(fail_rank=1, fail_at=7, kill=True)


def failing_rank1_in_workers():
    return Recorded(fail_rank=1, fail_at=7, only_in_workers=True)


def hanging_rank1():
    return Recorded(fail_rank=1, fail_at=7, hang=True)


def stream():
    return Stream()
