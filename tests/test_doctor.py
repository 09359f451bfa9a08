"""``loadtune doctor`` and NVML: what the machine offers, with or without a GPU, driver or pynvml."""

import json
import sys
import types

import pytest
import torch

from loadtune.engine import doctor

from loadtune.engine.trial import nvml
from loadtune.engine.doctor import PCIE_LANE_GBPS, link_gbps
from conftest import run_cli

NO_GPU = not torch.cuda.is_available()


@pytest.fixture
def fresh_nvml():
    nvml.reset()
    yield
    nvml.reset()


@pytest.mark.skipif(not NO_GPU, reason="checks the machine without a GPU")
@pytest.mark.slow
def test_doctor_without_a_gpu_says_so_and_prints_the_rest(tmp_path):
    out = run_cli("doctor", "--json", tmp_path / "d.json")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "no GPU" in text
    for what in ("cores", "usable", "RAM", "/dev/shm", "torch", "start method", "CPU pace", "between adjacent tenths"):
        assert what in text
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["schema"] == "loadtune/doctor" and data["gpus"] == [] and data["gpu_note"].startswith("no GPU")
    assert data["cpu_pace"]["pairs"] >= 2 and data["cpu_pace"]["spread"] >= 0  # measured by default
    assert data["machine"]["usable_cores"] >= 1 and data["machine"]["memory_total_bytes"] > 0


@pytest.mark.slow
def test_doctor_refuses_an_unwritable_json_path_with_exit_2(tmp_path):
    out = run_cli("doctor", "--no-bandwidth", "--no-pace", "--json", tmp_path / "missing" / "d.json")
    assert out.returncode == 2 and "does not exist" in out.stderr


def test_pcie_theoretical_rate_from_generation_and_width():
    assert link_gbps(4, 16) == pytest.approx(31.5, abs=0.01)
    assert link_gbps(5, 16) == pytest.approx(63.0, abs=0.01)
    assert link_gbps(3, 8) == pytest.approx(7.88, abs=0.01)
    assert link_gbps(None, 16) is None and link_gbps(4, None) is None and link_gbps(9, 16) is None
    assert PCIE_LANE_GBPS[3] == 0.985 and PCIE_LANE_GBPS[4] == 1.969 and PCIE_LANE_GBPS[5] == 3.938


def test_pynvml_missing_means_no_figures_not_a_crash(monkeypatch, fresh_nvml):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert nvml.nvml() is None
    assert "ImportError" in nvml.unavailable() or "ModuleNotFoundError" in nvml.unavailable()
    assert nvml.query("nvmlDeviceGetCount") is None and nvml.device_count() == 0
    assert nvml.handle(0) is None and nvml.UtilisationSampler.for_device("GPU-x", 0) is None
    report = doctor.collect(measure=False)
    assert report.nvml_note and report.machine.usable_cores >= 1


class NVMLError(Exception):
    pass


def fake_pynvml(init_fails=False, queries_fail=False):
    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError

    def init():
        if init_fails:
            raise NVMLError("Driver Not Loaded")

    def answer(value):
        def call(*args):
            if queries_fail:
                raise NVMLError("Not Supported")
            return value
        return call

    mod.nvmlInit = init
    mod.nvmlDeviceGetCount = answer(1)
    mod.nvmlDeviceGetHandleByIndex = answer("handle0")
    mod.nvmlDeviceGetHandleByUUID = answer("handle0")
    mod.nvmlSystemGetDriverVersion = answer(b"550.54.15")
    mod.nvmlDeviceGetUtilizationRates = answer(types.SimpleNamespace(gpu=87, memory=40))
    mod.nvmlDeviceGetCurrPcieLinkGeneration = answer(4)
    mod.nvmlDeviceGetMaxPcieLinkGeneration = answer(5)
    mod.nvmlDeviceGetCurrPcieLinkWidth = answer(16)
    mod.nvmlDeviceGetMaxPcieLinkWidth = answer(16)
    return mod


def test_nvml_failing_to_initialise_is_reported_not_raised(monkeypatch, fresh_nvml):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_fails=True))
    assert nvml.nvml() is None and "Driver Not Loaded" in nvml.unavailable()
    assert nvml.pcie_link("h") == nvml.PCIeLink(None, None, None, None)


def test_nvml_queries_that_fail_give_none(monkeypatch, fresh_nvml):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(queries_fail=True))
    assert nvml.unavailable() is None
    assert nvml.utilisation("h") is None and nvml.query("nvmlSystemGetDriverVersion") is None
    assert nvml.query("nvmlNoSuchFunction") is None  # an older pynvml lacks some functions


def test_nvml_answers_are_read(monkeypatch, fresh_nvml):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    assert nvml.query("nvmlSystemGetDriverVersion") == "550.54.15"  # bytes decoded
    link = nvml.pcie_link(nvml.handle(0))
    assert (link.gen_current, link.gen_max, link.width_current, link.width_max) == (4, 5, 16, 16)
    sampler = nvml.UtilisationSampler.for_device("GPU-abc", 0)
    sampler.maybe_sample()
    assert sampler.samples == []  # only while blocks are timed
    sampler.timed = True
    sampler.maybe_sample()
    assert [u for _, u in sampler.samples] == [87]
