"""A synthetic consumer for ``--step-ms X``: a training step of about X ms per batch, without a model.

Whether loading keeps up depends on how long the step takes; users without a model at hand give its
length instead. The work is a loop of matrix multiplications whose count is calibrated once per scan
(on a CUDA device, with synchronisation only during calibration), then fixed: every trial runs the
same work, so configs compare on equal terms.

On CUDA the step enqueues its kernels and returns, as a real step does, and first reads every tensor
of the batch (one cheap reduction) so the batch is really used. On the CPU the step is one core's
worth of work: its matmuls run single-threaded (multi-threaded small matmuls on a busy machine take
many times longer, which would make the calibration meaningless). It competes with the DataLoader
workers for cores, as a real CPU training step does, so with many workers a step can take longer
than X ms. That is measured, not a flaw of the measurement.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from loadtune.engine.trial.transfer import tensors_of
from loadtune.model.known import from_known

MIN_MATMULS = 4  # a step of at least this many matmuls, so its length has a resolution of a quarter
SIZES = {"cuda": (2048, 1024, 512, 256, 128, 64), "cpu": (256, 128, 64, 32, 16)}
PROBE_S = 0.02  # each timing during calibration runs at least this long


class WorkloadError(ValueError):
    """An unusable ``step_ms``: refused before any work, exit code 2."""


def check_step_ms(value: Any) -> float:
    """A positive number of milliseconds, or a message saying what is wrong."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise WorkloadError(f"step_ms must be a positive number of milliseconds per batch, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class StepWorkload:
    """The calibrated work: ``iterations`` matmuls of ``size`` x ``size`` float32 per batch."""

    ms: float  # what was asked
    device_type: str  # "cuda" or "cpu": calibrated there
    size: int
    iterations: int
    calibrated_ms: float  # what the step took at calibration (an idle device, no loader running)

    def build(self, device: torch.device) -> SyntheticStep:
        return SyntheticStep(self, device)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> StepWorkload:
        return from_known(cls, data)


class SyntheticStep:
    """The consumer ``step(batch)`` built from a ``StepWorkload``, its matrices allocated once."""

    def __init__(self, work: StepWorkload, device: torch.device):
        self.work, self.device = work, device
        g = torch.Generator().manual_seed(0)
        self.a = (torch.randn(work.size, work.size, generator=g) / work.size**0.5).to(device)
        self.b = (torch.randn(work.size, work.size, generator=g) / work.size**0.5).to(device)
        self.out = torch.empty(work.size, work.size, device=device)
        self.sink = torch.zeros((), device=device)
        self.touch = device.type == "cuda"

    def __call__(self, batch: Any = None) -> None:
        if self.touch:  # on the GPU: read the batch once (cheap there, and the data is really used)
            for tensor in tensors_of(batch):
                if tensor.device == self.sink.device and not tensor.is_complex():
                    self.sink += tensor.sum(dtype=torch.float32)
            for _ in range(self.work.iterations):
                torch.mm(self.a, self.b, out=self.out)
            return
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a fixed amount of work for one core (see the module's note)
        try:
            for _ in range(self.work.iterations):
                torch.mm(self.a, self.b, out=self.out)
        finally:
            torch.set_num_threads(threads)


def _time(fn, device: torch.device, repeats: int) -> float:
    """Seconds per call of ``fn``: after a warm-up, min of repeats on the CPU (interference only adds
    time), median on a GPU (whose clocks settle); the device synchronised after each repeat only."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    fn()
    sync()
    calls = 1
    while True:  # enough calls per repeat that the clock's resolution and the sync do not matter
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        took = time.perf_counter() - start
        if took >= PROBE_S or calls >= 1 << 16:
            break
        calls *= 2
    times = [took / calls]
    for _ in range(repeats - 1):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - start) / calls)
    return min(times) if device.type == "cpu" else statistics.median(times)


def calibrate(ms: float, device: torch.device | str, repeats: int = 5) -> StepWorkload:
    """Pick a matmul size and count whose loop takes about ``ms`` on ``device`` (idle, as now)."""
    ms = check_step_ms(ms)
    device = torch.device(device)
    kind = "cuda" if device.type == "cuda" else "cpu"
    target = ms / 1000
    for size in SIZES[kind]:
        step = SyntheticStep(StepWorkload(ms, kind, size, 1, 0.0), device)
        per = _time(step, device, repeats)
        if per * MIN_MATMULS <= target:
            break
    iterations = max(1, round(target / per))
    for attempt in range(3):  # correct the count by the whole step's measured length, then measure again
        took = _time(SyntheticStep(StepWorkload(ms, kind, size, iterations, 0.0), device), device, repeats)
        corrected = max(1, round(iterations * target / took))
        if corrected == iterations or attempt == 2:
            break
        iterations = corrected
    return StepWorkload(ms, kind, size, iterations, round(took * 1000, 4))
