"""Faults in real datasets with real worker processes: each gets a clear message and the scan goes on
(SPEC §9). Every test also runs under conftest's check that no process is left behind."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from loadtune.engine.trial.measure import LoaderOptions, Timing
from loadtune.model.config import TrialConfig
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.engine.spec import SpecRef
from conftest import first_trial_saved, interrupt_when

SPECS = Path(__file__).parent / "specs"
QUICK = ["--warmup", "0.2", "--block-time", "0.1", "--blocks", "2", "--timeout", "30"]


def trial(spec, workers, batch_size=8, timeout=30.0):
    config = TrialConfig(batch_size=batch_size, num_workers=workers, prefetch_factor=2 if workers else None)
    request = TrialRequest(config, "cpu", Timing(0.1, 0.1, 2, 20), LoaderOptions(shuffle=False), timeout, "fork")
    return run_trial(SpecRef.parse(SPECS / spec), request)


def cli(*args, timeout=240):
    env = {**os.environ, "COLUMNS": "200"}
    cmd = [sys.executable, "-m", "loadtune", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def flat(text):
    return " ".join(text.split())


def test_worker_killed_by_sigkill_fails_its_trial_and_the_scan_goes_on(tmp_path):
    out = tmp_path / "k.json"
    proc = cli("scan", SPECS / "worker_sigkill.py", "--workers", "0,1", "--prefetch", "2", "--no-persistent", "--json", out, "-q", *QUICK)
    assert proc.returncode == 0, proc.stderr  # num_workers=0 was measured: there is a recommendation
    text = flat(proc.stdout)
    assert "w1 pf2 bs8 failed: a DataLoader worker" in text and "SIGKILL" in text and "out-of-memory" in text
    trials = {t["config"]["num_workers"]: t for t in json.loads(out.read_text())["trials"]}
    assert trials[0]["status"] == "ok" and trials[1]["status"] == "failed"
    assert trials[1]["error"]["kind"] == "worker_killed"


def test_bus_error_in_a_worker_points_at_dev_shm():
    result = trial("worker_sigbus.py", workers=2)
    assert result.status == "failed" and result.error.kind == "worker_killed"
    assert "/dev/shm" in result.error.message and "SIGBUS" in result.error.message


def test_dataset_exception_names_type_index_and_worker():
    result = trial("failing.py", workers=2, batch_size=16)
    assert result.error.kind == "exception" and result.error.index == 77
    assert result.error.message.startswith("the dataset raised ValueError at index 77 in worker")
    assert "corrupt record at index 77" in result.error.message


def test_uncollatable_batch_suggests_a_collate_fn():
    for workers in (0, 2):
        result = trial("ragged.py", workers=workers)
        assert result.status == "failed" and result.error.kind == "collate", result.error
        assert "collate_fn" in result.error.message and "could not be collated" in result.error.message


def test_hang_in_workers_times_out_and_the_scan_goes_on(tmp_path):
    out = tmp_path / "h.json"
    start = time.monotonic()
    proc = cli("scan", SPECS / "hanging.py", "--workers", "0,1", "--prefetch", "2", "--no-persistent", "--json", out, "-q",
               "--warmup", "0.2", "--block-time", "0.1", "--blocks", "2", "--timeout", "8")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 90
    trials = {t["config"]["num_workers"]: t for t in json.loads(out.read_text())["trials"]}
    assert trials[0]["status"] == "ok"
    assert trials[1]["error"]["kind"] == "timeout" and "8 s trial timeout" in trials[1]["error"]["message"]


def test_cuda_out_of_memory_skips_larger_batches_and_keeps_smaller(tmp_path):
    out = tmp_path / "oom.json"
    proc = cli("scan", SPECS / "oom_step.py", "--workers", "0", "--batch-size", "8,16,32", "--json", out, "-q", *QUICK)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    ok = [t["config"]["batch_size"] for t in data["trials"] if t["status"] == "ok"]
    assert ok == [8]
    oom = [t for t in data["trials"] if t["status"] == "failed"]
    assert oom and all(t["error"]["kind"] == "cuda_oom" for t in oom)
    skipped = [s for s in data["skipped"] if "CUDA out of memory" in s["why"]]
    assert len(oom) + len(skipped) == 2  # bs16 and bs32: each either failed with OOM or skipped for it
    assert data["recommendation"]["config"]["batch_size"] == 8
    assert "CUDA out of memory at batch size" in flat(proc.stdout)


def test_unsharded_iterable_dataset_is_flagged_and_a_sharded_one_is_not():
    config = TrialConfig(batch_size=16, num_workers=2, prefetch_factor=2)
    request = TrialRequest(config, "cpu", Timing(0.1, 0.1, 2, 20), LoaderOptions(shuffle=False), 30.0, "fork")
    bad = run_trial(SpecRef.parse(SPECS / "unsharded_iterable.py"), request)
    good = run_trial(SpecRef.parse(f"{SPECS / 'unsharded_iterable.py'}:sharded"), request)
    assert bad.ok and any("same samples" in w and "get_worker_info" in w for w in bad.warnings)
    assert good.ok and good.warnings == []


def interrupt_after_first_trial(cmd, out, tmp_path):
    code, _, _ = interrupt_when(cmd, first_trial_saved(out), tmp_path)
    return code


def test_resume_continues_without_rerunning_finished_trials(tmp_path):
    out = tmp_path / "resume.json"
    args = ["scan", str(SPECS / "tiny.py"), "--workers", "0,1,2", "--prefetch", "2", "--no-persistent", "--json", str(out), "-q",
            "--warmup", "0.3", "--block-time", "0.2", "--blocks", "3"]
    assert interrupt_after_first_trial([sys.executable, "-m", "loadtune", *args], out, tmp_path) == 130
    before = json.loads(out.read_text())
    assert before["state"] == "interrupted"
    finished = {t["config"]["num_workers"]: t["blocks"] for t in before["trials"]}

    refused = cli(*[a if a != "0,1,2" else "0,1" for a in args], "--resume")
    assert refused.returncode == 2 and "cannot resume" in refused.stderr
    assert json.loads(out.read_text()) == before  # a refused resume leaves the file alone

    proc = cli(*args, "--resume")
    assert proc.returncode == 0, proc.stderr
    after = json.loads(out.read_text())
    assert after["state"] == "complete"
    search = [t for t in after["trials"] if t["round"] == 0]  # later rounds re-measure contenders on purpose
    assert sorted(t["config"]["num_workers"] for t in search) == [0, 1, 2]  # each once
    for t in search:
        if t["config"]["num_workers"] in finished:
            assert t["blocks"] == finished[t["config"]["num_workers"]]  # kept, not re-measured


def test_corrupt_results_file_is_refused_for_resume(tmp_path):
    out = tmp_path / "bad.json"
    out.write_text("{not json")
    proc = cli("scan", SPECS / "tiny.py", "--json", out, "--resume")
    assert proc.returncode == 2 and "not valid JSON" in proc.stderr and "Traceback" not in proc.stderr


def test_step_failure_is_not_blamed_on_the_dataset(tmp_path):
    spec = tmp_path / "bad_step.py"
    spec.write_text(
        "import torch\nfrom torch.utils.data import TensorDataset\n"
        "def dataset():\n    return TensorDataset(torch.zeros(64, 2))\n"
        "def step(batch):\n    raise RuntimeError('shape mismatch in my model')\n"
    )
    config = TrialConfig(batch_size=8, num_workers=0)
    request = TrialRequest(config, "cpu", Timing(0.1, 0.1, 2, 20), LoaderOptions(shuffle=False), 30.0, "fork")
    result = run_trial(SpecRef.parse(spec), request)
    assert result.error.kind == "step" and "step(batch)" in result.error.message
    assert "shape mismatch in my model" in result.error.message and "dataset raised" not in result.error.message


def test_constant_iterable_data_is_not_called_unsharded():
    import torch

    from loadtune.engine.trial.faults import DuplicateDetector

    constant = DuplicateDetector(2)
    for _ in range(4):
        constant.see(torch.zeros(4))
    assert not constant.duplicated
    replayed = DuplicateDetector(2)
    for batch in ([0.0], [0.0], [1.0], [1.0]):  # worker 0 and worker 1 yield the same stream
        replayed.see(torch.tensor(batch))
    assert replayed.duplicated


def test_resume_drops_the_rows_that_said_where_the_last_run_stopped(tmp_path):
    import loadtune
    from loadtune.engine.scan import prepare, resume_from

    out = tmp_path / "budget.json"
    opts = dict(workers=[0, 1], prefetch=[2], persistent=False, warmup=0.2, block_time=0.1, blocks=3)
    first = loadtune.scan(str(SPECS / "tiny.py"), json_path=out, budget=0.5, **opts)
    assert any("budget" in s.why for s in first.skipped)  # the calibration alone spends it
    plan = prepare(str(SPECS / "tiny.py"), budget=600, **opts)
    resume_from(plan, out)
    assert not any("budget" in s.why for s in plan.result.skipped)
    assert plan.result.calibration  # what was measured is kept
