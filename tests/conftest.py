"""The tests' shared helpers, and the check that every test leaves no process of its own behind
(trial children, DataLoader workers) and no shared-memory segment in /dev/shm (where DataLoader
workers hand batches over).

Tests that start processes (trials, CLI subprocesses, DataLoader workers, scans) are marked ``slow``:
``pytest -m "not slow"`` runs the rest, pure and quick."""

import contextlib
import functools
import os
import random
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from loadtune.analysis.against import judge_against
from loadtune.analysis.verdict import judge
from loadtune.engine.machine import collect
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.engine.trial.harness import group_members, still_running
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.against import DuetRound
from loadtune.model.check import INCONCLUSIVE, NO_BASE, NOTHING, PASS, REGRESSION
from loadtune.model.paired import PairedRound
from loadtune.model.results import ScanResult, SpecInfo
from loadtune.model.trial import Block, MemoryUsage, Trial
from loadtune.model.settings import ScanSettings

SPECS = Path(__file__).parent / "specs"  # datasets built to show one behaviour each
FIXTURES = Path(__file__).parent / "fixtures"  # saved results
# scans and trials of a few short blocks: the tests check what they do, not what they measure
QUICK = ["--warmup", "0.2", "--block-time", "0.1", "--blocks", "3", "--timeout", "30"]
QUICK_TIMING = Timing(warmup_s=0.1, block_s=0.1, blocks=3, max_s=40)


def run_cli(*args, cwd=None, env=None, timeout=300):
    """``python -m loadtune ARGS`` in a subprocess, its output captured. 200 columns: rich wraps no
    line a test looks for; Python's own warnings stay out of stderr."""
    full_env = {**os.environ, "COLUMNS": "200", "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.run([sys.executable, "-m", "loadtune", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=timeout)


# a check's exit code for each verdict (docs/cli.md, "Exit codes") and the heading of its Markdown summary
CHECK_EXITS = {PASS: 0, NO_BASE: 0, REGRESSION: 1, NOTHING: 3, INCONCLUSIVE: 4}
CHECK_HEADINGS = {PASS: "✅ pass", REGRESSION: "❌ regression", INCONCLUSIVE: "⚠️ inconclusive", NO_BASE: "➖ nothing to compare"}


def verdict_from_rounds(data: dict):
    """A check's verdict, its reasons and its change as the rules read them from the rounds its JSON records
    (the baseline's and today's, or both revisions' turns): pure, nothing measured again."""
    if data["against"]:
        return judge_against([DuetRound(**r) for r in data["against"]["rounds"]], data["tolerance"], data["min_throughput"])
    base, now = ([PairedRound(**r) for r in data[key]] for key in ("baseline_rounds", "rounds"))
    return judge(base, now, data["tolerance"], data["min_throughput"], data["cpu_change"], data["shape"]["unit_readings"])


def assert_check_agrees(code: int, data: dict, junit: Path | None = None, summary: str | None = None) -> str:
    """Whatever verdict this machine's timing gave, what the check said agrees with itself: the exit code is
    the verdict's, the verdict and its change are what the rules read from the recorded rounds, the JUnit
    file fails on a regression alone and errors where no verdict came, and the Markdown summary (its text)
    heads with the verdict. Which verdict a real timing gives is a benchmark's figure, not a test's
    (benchmarks/RESULTS.md). Returns the verdict."""
    status = data["status"]
    assert code == CHECK_EXITS[status], (code, status, data["reasons"])
    if status != NO_BASE:
        again, reasons, change = verdict_from_rounds(data)
        assert again == status and set(reasons) <= set(data["reasons"]), (again, reasons, data["reasons"])
        assert (change is None) == (data["change"] is None)
        if change is not None:
            assert [data["change"], data["change_low"], data["change_high"]] == pytest.approx([change.value, change.low, change.high])
    if junit is not None:
        suite = ET.parse(junit).getroot()
        assert suite.get("failures") == ("1" if status == REGRESSION else "0"), ET.tostring(suite)
        assert (suite.get("errors") != "0") == (status in (INCONCLUSIVE, NOTHING)), ET.tostring(suite)
    if summary is not None:
        assert f"### loadtune check: {CHECK_HEADINGS.get(status, '⚠️ ' + status)}" in summary, summary
    return status


def assert_reference(data: dict, rounds: int = 8):
    """A scan's saved reference for check, recorded by ``check --record`` or by the scan itself: of the pick,
    its rounds alternating which loader goes first, with PyTorch's defaults in each unless the pick is them."""
    reference = data["reference"]
    assert reference["config"] == data["recommendation"]["config"] and len(reference["rounds"]) == rounds
    assert [r["config_first"] for r in reference["rounds"]] == [True, False] * (rounds // 2)
    assert all(r["config_rate"] and r["calibration_rate"] for r in reference["rounds"])
    assert reference["recorded_at"] and reference["machine"]["usable_cores"] >= 1
    pick = reference["config"]
    defaults = None if pick["num_workers"] == 0 and not pick["heap"] else {
        "batch_size": pick["batch_size"], "num_workers": 0, "pin_memory": False, "prefetch_factor": None,
        "persistent_workers": False, "transfer": "none", "in_order": True, "start_method": None, "heap": None}
    assert reference["defaults"] == defaults
    assert all(bool(r["default_rate"]) == bool(defaults) for r in reference["rounds"])


def invoke(*args, env=None):
    """``loadtune ARGS`` in this process, through typer's test runner: for what the CLI refuses before any work,
    without the seconds a subprocess spends importing torch (``run_cli`` runs what measures). ``exit_code``,
    ``stdout`` and ``stderr`` as a subprocess's; an exception the CLI let through is in ``exception``."""
    from typer.testing import CliRunner

    from loadtune.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200", **(env or {})})


@dataclass(frozen=True)
class SavedScan:
    """A finished scan run through the CLI: what it printed and the files it wrote, for tests to read only."""

    proc: subprocess.CompletedProcess
    json: Path
    html: Path


@pytest.fixture(scope="session")
def tiny_scan(tmp_path_factory) -> SavedScan:
    """One default scan of ``specs/tiny.py`` (w0 and w2, quick blocks, the race and the stage profile), its JSON
    and its HTML page written: every test that only reads a finished scan's output shares it rather than
    scanning again. A test that changes the files works on a copy."""
    folder = tmp_path_factory.mktemp("tiny-scan")
    out, html = folder / "result.json", folder / "result.html"
    proc = run_cli("scan", SPECS / "tiny.py", "--workers", "0,2", "--prefetch", "2", "--no-persistent", "--json", out,
                   "--html", html, "--device", "cpu", "--details", *QUICK)  # the CPU path on any machine (tests/test_cuda.py
    # has the GPU's); the whole report, which the tests of its parts read (tests/test_view.py renders the short one)
    assert proc.returncode == 0, proc.stderr
    return SavedScan(proc, out, html)


def quick_request(config, timing=QUICK_TIMING, timeout=60.0):
    """A trial of ``config`` on the CPU, samples in order, workers forked."""
    return TrialRequest(config, "cpu", timing, LoaderOptions(shuffle=False), timeout, "fork")


def flat(text):
    """Text with rich's line wrapping undone."""
    return " ".join(text.split())


@functools.cache
def machine_info():
    return collect()


def empty_result():
    """A scan result with nothing measured yet, for a search strategy to propose from."""
    spec = SpecInfo(None, None, None, "D", 1000, False, False, False)
    return ScanResult(spec=spec, machine=machine_info(), settings=ScanSettings())


def fake_trial(config, rate, noise=0.005, epochs=0, rng=None):
    """A finished trial of ``config`` at about ``rate`` samples/s, as if measured."""
    rng = rng or random.Random(0)
    blocks = [Block(int(rate * (1 + rng.uniform(-noise, noise))), 10, 1.0, epochs) for _ in range(5)]
    memory = MemoryUsage(200 * 2**20 + 40 * 2**20 * config.num_workers, 1 + config.num_workers, "pss")
    return Trial(config, "ok", startup_s=0.05, warmup=Block(10, 1, 0.1, epochs), blocks=blocks, memory=memory)


def drive(strategy, rate_of, epochs=0, limit=200, noise=0.005):
    """Run a strategy against a synthetic landscape until it proposes nothing; returns the result."""
    result = empty_result()
    rng = random.Random(0)  # each run its own noise, whatever ran before it
    for _ in range(limit):
        proposals = strategy.propose(result)
        if not proposals:
            return result
        p = proposals[0]
        trial = fake_trial(p.config, rate_of(p.config), noise=noise, epochs=epochs, rng=rng)
        trial.round = p.round
        result.trials.append(trial)
    raise AssertionError("the strategy never stopped proposing")

# multiprocessing's own long-lived helpers, started once per test session, are not leaks
HELPERS = ("forkserver", "resource_tracker", "semaphore_tracker")


def stray_children():
    me = psutil.Process()
    strays = []
    for proc in me.children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            # a helper is our direct child; trials forked by the fork server share its command line
            if proc.ppid() == me.pid and any(h in " ".join(proc.cmdline()) for h in HELPERS):
                continue
            strays.append(proc)
        except psutil.NoSuchProcess:
            pass
    return strays


def live_group_members(pgid):
    """Processes of the trial's session still running (killed ones may linger as zombies until
    init reaps them: dead, holding no memory)."""
    return [proc.pid for proc in group_members(pgid) if still_running(proc)]


def shm_entries():
    """torch's segments whose creating process is gone: nothing will ever unlink them (a live
    process's segment may be in flight, and may belong to anyone on this machine)."""
    try:
        names = [n for n in os.listdir("/dev/shm") if n.startswith("torch_")]
    except OSError:
        return set()
    return {n for n in names if n.split("_")[1].isdigit() and not psutil.pid_exists(int(n.split("_")[1]))}


@pytest.fixture(autouse=True)
def no_leaked_processes():
    shm_before = shm_entries()
    yield
    leaked_shm = shm_entries() - shm_before
    assert not leaked_shm, f"shared memory left in /dev/shm: {sorted(leaked_shm)}"
    deadline = time.monotonic() + 5  # processes that are exiting get a moment to finish
    while stray_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    strays = stray_children()
    left = [(p.pid, p.cmdline()) for p in strays]
    for proc in strays:  # reported here, once: left alive, they would fail every later test too
        with contextlib.suppress(psutil.Error):
            proc.kill()
    assert not strays, f"processes left behind (now killed): {left}"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` need a CUDA device: skipped without one (run them with ``-m cuda`` on a GPU)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


def with_ctrl_c():
    """``preexec_fn`` for a CLI that a test interrupts: SIGINT acts as in a terminal's foreground job.
    A test run started in the background (``bash .ci/run &``) passes SIGINT on ignored, and Python
    then keeps ignoring it: the 'Ctrl-C' would be lost."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_when(cmd, ready, tmp_path, **popen):
    """Start the CLI in its own process group, wait until ``ready()`` (or 120 s), send SIGINT to the
    group as a terminal's Ctrl-C does, and wait for the CLI to exit: (return code, stdout, stderr).
    Output goes to files, not pipes: in a rare window (Ctrl-C while a trial is being handed to the fork
    server) multiprocessing's helpers outlive the CLI holding its output open (noted, not yet fixed),
    and a pipe reader would wait for them. Whatever is left of the group is killed afterwards."""
    import signal

    out, err = (tmp_path / "cli.out").open("w+"), (tmp_path / "cli.err").open("w+")
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, start_new_session=True, preexec_fn=with_ctrl_c, **popen)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not ready():
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=120)
    finally:
        for pid in live_group_members(proc.pid):
            os.kill(pid, signal.SIGKILL)
    out.seek(0), err.seek(0)
    return proc.returncode, out.read(), err.read()


def first_trial_saved(path):
    """``ready`` for ``interrupt_when``: the scan's JSON holds a finished trial."""
    import json

    return lambda: path.exists() and bool(json.loads(path.read_text())["trials"])
