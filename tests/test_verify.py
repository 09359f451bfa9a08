"""``loadtune doctor --verify`` on a machine without a GPU: the refusal, the structure of the results, the
renderer, the decisions with given numbers, and the parts of the GPU checks that run on a CPU. The checks
themselves need a CUDA device (``loadtune doctor --verify`` there; docs/cli.md)."""

import json
import sys

import pytest
import torch
from conftest import run_cli
from rich.console import Console

from loadtune.analysis import verify as decide
from loadtune.engine.spec import from_objects
from loadtune.engine.trial.meter import build_meter
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.engine.verify import device, runner
from loadtune.model.config import TrialConfig
from loadtune.model.verify import NO_CUDA, Check, Verification
from loadtune.report.verify import check_lines, print_line, verdict_lines

CPU_BUILD = torch.version.cuda is None


# --- the refusal -----------------------------------------------------------------------------------


@pytest.mark.skipif(not CPU_BUILD, reason="checks a CPU-only build of torch")
def test_a_cpu_build_is_refused_before_anything_runs():
    result = runner.verify(on_check=lambda check: pytest.fail("no check may run"))
    assert result.refused.startswith(NO_CUDA) and "CPU-only build" in result.refused
    assert result.checks == [] and not result.passed
    data = json.loads(json.dumps(result.to_dict()))
    assert data["schema"] == "loadtune/verify" and data["passed"] is False and data["refused"] == result.refused
    assert not runner.parent_cuda_initialised()


@pytest.mark.slow
@pytest.mark.skipif(not CPU_BUILD, reason="checks a CPU-only build of torch")
def test_cli_refuses_with_exit_3_and_writes_the_json(tmp_path):
    out = run_cli("doctor", "--verify", "--json", tmp_path / "v.json")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "no CUDA device: nothing to verify" in out.stderr and "PASS" not in out.stdout
    data = json.loads((tmp_path / "v.json").read_text())
    assert data["refused"].startswith(NO_CUDA) and data["checks"] == [] and data["passed"] is False


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a CUDA device")
def test_the_gpu_process_itself_refuses_without_a_device():
    result, told = Verification(), []
    runner.run_device(result, told.append, 60)
    assert result.refused.startswith(NO_CUDA) and result.checks == told == []


# --- the parent's reading of the GPU process ---------------------------------------------------------


def child(*lines, then=""):
    """A stand-in for the GPU process: says ``lines`` (with the marker), then runs ``then``."""
    said = "".join(f"print({device.MARK + json.dumps(line)!r}, flush=True)\n" for line in lines)
    return [sys.executable, "-c", "import sys, time\nprint('unrelated output')\n" + said + then]


@pytest.mark.slow
def test_a_gpu_process_that_dies_fails_every_check_it_did_not_report():
    told = []
    result = Verification()
    one = Check(decide.COPY, True, "fine", {"pinned_gbps": 24.0})
    runner.run_device(result, told.append, 30, child({"facts": {"gpus": [{"name": "G"}]}}, {"check": one.__dict__},
                                                     then="sys.stderr.write('boom: out of memory\\n'); sys.exit(5)"))
    assert result.facts == {"gpus": [{"name": "G"}]} and result.checks[0] == one
    assert "exit code 5" in result.error and "boom: out of memory" in result.error
    assert [c.name for c in result.checks] == list(decide.CHECK_NAMES[:-1])  # ranks are the parent's own
    assert all(not c.passed and "did not finish" in c.summary for c in result.checks[1:])
    assert told == result.checks and not result.passed


@pytest.mark.slow
def test_a_gpu_process_that_hangs_is_killed_at_the_timeout():
    result = Verification()
    runner.run_device(result, lambda check: None, 1.0, child(then="time.sleep(60)"))
    assert "did not finish within 1 s" in result.error
    assert len(result.checks) == len(decide.CHECK_NAMES) - 1 and not any(c.passed for c in result.checks)


# --- the structure: typed results, every check named, JSON round trip ------------------------------------


def test_the_gpu_process_runs_every_check_but_the_ranks_in_order():
    assert [name for name, _ in device.CHECKS] == list(decide.CHECK_NAMES[:-1])
    assert decide.CHECK_NAMES[-1] == decide.RANKS


def test_a_verification_passes_only_when_every_check_ran_and_passed():
    good, bad = Check("a", True, "ok", {"x": 1.0}), Check("b", False, "no", {"y": None}, "why")
    assert Verification([good]).passed and not Verification([good, bad]).passed
    assert not Verification().passed and not Verification([good], error="stopped").passed
    assert not Verification([good], refused=NO_CUDA).passed
    result = Verification([good, bad], facts={"gpus": []}, wall_s=3.5)
    again = Verification.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and again.failed == [bad]


# --- the decisions, with given numbers ------------------------------------------------------------


def test_idle_share_agreement():
    assert decide.wall_idle_share(batches=10, step_s=0.005, seconds=0.1) == pytest.approx(0.5)
    assert decide.wall_idle_share(batches=30, step_s=0.005, seconds=0.14) == 0.0  # a faster step than calibrated
    assert decide.idle_agrees(0.45, 0.5) and decide.idle_agrees(0.0, 0.1) and not decide.idle_agrees(0.35, 0.5)
    check = decide.idle_check([("slow loader", 0.48, 0.51), ("fast loader", 0.02, 0.0)], 5.0)
    assert check.passed and check.name == decide.IDLE and "48.0% by CUDA events" in check.summary
    assert check.figures["points"][0] == {"loader": "slow loader", "events": 0.48, "wall": 0.51}
    failed = decide.idle_check([("slow loader", 0.2, 0.5)], 5.0)
    assert not failed.passed and "cannot be trusted" in failed.note


def test_hidden_fraction_and_the_overlap_target():
    assert decide.hidden_fraction(copy_s=0.005, step_s=0.005, both_s=0.005) == pytest.approx(1.0)
    assert decide.hidden_fraction(0.005, 0.005, 0.010) == pytest.approx(0.0)
    assert decide.hidden_fraction(0.004, 0.006, 0.0065) == pytest.approx(0.875)  # of the shorter one
    check = decide.overlap_check(0.005, 0.005, 0.0052, 0.0099, 30)
    assert check.passed and "stream hides 96%" in check.summary and check.figures["non_blocking_hidden"] < 0.05
    assert check.figures["ceiling"] == pytest.approx(29 / 30, abs=1e-4)
    missed = decide.overlap_check(0.005, 0.005, 0.0056, 0.0099, 30)
    assert not missed.passed and missed.note


def test_values_are_judged_by_every_batch_and_controls_show_the_checks_power():
    assert decide.corrupted([[1, 1], [2, 2], [3, 3]]) == 0
    assert decide.corrupted([[1, 1], [2, 3], [4, 4]]) == 2
    check = decide.values_check(decide.PREFETCH, [("big", 16, 0), ("small", 16, 0)], [("without wait_stream", 16, 12)])
    assert check.passed and check.note is None and "16/16 intact" in check.summary and "12/16 corrupted" in check.summary
    blind = decide.values_check(decide.PREFETCH, [("big", 16, 0)], [("without wait_stream", 16, 0)])
    assert blind.passed and "could not have seen" in blind.note
    bad = decide.values_check(decide.NON_BLOCKING, [("pinned", 32, 1)], [])
    assert not bad.passed and "wrong data" in bad.note
    assert not decide.values_check(decide.PREFETCH, [("none", 0, 0)], []).passed


def test_copy_rates_pass_when_both_clocks_agree():
    ok = decide.copy_check(24.0, 11.0, 23.5, 31.5, 31.5, "PCIe gen4 x16", 64)
    assert ok.passed and ok.note is None and "pinned 24.0 GB/s" in ok.summary and "PCIe gen4 x16" in ok.summary
    assert not decide.copy_check(24.0, 11.0, 15.0, 31.5, 31.5, "PCIe gen4 x16", 64).passed  # events see a rate the wall does not
    c2c = decide.copy_check(380.0, 120.0, 370.0, 31.5, 31.5, "PCIe gen4 x16", 64)
    assert c2c.passed and "another link" in c2c.note
    flat = decide.copy_check(9.0, 10.0, 9.0, 31.5, 31.5, "PCIe gen4 x16", 64)
    assert flat.passed and "no faster than pageable" in flat.note and "only 29%" in flat.note
    assert not decide.copy_check(None, 10.0, 9.0, None, None, None, 64).passed
    assert "link unknown" in decide.copy_check(24.0, 11.0, 23.5, None, None, None, 64).summary


def test_sync_ranks_and_unfinished_checks():
    clean = decide.sync_check({"non_blocking": (24, None), "stream": (24, None)})
    assert clean.passed and "non_blocking (24 batches), stream (24 batches)" in clean.summary
    raised = decide.sync_check({"non_blocking": (3, "RuntimeError: called a synchronizing CUDA operation (at x.py:1)")})
    assert not raised.passed and "x.py:1" in raised.summary
    assert decide.ranks_check(4, [3, 3, 3, 3], None, False, 12.0).passed
    assert not decide.ranks_check(4, [3, 3, 0, 3], None, False, 12.0).passed
    assert not decide.ranks_check(4, [3, 3], "rank 2 killed by SIGSEGV", False, 12.0).passed
    assert not decide.ranks_check(1, [3], None, True, 5.0).passed  # the CLI's process initialised CUDA
    assert "one GPU" in decide.ranks_check(1, [3], None, False, 5.0).summary
    gone = decide.unfinished(decide.OVERLAP, "timeout")
    assert not gone.passed and gone.name == decide.OVERLAP


# --- the renderer -----------------------------------------------------------------------------------


def test_renderer_prints_a_pass_or_fail_line_per_check_and_the_verdict():
    passed = Check(decide.COPY, True, "pinned 24.0 GB/s")
    failed = Check(decide.OVERLAP, False, "stream hides 40%", note="the side stream's copy did not run under the step")
    assert check_lines(passed)[0].plain.startswith("PASS  copy rates") and len(check_lines(passed)) == 1
    lines = [t.plain for t in check_lines(failed)]
    assert lines[0].startswith("FAIL  stream overlap") and "did not run under the step" in lines[1]
    console = Console(record=True, width=200)
    print_line(console, failed)
    assert "FAIL  stream overlap" in console.export_text()
    facts = {"gpus": [{"name": "NVIDIA H100", "driver": "550.54"}], "machine": {"torch": "2.13.0", "cuda": "12.4"}}
    good = " ".join(t.plain for t in verdict_lines(Verification([passed], facts=facts, wall_s=42)))
    assert "All 1 checks passed on GPU 0: NVIDIA H100" in good and "driver 550.54" in good
    bad = " ".join(t.plain for t in verdict_lines(Verification([passed, failed], error="stopped", wall_s=42)))
    assert "1 of 2 checks failed" in bad and "stopped" in bad and "--json" in bad


# --- the GPU checks' own helpers, on a CPU ---------------------------------------------------------------


def test_observed_values_catch_a_batch_that_changed():
    batches = [torch.full((8,), i + 1, dtype=torch.int32) for i in range(4)]
    assert decide.corrupted(device.observe(batches)) == 0
    batches[2][3] = 7  # one value of batch 2 overwritten by another batch's
    assert decide.corrupted(device.observe(batches)) == 1
    assert device.observe([]) == []
    data = device.Filled(4)
    assert data[0].tolist() == [1] * 4 and data[5].dtype == torch.int32 and data[5].max() == 6


def test_a_control_disables_a_guard_and_restores_it():
    original = torch.Tensor.record_stream
    with device.without(torch.Tensor, "record_stream"):
        assert torch.zeros(1).record_stream(None) is None  # a no-op, even with no stream at all
    assert torch.Tensor.record_stream is original and "record_stream" not in torch.Tensor.__dict__
    own = torch.cuda.Stream.__dict__["wait_stream"]
    with device.without(torch.cuda.Stream, "wait_stream"):
        assert torch.cuda.Stream.__dict__["wait_stream"] is not own
    assert torch.cuda.Stream.__dict__["wait_stream"] is own


def sync_meter(step):
    spec = from_objects(device.Filled(4, length=64), step=step)
    return build_meter(spec, TrialConfig(2, 0, transfer="sync"), torch.device("cpu"), Timing(0.01, 0.01, 3, 30),
                       LoaderOptions(shuffle=False), None, None)


@pytest.fixture
def no_cuda_debug(monkeypatch):
    """The debug mode's switches are CUDA's: on a CPU they only record what was asked."""
    modes = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: modes.append("sync"))
    return modes


def test_the_timed_loop_runs_under_the_debug_mode_and_names_a_synchronising_call(no_cuda_debug):
    batches, raised = device.synced_loop(sync_meter(lambda batch: None), torch.device("cpu"), block_s=0.01)
    assert raised is None and batches >= 3 * 8
    assert no_cuda_debug[:3] == ["error", 0, "sync"] and no_cuda_debug[-1] == 0  # off only for each block's closing sync
    seen = []

    def syncing(batch):
        seen.append(batch)
        if len(seen) == 5:
            raise RuntimeError("called a synchronizing CUDA operation")

    batches, raised = device.synced_loop(sync_meter(syncing), torch.device("cpu"))
    assert "synchronizing" in raised and "test_verify.py" in raised and "syncing" in raised
    with pytest.raises(Exception, match="unrelated"):
        device.synced_loop(sync_meter(lambda batch: (_ for _ in ()).throw(ValueError("unrelated"))), torch.device("cpu"))
    pinned = "Caught RuntimeError in pin memory thread for device 0.\nOriginal Traceback:\nRuntimeError: called a synchronizing CUDA operation"
    assert device.gist(pinned).startswith("Caught RuntimeError") and device.gist(pinned).endswith("synchronizing CUDA operation")


# --- on a GPU ---------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.slow
def test_every_check_passes_on_this_gpu(tmp_path):
    out = run_cli("doctor", "--verify", "--json", tmp_path / "v.json", timeout=600)
    data = json.loads((tmp_path / "v.json").read_text())
    assert [c["name"] for c in data["checks"]] == list(decide.CHECK_NAMES)
    assert out.returncode == 0, out.stdout + out.stderr
    assert data["passed"] and out.stdout.count("PASS") == len(decide.CHECK_NAMES) and data["wall_s"] < 120
