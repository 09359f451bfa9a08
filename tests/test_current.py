"""Your settings as the baseline (``--current``): parsed and checked (loadtune/model/config.py), always
measured (engine/plan.py), the gain stated over them and "keep what you have" a possible verdict
(analysis/recommend.py), re-measured side by side (search/closing.py), marked in the report."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, empty_result
from rich.console import Console
from torch.utils.data import Dataset

from loadtune.analysis.recommend import recommend
from loadtune.engine.options import OptionsError
from loadtune.engine.plan import prepare
from loadtune.model.config import PlanError, TrialConfig, current_config, parse_knobs
from loadtune.model.results import ScanResult
from loadtune.model.trial import Block, MemoryUsage, Trial
from loadtune.report.scan import print_report
from loadtune.search.closing import closing_rounds

MiB = 2**20


def test_knobs_parse_from_text_and_dicts():
    assert parse_knobs("num_workers=8, pin_memory=True,batch_size=256") == {"num_workers": 8, "pin_memory": True,
                                                                            "batch_size": 256}
    assert parse_knobs({"num_workers": 2, "start_method": "spawn", "persistent_workers": "false"}) == {
        "num_workers": 2, "multiprocessing_context": "spawn", "persistent_workers": False}


@pytest.mark.parametrize("text, fragment", [
    ("num_workers=eight", "num_workers must be a whole number >= 0"),
    ("workers=8", "unknown knob 'workers'"),
    ("num_workers", "knob=value pairs"),
    ("pin_memory=yes", "pin_memory must be True or False"),
    ("batch_size=0", "batch_size must be a whole number >= 1"),
    ("transfer=teleport", "transfer must be one of"),
])
def test_bad_knobs_are_named(text, fragment):
    with pytest.raises(PlanError, match=fragment):
        parse_knobs(text)


def test_current_config_fills_pytorchs_defaults_and_refuses_what_pytorch_refuses():
    config = current_config({"num_workers": 8, "pin_memory": True}, 64, accelerator=True)
    assert config == TrialConfig(64, 8, True, 2, False, "non_blocking")  # PyTorch's prefetch, the pin's transfer
    assert current_config({"num_workers": 8, "pin_memory": True}, 64, accelerator=False).transfer == "none"
    with pytest.raises(PlanError, match="persistent_workers needs num_workers > 0"):
        current_config({"persistent_workers": True}, 64, accelerator=False)


# ---------------------------------------------------------------- the verdict


def trial(config: TrialConfig, rate: float, round_: int = 0) -> Trial:
    blocks = [Block(int(rate * f), 10, 1.0) for f in (0.98, 1.0, 1.02, 0.99, 1.01)]
    memory = MemoryUsage((100 + 40 * config.num_workers) * MiB, 1 + config.num_workers, "pss")
    return Trial(config, "ok", blocks=blocks, memory=memory, round=round_)


W0, W2, W8 = TrialConfig(64, 0), TrialConfig(64, 2, prefetch_factor=2), TrialConfig(64, 8, prefetch_factor=2)


def test_gain_is_over_the_current_settings_not_pytorchs_defaults():
    trials = [trial(W0, 100), trial(W2, 400), trial(W8, 200)]
    rec = recommend(trials, current=W8.key)
    assert rec.config == W2 and rec.baseline == W8
    assert rec.speedup == pytest.approx(2.0, rel=0.02)
    assert recommend(trials).baseline == W0  # without it: PyTorch's defaults, as before


def test_keep_what_you_have_when_nothing_beats_it_beyond_the_noise():
    trials = [trial(W0, 100), trial(W2, 400), trial(W8, 402)]  # w2 is cheaper, but no faster
    rec = recommend(trials, current=W8.key)
    assert rec.config == W8 and rec.baseline == W8
    assert "no measured config is faster than your current settings" in rec.reason and "1 cheaper config" in rec.reason
    assert recommend(trials).config == W2  # without --current the cheapest of the tied wins


def test_current_that_failed_gives_no_gain():
    broken = Trial(W8, "failed")
    rec = recommend([trial(W0, 100), trial(W2, 400), broken], current=W8.key)
    assert rec.config == W2 and rec.baseline is None and rec.speedup is None


def test_the_closing_rounds_measure_the_current_settings_beside_the_contenders():
    result = empty_result()
    result.settings.current = W8.key
    result.trials = [trial(W0, 100), trial(TrialConfig(64, 1, prefetch_factor=2), 398), trial(W2, 400), trial(W8, 250)]
    wanted = {p.config for p in closing_rounds(result, rounds=1, noise_floor=0.02, seed=0)}
    assert W8 in wanted and W0 not in wanted  # the reference is theirs, not PyTorch's defaults


def test_the_report_marks_the_current_row_and_says_keep():
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    mine = max((c for c in result.configs if c.ok), key=lambda c: c.estimate.median).config
    result.settings.current = mine.key
    result.recommendation = recommend(result.trials, current=mine.key)
    console = Console(width=200, record=True)
    print_report(console, result)
    text = console.export_text()
    row = next(line for line in text.splitlines() if mine.label() in line and "current" in line)
    assert "★" in row
    assert f"Keep what you have: your current settings ({mine.label()})" in text
    assert "current: your settings (--current)" in text


def test_the_report_states_the_gain_over_them():
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    slowest = min((c for c in result.configs if c.ok), key=lambda c: c.estimate.median)
    result.settings.current = slowest.config.key
    result.recommendation = recommend(result.trials, current=slowest.config.key)
    console = Console(width=200, record=True)
    print_report(console, result)
    assert f"× your current settings ({slowest.config.label()}:" in console.export_text()


# ---------------------------------------------------------------- the plan


class Tiny(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return i


def test_current_is_always_planned_and_sets_the_default_batch_size():
    plan = prepare(Tiny(), workers=[0, 1], current="num_workers=3,persistent_workers=True,batch_size=16", search="grid",
                   device="cpu")  # on a GPU machine the current config would copy its batches (tx=sync)
    mine = TrialConfig(16, 3, False, 2, True)
    assert plan.result.settings.current == mine.key and mine.key in plan.result.settings.references
    assert mine in plan.strategy.configs and {c.batch_size for c in plan.strategy.configs} == {16}
    assert plan.options.current == {"num_workers": 3, "persistent_workers": True, "batch_size": 16}
    inside = prepare(Tiny(), workers=[0, 1], current={"num_workers": 1}, device="cpu")  # already in the grid: not a reference
    assert inside.result.settings.current == TrialConfig(64, 1, prefetch_factor=2).key
    assert inside.result.settings.current not in inside.result.settings.references


def test_bad_current_is_an_options_error():
    with pytest.raises(OptionsError, match="current: prefetch_factor needs num_workers > 0"):
        prepare(Tiny(), current="prefetch_factor=4")
    with pytest.raises(OptionsError, match="unknown knob"):
        prepare(Tiny(), current="threads=4")

