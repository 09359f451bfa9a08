"""Shared by the GPU benchmarks: the no-GPU exit and the machine line of each result."""

from __future__ import annotations

import platform
import sys
from datetime import datetime, timezone


def require_cuda(name: str) -> None:
    """Exit 0 with a clear message (nothing measured, nothing written) on a machine without CUDA."""
    import torch

    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        print(f"{name}: SKIPPED, nothing measured: no CUDA device here (torch {torch.__version__}, {build}). "
              "Run it on a machine with an NVIDIA GPU.")
        sys.exit(0)


def machine() -> dict:
    import torch

    from loadtune.engine.trial import nvml

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "gpu": props.name,
        "gpu_memory_bytes": props.total_memory,
        "driver": nvml.query("nvmlSystemGetDriverVersion"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
