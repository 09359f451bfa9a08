"""A fixed, deterministic CPU workload shipped with loadtune: the yardstick of machine speed.

CI machines differ and drift. ``check`` measures this workload in the same run as the user's
dataset, and compares the ratio (dataset throughput / calibration throughput) with the same ratio
in the baseline, rather than samples/s measured on two different machines.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import torch
from torch.utils.data import BatchSampler, Dataset, SequentialSampler

from loadtune.model.config import TrialConfig
from loadtune.engine.spec import LoadedSpec, SpecRef, from_objects
from loadtune.engine.trial.server import main_module_hidden
from loadtune.model.paired import CalibrationShape
from loadtune.model.results import ScanResult

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


# --- the shaped calibration of ``check``: the user's per-sample costs, in fixed work -------------------------

MIN_WAIT_S = 200e-6  # waits shorter than a sleep's own cost are not reproduced
UNIT_SIZE = 16  # one unit of work: an in-place tanh of 16x16 values, a few microseconds, mostly operator overhead


def work(units: int, seed: int) -> float:
    """``units`` of fixed CPU work, deterministic: the same operations on every machine."""
    x = torch.full((UNIT_SIZE, UNIT_SIZE), 1.0 + (seed % 7) * 1e-3)
    for _ in range(units):
        x.tanh_()
    return float(x[0, 0])


UNIT_READINGS = 3  # readings of ``unit_seconds``, a beat apart: the fastest counts


def unit_seconds_isolated(readings: int = UNIT_READINGS) -> float:
    """``unit_seconds`` measured in child processes: running torch ops here would start this process's
    thread pools, and a trial forked from it later could deadlock in them. The fastest of
    ``readings`` readings, each in a freshly spawned interpreter: on the development machine one child
    in 6 to 13 ran the unit ~65% slower for its whole life, and children forked from one server shared
    that state (three readings of one check read 34% off), while ``check`` compares this figure across
    sessions. About 1.5 s a reading."""
    ctx = multiprocessing.get_context("spawn")
    got = []
    with main_module_hidden():
        for _ in range(readings):
            with ctx.Pool(1) as pool:
                got.append(pool.apply(unit_seconds))
    return min(got)


def unit_seconds(units: int = 2000, repeats: int = 5) -> float:
    """CPU seconds one unit takes on this thread: the fastest of a few repeats (the others met other
    processes' load). Sets how many units stand for a measured per-sample cost."""
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        work(units, 0)
        best = min(best, time.thread_time() - start)
    return max(best / units, 1e-9)


class ShapedCalibration(Dataset):
    """Each sample: ``shape.units`` of fixed CPU work, ``shape.sleep_s`` of waiting, ``shape.sample_numel``
    float32 values out. Module-level, so it pickles to workers under any start method."""

    def __init__(self, shape: CalibrationShape, length: int):
        self.shape, self.length = shape, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> torch.Tensor:
        value = work(self.shape.units, i)
        if self.shape.sleep_s > 0:
            time.sleep(self.shape.sleep_s)
        out = torch.zeros(max(1, self.shape.sample_numel))
        out[0] = value
        return out


def shaped_spec(shape: CalibrationShape, length: int) -> LoadedSpec:
    """The shaped calibration as an in-memory spec, with the user's dataset length (so epochs end
    where theirs do: persistent_workers matters alike). With ``shape.batch_size`` it batches by itself,
    that many a batch (the mean of a loader's batches that vary in size), whatever the config's batch size."""
    extras = None
    if shape.batch_size:
        extras = {"batch_sampler": BatchSampler(SequentialSampler(range(length)), shape.batch_size, drop_last=False)}
    spec = from_objects(ShapedCalibration(shape, length), loader_kwargs=extras)
    spec.picklable = True  # the CLI has run torch ops by now: its thread pools must not be forked
    return spec


def shape_for(result: ScanResult, config: TrialConfig, unit_s: float) -> CalibrationShape | None:
    """The user's per-sample costs at ``config``: from the stage profile when it was taken at the
    config's batch size (dataset CPU, waiting, collation per sample, batch bytes), else from the CPU
    the config's own trials used per sample. None when neither was measured. Batches that vary in size
    give the calibration batches of their measured mean."""
    varying = result.varying_batches
    size = varying.calibration_size if varying else None
    st = result.stages
    if st is not None and not st.error and st.fetch_cpu is not None and st.batch_size == config.batch_size:
        cpu = st.fetch_cpu.mean + st.collate.mean / st.batch_size
        wait = st.fetch_wall.mean - st.fetch_cpu.mean
        wait = wait if wait > max(MIN_WAIT_S, 0.1 * cpu) else 0.0  # below that, the profile's noise, not I/O
        numel = st.batch_bytes // (4 * st.batch_size)
        return CalibrationShape(max(1, round(cpu / unit_s)), wait, max(1, numel), unit_s, "stage profile", UNIT_READINGS, size)
    measured = result.config_result(config)
    if measured is None or measured.cpu_per_sample is None:
        return None
    batch = measured.batch
    numel = batch.nbytes // (4 * (batch.samples or config.batch_size)) if batch else 1
    return CalibrationShape(max(1, round(measured.cpu_per_sample / unit_s)), 0.0, max(1, numel), unit_s, "trial CPU",
                            UNIT_READINGS, size)
