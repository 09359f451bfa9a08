"""Shared by the GPU benchmarks: the no-GPU exit and the meta block of each result."""

from __future__ import annotations

import sys

from meta import run_meta


def require_cuda(name: str) -> None:
    """Exit 0 with a clear message (nothing measured, nothing written) on a machine without CUDA."""
    import torch

    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        print(f"{name}: SKIPPED, nothing measured: no CUDA device here (torch {torch.__version__}, {build}). "
              "Run it on a machine with an NVIDIA GPU.")
        sys.exit(0)


def gpu_meta() -> dict:
    """``run_meta()`` with the NVIDIA driver's version, which the machine's facts leave out."""
    from loadtune.engine.trial import nvml

    meta = run_meta()
    meta["machine"]["gpu_driver"] = nvml.query("nvmlSystemGetDriverVersion")
    return meta
