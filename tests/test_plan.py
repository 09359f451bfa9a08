"""The search space and its grid (loadtune/search/space.py): only valid DataLoader settings, each once,
with PyTorch's defaults measured as the reference."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from loadtune.model.config import DEFAULT_PREFETCH, PlanError, TrialConfig, parse_int_list

from loadtune.search.space import SearchSpace, build_grid, default_workers, reference_configs


class Tiny(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i])


def space(**kw) -> SearchSpace:
    kw.setdefault("batch_sizes", [32])
    kw.setdefault("workers", [0, 1, 2])
    return SearchSpace(**kw)


# ---------------------------------------------------------------- build_grid


@pytest.mark.parametrize("accelerator", [False, True])
def test_no_prefetch_or_persistent_without_workers(accelerator):
    configs, _ = build_grid(space(workers=[0, 1, 4], prefetch=[2, 4, 8]), accelerator)
    zero = [c for c in configs if c.num_workers == 0]
    assert zero, "num_workers=0 must be in the grid"
    for c in zero:
        assert c.prefetch_factor is None
        assert c.persistent_workers is False
        kwargs = c.loader_kwargs()
        assert "prefetch_factor" not in kwargs and "persistent_workers" not in kwargs
    for c in configs:
        if c.num_workers > 0:
            assert c.prefetch_factor in (2, 4, 8)


def test_pin_not_searched_without_accelerator():
    configs, skips = build_grid(space(), accelerator=False)
    assert all(c.pin_memory is False for c in configs)
    assert all(c.transfer == "none" for c in configs)
    assert len(skips) == 1
    assert "pin_memory" in skips[0].what
    assert "stay on the CPU" in skips[0].why


def test_pin_not_searched_without_accelerator_even_if_asked():
    configs, skips = build_grid(space(pin=True), accelerator=False)
    assert all(c.pin_memory is False for c in configs)
    assert skips


def test_with_accelerator_pins_and_transfer_strategies_are_searched():
    configs, skips = build_grid(space(), accelerator=True)
    assert [s.what for s in skips] == ["non_blocking without pin_memory"]
    assert {c.pin_memory for c in configs} == {False, True}
    assert {c.transfer for c in configs if not c.pin_memory} == {"sync", "stream"}
    assert {c.transfer for c in configs if c.pin_memory} == {"sync", "non_blocking", "stream"}
    # every (workers, prefetch, persistent) point appears with and without pinning, with each strategy
    points = {(c.batch_size, c.num_workers, c.prefetch_factor, c.persistent_workers) for c in configs}
    for pin, transfer in [(False, "sync"), (False, "stream"), (True, "sync"), (True, "non_blocking"), (True, "stream")]:
        assert {(c.batch_size, c.num_workers, c.prefetch_factor, c.persistent_workers)
                for c in configs if (c.pin_memory, c.transfer) == (pin, transfer)} == points


def test_with_accelerator_fixed_pin():
    configs, _ = build_grid(space(pin=False), accelerator=True)
    assert {c.pin_memory for c in configs} == {False}
    assert {c.transfer for c in configs} == {"sync", "stream"}  # never non_blocking from pageable memory


def test_grid_counts():
    # per batch size: w0 -> 1; each w>0 -> |prefetch| * |persistent|
    s = space(batch_sizes=[16, 64], workers=[0, 1, 2, 4], prefetch=[2, 4])
    configs, _ = build_grid(s, accelerator=False)
    assert len(configs) == 2 * (1 + 3 * 2 * 2)
    configs, _ = build_grid(s, accelerator=True)
    assert len(configs) == 2 * (2 + 3) * (1 + 3 * 2 * 2)  # unpinned: sync, stream; pinned: + non_blocking
    configs, _ = build_grid(space(batch_sizes=[16, 64], workers=[0, 1, 2, 4], prefetch=[2, 4], persistent=True), False)
    assert len(configs) == 2 * (1 + 3 * 2)
    assert all(c.persistent_workers for c in configs if c.num_workers)


def test_grid_deduplicates_and_sorts():
    configs, _ = build_grid(space(batch_sizes=[64, 16, 64], workers=[2, 0, 2], prefetch=[2]), False)
    assert len(configs) == 2 * (1 + 2)
    assert [c.batch_size for c in configs] == sorted(c.batch_size for c in configs)


def test_label_and_key_distinct_across_grid():
    configs, _ = build_grid(space(batch_sizes=[8, 32], workers=[0, 1, 2, 4], prefetch=[2, 4]), accelerator=True)
    keys = [c.key for c in configs]
    labels = [c.label() for c in configs]
    assert len(set(keys)) == len(configs)
    assert len(set(labels)) == len(configs)
    assert len(set(configs)) == len(configs)


def test_label_format():
    c = TrialConfig(64, 4, True, 2, True, "non_blocking")
    assert c.label() == "w4 pf2 pin persist non-blocking bs64"
    assert TrialConfig(32, 0).label() == "w0 bs32"
    assert TrialConfig(32, 2).label() == f"w2 pf{DEFAULT_PREFETCH} bs32"


def test_config_dict_round_trip():
    c = TrialConfig(64, 4, True, 4, True, "non_blocking")
    assert TrialConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize("accelerator", [False, True])
def test_loader_kwargs_accepted_by_real_dataloader(accelerator):
    configs, _ = build_grid(space(batch_sizes=[2, 4], workers=[0, 1, 3], prefetch=[1, 2, 4]), accelerator)
    configs += reference_configs(configs, accelerator)
    ds = Tiny()
    for c in configs:
        kwargs = c.loader_kwargs()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loader = DataLoader(ds, **kwargs)
        assert loader.batch_size == c.batch_size
        assert loader.num_workers == c.num_workers
        assert loader.pin_memory == c.pin_memory
        if c.num_workers:
            assert loader.prefetch_factor == c.prefetch_factor
            assert loader.persistent_workers == c.persistent_workers
        else:
            assert loader.prefetch_factor is None
            assert loader.persistent_workers is False


def test_loader_kwargs_default_prefetch_when_unset():
    kwargs = TrialConfig(8, 2).loader_kwargs()
    assert kwargs["prefetch_factor"] == DEFAULT_PREFETCH
    assert kwargs["persistent_workers"] is False


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kw, fragment",
    [
        ({"workers": [0, -1]}, "num_workers"),
        ({"batch_sizes": [0]}, "batch size"),
        ({"batch_sizes": [-8]}, "batch size"),
        ({"prefetch": [0]}, "prefetch_factor"),
        ({"workers": [True]}, "num_workers"),
        ({"batch_sizes": [False]}, "batch size"),
        ({"prefetch": [True, 2]}, "prefetch_factor"),
        ({"batch_sizes": [2.5]}, "batch size"),
        ({"workers": ["2"]}, "num_workers"),
        ({"workers": []}, "num_workers"),
        ({"batch_sizes": []}, "batch size"),
        ({"prefetch": []}, "prefetch_factor"),
    ],
)
def test_validation_refuses(kw, fragment):
    s = space(**kw)
    with pytest.raises(PlanError, match=fragment):
        s.validate()
    with pytest.raises(PlanError):
        build_grid(s, accelerator=False)


def test_validation_accepts_edges():
    space(batch_sizes=[1], workers=[0], prefetch=[1]).validate()


# ---------------------------------------------------------------- parse_int_list


@pytest.mark.parametrize(
    "text, expected",
    [("0,2,4", [0, 2, 4]), (" 1, 2 ,3 ", [1, 2, 3]), ("8", [8]), ("4,", [4]), ("-1,0", [-1, 0])],
)
def test_parse_int_list_good(text, expected):
    assert parse_int_list(text, "--workers") == expected


@pytest.mark.parametrize("text", ["", ",", "a,b", "1.5", "1;2", "two"])
def test_parse_int_list_bad(text):
    with pytest.raises(PlanError) as info:
        parse_int_list(text, "--workers")
    assert "--workers" in str(info.value)


# ---------------------------------------------------------------- default_workers


def test_default_workers_two_cores():
    assert default_workers(2) == [0, 1, 2, 4]


def test_default_workers_six_cores():
    ws = default_workers(6)
    assert {0, 1, 2, 4, 6, 8, 12} <= set(ws)
    assert max(ws) == 12
    assert ws == sorted(set(ws))


def test_default_workers_one_core():
    assert default_workers(1) == [0, 1, 2]


# ---------------------------------------------------------------- reference_configs


def test_reference_configs_only_where_missing():
    configs = [
        TrialConfig(16, 0, False, None, False, "none"),
        TrialConfig(16, 2, False, 2, False, "none"),
        TrialConfig(64, 2, False, 2, False, "none"),
        TrialConfig(64, 4, False, 2, True, "none"),
    ]
    refs = reference_configs(configs, accelerator=False)
    assert refs == [TrialConfig(64, 0, False, None, False, "none")]
    assert all(r.is_pytorch_default for r in refs)


def test_reference_configs_none_when_grid_has_defaults():
    configs, _ = build_grid(space(batch_sizes=[8, 32]), accelerator=False)
    assert reference_configs(configs, accelerator=False) == []
    configs, _ = build_grid(space(batch_sizes=[8, 32]), accelerator=True)
    assert reference_configs(configs, accelerator=True) == []


def test_reference_configs_when_workers_exclude_zero():
    configs, _ = build_grid(space(batch_sizes=[8, 32], workers=[2, 4]), accelerator=False)
    refs = reference_configs(configs, accelerator=False)
    assert refs == [TrialConfig(8, 0, False, None, False, "none"), TrialConfig(32, 0, False, None, False, "none")]
    assert not set(refs) & set(configs)


def test_reference_configs_with_accelerator_and_pin_forced():
    # only pinned configs in the grid: PyTorch's default (no pinning, plain .to()) is added
    configs, _ = build_grid(space(batch_sizes=[8], workers=[0, 2], pin=True), accelerator=True)
    assert all(not c.is_pytorch_default for c in configs)
    refs = reference_configs(configs, accelerator=True)
    assert refs == [TrialConfig(8, 0, False, None, False, "sync")]


def test_is_pytorch_default():
    assert TrialConfig(8, 0).is_pytorch_default
    assert TrialConfig(8, 0, transfer="sync").is_pytorch_default
    assert not TrialConfig(8, 1, prefetch_factor=2).is_pytorch_default
    assert not TrialConfig(8, 0, pin_memory=True, transfer="non_blocking").is_pytorch_default


def test_with_knobs_keeps_configs_valid():
    from loadtune.model.config import TrialConfig

    pinned = TrialConfig(64, 4, True, 2, True, "non_blocking", False, "spawn")
    unpinned = pinned.with_knobs(pin_memory=False)
    assert unpinned.transfer == "sync"  # transfer follows pinning on an accelerator
    no_workers = pinned.with_knobs(num_workers=0)
    assert (no_workers.prefetch_factor, no_workers.persistent_workers, no_workers.in_order, no_workers.start_method) == (None, False, True, None)
    cpu = TrialConfig(64, 0).with_knobs(pin_memory=True, num_workers=2)
    assert cpu.transfer == "none" and cpu.prefetch_factor == 2  # no accelerator: nothing to move
