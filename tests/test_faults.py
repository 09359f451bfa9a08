"""Faults in real datasets with real worker processes: each gets a clear message and the scan goes on.
Every test also runs under conftest's check that no process is left behind."""

import json
import queue
import signal
import sys
from multiprocessing.process import BaseProcess

import pytest

from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.faults import diagnose
from loadtune.engine.trial.harness import run_trial
from loadtune.model.config import TrialConfig
from conftest import QUICK, SPECS, first_trial_saved, flat, interrupt_when, invoke, quick_request, run_cli


def trial(spec, workers, batch_size=8):
    config = TrialConfig(batch_size=batch_size, num_workers=workers, prefetch_factor=2 if workers else None)
    return run_trial(SpecRef.parse(SPECS / spec), quick_request(config))


@pytest.mark.slow
def test_worker_killed_by_sigkill_fails_its_trial_and_the_scan_goes_on(tmp_path):
    out = tmp_path / "k.json"
    proc = run_cli("scan", SPECS / "worker_sigkill.py", "--workers", "0,1", "--prefetch", "2", "--no-persistent", "--json", out, "-q", *QUICK)
    assert proc.returncode == 0, proc.stderr  # num_workers=0 was measured: there is a recommendation
    text = flat(proc.stdout)
    assert "w1 pf2 bs8 failed: a DataLoader worker" in text and "SIGKILL" in text and "out-of-memory" in text
    trials = {t["config"]["num_workers"]: t for t in json.loads(out.read_text())["trials"]}
    assert trials[0]["status"] == "ok" and trials[1]["status"] == "failed"
    assert trials[1]["error"]["kind"] == "worker_killed"


@pytest.mark.slow
def test_bus_error_in_a_worker_points_at_dev_shm():
    result = trial("worker_sigbus.py", workers=2)
    assert result.status == "failed" and result.error.kind == "worker_killed"
    assert "/dev/shm" in result.error.message and "SIGBUS" in result.error.message


class DeadWorker(BaseProcess):
    """A worker as a DataLoader iterator keeps it, already killed by ``signum``."""

    def __init__(self, pid, signum):
        super().__init__()
        self.dead_pid, self.dead_code = pid, -signum

    pid = property(lambda self: self.dead_pid)
    exitcode = property(lambda self: self.dead_code)

    def join(self, timeout=None):
        pass


class NoticingIterator:
    """PyTorch's iterator as it notices a death: ``_workers`` holds every worker, the error says what it saw."""

    def __init__(self, workers):
        self._workers = workers

    def __next__(self, seen, cause):
        raise RuntimeError(seen) from cause


def death_diagnosed(seen, cause=None, workers=()):
    try:
        NoticingIterator([DeadWorker(pid, signum) for pid, signum in workers]).__next__(seen, cause)
    except RuntimeError as exc:
        return diagnose(exc)


KILLED = "DataLoader worker (pid 11) is killed by signal: Killed. "
BUS = "DataLoader worker (pid 12) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory."
EXITED = "DataLoader worker (pid(s) 11, 12) exited unexpectedly"


@pytest.mark.parametrize("seen, cause, workers", [
    (EXITED, queue.Empty(), [(11, signal.SIGBUS), (12, signal.SIGBUS)]),  # only the exit statuses know
    (EXITED, RuntimeError(KILLED), [(11, signal.SIGKILL), (12, signal.SIGBUS)]),  # the other death was seen first
    (EXITED, RuntimeError(BUS), []),  # only PyTorch's text knows
    (KILLED, None, [(11, signal.SIGKILL), (12, signal.SIGBUS)]),
], ids=["exit-status", "a-later-death", "text", "signal-seen-first"])
def test_a_bus_error_in_any_worker_points_at_dev_shm_whichever_death_was_seen_first(seen, cause, workers):
    error = death_diagnosed(seen, cause, workers)
    assert error.kind == "worker_killed" and "SIGBUS" in error.message and "/dev/shm" in error.message, error.message


def test_other_worker_deaths_say_what_is_known():
    killed = death_diagnosed(EXITED, queue.Empty(), [(11, signal.SIGKILL)])
    assert "(pid 11) was killed by SIGKILL" in killed.message and "out-of-memory" in killed.message
    assert "/dev/shm" not in killed.message
    assert "SIGSEGV" in death_diagnosed(EXITED, queue.Empty(), [(11, signal.SIGSEGV)]).message
    unknown = death_diagnosed(EXITED, queue.Empty())
    assert unknown.kind == "worker_killed" and unknown.message.startswith("DataLoader worker(s) 11, 12 exited unexpectedly")


@pytest.mark.slow
def test_dataset_exception_names_type_index_and_worker():
    result = trial("failing.py", workers=2, batch_size=16)
    assert result.error.kind == "exception" and result.error.index == 77
    assert result.error.message.startswith("the dataset raised ValueError at index 77 in worker")
    assert "corrupt record at index 77" in result.error.message


@pytest.mark.slow
def test_uncollatable_batch_suggests_a_collate_fn():
    for workers in (0, 2):
        result = trial("ragged.py", workers=workers)
        assert result.status == "failed" and result.error.kind == "collate", result.error
        assert "collate_fn" in result.error.message and "could not be collated" in result.error.message


@pytest.mark.slow
def test_hang_in_workers_times_out_and_the_scan_goes_on(tmp_path):
    out = tmp_path / "h.json"
    proc = run_cli("scan", SPECS / "hanging.py", "--workers", "0,1", "--prefetch", "2", "--no-persistent", "--json", out, "-q",
                   "--warmup", "0.2", "--block-time", "0.1", "--blocks", "2", "--timeout", "8")  # a hang left alone runs into run_cli's timeout
    assert proc.returncode == 0, proc.stderr
    trials = {t["config"]["num_workers"]: t for t in json.loads(out.read_text())["trials"]}
    assert trials[0]["status"] == "ok"
    assert trials[1]["error"]["kind"] == "timeout" and "8 s trial timeout" in trials[1]["error"]["message"]


@pytest.mark.slow
def test_cuda_out_of_memory_skips_larger_batches_and_keeps_smaller(tmp_path):
    out = tmp_path / "oom.json"
    proc = run_cli("scan", SPECS / "oom_step.py", "--workers", "0", "--batch-size", "8,16,32", "--json", out, "-q", *QUICK)
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


@pytest.mark.slow
def test_unsharded_iterable_dataset_is_flagged_and_a_sharded_one_is_not():
    request = quick_request(TrialConfig(batch_size=16, num_workers=2, prefetch_factor=2))
    bad = run_trial(SpecRef.parse(SPECS / "unsharded_iterable.py"), request)
    good = run_trial(SpecRef.parse(f"{SPECS / 'unsharded_iterable.py'}:sharded"), request)
    assert bad.ok and any("same samples" in w and "get_worker_info" in w for w in bad.warnings)
    assert good.ok and good.warnings == []


def interrupt_after_first_trial(cmd, out, tmp_path):
    code, _, _ = interrupt_when(cmd, first_trial_saved(out), tmp_path)
    return code


@pytest.mark.slow
def test_resume_continues_without_rerunning_finished_trials(tmp_path):
    out = tmp_path / "resume.json"
    args = ["scan", str(SPECS / "tiny.py"), "--workers", "0,1,2", "--prefetch", "2", "--no-persistent", "--json", str(out), "-q",
            "--warmup", "0.3", "--block-time", "0.2", "--blocks", "3", "--confirm", "0"]  # the search resumed, no race after it
    assert interrupt_after_first_trial([sys.executable, "-m", "loadtune", *args], out, tmp_path) == 130
    before = json.loads(out.read_text())
    assert before["state"] == "interrupted"
    finished = {t["config"]["num_workers"]: t["blocks"] for t in before["trials"]}

    refused = invoke(*[a if a != "0,1,2" else "0,1" for a in args], "--resume")
    assert refused.exit_code == 2 and "cannot resume" in refused.stderr
    assert json.loads(out.read_text()) == before  # a refused resume leaves the file alone

    proc = run_cli(*args, "--resume")
    assert proc.returncode == 0, proc.stderr
    after = json.loads(out.read_text())
    assert after["state"] == "complete"
    search = [t for t in after["trials"] if t["round"] == 0 and not t["leg"] and not t.get("referee")]  # no race legs, no referee rounds
    assert sorted(t["config"]["num_workers"] for t in search) == [0, 1, 2]  # each once
    for t in search:
        if t["config"]["num_workers"] in finished:
            assert t["blocks"] == finished[t["config"]["num_workers"]]  # kept, not re-measured


@pytest.mark.slow
def test_corrupt_results_file_is_refused_for_resume(tmp_path):
    out = tmp_path / "bad.json"
    out.write_text("{not json")
    got = invoke("scan", SPECS / "tiny.py", "--json", out, "--resume")
    assert got.exit_code == 2 and "not valid JSON" in got.stderr and isinstance(got.exception, SystemExit)


@pytest.mark.slow
def test_step_failure_is_not_blamed_on_the_dataset(tmp_path):
    spec = tmp_path / "bad_step.py"
    spec.write_text(
        "import torch\nfrom torch.utils.data import TensorDataset\n"
        "def dataset():\n    return TensorDataset(torch.zeros(64, 2))\n"
        "def step(batch):\n    raise RuntimeError('shape mismatch in my model')\n"
    )
    result = run_trial(SpecRef.parse(spec), quick_request(TrialConfig(batch_size=8, num_workers=0)))
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


@pytest.mark.slow
def test_resume_drops_the_rows_that_said_where_the_last_run_stopped(tmp_path):
    import loadtune
    from loadtune.engine.plan import prepare, resume_from

    out = tmp_path / "budget.json"
    # no race: a budget this short for one would be refused before any trial (tests/test_budget.py)
    opts = dict(workers=[0, 1], prefetch=[2], persistent=False, warmup=0.2, block_time=0.1, blocks=3, race_legs=0)
    first = loadtune.scan(str(SPECS / "tiny.py"), json_path=out, budget=0.5, **opts)
    assert any("budget" in s.why for s in first.skipped)  # the first trial would exceed it
    plan = prepare(str(SPECS / "tiny.py"), budget=600, **opts)
    resume_from(plan, out)
    assert not any("budget" in s.why for s in plan.result.skipped)
    assert plan.result.calibration  # what was measured is kept


# ---------------------------------------------------------------- start methods and pickles


def refuse_to_rebuild():
    raise RuntimeError("this object cannot be rebuilt in another process")


class Unbuildable(list):
    """Pickles in the scan's process, fails to unpickle in the trial's."""

    def __reduce__(self):
        return refuse_to_rebuild, ()


@pytest.mark.slow
def test_an_in_memory_dataset_runs_forkserver_workers_in_a_forked_trial():
    """A forked trial inherits the record of the scan's fork server; its forkserver workers must start one of their own."""
    from loadtune.engine.spec import from_objects

    run_trial(SpecRef(str(SPECS / "tiny.py")), quick_request(TrialConfig(8, 0)))  # the scan's fork server is up
    trial = run_trial(from_objects(list(range(64))), quick_request(TrialConfig(8, 1, prefetch_factor=2, start_method="forkserver")))
    assert trial.ok, trial.error


@pytest.mark.slow
def test_what_a_trial_cannot_unpickle_or_pickle_is_named_with_its_start_method():
    from loadtune.engine.spec import from_objects

    spec = from_objects(Unbuildable(range(16)))
    spec.picklable = True  # sent to the fork server by pickle
    trial = run_trial(spec, quick_request(TrialConfig(8, 0)))
    assert not trial.ok and trial.error.kind == "failure"
    assert "could not unpickle the dataset Unbuildable for a trial process started with 'forkserver'" in trial.error.message
    assert "this object cannot be rebuilt in another process" in trial.error.message
    spec = from_objects(list(range(16)), collate_fn=lambda batch: batch)
    spec.picklable = True
    trial = run_trial(spec, quick_request(TrialConfig(8, 0)))
    assert "could not pickle the dataset list for a trial process started with 'forkserver'" in trial.error.message
