"""A spec that changes torch's global matmul precision when it is imported, as a training script that
enables TF32 does: the synthetic step must be calibrated under it (tests/test_cuda.py)."""

import torch
from torch.utils.data import TensorDataset

torch.set_float32_matmul_precision("medium")


def dataset():
    return TensorDataset(torch.zeros(8, 2))
