"""The GPU path on a real CUDA device (skipped without one; on a GPU: ``python3 -m pytest -m cuda``)."""

import statistics
from collections import namedtuple

import pytest
import torch
from conftest import SPECS
from torch.utils.data import DataLoader, Dataset

import loadtune
from loadtune.engine import bandwidth, doctor
from loadtune.engine.trial.prefetch import CUDAPrefetcher
from loadtune.engine.trial.workload import calibrate

pytestmark = pytest.mark.cuda
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


@pytest.mark.parametrize("pin", [True, False])
@pytest.mark.slow
def test_prefetcher_moves_nested_batches_intact(pin):
    loader = DataLoader(Nested(), batch_size=8, num_workers=2, pin_memory=pin)
    seen = 0
    for batch in CUDAPrefetcher(loader, "cuda"):
        image, ids = batch["x"].image, batch["x"].meta["id"]
        assert isinstance(batch["x"], Sample) and image.is_cuda and ids.is_cuda and batch["y"][0].is_cuda
        assert batch["y"][1] == ["tag"] * len(ids) and batch["x"].meta["name"][0].startswith("s")
        for row, i in zip(image.cpu(), ids.cpu().tolist()):
            assert torch.equal(row, expected(i)["x"].image)
        seen += len(ids)
    assert seen == 48


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


def test_prefetched_values_are_right_while_the_gpu_is_busy():
    """A long kernel on the compute stream while the next copy runs on the side stream: the step must
    still read the finished copy (wait_stream), and no buffer may be reused under it (record_stream)."""
    data = [torch.full((1 << 20,), float(i)).pin_memory() for i in range(12)]
    heavy = torch.randn(2048, 2048, device="cuda")
    sums = []
    for batch in CUDAPrefetcher(data, "cuda"):
        for _ in range(5):
            heavy = torch.tanh(heavy @ heavy / 2048)  # keeps the compute stream busy while the next copy runs
        sums.append(batch.sum())
    torch.cuda.synchronize()
    assert [s.item() for s in sums] == [float(i) * (1 << 20) for i in range(12)]


def test_doctor_measures_positive_copy_rates():
    report = doctor.collect(sizes=(1 << 20, 16 << 20))
    assert report.gpu_note is None and report.gpus
    gpu = report.gpus[0]
    assert gpu.error is None and len(gpu.copies) == 2 * 2 * 2
    assert all(c.gbps > 0 and c.low <= c.gbps <= c.high for c in gpu.copies)
    assert bandwidth.pinned_peak(torch.device("cuda", 0), 16 << 20) > 0


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
