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
