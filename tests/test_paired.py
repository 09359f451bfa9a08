"""check's paired round: the config's loader and its shaped calibration's in one trial process, timed
block by block in turn. The round's figures as pure functions, then a real paired trial with workers."""

import math
from dataclasses import replace

import pytest
from conftest import SPECS, quick_request

from loadtune.engine.reference import PairedEntry, paired_round, round_of
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.paired import pairs_for
from loadtune.engine.trial.protocol import Kind
from loadtune.engine.trial.harness import run_trial
from loadtune.model.config import TrialConfig
from loadtune.model.paired import CalibrationShape, PairedRound
from loadtune.model.results import Block, Trial
from loadtune.engine.trial.measure import Timing

SHAPE = CalibrationShape(units=40, sleep_s=0.0, sample_numel=16, unit_s=1e-6, source="test")


def trial_of(config_rates, calibration_rates):
    trial = Trial(TrialConfig(32, 2), "ok")
    trial.blocks = [Block(int(r), 10, 1.0) for r in config_rates]
    trial.calibration_blocks = [Block(int(r), 10, 1.0) for r in calibration_rates]
    return trial


def test_the_round_is_the_median_ratio_of_neighbouring_blocks():
    # the third pair met a neighbour's burst in its config block only: the median ignores it
    got = round_of(trial_of([1000, 1100, 400, 1050], [500, 550, 520, 525]), config_first=False)
    assert got.pairs == 4 and got.config_first is False
    assert got.ratio == pytest.approx(2.0)
    assert got.config_rate == pytest.approx(math.exp(sum(map(math.log, [1000, 1100, 400, 1050])) / 4))


def test_a_round_counts_only_pairs_both_loaders_completed():
    got = round_of(trial_of([1000, 1200, 900], [500, 600]), config_first=True)
    assert got.pairs == 2 and got.ratio == pytest.approx(2.0)
    failed = trial_of([1000], [500])
    failed.status = "failed"
    assert round_of(failed, True) == PairedRound(None, None, True, 0)
    assert round_of(trial_of([1000], []), True).ratio is None


def test_back_to_back_rounds_read_the_ratio_of_the_two_trials():
    assert PairedRound(900.0, 300.0).ratio == pytest.approx(3.0)
    assert PairedRound(900.0, 300.0, True, 4, 2.5).ratio == pytest.approx(2.5)
    assert PairedRound.__dataclass_fields__["pairs"].default == 0  # rounds saved before block pairs read as back to back


def test_pairs_follow_the_timing():
    assert pairs_for(Timing(blocks=10)) == 5 and pairs_for(Timing(blocks=1)) == 2


@pytest.mark.slow
@pytest.mark.parametrize("config_first", [True, False])
def test_a_paired_trial_alternates_the_two_loaders_in_one_process(config_first):
    """Real workers: both loaders time the same number of blocks, in A B, B A, ... order."""
    timing = Timing(warmup_s=0.1, block_s=0.2, blocks=6, max_s=40)
    request = quick_request(TrialConfig(batch_size=16, num_workers=2, persistent_workers=True), timing)
    seen = []
    trial = run_trial(SpecRef(str(SPECS / "tiny.py")), replace(request, entry=PairedEntry(SHAPE, 512, config_first)),
                      on_event=lambda kind, payload: seen.append(kind) if kind in (Kind.BLOCK, Kind.CALIBRATION) else None)
    assert trial.ok, trial.error
    assert len(trial.blocks) == len(trial.calibration_blocks) == 3
    first = Kind.BLOCK if config_first else Kind.CALIBRATION
    other = Kind.CALIBRATION if config_first else Kind.BLOCK
    assert seen == [first, other, other, first, first, other]
    assert all(b.rate > 0 for b in trial.blocks + trial.calibration_blocks)
    round_ = round_of(trial, config_first)
    assert round_.pairs == 3 and round_.ratio > 0
    assert Trial.from_dict(trial.to_dict()).calibration_blocks == trial.calibration_blocks


@pytest.mark.slow
def test_paired_round_runs_one_process_per_round():
    timing = Timing(warmup_s=0.1, block_s=0.2, blocks=4, max_s=40)
    request = quick_request(TrialConfig(batch_size=16, num_workers=1), timing)
    got, trials = paired_round(SpecRef(str(SPECS / "tiny.py")), SHAPE, None, request, index=1)
    assert len(trials) == 1 and got.pairs == 2 and got.config_first is False and got.ratio > 0
