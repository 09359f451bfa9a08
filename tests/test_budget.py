"""The budget: what a ``--budget`` must hold for a race (the screening's first trials and the race's
first legs), refused before any trial when it cannot; the screening keeping time for those legs; and a
race that stops wide naming the legs and the budget that would narrow it. The arithmetic as pure
functions, the refusal through the CLI, then a real scan within a budget that fits."""

import re
import time
from types import SimpleNamespace

import pytest
from conftest import SPECS, empty_result, fake_trial, machine_info
from test_race import W1, W2, legs_of
from typer.testing import CliRunner

import loadtune
from loadtune.analysis.budget import (RaceClock, leg_seconds, mean_leg_s, measured_leg_s, narrowing, race_needs, readable,
                                      ready_seconds, round_seconds, screening_trial_s, too_short)
from loadtune.analysis.race import MIN_LEGS, PAIRS_PER_LEG, RacePolicy, precision_note
from loadtune.cli.app import app
from loadtune.engine import scan as scan_mod
from loadtune.engine.options import OptionsError
from loadtune.engine.plan import prepare, race_needs_of
from loadtune.model.config import TrialConfig
from loadtune.model.settings import ScanOptions
from loadtune.model.trial import Block, Trial

TINY = str(SPECS / "tiny.py")
QUICK = dict(workers=[0, 1], warmup=0.2, block_time=0.2)
W0 = TrialConfig(32, 0)


# ---------------------------------------------------------------- the arithmetic


def test_a_leg_grows_with_its_racers_pairs_warmup_and_block():
    opts = ScanOptions()
    base = leg_seconds(opts, 2, PAIRS_PER_LEG)
    assert leg_seconds(opts, 3, PAIRS_PER_LEG) > base and leg_seconds(opts, 2, PAIRS_PER_LEG + 1) > base
    assert leg_seconds(ScanOptions(warmup=3.0), 2, PAIRS_PER_LEG) > base > leg_seconds(ScanOptions(block_time=0.1), 2, PAIRS_PER_LEG)
    # measured: the racers' start-up and warm-up as timed, and each turn longer by its rounds of batches
    assert leg_seconds(opts, 2, PAIRS_PER_LEG, ready_s=0.0) == pytest.approx(2 * 2 * PAIRS_PER_LEG * opts.block_time / 2)
    assert leg_seconds(opts, 2, PAIRS_PER_LEG, ready_s=0.0, round_s=0.1) > leg_seconds(opts, 2, PAIRS_PER_LEG, ready_s=0.0)


def test_a_budget_below_the_need_is_refused_at_it_allowed_and_the_figure_given_allows_a_race():
    needs = race_needs(ScanOptions(), trials=3, racers=3, legs=MIN_LEGS, pairs=PAIRS_PER_LEG)
    assert needs.total_s == pytest.approx(needs.screening_s + needs.legs_s + needs.trial_s)
    assert needs.screening_s == pytest.approx(3 * screening_trial_s(ScanOptions()))
    assert needs.allows(needs.total_s) and not needs.allows(needs.total_s - 0.5)
    assert needs.allows(needs.smallest_budget) and needs.smallest_budget - needs.total_s < 5
    message = too_short(20, needs)
    assert message.startswith("--budget 20 s is too short for a race")
    figure = int(re.search(r"Give --budget (\d+) or more", message).group(1))
    assert figure == needs.smallest_budget and needs.allows(figure)
    assert f"≈ {needs.screening_s:.0f} s" in message and f"≈ {needs.legs_s:.0f} s" in message
    assert "--race-legs 0" in message and "drop --budget" in message


def test_budgets_round_up_to_figures_one_would_type():
    assert [readable(s) for s in (0.5, 30, 30.2, 61, 299, 301, 601)] == [5, 30, 35, 70, 300, 330, 630]


def test_the_plan_needs_its_first_trials_and_the_race_first_legs_and_refuses_a_budget_below():
    """The adaptive search's first trials: PyTorch's defaults and the sweep's first count with workers;
    a race of those two for the legs a verdict needs. No race to run (one config, --race-legs 0): no need."""
    needs = race_needs_of(prepare(TINY, **QUICK))
    assert (needs.trials, needs.racers, needs.legs) == (2, 2, RacePolicy(0.02, 6).first_legs)
    assert race_needs_of(prepare(TINY, **QUICK, race_legs=1)).legs == 1
    with pytest.raises(OptionsError, match="too short for a race") as refused:
        prepare(TINY, **QUICK, budget=needs.total_s - 1)
    figure = int(re.search(r"Give --budget (\d+) or more", str(refused.value)).group(1))
    prepare(TINY, **QUICK, budget=figure)  # the figure given passes
    prepare(TINY, **QUICK, budget=needs.total_s - 1, race_legs=0)  # no race: the budget bounds the screening alone
    assert race_needs_of(prepare(TINY, workers=[0], prefetch=[2])) is None


def test_the_grid_first_trials_end_once_the_defaults_and_a_config_with_workers_ran():
    plan = prepare(TINY, **QUICK, search="grid")
    first = plan.strategy.first_trials()
    assert any(c.is_pytorch_default for c in first) and any(c.num_workers for c in first)
    assert not (any(c.is_pytorch_default for c in first[:-1]) and any(c.num_workers for c in first[:-1]))


# ---------------------------------------------------------------- measured times


def timed(config: TrialConfig, wall_s: float, batches: int = 10, seconds: float = 1.0, leg: int = 0) -> Trial:
    return Trial(config, "ok", blocks=[Block(320, batches, seconds)] * 3, wall_s=wall_s, leg=leg)


def test_a_leg_is_reckoned_from_the_screening_trials_start_up_and_batches():
    trials = [timed(W0, 4.0), timed(W1, 5.0, batches=20), timed(W2, 6.0, batches=10), timed(W1, 2.0, leg=1)]
    assert ready_seconds(trials) == pytest.approx(2.0)  # 1, 2 and 3 s before the blocks; the leg's share left out
    # one batch per worker: every 0.1 s (w0), 0.05 s (w1), 0.2 s (w2, a batch every 0.1 s)
    assert round_seconds(trials) == pytest.approx(0.1)
    opts = ScanOptions()
    assert measured_leg_s(opts, trials, 2, 3) == pytest.approx(leg_seconds(opts, 2, 3, ready_s=2.0, round_s=0.1))
    assert ready_seconds([]) is None and measured_leg_s(opts, [], 2, 3) == leg_seconds(opts, 2, 3)


def test_a_leg_measured_is_its_racers_shares_summed():
    legs = [timed(W0, 3.0, leg=1), timed(W1, 3.0, leg=1), timed(W0, 5.0, leg=2), timed(W1, 5.0, leg=2), timed(W0, 9.0)]
    assert mean_leg_s(legs) == pytest.approx(8.0) and mean_leg_s(legs[-1:]) is None


def reserved(trials: list[Trial], **options) -> tuple[scan_mod.Run, float]:
    result = empty_result()
    result.settings.options = ScanOptions(**options)
    result.trials = trials
    plan = SimpleNamespace(result=result, options=result.settings.options, machine=machine_info())
    run = scan_mod.Run(plan, lambda config: config, lambda: None, None)
    return run, scan_mod.race_reserve(run)


def test_the_screening_keeps_the_race_first_legs_once_a_race_is_possible():
    two = [fake_trial(W0, 1000.0), fake_trial(TrialConfig(32, 2, False, 2, True), 1800.0)]
    for t in two:
        t.wall_s = 3.0
    run, keep = reserved(two, budget=60.0)
    assert keep == pytest.approx(MIN_LEGS * measured_leg_s(run.plan.options, two, 2, PAIRS_PER_LEG))
    assert run.fits(2, keep) and not run.fits(2, 60.0 - 2 * 3.0 + 0.5)  # two trials of 3 s and what is kept
    assert reserved(two, budget=None)[1] == 0.0  # no budget: nothing to keep
    assert reserved(two, budget=60.0, race_legs=0)[1] == 0.0  # no race
    assert reserved(two[:1], budget=60.0)[1] == 0.0  # one config: no race possible yet


# ---------------------------------------------------------------- what would narrow a race that stopped wide


def test_a_race_stopped_wide_names_the_legs_and_the_budget_that_would_narrow_it():
    trials = legs_of([[0.12, -0.12, 0.0]] * 3)
    for t in trials:
        t.wall_s = 4.0  # two racers: legs of 8 s
    clock = RaceClock(mean_leg_s(trials), spent_s=50.0, budget=60.0, max_legs=6, closing_s=3.0)
    note = precision_note(trials, W2, 0.05, 3, 3, clock=clock)
    more = int(re.search(r"about (\d+) more legs", note).group(1))
    assert f"--budget {readable(50 + more * 8.0 + 3)}" in note and "a leg takes about 8 s here" in note
    assert ("--race-legs" in note) == (3 + more > 6)
    assert narrowing(2, 3, RaceClock(8.0, 50.0, 60.0, max_legs=4)) == " (--race-legs 5 with --budget 70: a leg takes about 8 s here)"
    assert narrowing(2, 3, RaceClock(8.0, 50.0, None, max_legs=4)) == " (--race-legs 5: a leg takes about 8 s here, about 20 s more)"
    assert narrowing(2, 3, None) == " (--race-legs 5, or a --budget that allows them)"


# ---------------------------------------------------------------- the CLI


def test_the_cli_refuses_a_budget_too_short_for_a_race_before_any_trial(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text('{"an": "earlier scan"}')
    for path in (tmp_path / "new.json", kept):
        before = path.read_bytes() if path.exists() else None
        got = CliRunner().invoke(app, ["scan", TINY, "--workers", "0,1", "--budget", "3", "--json", str(path)],
                                 env={"COLUMNS": "200"})
        text = " ".join(got.output.split())
        assert got.exit_code == 2, got.output
        assert "--budget 3 s is too short for a race" in text and "--race-legs 0" in text
        assert re.search(r"Give --budget \d+ or more", text) and "Traceback" not in text
        assert (path.read_bytes() if path.exists() else None) == before  # nothing written: no trial ran


# ---------------------------------------------------------------- a real scan


@pytest.mark.slow
def test_a_scan_within_a_budget_that_fits_races_and_keeps_to_it(tmp_path):
    """More configs than the budget screens: the screening stops where the race's first legs would no
    longer fit, the race runs them, and no trial or leg starts past the budget (read from the scan's own
    clock as each starts: a timing of this shared machine's pace would make the test flaky)."""
    budget = 20.0  # the least the plan allows here: the search, left alone, would run about 25 s
    starts = StartTimes()
    result = loadtune.scan(TINY, json_path=tmp_path / "s.json", workers=[0, 1, 2, 4], prefetch=[2, 4], warmup=0.2,
                           block_time=0.2, budget=budget, diagnose=False, observer=starts)
    legs = RacePolicy(0.02, 6).legs_run(result.trials)
    assert legs >= MIN_LEGS, result.notes
    stopped = [s.why for s in result.skipped if s.what.endswith("more trials")]
    assert all("for the race's first legs" in why for why in stopped), stopped  # if cut, cut for the race
    assert starts.race and starts.trials, (starts.race, starts.trials)
    assert max(starts.race + starts.trials) < budget, (starts.race, starts.trials)


class StartTimes(scan_mod.ScanObserver):
    """When each trial and race leg started, in seconds since the scan started."""

    def __init__(self) -> None:
        self.zero, self.trials, self.race = 0.0, [], []

    def scan_started(self, result, planned, budget) -> None:
        self.zero = time.monotonic()

    def trial_started(self, index, config, round_) -> None:
        self.trials.append(time.monotonic() - self.zero)

    def race_started(self, leg, configs) -> None:
        self.race.append(time.monotonic() - self.zero)
