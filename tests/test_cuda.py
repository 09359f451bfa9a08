"""The GPU path. Tests marked ``cuda`` need a real CUDA device (skipped without one; on a GPU:
``python3 -m pytest -m cuda``); the others check on the CPU what can be checked there."""

import faulthandler
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from conftest import SPECS
from torch.utils.data import DataLoader, Dataset, TensorDataset

import loadtune
from loadtune.engine import bandwidth, doctor
from loadtune.engine.loaders import start
from loadtune.engine.trial.prefetch import Copy, CUDAPrefetcher, pipelined
from loadtune.engine.trial.workload import calibrate

Sample = namedtuple("Sample", "image meta")


class Nested(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": Sample(torch.rand(3, 32, 32, generator=g), {"id": torch.tensor(i), "name": f"s{i}"}),
                "y": [torch.tensor(i % 5), "tag"]}


def expected(i):
    return Nested()[i]


@pytest.mark.cuda
@pytest.mark.parametrize("pin", [True, False])
@pytest.mark.slow
def test_prefetcher_moves_nested_batches_intact(pin):
    loader = DataLoader(Nested(), batch_size=8, num_workers=2, pin_memory=pin)
    seen = 0
    for batch in CUDAPrefetcher(loader, "cuda"):
        image, ids = batch["x"].image, batch["x"].meta["id"]
        assert isinstance(batch["x"], Sample) and image.is_cuda and ids.is_cuda and batch["y"][0].is_cuda
        assert list(batch["y"][1]) == ["tag"] * len(ids) and batch["x"].meta["name"][0].startswith("s")  # collated: a tuple
        for row, i in zip(image.cpu(), ids.cpu().tolist()):
            assert torch.equal(row, expected(i)["x"].image)
        seen += len(ids)
    assert seen == 48


class Bomb:
    """Cyclic garbage that aborts a forked child collecting it, as CUDA tensors and pinned buffers do
    (their allocators call CUDA, which a forked child cannot use)."""

    def __init__(self):
        self.me, self.parent = self, os.getpid()

    def __del__(self):
        if os.getpid() != self.parent:
            faulthandler.disable()  # no stack dump in the test's output: the abort is the point
            os.abort()


class Collecting(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        gc.collect()  # what a worker's collector does on its own, sooner or later
        return i


@pytest.mark.slow
def test_workers_forked_beside_a_live_cuda_context_never_collect_the_parents_garbage(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    loader = DataLoader(Collecting(), batch_size=2, num_workers=2, persistent_workers=True)
    frozen = gc.get_freeze_count()  # not 0 on every Python (3.12 starts with some)
    gc.disable()  # the parent must not collect the bomb before its workers fork
    try:
        Bomb()
        with pytest.raises(RuntimeError, match="Abort|exited unexpectedly"):  # the hazard, without start()
            list(iter(loader))
        Bomb()
        assert [b.tolist() for b in start(DataLoader(Collecting(), batch_size=2, num_workers=2))] == [[0, 1], [2, 3], [4, 5], [6, 7]]
        assert gc.get_freeze_count() == frozen  # this process's collector as it was
    finally:
        gc.enable()
        gc.collect()


class CollectorState(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return int(gc.isenabled())


@pytest.mark.slow
def test_workers_forked_beside_a_live_cuda_context_collect_their_own_garbage(monkeypatch):
    """The collector is paused only while the workers fork: on again in each worker and here."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert gc.isenabled()
    assert [b.tolist() for b in start(DataLoader(CollectorState(), batch_size=2, num_workers=2))] == [[1, 1], [1, 1]]
    assert gc.isenabled()


@pytest.mark.cuda
def test_prefetcher_records_the_compute_stream_on_every_moved_tensor(monkeypatch):
    recorded = []
    original = torch.Tensor.record_stream

    def spy(self, stream):
        recorded.append((self.device.type, stream))
        return original(self, stream)

    monkeypatch.setattr(torch.Tensor, "record_stream", spy)
    batches = [(torch.randn(4, 4), {"m": torch.ones(2)}, "leaf") for _ in range(3)]
    out = list(CUDAPrefetcher(batches, "cuda"))
    assert len(recorded) == 3 * 2  # two tensors per batch, the string untouched
    assert all(kind == "cuda" and stream == torch.cuda.current_stream() for kind, stream in recorded)
    assert all(torch.equal(o[0].cpu(), b[0]) for o, b in zip(out, batches))


def filled(count: int, mib: int) -> list[torch.Tensor]:
    """``count`` pinned batches of ``mib`` MiB, batch i all ``i + 1``: every value differs, so a batch
    read from memory that is not its own (not yet copied, or already overwritten by another batch's
    copy, whichever block the caching allocator hands back) sums to something else."""
    numel = mib * 2**20 // 4
    return [torch.full((numel,), float(i + 1)).pin_memory() for i in range(count)]


def exact_sums(batches) -> list[float]:
    return [batch.sum(dtype=torch.float64) for batch in batches]


@pytest.mark.cuda
def test_the_step_waits_for_its_copy():
    """Copies much longer than the step, the compute stream idle: without ``wait_stream`` the step's
    kernel starts while its batch is still being copied and reads what the memory held before."""
    data = filled(8, 64)  # 64 MiB copies take milliseconds; the sum starts microseconds after its copy is issued
    sums = exact_sums(CUDAPrefetcher(data, "cuda"))  # nothing waits on the host until the end
    torch.cuda.synchronize()
    assert [s.item() for s in sums] == [(i + 1) * 16 * 2**20 for i in range(8)]


@pytest.mark.cuda
def test_a_batch_is_not_overwritten_while_its_step_still_reads_it():
    """Steps much longer than the copies: the host runs ahead, issuing later copies while earlier
    steps still wait their turn on the compute stream. Without ``record_stream`` a batch freed on the
    host gives its memory back to the side stream at once, and a later copy overwrites it before its
    step has read it."""
    sums = []
    for batch in CUDAPrefetcher(filled(12, 4), "cuda"):
        torch.cuda._sleep(50_000_000)  # tens of milliseconds on the compute stream: a long step
        sums.append(batch.sum(dtype=torch.float64))
    torch.cuda.synchronize()
    assert [s.item() for s in sums] == [(i + 1) * 2**20 for i in range(12)]


class Fetches:
    """A loader that logs each ``next()``, for the prefetcher's order of events."""

    def __init__(self, n: int, log: list):
        self.items, self.log = list(range(n)), log

    def __iter__(self):
        for item in self.items:
            self.log.append(("fetch", item))
            yield torch.full((2,), float(item))


def test_the_prefetcher_hands_out_the_first_batch_before_fetching_the_second_then_copies_ahead():
    """Its order of events, on the CPU (the same generator drives the CUDA streams): the first batch
    goes out after one fetch, so its start-up counts one batch as the other strategies do; after it,
    each batch is ready (the step waits for it) before the next copy is issued, and that copy is
    issued before the batch goes out (so it overlaps the step)."""
    log: list = []

    def issue(batch):
        log.append(("issue", int(batch[0])))
        return batch

    def ready(copy: Copy):
        log.append(("ready", int(copy.batch[0])))

    out = []
    for copy in pipelined(iter(Fetches(4, log)), issue, ready):
        log.append(("out", int(copy.batch[0])))
        out.append(copy.nbytes)
    assert log == [("fetch", 0), ("issue", 0), ("ready", 0), ("out", 0),
                   ("fetch", 1), ("issue", 1), ("ready", 1), ("fetch", 2), ("issue", 2), ("out", 1),
                   ("ready", 2), ("fetch", 3), ("issue", 3), ("out", 2),
                   ("ready", 3), ("out", 3)]
    assert out == [8] * 4  # the bytes of each batch handed out
    assert list(pipelined(iter([]), issue, ready)) == []


def test_on_the_cpu_the_prefetcher_passes_batches_through():
    batches = [torch.ones(2), torch.zeros(3)]
    assert list(CUDAPrefetcher(batches, "cpu")) == batches


@pytest.mark.cuda
def test_the_warm_ups_duplicate_check_keeps_no_gpu_memory():
    """With ``stream`` the warm-up's check for replaying workers sees batches already on the GPU: the
    first tensors it keeps must not count in the trial's device memory peak."""
    from loadtune.engine.trial.faults import DuplicateDetector

    device = torch.device("cuda", 0)
    detector = DuplicateDetector(2)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    for i in range(4):
        detector.see({"x": torch.full((1 << 20,), float(i % 2), device=device)})
    assert torch.cuda.memory_allocated(device) == before
    assert all(t.device.type == "cpu" for t in detector.first) and not detector.duplicated


@pytest.mark.cuda
def test_doctor_measures_positive_copy_rates():
    report = doctor.collect(sizes=(1 << 20, 16 << 20))
    assert report.gpu_note is None and report.gpus
    gpu = report.gpus[0]
    assert gpu.error is None and len(gpu.copies) == 2 * 2 * 2
    assert all(c.gbps > 0 and c.low <= c.gbps <= c.high for c in gpu.copies)
    assert bandwidth.pinned_peak(torch.device("cuda", 0), 16 << 20) > 0


@pytest.mark.cuda
def test_cuda_step_calibration_lands_near_the_asked_length():
    work = calibrate(5, "cuda")
    step = work.build(torch.device("cuda"))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    took = []
    for _ in range(5):
        start.record()
        step(None)
        end.record()
        end.synchronize()
        took.append(start.elapsed_time(end))
    assert 5 / 3 <= statistics.median(took) <= 5 * 3


@pytest.mark.cuda
@pytest.mark.slow
def test_scan_searches_transfer_strategies_on_the_gpu(tmp_path):
    result = loadtune.scan(SPECS / "tiny.py", workers=[0, 2], prefetch=[2], persistent=False, search="grid",
                           warmup=0.2, block_time=0.1, blocks=3, confirm=0, step_ms=2, json_path=tmp_path / "r.json")
    assert result.h2d_peak_gbps and result.h2d_peak_gbps > 0
    assert result.settings.step["device_type"] == "cuda"
    assert {t.config.transfer for t in result.trials} == {"sync", "non_blocking", "stream"}
    assert not any(t.config.transfer == "non_blocking" and not t.config.pin_memory for t in result.trials)
    for trial in result.trials:
        assert trial.ok, trial.error
        assert all(b.h2d_bytes and b.h2d_bytes > 0 for b in trial.blocks)
        assert all(0 <= b.wait_s <= b.seconds for b in trial.blocks)
        assert trial.gpu and trial.gpu.peak_allocated_bytes > 0
        if trial.config.pin_memory:
            assert trial.gpu.pinned_bytes
    loaded = loadtune.ScanResult.load(tmp_path / "r.json")
    assert all(c.h2d_gbps > 0 for c in loaded.configs)


IN_THE_CLI = textwrap.dedent("""
    import json, os, sys
    import torch
    from loadtune.cli import main

    sys.argv = ["loadtune", "scan", *sys.argv[1:]]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    initialized = torch.cuda.is_initialized()
    pid = os.fork()  # what a trial of an in-memory dataset is: a child forked from the scan's process
    if pid == 0:
        try:
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"code": code, "initialized": initialized, "forked_child_ok": os.waitstatus_to_exitcode(status) == 0}))
""")


@pytest.mark.cuda
@pytest.mark.slow
def test_the_scans_own_process_never_initialises_cuda(tmp_path):
    """A whole CUDA scan run by the CLI in this very process: afterwards CUDA is not initialised here,
    and a child forked from it can still use the GPU (nothing in the scan's process poisoned fork)."""
    args = [SPECS / "tiny.py", "--device", "cuda", "--workers", "0", "--prefetch", "2", "--no-persistent", "--warmup", "0.2",
            "--block-time", "0.1", "--blocks", "3", "--confirm", "0", "--step-ms", "2", "--json", tmp_path / "r.json"]
    done = subprocess.run([sys.executable, "-c", IN_THE_CLI, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"code": 0, "initialized": False, "forked_child_ok": True}, done.stdout[-3000:]


def on_its_own_gpu(batch):
    """A rank's step: its batch, and its current device, are those of GPU LOCAL_RANK, never GPU 0's
    (peaks read on whatever device a rank used would not show it)."""
    local = int(os.environ.get("LOCAL_RANK", "0"))  # a trial of one loader (the profile) runs on cuda:0
    images = batch[0]
    if images.device != torch.device("cuda", local) or torch.cuda.current_device() != local:
        raise AssertionError(f"local rank {local} got a batch on {images.device}, cuda:{torch.cuda.current_device()} current")


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_ranks_of_an_in_memory_dataset_each_measure_their_own_gpu(tmp_path):
    """Two ranks of a dataset built in this process (spawned, never forked, on CUDA): each rank's batches
    and figures come from its own GPU, and each rank's copy is set beside its own GPU's pinned peak."""
    data = TensorDataset(torch.randn(256, 3, 32, 32), torch.arange(256))
    result = loadtune.scan(data, step=on_its_own_gpu, device="cuda", nproc_per_node=2, workers=[0, 1], prefetch=[2],
                           persistent=False, batch_size=16, warmup=0.2, block_time=0.1, blocks=3, confirm=0, reference_rounds=0,
                           json_path=tmp_path / "r.json")
    assert result.settings.ranks["start_method"] == "spawn" and result.settings.ranks["backend"] == "gloo"
    assert result.h2d_peaks_gbps and len(result.h2d_peaks_gbps) == 2 and all(p > 0 for p in result.h2d_peaks_gbps)
    assert result.trials and all(t.ok for t in result.trials), [t.error for t in result.trials]
    for trial in result.trials:
        assert [r.local_rank for r in trial.ranks] == [0, 1]
        assert all(r.gpu is not None and r.gpu.peak_allocated_bytes > 0 for r in trial.ranks)
        assert trial.batch is not None and trial.gpu is not None  # the ranks' figures reached the trial


def test_the_synthetic_step_is_calibrated_with_the_spec_loaded(monkeypatch):
    """A spec that enables TF32 at import makes the same matmuls faster in every trial; the step must be
    calibrated under it, or the trials would run a shorter step than asked."""
    from loadtune.engine import probe
    from loadtune.engine.spec import SpecRef
    from loadtune.engine.trial import workload

    seen = []
    monkeypatch.setattr(workload, "calibrate", lambda ms, device: seen.append(torch.get_float32_matmul_precision())
                        or workload.StepWorkload(ms, "cpu", 16, 1, ms))
    before = torch.get_float32_matmul_precision()
    try:
        ref = SpecRef.parse(SPECS / "tf32.py")
        with tempfile.TemporaryDirectory() as scratch:
            probe.calibrate_step(torch.device("cpu"), 2.0, probe.spec_argument(ref, Path(scratch)))
    finally:
        torch.set_float32_matmul_precision(before)
    assert seen == ["medium"]
