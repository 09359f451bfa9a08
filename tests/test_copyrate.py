"""The copy to the GPU in the report: achieved GB/s beside the peak, the uint8 advice, GPU usage —
as pure functions of a result, so they are checked without a GPU."""

import pytest
import torch
from rich.console import Console

from loadtune.engine.trial import gpu

from loadtune.engine import probe
from loadtune.analysis.copyrate import copy_notes, copy_share, image_tensor
from loadtune.engine.machine import collect
from loadtune.model.config import TrialConfig
from loadtune.analysis.recommend import recommend
from loadtune.report.scan import print_report
from loadtune.model.results import ScanResult, SpecInfo
from loadtune.model.trial import Block, GPUUsage, MemoryUsage, Trial
from loadtune.model.settings import ScanSettings
from loadtune.model.batch import BatchInfo

IMAGES = BatchInfo(64 * 3 * 224 * 224 * 4 + 64 * 8, [("float32", [64, 3, 224, 224]), ("int64", [64])])
BATCH_BYTES = IMAGES.nbytes


def gpu_result(gbps_of, peak=25.0, batch=IMAGES, step=True):
    """A scan on a (pretend) GPU: each config moves batches at ``gbps_of(config)`` GB/s."""
    spec = SpecInfo(None, None, None, "Images", 10_000, False, step, False)
    result = ScanResult(spec=spec, machine=collect(), settings=ScanSettings(device="cuda:0"),
                        h2d_peak_gbps=peak)
    for config in (TrialConfig(64, 0, False, None, False, "sync"), TrialConfig(64, 4, True, 2, True, "non_blocking"),
                   TrialConfig(64, 4, True, 2, True, "stream")):
        rate = gbps_of(config)
        batches = max(1, round(rate * 1e9 / BATCH_BYTES))
        blocks = [Block(batches * 64, batches, 1.0, 0, 0.3, batches * BATCH_BYTES) for _ in range(4)]
        result.trials.append(Trial(config, "ok", startup_s=0.1, blocks=blocks, batch=batch,
                                   memory=MemoryUsage(2**30, 5, "pss"),
                                   gpu=GPUUsage(3 * 2**30, 4 * 2**30, BATCH_BYTES * 9, True, [(1.0, 60), (1.2, 70)])))
    result.recommendation = recommend(result.trials)
    return result


def test_image_like_batches_are_recognised():
    assert image_tensor(IMAGES) == ("float32", [64, 3, 224, 224])
    nhwc = BatchInfo(32 * 64 * 64 * 3 * 4, [("float32", [32, 64, 64, 3])])
    assert image_tensor(nhwc) is not None
    assert image_tensor(BatchInfo(64 * 3 * 224 * 224, [("uint8", [64, 3, 224, 224])])) is None  # already uint8
    assert image_tensor(BatchInfo(64 * 512 * 4, [("float32", [64, 512])])) is None  # features, not images
    assert image_tensor(None) is None


def test_copy_bound_image_batches_get_the_uint8_advice():
    result = gpu_result(lambda c: 22.0 if c.num_workers else 8.0)
    notes = copy_notes(result)
    assert "88% of this device's pinned host-to-device peak (25.0 GB/s" in notes[0]
    assert "the copy is the bound" in notes[0]
    assert any("uint8" in n and "apex" in n and "1/4" in n for n in notes)
    pick = result.config_result(result.recommendation.config)
    assert copy_share(pick, 25.0) == pytest.approx(pick.h2d_gbps / 25.0)


def test_no_uint8_advice_when_the_copy_is_far_from_the_bound_or_the_data_is_not_images():
    assert not any("uint8" in n for n in copy_notes(gpu_result(lambda c: 3.0)))
    features = BatchInfo(BATCH_BYTES, [("float32", [64, 3 * 224 * 224])])
    assert not any("uint8" in n for n in copy_notes(gpu_result(lambda c: 22.0, batch=features)))
    no_peak = copy_notes(gpu_result(lambda c: 22.0, peak=None))
    assert len(no_peak) == 1 and "no pinned peak" in no_peak[0]


def test_table_shows_wait_and_copy_rate_columns_and_gpu_usage():
    result = gpu_result(lambda c: 22.0 if c.num_workers else 8.0)
    console = Console(record=True, width=120)
    print_report(console, result)
    short = console.export_text()
    assert "wait" in short and "GB/s" in short and "30%" in short and "pinned peak 25.0" in short
    console = Console(record=True, width=120)
    print_report(console, result, details=True)
    text = console.export_text()
    assert "GPU memory peak 3.0G allocated, 4.0G reserved" in text and "GPU utilisation 65%" in text
    assert "pinned host memory" in text and "estimate" in text


def test_no_extra_columns_on_a_cpu_scan_without_a_step():
    result = gpu_result(lambda c: 1.0, step=False)
    for t in result.trials:
        t.blocks = [Block(b.samples, b.batches, b.seconds, 0) for b in t.blocks]
    console = Console(record=True, width=120)
    print_report(console, result)
    header = console.export_text().splitlines()[2]
    assert "wait" not in header and "GB/s" not in header


def test_gpu_fields_round_trip(tmp_path):
    result = gpu_result(lambda c: 10.0)
    result.save(tmp_path / "r.json")
    back = ScanResult.load(tmp_path / "r.json")
    assert back.h2d_peak_gbps == 25.0
    trial = back.trials[0]
    assert trial.gpu == result.trials[0].gpu and trial.batch == IMAGES
    assert trial.blocks[0].h2d_bytes == result.trials[0].blocks[0].h2d_bytes


def test_pinned_estimate_is_batch_bytes_times_batches_in_flight():
    info = BatchInfo(1000, [])
    assert gpu.pinned_estimate(TrialConfig(8, 4, True, 2), info) == 1000 * (2 * 4 + 1)
    assert gpu.pinned_estimate(TrialConfig(8, 0, True), info) == 1000
    assert gpu.pinned_estimate(TrialConfig(8, 4, False, 2), info) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
@pytest.mark.slow
def test_probe_without_a_gpu_reports_an_error_instead_of_raising():
    got = probe.run("cuda:0", 5.0, timeout=120)
    assert got.error and got.workload is None and got.h2d_peak_gbps is None
