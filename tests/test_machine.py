"""What the machine offers (loadtune/machine.py): usable cores from affinity and cgroup quotas."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from loadtune.engine import machine
from loadtune.model.machine import GPUInfo
from loadtune.model.machine import MachineInfo
from loadtune.engine.machine import cgroup_cpu_limit, cgroup_v2_dirs, collect, parse_cfs, parse_cpu_max, usable_cores

# ---------------------------------------------------------------- parsers


@pytest.mark.parametrize(
    "text, expected",
    [
        ("max 100000", None),
        ("max 100000\n", None),
        ("200000 100000", 2.0),
        ("150000 100000", 1.5),
        ("50000 100000\n", 0.5),
        ("100000", None),
        ("", None),
        ("0 100000", None),
    ],
)
def test_parse_cpu_max(text, expected):
    assert parse_cpu_max(text) == expected


@pytest.mark.parametrize(
    "quota, period, expected",
    [("-1\n", "100000\n", None), ("200000\n", "100000\n", 2.0), ("25000", "100000", 0.25), ("100000", "0", None)],
)
def test_parse_cfs(quota, period, expected):
    assert parse_cfs(quota, period) == expected


# ---------------------------------------------------------------- cgroup tree


def own_cgroup_dir(root: Path) -> Path:
    """Where cgroup_v2_dirs looks for this process under ``root``, from the real /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return root
    line = next((x for x in lines if x.startswith("0::")), None)
    return root / line[3:].strip().lstrip("/") if line else root


def test_cgroup_v2_dirs_are_own_dir_and_ancestors_within_root(tmp_path):
    dirs = cgroup_v2_dirs(tmp_path)
    assert dirs[0] == own_cgroup_dir(tmp_path)
    assert dirs[-1] == tmp_path
    assert all(d == tmp_path or tmp_path in d.parents for d in dirs)
    assert len(dirs) == len(set(dirs))


def test_cgroup_limit_none_in_empty_tree(tmp_path):
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_v2_quota_in_own_dir(tmp_path):
    here = own_cgroup_dir(tmp_path)
    here.mkdir(parents=True, exist_ok=True)
    (here / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5


def test_cgroup_v2_unlimited(tmp_path):
    here = own_cgroup_dir(tmp_path)
    here.mkdir(parents=True, exist_ok=True)
    (here / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 3.0


def test_cgroup_v1_unlimited(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_tightest_of_v1_and_v2(tmp_path):
    here = own_cgroup_dir(tmp_path)
    here.mkdir(parents=True, exist_ok=True)
    (here / "cpu.max").write_text("400000 100000\n")
    (tmp_path / "cpu").mkdir(exist_ok=True)
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("250000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == 2.5


@pytest.fixture
def fake_proc_cgroup(tmp_path, monkeypatch):
    """Point the module's read of /proc/self/cgroup at a file of our own (only that path)."""
    proc = tmp_path / "proc_self_cgroup"
    real_path = machine.Path

    def path(*args):
        if args and str(args[0]) == "/proc/self/cgroup":
            return real_path(proc)
        return real_path(*args)

    monkeypatch.setattr(machine, "Path", path)
    return proc


def test_cgroup_v2_ancestor_quota_applies(tmp_path, fake_proc_cgroup):
    root = tmp_path / "cg"
    fake_proc_cgroup.write_text("1:cpu:/\n0::/kubepods/pod1/ctr\n")
    assert cgroup_v2_dirs(root) == [root / "kubepods/pod1/ctr", root / "kubepods/pod1", root / "kubepods", root]
    leaf = root / "kubepods/pod1/ctr"
    leaf.mkdir(parents=True)
    (leaf / "cpu.max").write_text("max 100000\n")
    (root / "kubepods/pod1/cpu.max").write_text("200000 100000\n")  # the pod's limit
    (root / "kubepods/cpu.max").write_text("1600000 100000\n")
    assert cgroup_cpu_limit(root) == 2.0


def test_cgroup_v2_dirs_without_v2_line(tmp_path, fake_proc_cgroup):
    fake_proc_cgroup.write_text("4:memory:/x\n1:cpu:/\n")
    assert cgroup_v2_dirs(tmp_path) == [tmp_path]


def test_cgroup_malformed_file_is_not_a_crash(tmp_path):
    here = own_cgroup_dir(tmp_path)
    here.mkdir(parents=True, exist_ok=True)
    (here / "cpu.max").write_text("lots 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_a_cgroup_v2_memory_limit_leaves_its_limit_less_what_its_processes_hold(tmp_path, fake_proc_cgroup):
    root = tmp_path / "cg"
    fake_proc_cgroup.write_text("0::/kubepods/pod1/ctr\n")
    leaf = root / "kubepods/pod1/ctr"
    leaf.mkdir(parents=True)
    (leaf / "memory.max").write_text("max\n")
    pod = root / "kubepods/pod1"
    (pod / "memory.max").write_text(f"{16 * 2**30}\n")  # the pod's limit
    (pod / "memory.current").write_text(f"{10 * 2**30}\n")
    (pod / "memory.stat").write_text(f"anon {4 * 2**30}\nfile {6 * 2**30}\n")  # 6 GiB of it page cache
    assert machine.memory_headroom(root) == 12 * 2**30  # reclaimable cache not counted as held


def test_a_cgroup_v1_memory_limit_is_read_in_the_processs_own_group(tmp_path, fake_proc_cgroup):
    root = tmp_path / "cg"
    fake_proc_cgroup.write_text("4:memory:/bench\n1:cpu:/\n")
    group = root / "memory" / "bench"
    group.mkdir(parents=True)
    (group / "memory.limit_in_bytes").write_text(f"{3 * 2**30}\n")
    (group / "memory.usage_in_bytes").write_text(f"{2 * 2**30}\n")
    (group / "memory.stat").write_text(f"cache {2**30}\nrss {2**30}\nhierarchical_memory_limit {3 * 2**30}\ntotal_cache {2**30}\n")
    assert machine.memory_headroom(root) == 2 * 2**30
    (group / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (group / "memory.stat").write_text("total_cache 0\nhierarchical_memory_limit 9223372036854771712\n")
    assert machine.memory_headroom(root) is None  # no limit: the host's memory is what counts


# ---------------------------------------------------------------- usable cores, collect


def test_usable_cores_within_affinity():
    n = usable_cores()
    assert 1 <= n <= len(os.sched_getaffinity(0))


def test_usable_cores_capped_by_quota_rounded_up(monkeypatch):
    monkeypatch.setattr(machine, "affinity_cores", lambda: 8)
    monkeypatch.setattr(machine, "cgroup_cpu_limit", lambda root=None: 1.5)
    assert usable_cores() == 2
    monkeypatch.setattr(machine, "cgroup_cpu_limit", lambda root=None: 0.2)
    assert usable_cores() == 1
    monkeypatch.setattr(machine, "cgroup_cpu_limit", lambda root=None: 32.0)
    assert usable_cores() == 8
    monkeypatch.setattr(machine, "cgroup_cpu_limit", lambda root=None: None)
    assert usable_cores() == 8


def test_collect_sane():
    info = collect()
    assert isinstance(info, MachineInfo)
    assert info.usable_cores >= 1
    assert info.usable_cores <= info.logical_cores
    assert info.usable_cores == usable_cores()
    assert info.memory_total_bytes > 0
    assert 0 < info.memory_available_bytes <= info.memory_total_bytes
    assert info.torch == torch.__version__ and isinstance(info.torch, str)
    assert info.python.count(".") == 2
    assert info.start_method in ("fork", "spawn", "forkserver")
    assert info.has_accelerator == bool(info.gpus) == torch.cuda.is_available()
    if info.shm_total_bytes is not None:
        assert info.shm_total_bytes > 0


def test_machine_info_dict_round_trip():
    info = collect()
    info.gpus = [GPUInfo(index=0, name="Fake GPU", memory_bytes=80 * 2**30)]
    again = MachineInfo.from_dict(info.to_dict())
    assert again == info
    assert again.has_accelerator


# ---------------------------------------------------------------- the scan's process never touches CUDA

CUDA_CALLS = ("is_available", "device_count", "get_device_properties", "get_device_name", "get_device_capability",
              "init", "_lazy_init", "set_device", "current_device", "synchronize", "mem_get_info")


@pytest.fixture
def cuda_forbidden(monkeypatch):
    """Every torch.cuda function that asks the driver raises in this process (children are fresh
    interpreters, or forked without using them): the parent's code must not call any of them."""
    def forbidden(name):
        def call(*args, **kwargs):
            raise AssertionError(f"the scan's own process called torch.cuda.{name}")
        return call

    for name in CUDA_CALLS:
        monkeypatch.setattr(torch.cuda, name, forbidden(name))
    cached = machine.gpus_in_child
    cached.cache_clear()
    yield
    cached.cache_clear()  # what a test read under its own environment is not this machine's


@pytest.mark.slow
def test_the_scans_process_reads_gpus_and_plans_a_cuda_scan_without_calling_cuda(cuda_forbidden, monkeypatch, tmp_path):
    import loadtune
    from conftest import SPECS

    from loadtune.engine.plan import prepare

    # a CUDA build on a machine with a driver: the GPUs come from a child (here a CPU build's: none)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(machine, "driver_present", lambda: True)
    real = machine.collect()
    assert isinstance(real.gpus, list)
    # a tiny scan through the Python API: its trials and probes are other processes
    result = loadtune.scan(str(SPECS / "tiny.py"), device="cpu", workers=[0], persistent=False, batch_size=16,
                           warmup=0.1, block_time=0.1, blocks=3, confirm=0, diagnose=False, reference_rounds=0,
                           json_path=tmp_path / "r.json")
    assert result.state == "complete" and result.trials and all(t.ok for t in result.trials)
    # planning a scan of two ranks on two (reported) GPUs: device picked, ranks laid out, devices probed in a child
    two = ({"index": 0, "name": "GPU", "memory_bytes": 2**34}, {"index": 1, "name": "GPU", "memory_bytes": 2**34})
    monkeypatch.setattr(machine, "gpus_in_child", lambda visible, order: two)
    plan = prepare(str(SPECS / "tiny.py"), device="cuda", nproc_per_node=2)
    assert plan.device == "cuda:0" and [g.index for g in plan.machine.gpus] == [0, 1]
    assert plan.result.settings.ranks["start_method"] == "spawn" and plan.result.settings.ranks["backend"] == "gloo"
    if plan.result.h2d_peaks_gbps is None:  # not two real devices to probe here: said so
        assert any("measuring cuda:0 before the scan failed" in n for n in plan.result.notes)


def test_without_a_cuda_build_or_a_driver_no_child_is_started(cuda_forbidden, monkeypatch):
    started = []
    monkeypatch.setattr(machine, "gpus_in_child", lambda visible, order: started.append(1) or ())
    monkeypatch.setattr(torch.version, "cuda", None)
    assert machine.cuda_gpus() == [] and not started
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(machine, "driver_present", lambda: False)
    assert machine.cuda_gpus() == [] and not started
    monkeypatch.setattr(machine, "driver_present", lambda: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert machine.cuda_gpus() == [] and started == [1]


# ---------------------------------------------------------------- finding a trial's GPU in NVML


class NVMLError(Exception):
    pass


def fake_nvml(known: dict, mig: set = frozenset(), by_pci: dict | None = None):
    """A pynvml that knows devices by NVML's names: ``known`` UUID -> handle (utilisation = handle's
    number), ``by_pci`` bus id -> handle; handles in ``mig`` are MIG instances. By index it knows a
    device nobody asked for, so a lookup by CUDA's index would find the wrong GPU."""
    import types

    mod = types.ModuleType("pynvml")
    mod.calls = []

    def lookup(table):
        def call(key):
            mod.calls.append(key)
            if key not in table:
                raise NVMLError("Not Found")
            return table[key]
        return call

    mod.nvmlInit = lambda: mod.calls.append("init")
    mod.nvmlShutdown = lambda: mod.calls.append("shutdown")
    mod.nvmlDeviceGetHandleByUUID = lookup(known)
    mod.nvmlDeviceGetHandleByPciBusId_v2 = lookup(by_pci or {})
    mod.nvmlDeviceGetHandleByIndex = lambda i: "the-wrong-gpu"
    mod.nvmlDeviceIsMigDeviceHandle = lambda h: int(h in mig)

    def rates(h):
        if h in mig:
            raise NVMLError("Not Supported")
        return types.SimpleNamespace(gpu=int(h.removeprefix("h")), memory=0)

    mod.nvmlDeviceGetUtilizationRates = rates
    return mod


@pytest.fixture
def nvml_module(monkeypatch):
    import sys

    from loadtune.engine.trial import nvml

    def use(mod):
        nvml.reset()
        monkeypatch.setitem(sys.modules, "pynvml", mod)
        return mod

    yield use
    nvml.reset()


UUID = "5c3f2d8e-0a1b-4c2d-9e8f-0123456789ab"  # as CUDA reports it: no prefix


def test_a_whole_gpu_is_found_by_its_gpu_uuid_and_sampled(nvml_module):
    from loadtune.engine.trial import nvml

    nvml_module(fake_nvml({f"GPU-{UUID}": "h42"}))
    sampler = nvml.UtilisationSampler.for_device(UUID, 3)
    sampler.timed = True
    sampler.maybe_sample()
    assert [u for _, u in sampler.samples] == [42]
    assert nvml.utilisation_notes([{"uuid": UUID, "pci_bus_id": None, "index": 3}]) == []


def test_a_mig_instance_is_found_by_its_mig_uuid_and_said_to_have_no_utilisation(nvml_module):
    from loadtune.engine.trial import nvml

    mod = nvml_module(fake_nvml({f"MIG-{UUID}": "h7"}, mig={"h7"}))
    assert nvml.handle_for(UUID) == "h7" and f"MIG-{UUID}" in mod.calls
    assert nvml.UtilisationSampler.for_device(UUID, 0) is None
    notes = nvml.utilisation_notes([{"uuid": UUID, "pci_bus_id": None, "index": 0}])
    assert notes == ["GPU utilisation is not sampled on cuda:0: the device is a MIG instance, for which NVML reports no utilisation"]


def test_a_gpu_in_mig_mode_found_by_its_pci_bus_is_said_to_have_no_utilisation(nvml_module):
    """A MIG instance whose UUID NVML does not know is found by its PCI bus id, which names the whole
    GPU: NVML reports no utilisation for a GPU in MIG mode either, so no sampler that reads nothing."""
    from loadtune.engine.trial import nvml

    mod = nvml_module(fake_nvml({}, by_pci={"00000000:3B:00.0": "h5", "00000000:3C:00.0": "h6"}))
    mod.nvmlDeviceGetMigMode = lambda h: [1, 1] if h == "h5" else [0, 0]
    assert nvml.UtilisationSampler.for_device(UUID, 0, "00000000:3B:00.0") is None
    assert nvml.UtilisationSampler.for_device(UUID, 1, "00000000:3C:00.0") is not None  # MIG off: sampled
    notes = nvml.utilisation_notes([{"uuid": UUID, "pci_bus_id": "00000000:3B:00.0", "index": 0}])
    assert notes == ["GPU utilisation is not sampled on cuda:0: the GPU is in MIG mode, for which NVML reports no utilisation"]


def test_a_device_nvml_knows_by_no_uuid_is_found_by_pci_bus_and_never_by_cudas_index(nvml_module):
    from loadtune.engine.trial import nvml

    nvml_module(fake_nvml({}, by_pci={"00000000:3B:00.0": "h9"}))
    assert nvml.handle_for(UUID, "00000000:3B:00.0") == "h9"
    assert nvml.handle_for(UUID, None) is None  # not "the-wrong-gpu": CUDA's index is not NVML's
    assert nvml.UtilisationSampler.for_device(UUID, 0) is None
    assert "NVML knows no device" in nvml.utilisation_notes([{"uuid": UUID, "pci_bus_id": None, "index": 0}])[0]


def test_nvml_is_shut_down_as_often_as_it_was_initialised(nvml_module):
    from loadtune.engine.trial import nvml

    mod = nvml_module(fake_nvml({}))
    assert nvml.nvml() is mod and nvml.nvml() is mod  # initialised once
    nvml.shutdown()
    assert mod.calls == ["init", "shutdown"]
    assert nvml.nvml() is mod and mod.calls[-1] == "init"  # a later query initialises it again


def test_a_pci_bus_id_is_written_as_nvml_reads_it():
    import types

    from loadtune.engine.trial.gpu import pci_bus_id

    assert pci_bus_id(types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)) == "00000000:3B:00.0"
    assert pci_bus_id(types.SimpleNamespace(name="an older torch")) is None
