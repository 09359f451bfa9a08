"""Trials in isolated processes with real DataLoader workers: results, failures, timeouts, no orphans."""

import time
from pathlib import Path

import pytest

from loadtune.engine.trial.measure import LoaderOptions, Timing
from loadtune.model.config import TrialConfig
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.engine.spec import SpecRef

from conftest import live_group_members

SPECS = Path(__file__).parent / "specs"
QUICK = Timing(warmup_s=0.1, block_s=0.1, blocks=2, max_s=20)


def request(config, timeout=30.0, timing=QUICK):
    return TrialRequest(config, "cpu", timing, LoaderOptions(shuffle=False), timeout, "fork")


def test_trial_with_workers_measures_and_counts_every_process():
    config = TrialConfig(batch_size=32, num_workers=2, prefetch_factor=2)
    trial = run_trial(SpecRef.parse(SPECS / "tiny.py"), request(config))
    assert trial.status == "ok", trial.error
    assert len(trial.blocks) == 2 and trial.estimate.median > 0
    assert trial.startup_s is not None and trial.startup_s > 0
    assert trial.memory.peak_processes == 3  # the trial's main process and its two workers
    assert trial.memory.method in ("pss", "rss") and trial.memory.peak_bytes > 10 * 2**20


def test_dataset_exception_fails_the_trial_with_its_own_type_and_message():
    config = TrialConfig(batch_size=16, num_workers=2, prefetch_factor=2)
    trial = run_trial(SpecRef.parse(SPECS / "failing.py"), request(config))
    assert trial.status == "failed"
    assert trial.error.kind == "exception"
    assert trial.error.exception_type == "ValueError"
    assert "corrupt record at index 77" in trial.error.message


def test_hang_hits_the_timeout_and_leaves_no_process_behind():
    pids = []
    config = TrialConfig(batch_size=8, num_workers=2, prefetch_factor=2)
    trial = run_trial(
        SpecRef.parse(SPECS / "hanging.py"),
        request(config, timeout=4.0),
        on_event=lambda kind, payload: pids.append(payload) if kind == "process" else None,
    )
    assert trial.status == "failed" and trial.error.kind == "timeout"
    assert 4.0 <= trial.wall_s < 20
    assert pids and live_group_members(pids[0]) == []  # the child and both workers are gone


def test_trial_killed_by_a_signal_is_reported(tmp_path):
    spec = tmp_path / "suicidal.py"
    spec.write_text(
        "import os, signal, torch\n"
        "from torch.utils.data import Dataset\n"
        "class D(Dataset):\n"
        "    def __len__(self): return 8\n"
        "    def __getitem__(self, i):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "def dataset(): return D()\n"
    )
    trial = run_trial(SpecRef.parse(spec), request(TrialConfig(batch_size=4, num_workers=0)))
    assert trial.status == "failed"
    assert trial.error.kind == "killed" and "SIGKILL" in trial.error.message


@pytest.mark.parametrize("workers", [0, 2])
def test_user_prints_stay_out_of_our_output(capfd, tmp_path, workers):
    spec = tmp_path / f"chatty{workers}.py"
    spec.write_text(
        "import torch\n"
        "from torch.utils.data import Dataset\n"
        "class D(Dataset):\n"
        "    def __len__(self): return 64\n"
        "    def __getitem__(self, i):\n"
        "        print('loading', i)\n"
        "        return torch.zeros(2)\n"
        "def dataset(): return D()\n"
    )
    config = TrialConfig(batch_size=8, num_workers=workers, prefetch_factor=2 if workers else None)
    trial = run_trial(SpecRef.parse(spec), request(config))
    assert trial.ok
    out, err = capfd.readouterr()
    assert "loading" not in out and "loading" not in err


def test_trial_counts_the_cpu_of_its_workers_over_the_timed_blocks():
    from loadtune.model.results import ConfigResult

    timing = Timing(warmup_s=0.2, block_s=0.2, blocks=3, max_s=20)
    config = TrialConfig(batch_size=16, num_workers=2, prefetch_factor=2, persistent_workers=True)
    computing = run_trial(SpecRef.parse(SPECS / "bound_by.py:cpu"), request(config, timing=timing))
    waiting = run_trial(SpecRef.parse(SPECS / "bound_by.py:waiting"), request(config, timing=timing))
    assert computing.status == "ok" and waiting.status == "ok"
    cpu, sleep = ConfigResult(config, [computing]), ConfigResult(config, [waiting])
    # ~1 ms of arithmetic a sample happens in the workers: the main process alone would read a few µs
    assert cpu.cpu_per_sample > 0.3e-3, cpu.cpu_per_sample
    assert sleep.cpu_per_sample < cpu.cpu_per_sample / 3  # 2 ms of sleep a sample costs little CPU
    assert 0 < sleep.busy_cores < cpu.busy_cores


def test_trial_cpu_is_left_unknown_when_the_workers_change_inside_the_window():
    # without persistent_workers every epoch starts new workers: the CPU of those that ended is not readable
    timing = Timing(warmup_s=0.1, block_s=0.1, blocks=3, max_s=20)
    config = TrialConfig(batch_size=8, num_workers=2, prefetch_factor=2)
    trial = run_trial(SpecRef.parse(SPECS / "short_epoch.py"), request(config, timing=timing))
    assert trial.status == "ok" and sum(b.epochs for b in trial.blocks) >= 2
    assert trial.cpu_s is None


def test_ctrl_c_while_a_trial_starts_is_held_until_it_has_started():
    import os
    import signal

    from loadtune.engine.trial.harness import sigint_held

    reached = []
    with pytest.raises(KeyboardInterrupt):
        with sigint_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler has run by now: it only took note
            reached.append(True)
    assert reached == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a job started in the background ignores it
    try:
        with sigint_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("persistent", [False, True])
def test_iterable_dataset_without_a_length_measures_with_workers(persistent):
    # the warm-up asks the loader's iterator for its backlog: an IterableDataset's iterator has no len()
    config = TrialConfig(batch_size=16, num_workers=2, prefetch_factor=2, persistent_workers=persistent)
    trial = run_trial(SpecRef.parse(SPECS / "unsharded_iterable.py:long_sharded"), request(config))
    assert trial.status == "ok", trial.error
    assert len(trial.blocks) == 2 and trial.estimate.median > 0
    assert not any(b.epochs for b in trial.blocks)
