"""check's paired round: the config's loader, its shaped calibration's and PyTorch's defaults' in one
trial process, timed block by block in turn. The round's figures as pure functions, then real paired
trials with workers."""

import math
from dataclasses import replace

import pytest
from conftest import FIXTURES, SPECS, quick_request

from loadtune.engine import reference as reference_mod
from loadtune.engine.calibration import shape_for, shaped_spec
from loadtune.engine.reference import PairedEntry, paired_round, round_of
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.paired import pairs_for
from loadtune.engine.trial.protocol import Kind
from loadtune.engine.trial.harness import run_trial
from loadtune.model.batch import BatchInfo, BatchSizes
from loadtune.model.config import TrialConfig
from loadtune.model.paired import CalibrationShape, PairedRound, turn_order
from loadtune.model.results import ScanResult
from loadtune.model.trial import Block, Trial
from loadtune.engine.trial.setup import Timing

CONFIG_W2, DEFAULTS_W0 = TrialConfig(32, 2), TrialConfig(32, 0)
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


def test_the_gain_over_the_defaults_is_the_median_ratio_of_their_neighbouring_blocks():
    trial = trial_of([1000, 1100, 1050, 990], [500, 550, 520, 500])
    trial.default_blocks = [Block(int(r), 10, 1.0) for r in (400, 440, 100, 396)]  # a burst hit one defaults block
    got = round_of(trial, config_first=True)
    assert got.pairs == 4 and got.ratio == pytest.approx(2.0, rel=0.02)
    assert got.gain == pytest.approx(2.5, rel=0.01) and got.default_ratio == got.gain
    assert got.default_rate == pytest.approx(math.exp(sum(map(math.log, [400, 440, 100, 396])) / 4))
    assert round_of(trial_of([1000], [500]), True).gain is None  # no defaults in the round
    assert PairedRound(900.0, 300.0, default_rate=450.0).gain == pytest.approx(2.0)  # back to back: the trials' rates


def test_the_config_sits_between_the_calibration_and_the_defaults_in_alternating_order():
    assert turn_order(False, True) == ("config", "calibration") and turn_order(False, False) == ("calibration", "config")
    assert turn_order(True, True) == ("defaults", "config", "calibration")
    assert turn_order(True, False) == ("calibration", "config", "defaults")


def test_back_to_back_rounds_run_each_loader_as_a_trial_in_turn(monkeypatch):
    """Several ranks: a trial per loader, in the round's turn order, the defaults with their own knobs."""
    ran = []

    def fake_run(source, request):
        rate = {CONFIG_W2: 900.0, DEFAULTS_W0: 300.0}[request.config] if source != "calibration" else 450.0
        ran.append((source if source == "calibration" else request.config.label()))
        trial = Trial(request.config, "ok")
        trial.blocks = [Block(int(rate), 1, 1.0)] * 3
        return trial

    monkeypatch.setattr(reference_mod, "run_trial", fake_run)
    request = quick_request(CONFIG_W2)
    got, trials = reference_mod.back_to_back("dataset", "calibration", request, config_first=False, defaults=DEFAULTS_W0)
    assert ran == ["calibration", "w2 pf2 bs32", "w0 bs32"] and len(trials) == 3
    assert got.ratio == pytest.approx(2.0) and got.gain == pytest.approx(3.0) and got.default_ratio is None


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
@pytest.mark.parametrize("config_first", [True, False])
def test_a_paired_trial_with_the_defaults_measures_their_gain_side_by_side(config_first):
    """Real workers over a dataset that waits 2 ms per sample: two workers load about twice what the
    main process alone does, and the defaults' blocks (no workers) take their turns beside the config's."""
    timing = Timing(warmup_s=0.1, block_s=0.4, blocks=6, max_s=40)
    request = quick_request(TrialConfig(batch_size=16, num_workers=2, persistent_workers=True), timing)
    seen = []
    entry = PairedEntry(SHAPE, 512, config_first, defaults=TrialConfig(16, 0))
    trial = run_trial(SpecRef(str(SPECS / "bound_by.py"), "waiting"), replace(request, entry=entry),
                      on_event=lambda kind, payload: seen.append(kind) if kind in (Kind.BLOCK, Kind.CALIBRATION, Kind.DEFAULTS) else None)
    assert trial.ok, trial.error
    assert len(trial.blocks) == len(trial.calibration_blocks) == len(trial.default_blocks) == 3
    turn = [Kind.DEFAULTS, Kind.BLOCK, Kind.CALIBRATION] if config_first else [Kind.CALIBRATION, Kind.BLOCK, Kind.DEFAULTS]
    assert seen == turn + turn[::-1] + turn
    round_ = round_of(trial, config_first)
    assert round_.default_rate < 1 / 0.002 * 1.05  # the main process alone cannot beat its own sleeps
    assert 1.4 < round_.gain < 2.6, round_
    assert Trial.from_dict(trial.to_dict()).default_blocks == trial.default_blocks


@pytest.mark.slow
def test_paired_round_runs_one_process_per_round():
    timing = Timing(warmup_s=0.1, block_s=0.2, blocks=4, max_s=40)
    request = quick_request(TrialConfig(batch_size=16, num_workers=1), timing)
    got, trials = paired_round(SpecRef(str(SPECS / "tiny.py")), SHAPE, None, request, index=1)
    assert len(trials) == 1 and got.pairs == 2 and got.config_first is False and got.ratio > 0


def test_batches_of_varying_size_shape_a_calibration_that_batches_their_mean():
    """check's calibration of a loader whose batches vary: per-sample values from the first batch's own
    count, and batches of the measured mean, whatever number keyed the config."""
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    result.stages = None
    trial = result.ok_trials[0]
    trial.cpu_s, trial.batch = 0.5, BatchInfo(48 * 4 * 10, [("float32", [48, 10])], 48)  # a first batch of 48 samples
    trial.batch_sizes = BatchSizes(30.7, 2, 212, True)
    shape = shape_for(result, trial.config, 1e-6)
    assert shape.batch_size == 31 and shape.sample_numel == 10
    assert CalibrationShape.from_dict(shape.to_dict()) == shape
    spec = shaped_spec(shape, 100)
    loader = spec.build_loader(TrialConfig(trial.config.batch_size, 0).loader_kwargs())
    assert [len(b) for b in loader] == [31, 31, 31, 7]  # the mean, not the config's batch size
