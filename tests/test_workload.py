"""The consumer: --step-ms's synthetic step, and how long the step waited for data ("wait %")."""

import json
import statistics
import time

import pytest
import torch
from conftest import SPECS, invoke, run_cli
from torch.utils.data import Dataset

from loadtune.engine.trial.measure import measure
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.model.config import TrialConfig
from loadtune.model.results import ScanResult
from loadtune.model.trial import Block
from loadtune.engine.options import OptionsError
from loadtune.engine.plan import prepare
from loadtune.engine.spec import from_objects
from loadtune.engine.trial.workload import StepWorkload, WorkloadError, calibrate, check_step_ms


@pytest.mark.parametrize("bad", [0, -1, -0.5, float("nan"), float("inf"), "5", True, None])
def test_step_ms_must_be_a_positive_number(bad):
    with pytest.raises(WorkloadError, match="positive number of milliseconds"):
        check_step_ms(bad)


@pytest.mark.parametrize("value", ["0", "-3"])
@pytest.mark.slow
def test_cli_refuses_a_non_positive_step_ms_with_exit_2(tmp_path, value):
    got = invoke("scan", SPECS / "tiny.py", f"--step-ms={value}", "--json", tmp_path / "r.json", "-q")
    assert got.exit_code == 2 and isinstance(got.exception, SystemExit), got.output
    assert "step_ms must be a positive number" in got.stderr
    assert not (tmp_path / "r.json").exists()


def test_step_ms_and_a_spec_step_are_not_both_taken():
    spec = from_objects(Slow(0.0), step=lambda batch: None)
    with pytest.raises(OptionsError, match="drop one"):
        prepare(spec, step_ms=5)


def test_cpu_calibration_lands_near_the_asked_length():
    work = calibrate(20, "cpu")
    assert work.device_type == "cpu" and work.iterations >= 1
    step = work.build(torch.device("cpu"))
    took = []
    for _ in range(15):
        start = time.perf_counter()
        step(None)
        took.append(time.perf_counter() - start)
    # the fastest call, as the calibration takes it; a generous factor, since a burst of other load during the
    # calibration shortens the step and one during these calls lengthens it: a wrong count or unit is far outside
    assert 20 / 4 <= min(took) * 1000 <= 20 * 4
    assert StepWorkload.from_dict(work.to_dict()) == work


class Slow(Dataset):
    """Samples that take ``delay`` seconds each to make: a loader the step waits for."""

    def __init__(self, delay):
        self.delay = delay

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return torch.full((4,), float(i))


def blocks_of(spec, config, **timing):
    events = []
    measure(spec, config, torch.device("cpu"), Timing(**{"warmup_s": 0.05, "block_s": 0.15, "blocks": 3, **timing}),
            LoaderOptions(), lambda k, p: events.append((k, p)))
    return [p for k, p in events if k == "block"]


def test_wait_fraction_is_recorded_between_0_and_1_and_follows_the_bound():
    starved = blocks_of(from_objects(Slow(0.004), step=lambda b: None), TrialConfig(8, 0))
    busy = blocks_of(from_objects(Slow(0.0), step=lambda b: time.sleep(0.02)), TrialConfig(8, 0))
    for block in starved + busy:
        assert block.wait_s is not None and 0 <= block.wait_s <= block.seconds
    starved_share = statistics.median(b.wait_s / b.seconds for b in starved)
    busy_share = statistics.median(b.wait_s / b.seconds for b in busy)
    assert starved_share > 0.5 > busy_share  # loading bound: the step waits; step bound: it hardly does


def test_no_wait_figure_without_a_consumer_and_no_bytes_on_cpu():
    blocks = blocks_of(from_objects(Slow(0.0)), TrialConfig(8, 0))
    assert blocks and all(b.wait_s is None and b.h2d_bytes is None for b in blocks)


@pytest.mark.slow
def test_synthetic_step_runs_in_the_trial_and_waits_are_saved(tmp_path):
    path = tmp_path / "r.json"
    out = run_cli("scan", str(SPECS / "tiny.py"), "--workers", "0,2", "--prefetch", "2", "--no-persistent", "--step-ms", "2",
                  "--warmup", "0.2", "--block-time", "0.1", "--blocks", "3", "--confirm", "0", "--json", str(path))
    assert out.returncode == 0, out.stderr
    assert "wait" in out.stdout and "synthetic step of 2 ms" in out.stdout.replace("\n", " ")
    data = json.loads(path.read_text())
    assert data["settings"]["step"]["ms"] == 2 and data["settings"]["step"]["device_type"] == "cpu"
    blocks = [b for t in data["trials"] for b in t["blocks"]]
    assert blocks and all(0 <= b["wait_s"] <= b["seconds"] for b in blocks)
    assert all(t["batch"]["tensors"] for t in data["trials"])
    assert not any(b.get("wait_s") for t in data["calibration"] for b in t["blocks"])  # the yardstick has no step
    result = ScanResult.load(path)
    assert all(0 <= c.wait_fraction <= 1 for c in result.configs if c.ok)


def test_old_blocks_without_the_new_fields_still_load():
    block = Block(**{"samples": 10, "batches": 1, "seconds": 0.5, "epochs": 0})
    assert block.wait_s is None and block.h2d_bytes is None and block.h2d_gbps is None
    assert Block(10, 1, 0.5, 0, 0.1, 2 * 10**9).h2d_gbps == pytest.approx(4.0)
