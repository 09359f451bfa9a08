"""Option layering and checking (loadtune/engine/options.py: resolve_options, validate_options; engine/plan.py: prepare)."""

from __future__ import annotations

import itertools
import sys
import textwrap

import pytest
import torch
from torch.utils.data import Dataset

from loadtune.engine import machine
from loadtune.search.space import default_workers
from loadtune.analysis.recommend import NOISE_FLOOR
from loadtune.engine.options import OptionsError, resolve_options
from loadtune.engine.plan import DEFAULT_BATCH_SIZE, prepare
from loadtune.model.settings import ScanOptions
from loadtune.engine.spec import SpecError

# ---------------------------------------------------------------- resolve_options


def test_defaults_when_nothing_given():
    opts = resolve_options({}, {})
    assert opts == ScanOptions()
    assert opts.batch_size is None and opts.workers is None
    assert opts.prefetch == [2, 4]
    assert opts.noise_floor == NOISE_FLOOR
    assert opts.blocks == 10 and opts.min_blocks == 3 and opts.target_spread == 0.03
    assert opts.search == "adaptive" and opts.budget is None


def test_spec_dict_overrides_defaults():
    opts = resolve_options({"blocks": 9, "shuffle": False, "warmup": 0.25}, {})
    assert (opts.blocks, opts.shuffle, opts.warmup) == (9, False, 0.25)
    assert opts.timeout == ScanOptions().timeout  # untouched


def test_overrides_win_over_spec_dict():
    opts = resolve_options({"blocks": 9, "batch_size": 32, "workers": [0, 2]}, {"blocks": 3, "workers": [4]})
    assert opts.blocks == 3
    assert opts.workers == [4]
    assert opts.batch_size == [32]  # from the spec dict, not overridden


def test_none_in_overrides_means_not_given():
    opts = resolve_options({"blocks": 9, "pin": False, "batch_size": 16}, {"blocks": None, "pin": None, "batch_size": None})
    assert opts.blocks == 9
    assert opts.pin is False
    assert opts.batch_size == [16]


def test_falsy_overrides_still_win():
    opts = resolve_options({"shuffle": True, "seed": 7, "pin": True}, {"shuffle": False, "seed": 0, "pin": False})
    assert opts.shuffle is False and opts.seed == 0 and opts.pin is False


def test_unknown_key_in_spec_dict_names_key():
    with pytest.raises(OptionsError) as info:
        resolve_options({"num_wrokers": [0, 2]}, {})
    msg = str(info.value)
    assert "'num_wrokers'" in msg and "spec" in msg
    assert "workers" in msg  # lists the known names


def test_unknown_key_in_overrides_names_key():
    with pytest.raises(OptionsError, match="'colour'"):
        resolve_options({}, {"colour": "blue"})


@pytest.mark.parametrize("key", ["batch_size", "workers", "prefetch"])
def test_scalar_becomes_list(key):
    opts = resolve_options({key: 8}, {})
    assert getattr(opts, key) == [8]


def test_tuple_becomes_list():
    opts = resolve_options({}, {"batch_size": (16, 32)})
    assert opts.batch_size == [16, 32]


@pytest.mark.parametrize(
    "layer, fragment",
    [
        ({"blocks": 0}, "blocks"),
        ({"blocks": -2}, "blocks"),
        ({"blocks": 2.5}, "blocks"),
        ({"blocks": True}, "blocks"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": 0}, "timeout"),
        ({"warmup": 0}, "warmup"),
        ({"block_time": -0.5}, "block_time"),
        ({"block_time": "1"}, "block_time"),
        ({"noise_floor": 1.5}, "noise_floor"),
        ({"noise_floor": 1.0}, "noise_floor"),
        ({"noise_floor": -0.1}, "noise_floor"),
        ({"timeout": 1.0, "warmup": 1.0, "block_time": 0.5}, "timeout"),
        ({"warmup": float("nan")}, "warmup"),
        ({"block_time": float("inf")}, "block_time"),
        ({"timeout": float("nan")}, "timeout"),
        ({"budget": float("nan")}, "budget"),
        ({"target_spread": float("nan")}, "target_spread"),
        ({"batch_size": []}, "batch_size"),
        ({"workers": []}, "workers"),
    ],
)
@pytest.mark.parametrize("where", ["spec", "overrides"])
def test_invalid_values_refused(layer, fragment, where):
    spec, over = (layer, {}) if where == "spec" else ({}, layer)
    with pytest.raises(OptionsError, match=fragment):
        resolve_options(spec, over)


def test_invalid_spec_value_fixed_by_override():
    opts = resolve_options({"blocks": 0}, {"blocks": 4})
    assert opts.blocks == 4


def test_non_numeric_noise_floor_refused():
    with pytest.raises(OptionsError, match="noise_floor"):
        resolve_options({"noise_floor": "0.05"}, {})


@pytest.mark.parametrize("key", ["pin", "persistent", "shuffle", "drop_last"])
def test_non_bool_switch_refused(key):
    with pytest.raises(OptionsError, match=key):
        resolve_options({key: "no"}, {})


# ---------------------------------------------------------------- prepare


class Tiny(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.tensor([i])


def test_prepare_with_dataset_object_defaults():
    plan = prepare(Tiny(), search="grid")
    cores = machine.usable_cores()
    assert plan.device == "cpu" or torch.cuda.is_available()
    grid = [c for c in plan.strategy.configs if c.key not in plan.result.settings.references]
    assert {c.batch_size for c in plan.strategy.configs} == {DEFAULT_BATCH_SIZE}
    assert {c.num_workers for c in grid} == set(default_workers(cores))
    assert plan.result.settings.grid_size == len(grid)
    assert plan.result.spec.length == 16 and plan.result.spec.path is None


def test_prepare_orders_trials_reproducibly_and_includes_reference():
    a = prepare(Tiny(), workers=[1, 2], batch_size=[4, 8], seed=3, search="grid")
    b = prepare(Tiny(), workers=[1, 2], batch_size=[4, 8], seed=3, search="grid")
    assert a.strategy.configs == b.strategy.configs
    # workers exclude 0: PyTorch's default is added at each batch size as a reference
    refs = a.result.settings.references
    assert len(refs) == 2
    assert {c.key for c in a.strategy.configs if c.num_workers == 0} == set(refs)


@pytest.mark.parametrize(
    "over",
    [{"workers": [-1]}, {"batch_size": 0}, {"prefetch": [0]}, {"workers": [True]}, {"workers": []}],
)
def test_prepare_turns_plan_errors_into_options_errors(over):
    with pytest.raises(OptionsError):
        prepare(Tiny(), **over)


def test_prepare_refuses_cuda_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(OptionsError, match="cuda"):
        prepare(Tiny(), device="cuda")
    with pytest.raises(OptionsError, match="device"):
        prepare(Tiny(), device="tpu")


_n = itertools.count()


def test_prepare_uses_spec_dict_then_overrides(tmp_path):
    stem = f"lt_opts_spec_{next(_n)}_{tmp_path.name.replace('-', '_')}"
    path = tmp_path / f"{stem}.py"
    path.write_text(
        textwrap.dedent(
            """
            import torch
            from torch.utils.data import Dataset

            class D(Dataset):
                def __len__(self):
                    return 20
                def __getitem__(self, i):
                    return torch.tensor([i])

            def dataset():
                return D()

            loadtune = {"batch_size": 8, "workers": [0, 1], "blocks": 7}
            """
        )
    )
    try:
        plan = prepare(str(path), blocks=2, workers=None, search="grid")
        assert plan.options.batch_size == [8]
        assert plan.options.workers == [0, 1]
        assert plan.options.blocks == 2
        assert {c.num_workers for c in plan.strategy.configs} == {0, 1}
        assert plan.result.spec.path == str(path.resolve())
        assert plan.result.spec.sha256 and len(plan.result.spec.sha256) == 64
    finally:
        sys.modules.pop(stem, None)


def test_prepare_unknown_key_in_spec_dict(tmp_path):
    stem = f"lt_opts_spec_{next(_n)}_{tmp_path.name.replace('-', '_')}"
    path = tmp_path / f"{stem}.py"
    path.write_text("dataset = [1, 2, 3]\nloadtune = {'batchsize': 8}\n")
    try:
        with pytest.raises(OptionsError, match="'batchsize'"):
            prepare(str(path))
    finally:
        sys.modules.pop(stem, None)


def test_prepare_bad_spec_raises_spec_error(tmp_path):
    with pytest.raises(SpecError):
        prepare(str(tmp_path / "absent.py"))


def test_device_always_has_an_index():
    from loadtune.model.machine import GPUInfo
    from loadtune.engine.options import pick_device

    cpu_only = machine.collect()
    cpu_only.gpus = []
    assert pick_device(None, cpu_only) == "cpu"
    two = machine.collect()
    two.gpus = [GPUInfo(0, "A", 1), GPUInfo(1, "B", 1)]
    assert pick_device(None, two) == "cuda:0"  # torch.cuda.set_device refuses a bare "cuda"
    assert pick_device("cuda", two) == "cuda:0" and pick_device("cuda:1", two) == "cuda:1"
    for bad in ("cuda:2", "cuda:x", "tpu"):
        with pytest.raises(OptionsError):
            pick_device(bad, two)


def test_drop_last_with_a_batch_larger_than_the_dataset_is_refused():
    with pytest.raises(OptionsError, match="never fill one batch"):
        prepare(Tiny(), batch_size=32, drop_last=True)
