"""Trials in isolated processes with real DataLoader workers: results, failures, timeouts, no orphans."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadtune.engine.trial.setup import Timing
from loadtune.model.config import TrialConfig
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.spec import SpecRef

from conftest import QUICK_TIMING, SPECS, live_group_members, quick_request


@pytest.mark.slow
def test_trial_with_workers_measures_and_counts_every_process():
    config = TrialConfig(batch_size=32, num_workers=2, prefetch_factor=2)
    trial = run_trial(SpecRef.parse(SPECS / "tiny.py"), quick_request(config))
    assert trial.status == "ok", trial.error
    assert len(trial.blocks) == QUICK_TIMING.blocks and trial.estimate.median > 0
    assert trial.startup_s is not None and trial.startup_s > 0
    assert trial.memory.peak_processes == 3  # the trial's main process and its two workers
    assert trial.memory.method in ("pss", "rss") and trial.memory.peak_bytes > 10 * 2**20


@pytest.mark.slow
def test_dataset_exception_fails_the_trial_with_its_own_type_and_message():
    config = TrialConfig(batch_size=16, num_workers=2, prefetch_factor=2)
    trial = run_trial(SpecRef.parse(SPECS / "failing.py"), quick_request(config))
    assert trial.status == "failed"
    assert trial.error.kind == "exception"
    assert trial.error.exception_type == "ValueError"
    assert "corrupt record at index 77" in trial.error.message


@pytest.mark.slow
def test_hang_hits_the_timeout_and_leaves_no_process_behind():
    pids = []
    config = TrialConfig(batch_size=8, num_workers=2, prefetch_factor=2)
    trial = run_trial(
        SpecRef.parse(SPECS / "hanging.py"),
        quick_request(config, timeout=4.0),
        on_event=lambda kind, payload: pids.append(payload) if kind == "process" else None,
    )
    assert trial.status == "failed" and trial.error.kind == "timeout"
    assert 4.0 <= trial.wall_s < 30  # the 4 s timeout ended it, not the hang; the rest is killing on a busy machine
    assert pids and live_group_members(pids[0]) == []  # the child and both workers are gone


@pytest.mark.slow
def test_a_config_with_environment_variables_is_timed_in_a_process_started_with_them(tmp_path):
    """The heap setting as the user sets it: exported before the process starts. ``/proc/self/environ`` holds
    the environment a process was started with (what glibc's allocator read), not later changes to it; the
    spec's dataset reports what it found there, in the error it raises. Without the setting, the trial's
    process started without the variables, and the scan's own environment is left as it was."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("a process's start environment is read from /proc (Linux)")
    spec = tmp_path / "environ.py"
    spec.write_text(
        "def dataset():\n"
        "    start = dict(v.split(b'=', 1) for v in open('/proc/self/environ', 'rb').read().split(b'\\0') if b'=' in v)\n"
        "    raise LookupError(f\"started with {start.get(b'MALLOC_MMAP_THRESHOLD_')} {start.get(b'MALLOC_TRIM_THRESHOLD_')}\")\n"
    )
    kept = TrialConfig(batch_size=8, num_workers=0, heap=2**22)
    trial = run_trial(SpecRef.parse(spec), quick_request(kept))
    assert trial.status == "failed" and "started with b'4194304' b'16777216'" in trial.error.message, trial.error
    assert kept.environment == {"MALLOC_MMAP_THRESHOLD_": "4194304", "MALLOC_TRIM_THRESHOLD_": "16777216"}
    plain = run_trial(SpecRef.parse(spec), quick_request(TrialConfig(batch_size=8, num_workers=0)))
    assert "started with None None" in plain.error.message, plain.error
    assert "MALLOC_MMAP_THRESHOLD_" not in os.environ


@pytest.mark.slow
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
    trial = run_trial(SpecRef.parse(spec), quick_request(TrialConfig(batch_size=4, num_workers=0)))
    assert trial.status == "failed"
    assert trial.error.kind == "killed" and "SIGKILL" in trial.error.message


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.slow
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
    trial = run_trial(SpecRef.parse(spec), quick_request(config))
    assert trial.ok
    out, err = capfd.readouterr()
    assert "loading" not in out and "loading" not in err


@pytest.mark.slow
def test_trial_counts_the_cpu_of_its_workers_over_the_timed_blocks():
    from loadtune.model.results import ConfigResult

    timing = Timing(warmup_s=0.2, block_s=0.2, blocks=3, max_s=20)
    config = TrialConfig(batch_size=16, num_workers=2, prefetch_factor=2, persistent_workers=True)
    computing = run_trial(SpecRef.parse(SPECS / "bound_by.py:cpu"), quick_request(config, timing=timing))
    waiting = run_trial(SpecRef.parse(SPECS / "bound_by.py:waiting"), quick_request(config, timing=timing))
    assert computing.status == "ok" and waiting.status == "ok"
    cpu, sleep = ConfigResult(config, [computing]), ConfigResult(config, [waiting])
    # ~1 ms of arithmetic a sample happens in the workers: the main process alone would read a few µs
    assert cpu.cpu_per_sample > 0.3e-3, cpu.cpu_per_sample
    assert sleep.cpu_per_sample < cpu.cpu_per_sample / 3  # 2 ms of sleep a sample costs little CPU
    assert 0 < sleep.busy_cores < cpu.busy_cores


@pytest.mark.slow
def test_trial_cpu_is_left_unknown_when_the_workers_change_inside_the_window():
    # without persistent_workers every epoch starts new workers: the CPU of those that ended is not readable
    timing = Timing(warmup_s=0.1, block_s=0.1, blocks=3, max_s=20)
    config = TrialConfig(batch_size=8, num_workers=2, prefetch_factor=2)
    trial = run_trial(SpecRef.parse(SPECS / "short_epoch.py"), quick_request(config, timing=timing))
    assert trial.status == "ok" and sum(b.epochs for b in trial.blocks) >= 2
    assert trial.cpu_s is None


def test_ctrl_c_while_a_trial_starts_is_held_until_it_has_started():
    import os
    import signal

    from loadtune.engine.trial.harness import sigint_held

    reached = []
    # Python's own handler, as in the CLI (an earlier test or library may have left another one installed)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with sigint_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler has run by now: it only took note
                reached.append(True)
        assert reached == [True]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a job started in the background ignores it
    try:
        with sigint_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.slow
def test_iterable_dataset_without_a_length_measures_with_workers(persistent):
    # the warm-up asks the loader's iterator for its backlog: an IterableDataset's iterator has no len()
    config = TrialConfig(batch_size=16, num_workers=2, prefetch_factor=2, persistent_workers=persistent)
    trial = run_trial(SpecRef.parse(SPECS / "unsharded_iterable.py:long_sharded"), quick_request(config))
    assert trial.status == "ok", trial.error
    assert len(trial.blocks) == QUICK_TIMING.blocks and trial.estimate.median > 0
    assert not any(b.epochs for b in trial.blocks)


def test_one_table_records_a_loaders_messages_on_the_trial_and_a_ranks_on_its_figures():
    from loadtune.engine.trial.protocol import Kind, Message, apply
    from loadtune.model.trial import Block, GPUUsage, Trial

    one, ranked = Trial(config=TrialConfig(8, 0), status="failed"), Trial(config=TrialConfig(8, 0), status="failed")
    for kind, payload in [("startup", 0.5), ("block", Block(80, 10, 1.0)), ("cpu", 0.3), ("memory", 123),
                          ("gpu_memory", GPUUsage(peak_reserved_bytes=10)), ("warning", "w")]:
        apply(one, Message(Kind(kind), payload))
        for rank in (0, 1):
            reserved = GPUUsage(peak_reserved_bytes=10 + rank) if kind == "gpu_memory" else payload
            apply(ranked, Message(Kind(kind), reserved, rank=rank, local_rank=rank))
    assert one.startup_s == 0.5 and len(one.blocks) == 1 and one.cpu_s == 0.3 and one.warnings == ["w"]
    assert one.ranks == [] and not hasattr(one, "memory_bytes")  # one loader's memory is sampled from outside
    assert [(r.rank, r.startup_s, len(r.blocks), r.memory_bytes) for r in ranked.ranks] == [(0, 0.5, 1, 123), (1, 0.5, 1, 123)]
    assert ranked.blocks == [] and ranked.cpu_s == 0.6 and ranked.gpu.peak_reserved_bytes == 11  # the node's CPU, the fullest GPU
    assert ranked.warnings == ["rank 0: w", "rank 1: w"]
    assert Message(Kind.BLOCK, 1, 1, 0).event() == (Kind.RANK, (1, 0, Kind.BLOCK, 1))  # what on_event hears of a rank


SERVER_FIRST = """
import sys, psutil
from loadtune.engine.trial.server import start_fork_server
start_fork_server()
assert "torch" not in sys.modules, "starting the fork server imported torch here"
from multiprocessing import forkserver
server = forkserver._forkserver._forkserver_pid  # by pid: its cmdline reads empty for an instant as it execs
assert server in [p.pid for p in psutil.Process().children()], server
from conftest import QUICK_TIMING, SPECS
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.setup import LoaderOptions
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.config import TrialConfig
trial = run_trial(SpecRef(str(SPECS / "tiny.py")), TrialRequest(TrialConfig(8, 1, prefetch_factor=2), "cpu", QUICK_TIMING,
                                                                LoaderOptions(), 60.0, None))
assert trial.ok, trial.error
assert forkserver._forkserver._forkserver_pid == server  # the trial was forked by it, not by a second server
assert [p.pid for p in psutil.Process().children() if "forkserver" in " ".join(p.cmdline())] == [server]
print("ok")
"""


@pytest.mark.slow
def test_a_fork_server_started_before_torch_serves_the_trials():
    # the CLI starts it first, so that it imports torch while the CLI does
    out = subprocess.run([sys.executable, "-c", SERVER_FIRST], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_a_killed_workers_segment_is_removed_even_before_the_worker_is_reaped():
    """A worker killed between making a batch's segment and the main process taking it leaves the
    segment behind; the trial's clean-up removes those of dead creators, a zombie (killed, not yet
    reaped) among them, and keeps a live process's."""
    import os

    import psutil

    from loadtune.engine.trial.harness import remove_orphaned_shared_memory

    since = time.time() - 1
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert psutil.pid_exists(pid)  # a zombie still has its pid
        orphan, live = Path(f"/dev/shm/torch_{pid}_loadtune_test"), Path(f"/dev/shm/torch_{os.getpid()}_loadtune_test")
        orphan.write_bytes(b"x")
        live.write_bytes(b"x")
        try:
            remove_orphaned_shared_memory(since)
            assert not orphan.exists() and live.exists()
        finally:
            orphan.unlink(missing_ok=True)
            live.unlink(missing_ok=True)
    finally:
        os.waitpid(pid, 0)


@pytest.mark.slow
def test_a_trial_that_reaches_its_deadline_keeps_only_whole_blocks():
    """A trial whose time runs out inside a block ends there, and that block is not kept: it ended at the
    first batch past the deadline, after as little as one batch, where a block holds its time and whole
    bursts of batches. Its rate would time where the deadline fell among the bursts, not the loader."""
    config = TrialConfig(batch_size=8, num_workers=1, prefetch_factor=2)  # 24 ms a batch: 0.3 s blocks of ~12
    timing = Timing(warmup_s=0.2, block_s=0.3, blocks=50, max_s=1.6)  # 50 blocks cannot fit: the deadline ends it
    trial = run_trial(SpecRef.parse(SPECS / "sleep_dial.py"), quick_request(config, timing))
    assert trial.status == "ok", trial.error
    assert 1 <= len(trial.blocks) < 50
    assert all(b.seconds >= timing.block_s for b in trial.blocks), [round(b.seconds, 3) for b in trial.blocks]
