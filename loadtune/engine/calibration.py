"""A fixed, deterministic CPU workload shipped with loadtune: the yardstick of machine speed.

CI machines differ and drift. ``check`` measures this workload in the same run as the user's
dataset, and compares the ratio (dataset throughput / calibration throughput) with the same ratio
in the baseline, rather than samples/s measured on two different machines.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import Dataset

from loadtune.model.config import TrialConfig
from loadtune.engine.spec import SpecRef

SIZE = 48  # per-sample work: a few small matmuls and elementwise ops, a fraction of a millisecond


class Calibration(Dataset):
    """Each sample: a seeded matrix, a few matmuls and a nonlinearity. Same work on every machine."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(i)
        x = torch.randn(SIZE, SIZE, generator=g)
        for _ in range(4):
            x = torch.tanh(x @ x.T / SIZE)
        return x.sum(dim=0)


def dataset() -> Calibration:
    torch.set_num_threads(1)  # one thread: a yardstick that does not depend on how busy the other cores are
    return Calibration()


REF = SpecRef(path=str(Path(__file__).resolve()), module=__name__)
CONFIG = TrialConfig(batch_size=32, num_workers=0)  # one process: no scheduling of workers in the yardstick
