"""The race: contenders' loaders alive together, a process each, their short blocks taking turns. Its
decisions as pure functions over seeded simulations (drift the loaders share, block noise, a 10%
difference, identical configs), the legs' orchestration with simulated legs, then a real race."""

import json
import math
import random
import sys
from dataclasses import replace

import pytest
from conftest import SPECS, empty_result, fake_trial, quick_request

from loadtune.analysis.comparison import SLOWER, TIED, UNDECIDED, Comparison, after_more
from loadtune.analysis.race import (MIN_LEGS, joined_note, PAIRS_PER_LEG, WIDE, RacePolicy, legs_to, next_leg, precision_note, pair_logs,
                                    race_order, race_ratio, relative_to, standing_of, verdict)
from loadtune.analysis.recommend import recommend
from loadtune.engine.race import RaceRun, ending_note, race
from loadtune.engine.trial.paired import race_orders
from loadtune.model.config import TrialConfig
from loadtune.model.estimate import t975
from loadtune.model.trial import Block, Trial
from loadtune.analysis.race import MAX_RACERS
from loadtune.search.race import challenger, entrants

W0, W1, W2, W4 = (TrialConfig(32, w, False, 2 if w else None, bool(w)) for w in (0, 1, 2, 4))
FLOOR = 0.02


def simulated_leg(rates: dict, number: int, rng: random.Random, pairs: int = 4, block_noise: float = 0.04,
                  drift: float = 0.05, process: float = 0.0, pace: float = 1.0) -> list[Trial]:
    """One leg: a shared random walk of the machine's pace, independent noise per block, (``process``)
    a level each config's loaders land on in this process, and (``pace``) the speed the whole machine
    runs at during this leg, every config alike."""
    levels = {c: pace * math.exp(rng.gauss(0, process)) for c in rates}
    trials = {c: Trial(c, "ok", leg=number) for c in rates}
    pace = 0.0
    for order in race_orders(len(rates), pairs, rng.randrange(1 << 30)):
        configs = list(rates)
        for i in order:
            pace += rng.gauss(0, drift)
            c = configs[i]
            r = rates[c] * levels[c] * math.exp(pace + rng.gauss(0, block_noise))
            trials[c].blocks.append(Block(max(1, int(r * 0.25)), 8, 0.25))
    # blocks of one turn share an index: reorder each config's blocks by turn (they were appended in turn order)
    return list(trials.values())


def race_trials(rates: dict, legs: int, seed: int, **kw) -> list[Trial]:
    rng = random.Random(seed)
    return [t for n in range(1, legs + 1) for t in simulated_leg(rates, n, rng, **kw)]


def test_the_turns_come_in_pairs_a_shuffled_order_then_its_reverse():
    orders = list(race_orders(4, 3, seed=1))
    assert len(orders) == 6
    for first, second in zip(orders[::2], orders[1::2]):
        assert sorted(first) == [0, 1, 2, 3] and second == tuple(reversed(first))
    assert len({orders[0], orders[2], orders[4]}) > 1  # shuffled, not one fixed order


def test_a_turn_pair_is_the_mean_log_ratio_of_its_two_turns_and_needs_both():
    a, b = Trial(W2, "ok", leg=1), Trial(W1, "ok", leg=1)
    a.blocks = [Block(200, 1, 1.0), Block(300, 1, 1.0), Block(100, 1, 1.0)]
    b.blocks = [Block(100, 1, 1.0), Block(100, 1, 1.0), Block(100, 1, 1.0)]
    assert pair_logs(a, b) == pytest.approx([(math.log(2) + math.log(3)) / 2])  # the third turn has no partner


def test_shared_drift_cancels_and_a_10_percent_difference_is_resolved():
    """Drift several times the difference, shared by the loaders: 10% apart is told apart in 20 of 20."""
    slower = 0
    for seed in range(20):
        trials = race_trials({W4: 1100.0, W2: 1000.0}, legs=4, seed=seed, drift=0.08)
        v = verdict(trials, FLOOR)
        slower += v.leader == W4 and v.standing(W2).status == SLOWER
    assert slower == 20


@pytest.mark.parametrize("block_noise, ties, undecided", [(0.04, 0, 35), (0.01, 16, 0)])
def test_identical_configs_are_never_told_apart_and_the_cheaper_is_picked_where_they_tie(block_noise, ties, undecided):
    """Tied (the whole interval within the floor): the cheaper is picked; undecided (an interval reaching
    past the floor, however near 1 its middle): the leader, whichever that is, and the reason says so.
    Blocks spread ±4% leave three legs' intervals wider than the floor nearly always; ±1%, half inside it."""
    different = tied = unsure = 0
    for seed in range(40):
        trials = race_trials({W4: 1000.0, W2: 1000.0}, legs=3, pairs=5, seed=seed, drift=0.03, block_noise=block_noise)
        v = verdict(trials, FLOOR)
        other = next(s for s in v.standings if s.config != v.leader)
        different += other.status == SLOWER
        rec = recommend(trials, FLOOR)
        if other.status == TIED:
            tied += 1
            assert rec.config == W2 and 1 - FLOOR <= other.ratio.low and other.ratio.high <= 1 / (1 - FLOOR)
        elif other.status == UNDECIDED:
            unsure += 1
            assert rec.config == v.leader and "undecided" in rec.reason and other.ratio.text() in rec.reason
    assert different <= 1 and tied >= ties and unsure >= undecided


@pytest.mark.parametrize("process", [0.0, 0.01, 0.04])
def test_the_interval_covers_the_true_ratio_when_processes_differ_too(process):
    """95% intervals over turn pairs hold the true ratio at least 90% of the time, also when each leg's
    process puts a loader at a level of its own (0.04: as large as the blocks' noise; about 92% then,
    95% without one)."""
    held = 0
    runs = 300
    for seed in range(runs):
        trials = race_trials({W4: 1150.0, W2: 1000.0}, legs=4, seed=seed, process=process)
        r = race_ratio(trials, W4, W2)
        held += r.low <= 1.15 <= r.high
    assert held >= 0.9 * runs


def known(value: float, se: float, pairs: int = 10, df: int = 9) -> Comparison:
    """A ratio known to a standard error ``se`` of its log, with ``df`` degrees of freedom."""
    half = t975(df) * se
    return Comparison(value, value * math.exp(-half), value * math.exp(half), pairs, 2, se=se, df=df)


def test_standing_against_the_leader():
    from loadtune.analysis.race import Standing
    assert standing_of(known(0.90, 0.013), FLOOR) == SLOWER
    assert standing_of(known(0.995, 0.005), FLOOR) == TIED  # the two one-sided bounds decide
    assert Standing(W2, standing_of(known(0.97, 0.01), FLOOR), known(0.97, 0.01)).status == UNDECIDED
    assert standing_of(known(0.99, 0.02), FLOOR) == UNDECIDED  # its middle within the floor, its interval not
    assert standing_of(None, FLOOR) == UNDECIDED


@pytest.mark.parametrize("value, low, high, status", [
    (1.00, 0.76, 1.31, UNDECIDED),  # a point ratio of 1 is no tie: the interval reaches far past the floor
    (0.99, 0.98, 1.005, TIED),  # the whole interval within the floor
    (0.99, 0.979, 1.001, UNDECIDED),  # below 1 - floor by a hair
    (0.99, 0.98, 1.5, UNDECIDED),  # it could be far faster than the leader: no tie either
    (1.01, 0.99, 1.0 / 0.98, TIED),  # the upper edge, 1 / (1 - floor), is within the floor
    (1.01, 0.99, 1.03, UNDECIDED),
    (0.90, 0.85, 0.97, SLOWER),
])
def test_a_tie_is_an_interval_inside_the_floor_on_both_sides_of_1(value, low, high, status):
    r = Comparison(value, low, high, 9, 3)
    assert standing_of(r, FLOOR) == status
    flipped = Comparison(1 / value, 1 / high, 1 / low, 9, 3)  # the leader against the config: the same tie
    assert (standing_of(flipped, FLOOR) == TIED) == (status == TIED)


def race_read(logs: list[float], legs: int = 3) -> list[Trial]:
    """Screening runs of W0 and W4 alike, then ``legs`` legs whose turn pairs read W0 / W4 as ``logs``."""
    return [fake_trial(W0, 1000.0), fake_trial(W4, 1000.0)] + legs_of([logs] * legs, W0, W4)


def test_a_race_that_ends_undecided_picks_the_leader_and_says_undecided_with_the_interval():
    """1.00x (0.76-1.31): its middle within the floor, its interval not. The cheaper config (here the
    defaults, as on the dataset that picked w0 at 0.79x of the best) is not picked by default: the
    leader is, and the reason names the undecided config with its interval."""
    m = -0.003  # W4 leads by a hair
    trials = race_read([m + 0.41, m - 0.41, m])
    v = verdict(trials, FLOOR)
    w0 = v.standing(W0)
    assert v.leader == W4 and w0.status == UNDECIDED and w0.ratio.text() == "1.00× (0.76–1.31)"
    rec = recommend(trials, FLOOR)
    assert rec.config == W4 and rec.tied == [W4] and rec.best == W4
    assert "undecided" in rec.reason and f"{W0.label()} 1.00× (0.76–1.31)" in rec.reason
    assert "tied" not in rec.reason and "cheapest" not in rec.reason


def test_a_race_that_ties_within_the_floor_picks_the_cheaper_config():
    m = -0.0076
    trials = race_read([m + 0.018, m - 0.018, m])
    v = verdict(trials, FLOOR)
    r = v.standing(W0).ratio
    assert v.leader == W4 and v.standing(W0).status == TIED and (r.value, r.low, r.high) == pytest.approx((0.99, 0.98, 1.005), abs=0.003)
    rec = recommend(trials, FLOOR)
    assert rec.config == W0 and set(rec.tied) == {W0, W4} and rec.best == W4
    assert "tied" in rec.reason and "cheapest" in rec.reason and "undecided" not in rec.reason


def test_the_leader_and_the_undecided_race_on():
    trials = race_trials({W4: 1000.0, W2: 990.0, W1: 600.0}, legs=1, seed=3, pairs=4, block_noise=0.05)
    v = verdict(trials, FLOOR)
    assert v.leader in (W4, W2) and v.standing(W1).status == SLOWER
    assert W1 not in next_leg(v) and v.leader in next_leg(v)
    assert race_order(trials, FLOOR)[-1] == W1
    assert set(relative_to(trials, W2)) == {W4, W1}


def test_a_decided_config_whose_interval_decides_nothing_races_on():
    """Two legs that disagree give a t(1) interval: slower, but 0.56x (0.35-0.87); it races another leg
    when the race asks for intervals within +-10%, and not when its interval is that tight."""
    from loadtune.analysis.race import LEADER, RaceVerdict, Standing
    loose = RaceVerdict(W2, [Standing(W2, LEADER, None), Standing(W1, SLOWER, Comparison(0.56, 0.35, 0.87, 6, 2))])
    assert next_leg(loose) == [] and next_leg(loose, 0.10) == [W2, W1]
    tight = RaceVerdict(W2, [Standing(W2, LEADER, None), Standing(W1, SLOWER, Comparison(0.56, 0.54, 0.58, 6, 2))])
    assert next_leg(tight, 0.10) == []


def legs_of(logs_by_leg: list[list[float]], a: TrialConfig = W1, b: TrialConfig = W2) -> list[Trial]:
    """Legs whose turn pairs read exactly these log ratios of ``a`` to ``b``."""
    trials = []
    for n, logs in enumerate(logs_by_leg, start=1):
        ta, tb = Trial(a, "ok", leg=n), Trial(b, "ok", leg=n)
        for x in logs:
            ta.blocks += [Block(round(1e6 * math.exp(x)), 1, 1.0)] * 2
            tb.blocks += [Block(1_000_000, 1, 1.0)] * 2
        trials += [ta, tb]
    return trials


def test_a_third_leg_narrows_two_disagreeing_legs_a_lot_and_a_steady_spread_slowly():
    """Two legs whose means disagree leave one degree of freedom: ±1% pairs around legs 6% apart give an
    interval of about ±30%, which a third leg cuts by more than half. Pairs spread ±12% in three legs
    that agree give ±8%, which takes several more legs to bring within ±5%."""
    disagree = race_ratio(legs_of([[-0.03, -0.02, -0.04], [0.03, 0.02, 0.04]]), W1, W2)
    assert disagree.df == 1 and disagree.between > 0 and disagree.halfwidth > 0.2
    assert after_more(disagree, 3, 1) < disagree.halfwidth / 2 and 2 <= legs_to(disagree, 0.05, 3) <= 6
    steady = race_ratio(legs_of([[0.12, -0.12, 0.0], [0.12, -0.12, 0.0], [0.12, -0.12, 0.0]]), W1, W2)
    assert steady.between == 0 and steady.df == 8 and 0.07 < steady.halfwidth < 0.10
    assert 0.75 * steady.halfwidth < after_more(steady, 3, 1) < steady.halfwidth
    assert 3 <= legs_to(steady, 0.05, 3) <= 8 and legs_to(steady, 0.10, 3) == 0
    assert legs_to(steady, 0.001, 3) is None  # past what more legs can do
    note = precision_note(legs_of([[0.12, -0.12, 0.0], [0.12, -0.12, 0.0], [0.12, -0.12, 0.0]]), W2, 0.05, 3, 3)
    assert W1.label() in note and "more legs would bring it within ±5%" in note and "--race-legs" in note
    hopeless = precision_note(legs_of([[0.9, -0.9, 0.0], [0.9, -0.9, 0.0], [0.9, -0.9, 0.0]]), W2, 0.05, 3, 3)
    assert "more legs would barely narrow it" in hopeless and "loadtune doctor" in hopeless  # where to look for why


def test_the_pick_races_on_with_a_config_whose_ratio_to_it_is_wide():
    """The leader W4, the pick W2 (tied with it and cheaper): W1, decided slower than the leader, races on
    with the pick because its ratio to the pick (the figure the table prints) is known only to ±30%, and
    a third leg would narrow it; known to ±2%, nobody races on."""
    from loadtune.analysis.race import LEADER, RaceVerdict, Standing
    v = RaceVerdict(W4, [Standing(W4, LEADER, None), Standing(W2, TIED, None), Standing(W1, SLOWER, None)])
    wide = race_ratio(legs_of([[-0.73, -0.72, -0.74], [-0.67, -0.68, -0.66]]), W1, W2)
    tight = race_ratio(legs_of([[-0.70, -0.71, -0.69], [-0.70, -0.69, -0.71]]), W1, W2)
    assert wide.halfwidth > 0.2 and tight.halfwidth < 0.05
    assert next_leg(v, 0.05, FLOOR, 3, W2, {W1: wide, W4: tight}) == [W4, W2, W1]
    assert next_leg(v, 0.05, FLOOR, 3, W2, {W1: tight, W4: tight}) == []
    assert next_leg(v, 0.05, FLOOR, 3, W2, {W1: tight, W4: wide}) == [W4, W2]  # the leader's own ratio to the pick


def test_the_gain_over_the_baseline_races_on_toward_ten_percent_where_five_is_out_of_reach():
    """The pick W2's ratio to the defaults W0, the headline gain, known to ±15% after two legs: ±5% would
    take nine more legs, ±10% two, so with four left the pair races on; any other config with that ratio
    rests, and with no legs left so does the baseline."""
    from loadtune.analysis.race import GAIN_WIDE, LEADER, RaceVerdict, Standing
    v = RaceVerdict(W2, [Standing(W2, LEADER, None), Standing(W0, SLOWER, None), Standing(W1, SLOWER, None)])
    gain = race_ratio(legs_of([[0.15, -0.15, 0.0], [0.15, -0.15, 0.0]], W0, W2), W0, W2)
    assert GAIN_WIDE < gain.halfwidth < 0.2
    assert next_leg(v, WIDE, FLOOR, 3, W2, {W0: gain}, legs_left=4) == []  # not the baseline: it rests
    assert next_leg(v, WIDE, FLOOR, 3, W2, {W0: gain}, legs_left=4, baseline=W0) == [W2, W0]
    assert next_leg(v, WIDE, FLOOR, 3, W2, {W0: gain}, legs_left=1, baseline=W0) == [W2, W0]  # the last leg narrows it
    assert next_leg(v, WIDE, FLOOR, 3, W2, {W0: gain}, legs_left=0, baseline=W0) == []
    within = race_ratio(legs_of([[0.08, -0.08, 0.0], [0.08, -0.08, 0.0]], W0, W2), W0, W2)
    assert WIDE < within.halfwidth <= GAIN_WIDE and next_leg(v, WIDE, FLOOR, 3, W2, {W0: within}, legs_left=1, baseline=W0) == []


def test_a_wide_gain_races_every_leg_that_narrows_it_even_where_ten_percent_is_out_of_reach():
    """Three legs of the README example's pick W2 against the defaults W0 that disagree (0.66×, 0.79×,
    0.66×, as a scan on the 2-core VM read them): a t(3) interval, ±21%. The three legs left cannot bring
    it within ±10%, which rested it before; they cut it to about ±10-11%, so it races on. A gain whose
    spread is its turns' own, measured in ten legs, is narrowed by under a tenth by one more: it rests."""
    from loadtune.analysis.race import GAIN_WIDE, LEADER, RaceVerdict, Standing, gain_worth_a_leg, worth_a_leg
    v = RaceVerdict(W2, [Standing(W2, LEADER, None), Standing(W0, SLOWER, None)])
    disagree = race_ratio(legs_of([[-0.516, -0.316, -0.416], [-0.336, -0.136, -0.236], [-0.516, -0.316, -0.416]], W0, W2),
                          W0, W2)
    assert 0.15 < disagree.halfwidth < 0.25 and not worth_a_leg(disagree, GAIN_WIDE, PAIRS_PER_LEG, legs_left=3)
    assert gain_worth_a_leg(disagree, PAIRS_PER_LEG, legs_left=3)
    assert next_leg(v, WIDE, FLOOR, 3, W2, {W0: disagree}, legs_left=3, baseline=W0) == [W2, W0]
    steady = race_ratio(legs_of([[0.4, -0.4, 0.0]] * 10, W0, W2), W0, W2)
    assert steady.halfwidth > GAIN_WIDE and after_more(steady, PAIRS_PER_LEG) > 0.9 * steady.halfwidth
    assert next_leg(v, WIDE, FLOOR, 3, W2, {W0: steady}, legs_left=3, baseline=W0) == []


def test_an_undecided_config_that_another_leg_could_not_decide_rests():
    """0.975 with a ±2% interval sits on the 2% floor: three more turn pairs cannot move either test past
    it, so it rests (and is picked as when the legs run out); 0.95 with twice that spread could be called
    slower after one more leg, and races on; so does one whose interval is wider than ``wide``."""
    from loadtune.analysis.race import LEADER, RaceVerdict, Standing, could_decide
    def ratio(value, se):
        return known(value, se, pairs=6, df=5)

    on_the_floor, behind = ratio(0.975, 0.008), ratio(0.95, 0.016)
    assert standing_of(on_the_floor, FLOOR) == UNDECIDED == standing_of(behind, FLOOR)
    assert not could_decide(on_the_floor, FLOOR, 3) and could_decide(behind, FLOOR, 3)
    assert could_decide(on_the_floor, FLOOR, 300)  # enough pairs decide anything
    # 1.025 with ±2%: its interval clears 1 - floor but sits on the band's upper edge, 1 / (1 - floor): no tie,
    # and three more pairs could not make one; a ratio of 1.00 as tight could be tied after them
    on_the_top = ratio(1.025, 0.008)
    assert standing_of(on_the_top, FLOOR) == UNDECIDED and on_the_top.low >= 1 - FLOOR
    assert not could_decide(on_the_top, FLOOR, 3) and could_decide(ratio(1.0, 0.008), FLOOR, 3)
    v = RaceVerdict(W4, [Standing(W4, LEADER, None), Standing(W2, UNDECIDED, on_the_floor), Standing(W1, UNDECIDED, behind)])
    assert next_leg(v) == [W4, W2, W1]  # without a floor every undecided config races on, as the live race asks
    assert next_leg(v, 0.10, FLOOR, 3) == [W4, W1]
    wide = RaceVerdict(W4, [Standing(W4, LEADER, None), Standing(W2, UNDECIDED, ratio(0.975, 0.05))])
    assert next_leg(wide, 0.10, FLOOR, 3) == [W4, W2]
    assert could_decide(None, FLOOR, 3)


def test_the_pick_is_the_cheapest_tied_with_the_leader_and_never_an_undecided_one():
    screening = [fake_trial(c, r) for c, r in ((W0, 500.0), (W2, 1000.0), (W4, 1000.0))]
    tied = screening + race_trials({W4: 1000.0, W2: 1000.0, W0: 500.0}, legs=5, seed=1, drift=0.03, block_noise=0.02)
    rec = recommend(tied, FLOOR)
    assert rec.config == W2 and set(rec.tied) == {W2, W4}
    assert rec.baseline == W0 and rec.speedup == pytest.approx(2.0, rel=0.05) and rec.speedup_pairs >= 10
    assert rec.speedup_low <= rec.speedup <= rec.speedup_high
    # W2 5% slower than W4 and not yet told apart: W4, the leader, is the pick
    behind = screening + race_trials({W4: 1050.0, W2: 1000.0}, legs=1, seed=2, pairs=3, block_noise=0.05)
    v = verdict(behind, FLOOR)
    assert v.leader == W4 and v.standing(W2).status == UNDECIDED
    rec = recommend(behind, FLOOR)
    assert rec.config == W4 and rec.tied == [W4] and "undecided" in rec.reason and v.standing(W2).ratio.text() in rec.reason


def test_the_race_takes_the_screenings_contenders_and_the_defaults_within_memory():
    result = empty_result()
    result.trials = [fake_trial(c, r) for c, r in ((W0, 500.0), (W1, 800.0), (W2, 1000.0), (W4, 1010.0))]
    got = entrants(result, FLOOR, memory_limit=10 * 2**30)
    assert W2 in got.configs and W4 in got.configs and W0 in got.configs and len(got.configs) <= MAX_RACERS
    tight = entrants(result, FLOOR, memory_limit=700 * 2**20)  # two loaders' screening peaks fit, not three
    assert len(tight.configs) == 2 and tight.left_out


def test_a_pick_far_ahead_races_the_best_of_the_rest():
    """``num_workers=0`` (the defaults) six times faster than any loader with workers is the only
    contender: the best other races it, so its lead is paired and its runs repeated; alone, it
    would not race at all."""
    result = empty_result()
    result.trials = [fake_trial(c, r) for c, r in ((W0, 12000.0), (W1, 1500.0), (W2, 1900.0))]
    assert entrants(result, FLOOR, memory_limit=10 * 2**30).configs == [W0, W2]
    assert entrants(result, FLOOR, memory_limit=10 * 2**30, runner_up_too=False).configs == []  # autotune's
    result.trials = result.trials[:1]
    assert entrants(result, FLOOR, memory_limit=10 * 2**30).configs == []


def test_the_runner_up_is_the_cheapest_of_the_rest_that_nothing_clearly_beats():
    """Two of the rest within the screening's noise: the cheaper races the pick, whichever read faster
    (a coin toss that, on ``large_tensors``, decided whether every leg started four workers or two);
    one of the rest clearly faster races however many workers it has."""
    result = empty_result()
    result.trials = [fake_trial(c, r) for c, r in ((W0, 12000.0), (W1, 1500.0), (W2, 1900.0), (W4, 1910.0))]
    assert entrants(result, FLOOR, memory_limit=10 * 2**30).configs == [W0, W2]
    result.trials[-1] = fake_trial(W4, 2600.0)
    assert entrants(result, FLOOR, memory_limit=10 * 2**30).configs == [W0, W4]


def simulated_run(rates: dict, seed: int, budget_s: float | None = None, paces: tuple[float, ...] = (1.0,),
                  trials: list[Trial] | None = None, **noise) -> tuple[RaceRun, list[Trial], list]:
    rng = random.Random(seed)
    trials = [] if trials is None else trials
    legs: list = []

    def run_leg(configs, number):
        legs.append(list(configs))
        leg = simulated_leg({c: rates[c] for c in configs}, number, rng, pace=paces[(number - 1) % len(paces)], **noise)
        for t in leg:
            t.wall_s = 1.0
        return leg

    def fits(seconds: float) -> bool:
        return budget_s is None or sum(t.wall_s for t in trials) + seconds <= budget_s

    return RaceRun(run_leg, fits, trials.extend, share_s=1.0), trials, legs


def test_a_leg_that_would_overrun_the_budget_is_not_started_the_first_one_included():
    run, trials, legs = simulated_run({W4: 2000.0, W2: 1000.0, W1: 500.0}, seed=0, budget_s=2.5)
    assert race(trials, [W4, W2, W1], RacePolicy(FLOOR, 4), run) == "budget" and legs == []  # 3 configs x 1 s > 2.5 s
    run, trials, legs = simulated_run({W4: 2000.0, W2: 1000.0, W1: 500.0}, seed=0, budget_s=4.0)
    assert race(trials, [W4, W2, W1], RacePolicy(FLOOR, 4), run) == "budget" and len(legs) == 1  # the second would not fit


def test_the_race_stops_once_decided_but_not_before_every_config_ran_two_legs():
    """Decided by its first leg already, the race still runs every config a second leg (fresh processes:
    what differs between processes enters the intervals), then races on only those known too loosely,
    and stops; with one leg allowed, one leg."""
    run, trials, legs = simulated_run({W4: 2000.0, W2: 1000.0, W1: 500.0}, seed=0)
    assert verdict(simulated_leg({W4: 2000.0, W2: 1000.0, W1: 500.0}, 1, random.Random(0)), FLOOR).decided
    how = race(trials, [W4, W2, W1], RacePolicy(FLOOR, 5), run)
    assert how == "decided" or (how == "legs" and len(legs) == 5)  # decided, then raced to a precision
    assert legs[:MIN_LEGS] == [[W4, W2, W1]] * MIN_LEGS and verdict(trials, FLOOR).decided
    # then the leader with those whose interval to it is wider than WIDE, until none is that the legs left
    # could bring within it, or the legs are spent
    assert all(leg[0] == W4 for leg in legs[MIN_LEGS:])
    left = 5 - len(legs)
    for s in verdict(trials, FLOOR).standings:
        if s.ratio is not None and s.ratio.halfwidth > WIDE:
            assert left == 0 or legs_to(s.ratio, WIDE, PAIRS_PER_LEG) is None or legs_to(s.ratio, WIDE, PAIRS_PER_LEG) > left
    run, trials, legs = simulated_run({W4: 2000.0, W2: 1000.0}, seed=0)
    race(trials, [W4, W2], RacePolicy(FLOOR, 1), run)
    assert len(legs) == 1


def test_the_race_ends_at_its_legs_and_says_who_was_undecided():
    run, trials, legs = simulated_run({W4: 1030.0, W2: 1000.0}, seed=4)
    how = race(trials, [W4, W2], RacePolicy(FLOOR, 2), run)
    v = verdict(trials, FLOOR)
    assert not v.decided and how == "legs" and len(legs) == 2
    assert "undecided" in ending_note(how, v, 2) and "not picked over the leader" in ending_note(how, v, 2)


def test_the_race_rests_configs_another_leg_could_not_decide_and_says_so():
    """1% apart sits on the 2% floor: after its two legs no third leg could decide, so the race ends
    with legs to spare and says why; undecided, the cheaper config is not picked by default: the leader
    is, and the reason names the undecided one with its interval."""
    run, trials, legs = simulated_run({W4: 1010.0, W2: 1000.0}, seed=4)
    how = race(trials, [W4, W2], RacePolicy(FLOOR, 5), run)
    v = verdict(trials, FLOOR)
    assert how == "futile" and len(legs) < 5 and not v.decided
    assert "another leg could not decide" in ending_note(how, v, 5)
    other = next(s for s in v.standings if s.config != v.leader)
    assert other.status == UNDECIDED and other.ratio.value >= 1 - FLOOR  # its middle within the floor: once picked
    rec = recommend(trials, FLOOR)
    assert rec.config == v.leader and "undecided" in rec.reason and other.ratio.text() in rec.reason


def screened_apart() -> list[Trial]:
    """The README example's screening on a machine whose pace wandered: w2 and w4, tied in long loops
    (396 and 400 samples/s), read 335 and 479 alone, minutes apart; each run's blocks agreed within it."""
    return [fake_trial(c, r) for c, r in ((W0, 300.0), (W1, 155.0), (W2, 335.0), (W4, 479.0))]


WANDERING = (0.75, 1.25)  # the machine's pace in alternate legs
STEADY = (1.0,)


@pytest.mark.parametrize("paces", [STEADY, WANDERING])
def test_a_cheaper_config_the_screening_left_out_joins_where_the_legs_show_runs_landing_far_apart(paces):
    """The screening alone calls w2 slower than w4, so the race takes w4 and the defaults. Where its legs
    then show runs landing far apart (the machine at 0.75x its pace in one leg, 1.25x in the next), w2
    is not clearly slower any more, and, cheaper than the pick, it joins (before w1, which read slower
    still); where the legs agree with the screening (a steady machine), nothing joins."""
    result = empty_result()
    result.trials = screened_apart()
    assert entrants(result, FLOOR, memory_limit=10 * 2**30).configs == [W4, W0]
    rng = random.Random(3)
    result.trials += [t for n in (1, 2) for t in simulated_leg({W4: 479.0, W0: 300.0}, n, rng, pace=paces[(n - 1) % len(paces)])]
    joins = challenger(result, [W4, W0], W4, FLOOR, memory_limit=10 * 2**30)
    assert joins == (W2 if paces == WANDERING else None)
    assert challenger(result, [W4, W0], W4, FLOOR, memory_limit=700 * 2**20) is None  # neither fits beside them
    assert challenger(result, [W4, W0], W1, FLOOR, memory_limit=10 * 2**30) is None  # none cheaper than a w1 pick


@pytest.mark.parametrize("heap_rate, joins", [(310.0, False), (700.0, True)])
def test_the_heap_setting_of_a_loader_the_race_met_joins_only_where_it_moves_that_loader(heap_rate, joins):
    """On a wandering machine the defaults raced beside w4; the same loader with the heap kept, cheaper
    than w4 and not clearly slower alone, joins only where keeping the heap moved it (2.3x): at 1.03x
    its legs would measure the loader the race already met."""
    heap = replace(W0, heap=64 * 2**20)
    result = empty_result()
    result.trials = [fake_trial(W4, 479.0), fake_trial(W0, 300.0), fake_trial(heap, heap_rate)]
    rng = random.Random(3)
    result.trials += [t for n in (1, 2) for t in simulated_leg({W4: 479.0, W0: 300.0}, n, rng, pace=WANDERING[n - 1])]
    assert challenger(result, [W4, W0], W4, FLOOR, memory_limit=10 * 2**30) == (heap if joins else None)


def test_a_config_that_joins_races_its_own_first_legs_and_is_picked_where_it_ties():
    """On a wandering machine, w2 joins the race after its first legs and races two of its own beside the
    leader and PyTorch's defaults (the baseline: picked, its gain over them must be side by side from its
    first leg); tied with w4 side by side, it is the pick, and a note says it joined. Only one joins (w1,
    cheaper still, does not follow it): each costs legs. The turns' own noise is low here: how precise
    a race's ratios are is other tests' matter."""
    result = empty_result()
    result.trials = screened_apart()
    truth = {W4: 400.0, W2: 400.0, W0: 280.0, W1: 200.0}
    run, trials, legs = simulated_run(truth, seed=5, paces=WANDERING, trials=result.trials, block_noise=0.01, drift=0.01)
    run.pick = lambda: recommend(result.trials, FLOOR).config
    run.challenger = lambda racing: challenger(result, racing, run.pick(), FLOOR, 10 * 2**30)
    run.baseline = lambda: W0
    race(trials, [W4, W0], RacePolicy(FLOOR, 6), run)
    assert legs[:MIN_LEGS] == [[W4, W0]] * MIN_LEGS
    joined = [n for n, leg in enumerate(legs) if W2 in leg]
    assert len(joined) >= MIN_LEGS and joined[0] >= MIN_LEGS and all(W4 in legs[n] for n in joined)
    assert all(W0 in legs[n] for n in joined[:MIN_LEGS])  # the baseline beside it from its first leg
    rec = recommend(result.trials, FLOOR)
    assert rec.config == W2 and not any(W1 in leg for leg in legs)
    assert rec.baseline == W0 and rec.speedup_pairs >= MIN_LEGS * 4  # the gain from its own legs, side by side
    assert "w2 pf2 persist bs32 (from leg 3)" in joined_note(trials, [W4, W0])
    assert joined_note(trials, [W4, W0, W2]) is None


def faulted(trial: Trial, share: float) -> Trial:
    """``trial`` with its main process taking ``share`` of each 10 MiB batch's pages fresh."""
    from loadtune.model.batch import BatchInfo
    trial.batch = BatchInfo(10 * 2**20)
    trial.blocks = [replace(b, faulted_bytes=int(share * b.batches * 10 * 2**20)) for b in trial.blocks]
    return trial


@pytest.mark.parametrize("fresh", [False, True])
def test_runs_alone_that_a_wandering_machine_moved_do_not_unsettle_a_race_unless_a_state_could(fresh):
    """w0 read 0.70x w2 alone and ties it side by side, while the machine's pace moved 0.75x-1.25x between
    legs (w4's runs show it). Where w0 collated in the heap, that spread is the machine's, and the two
    readings agree within it: the race decides. Where w0 took each batch's pages fresh, the gap can be its
    allocator's state: judged by its runs alone, it is unsettled, as before."""
    trials = [fake_trial(c, r) for c, r in ((W0, 335.0), (W2, 479.0), (W4, 300.0))]
    rng = random.Random(2)
    trials += [t for n in (1, 2, 3) for t in simulated_leg({W2: 400.0, W0: 400.0, W4: 280.0}, n, rng, block_noise=0.02,
                                                          pace=WANDERING[(n - 1) % 2])]
    trials = [faulted(t, 1.0 if fresh else 0.0) if t.config == W0 else t for t in trials]
    v = verdict(trials, FLOOR)
    standing = v.standing(W0) if v.leader == W2 else v.standing(W2)
    assert (standing.unsettled is not None) == fresh, standing.unsettled


def test_a_pick_that_never_met_the_baseline_races_it_next():
    """w4 and the defaults raced two legs; w2 joined for two of its own beside w4 alone and ties it, so it
    is the pick, and its gain over the defaults would be a product of two legs' ratios: the next leg puts
    it beside them. Without the baseline named, the race is over (w2 tied, the defaults clearly slower)."""
    rng = random.Random(4)
    trials = [t for n in (1, 2) for t in simulated_leg({W4: 400.0, W0: 280.0}, n, rng, block_noise=0.01)]
    trials += [t for n in (3, 4) for t in simulated_leg({W4: 400.0, W2: 400.0}, n, rng, block_noise=0.01)]
    policy = RacePolicy(FLOOR, 8)
    assert policy.racing(trials, [W4, W0], pick=W2) == []
    assert policy.racing(trials, [W4, W0], pick=W2, baseline=W0)[:2] == [W2, W0]


def test_a_resumed_race_goes_on_from_its_legs():
    run, trials, legs = simulated_run({W4: 2000.0, W2: 1000.0}, seed=0)
    race(trials, [W4, W2], RacePolicy(FLOOR, 1), run)  # interrupted after one leg
    assert race(trials, [W4, W2], RacePolicy(FLOOR, 5), run) == "decided" and len(legs) == MIN_LEGS  # its second leg
    assert race(trials, [W4, W2], RacePolicy(FLOOR, 5), run) == "decided" and len(legs) == MIN_LEGS  # nothing left to race


def test_a_screening_trial_times_six_blocks_at_most_after_half_the_warmup_only_where_the_race_follows():
    """The race decides between the contenders, so their screening runs stop at 6 blocks, after half the
    warm-up; without a race the screening's figures decide, and ``--blocks`` and ``--warmup`` hold.
    ``--min-blocks`` always holds."""
    from loadtune.analysis.budget import SCREEN_BLOCKS
    from loadtune.engine.scan import screening
    from loadtune.engine.trial.setup import Timing
    from loadtune.model.settings import ScanOptions

    request = quick_request(W2, Timing(warmup_s=1.0, block_s=0.5, blocks=10, max_s=60.0, min_blocks=3))
    assert screening(request, ScanOptions()).timing.blocks == SCREEN_BLOCKS == 6
    assert screening(request, ScanOptions()).timing.warmup_s == 0.5
    assert screening(request, ScanOptions(race_legs=0)).timing.blocks == 10
    assert screening(request, ScanOptions(race_legs=0)).timing.warmup_s == 1.0
    assert screening(request, ScanOptions(confirm=0)).timing.blocks == 10
    at_least_8 = replace(request, timing=replace(request.timing, min_blocks=8))
    assert screening(at_least_8, ScanOptions()).timing.blocks == 8
    fewer = replace(request, timing=replace(request.timing, blocks=4))
    assert screening(fewer, ScanOptions()).timing.blocks == 4


@pytest.mark.slow
def test_a_real_race_tells_two_workers_from_one_on_a_waiting_dataset():
    """Each sample waits 3 ms: two workers deliver twice what one does. Two legs, each a trial process
    with both loaders alive and their blocks taking turns."""
    from loadtune.engine.race import run_leg
    from loadtune.engine.spec import SpecRef

    one, two = replace(W1, batch_size=8), replace(W2, batch_size=8)
    trials = []
    for number in (1, 2):
        leg = run_leg(SpecRef(str(SPECS / "sleep_dial.py")), quick_request(one), [one, two], number, seed=number)
        assert [t.config for t in leg] == [one, two] and all(t.ok and t.raced and t.leg == number for t in leg)
        assert len(leg[0].blocks) == len(leg[1].blocks) == 2 * PAIRS_PER_LEG  # a block each per turn
        trials += leg
    v = verdict(trials, FLOOR)
    assert v.leader == two and v.standing(one).status == SLOWER
    r = race_ratio(trials, one, two)
    assert r.pairs == 2 * PAIRS_PER_LEG and r.groups == 2
    assert 0.3 < r.value < 0.7 and r.low <= r.value <= r.high


def test_a_leg_that_outlasts_its_sides_time_ends_with_whole_blocks():
    """A leg of more turns than a side's time allows (a slow loader's turns are long: on a disk-bound
    array, eight workers' bursts took 10 s a turn) ends where the time does. No block is timed after
    it: before, every turn after the deadline returned one batch already made, in milliseconds, and
    a leg read 10,000 samples/s beside its own 100."""
    from loadtune.engine.race import run_leg
    from loadtune.engine.spec import SpecRef
    from loadtune.engine.trial.setup import Timing

    one, two = replace(W1, batch_size=8), replace(W2, batch_size=8)
    timing = Timing(warmup_s=0.1, block_s=0.2, blocks=3, max_s=2.5)  # 0.1 s turns: 40 pairs of two sides take 16 s
    leg = run_leg(SpecRef(str(SPECS / "sleep_dial.py")), quick_request(one, timing), [one, two], 1, seed=1, pairs=40)
    assert all(t.ok for t in leg), [t.error for t in leg]
    for t in leg:
        assert 2 <= len(t.blocks) < 80
        assert all(b.seconds >= 0.09 for b in t.blocks), [round(b.seconds, 3) for b in t.blocks]
    assert race_ratio(leg, one, two) is not None


@pytest.mark.slow
def test_a_race_reads_its_loaders_memory_between_blocks_never_during_one(monkeypatch):
    """Reading a tree's PSS takes tens of ms of CPU: taken inside a short block, it came out of that
    block alone, and only of a loader that kept every core busy. Sampled as often as the parent looks
    (every poll), the samples must still all fall between the turns, and some must fall there."""
    import time

    from loadtune.engine.race import run_leg
    from loadtune.engine.spec import SpecRef
    from loadtune.engine.trial import memory
    from loadtune.engine.trial.harness import TrialProcess

    samples, turns = [], []
    real_sample, real_receive, real_start = memory.tree_sample, TrialProcess.receive, TrialProcess.start

    def sample(*args, **kw):
        samples.append(time.monotonic())
        return real_sample(*args, **kw)

    def receive(self, trial, *args, **kw):
        before, started = len(trial.blocks), time.monotonic()
        ending = real_receive(self, trial, *args, **kw)
        if len(trial.blocks) > before:  # a turn: from the word to time a block until the block came back
            turns.append((started, time.monotonic()))
        return ending

    def start(self, on_event):
        real_start(self, on_event)
        self.watch.memory.interval_s, self.watch.memory.timed_share = 0.0, 1.0  # sample at every look

    monkeypatch.setattr(memory, "tree_sample", sample)
    monkeypatch.setattr(TrialProcess, "receive", receive)
    monkeypatch.setattr(TrialProcess, "start", start)
    one, two = replace(W1, batch_size=8), replace(W2, batch_size=8)
    leg = run_leg(SpecRef(str(SPECS / "sleep_dial.py")), quick_request(one), [one, two], 1, seed=1)
    assert all(t.ok for t in leg) and len(turns) == 2 * len(leg[0].blocks)
    assert not [s for s in samples if any(a < s < b for a, b in turns)]
    assert [s for s in samples if turns[0][1] <= s <= turns[-1][0]]  # between the turns


@pytest.mark.slow
def test_a_scan_races_its_contenders_and_states_the_gain_side_by_side(tmp_path):
    """The screening times w0 (PyTorch's defaults), w1 and w2 alone; the race takes w2 and the defaults,
    so the gain over them is a paired ratio: w2 makes about twice what the main process alone does.
    loadtune's yardstick runs after the answer, which it does not change."""
    from loadtune.engine.scan import ScanObserver, scan

    class Answer(ScanObserver):
        yardsticks: int | None = None

        def answer_ready(self, result):
            self.yardsticks = len(result.calibration)

    seen = Answer()
    result = scan(str(SPECS / "sleep_dial.py"), json_path=tmp_path / "r.json", workers=[0, 1, 2], race_legs=3,
                  observer=seen)
    assert seen.yardsticks == 0 and len(result.calibration) == 2
    two, zero = replace(W2, batch_size=8), TrialConfig(8, 0)
    raced = {t.config for t in result.trials if t.raced}
    assert {two, zero} <= raced
    rec = result.recommendation
    assert rec.config == two and rec.baseline == zero and rec.speedup_pairs >= 3
    assert 1.2 < rec.speedup_low <= rec.speedup <= rec.speedup_high and 1.4 < rec.speedup < 3.0


def test_a_progress_line_prints_no_verdict_its_interval_denies():
    """'slower' is printed only beside an interval wholly below the floor, and two legs that disagree
    print no t(1) interval as news."""
    from loadtune.analysis.race import Standing
    from loadtune.report.progress import standing_text
    disagree = race_ratio(legs_of([[-0.30, -0.32, -0.31], [0.10, 0.12, 0.11]]), W1, W2)
    assert disagree.halfwidth > 0.5 and standing_of(disagree, FLOOR) == UNDECIDED
    assert "legs disagree" in standing_text(Standing(W1, UNDECIDED, disagree)) and "–" not in standing_text(Standing(W1, UNDECIDED, disagree))
    for r in (known(0.68, 0.05, df=2), known(0.68, 0.2, df=2), known(0.97, 0.005), known(0.995, 0.004)):
        s = Standing(W1, standing_of(r, FLOOR), r)
        text = standing_text(s)
        if s.status == SLOWER:
            assert r.high < 1 - FLOOR and f"{r.high:.2f})" in text
        if s.status == TIED:
            assert r.low >= 1 - FLOOR
        assert s.status != SLOWER or r.high < 1  # never "slower" beside an interval holding 1.0


@pytest.mark.slow
def test_a_scan_of_large_batches_tries_and_reports_the_heap_setting(tmp_path):
    """40 MiB batches without workers fault in anew: the scan measures the same loader with glibc's
    thresholds set, races it, and reports the setting with the config (no timing asserted)."""
    from loadtune.engine.scan import scan
    from loadtune.engine.trial.load import PROC_STAT
    from loadtune.report.recommendation import recommendation_panel
    from loadtune.report.table import trial_table
    from rich.console import Console

    if not PROC_STAT.exists():
        pytest.skip("page faults are counted on Linux only")
    result = scan(str(SPECS / "large_batches.py"), json_path=tmp_path / "r.json", workers=[0], race_legs=2, seed=1,
                  warmup=0.3, block_time=0.2, blocks=4)  # short blocks: the steps are asserted, not the figures
    heap = [t for t in result.trials if t.config.heap]
    assert heap and all(t.config.num_workers == 0 and t.config.heap >= 2 * 40 * 2**20 for t in heap)
    assert any(t.raced for t in heap)  # raced like any other config
    from loadtune.analysis.footprint import fault_regimes
    from loadtune.analysis.race import STATE_PROCESSES, state_processes_wanted
    by = {c.config: c for c in result.configs}
    defaults = by[result.recommendation.baseline]
    assert state_processes_wanted(result.trials, by, defaults.config) == 0  # seen in enough processes, or no regime
    if sum(t.ok for t in defaults.trials) >= STATE_PROCESSES or fault_regimes(defaults):
        assert any("fresh processes" in n for n in result.notes) or fault_regimes(defaults)
    console = Console(record=True, width=200)
    console.print(trial_table(result))
    console.print(recommendation_panel(result))
    text = console.export_text()
    assert "w0 +MALLOC env bs40" in text  # what the user sets, by its name
    if result.recommendation.config.heap:
        assert f"MALLOC_MMAP_THRESHOLD_={result.recommendation.config.heap}" in text and "MALLOC_TRIM_THRESHOLD_" in text


def test_a_race_reading_its_solo_runs_contradict_is_undecided_and_no_gain_rests_on_it():
    """PyTorch's defaults read 0.4x the two-worker loader side by side where their runs alone read 1.25x
    it: the reading holds only in the processes that took it. The defaults are left undecided (never
    picked), a note says why and the range they ran at, and the gain over them is no 95% interval."""
    from loadtune.analysis.race import unsettled_note
    solo = [fake_trial(W0, 1000.0), fake_trial(W2, 800.0)]
    trials = solo + race_trials({W0: 400.0, W2: 1000.0}, legs=3, seed=2, block_noise=0.02)
    v = verdict(trials, FLOOR)
    assert v.leader == W2 and v.standing(W0).status == UNDECIDED and "disagree beyond both intervals" in v.standing(W0).unsettled
    assert W0 not in next_leg(v, WIDE, FLOOR, PAIRS_PER_LEG)  # another leg in that state settles nothing
    note = unsettled_note(trials, v)
    assert W0.label() in note and "samples/s" in note and "not picked" in note
    rec = recommend(trials, FLOOR)
    assert rec.config == W2 and rec.baseline == W0 and rec.speedup is None and rec.gain_unsettled
    assert rec.speedup_low < rec.speedup_high


@pytest.mark.parametrize("shares, took", [((0.0, 1.0), "0 KiB to 10 MiB"), ((1.0, 2.0), "10 MiB to 20 MiB")])
def test_a_config_that_ran_in_two_states_of_its_allocator_is_not_the_leader(shares, took):
    """A loader without workers whose second leg's process took its pages in another state of its
    allocator than the others: fresh there and not elsewhere, or the batch's pages fresh in all and the
    samples' too in one (glibc gave them back after each batch: 96 or 192 MiB of 96 MiB batches). Its
    ratios rest on that state, so the leader is a config the scan controlled and it stays undecided;
    the note names the pages it took."""
    trials = race_trials({W0: 1100.0, W2: 1000.0}, legs=3, seed=3, block_noise=0.02)
    for t in trials:
        if t.config == W0:
            faulted(t, shares[t.leg == 2])
    v = verdict(trials, FLOOR)
    assert v.leader == W2 and v.standing(W0).status == UNDECIDED and "allocator" in v.standing(W0).unsettled
    assert f"took {took} of fresh pages" in v.standing(W0).unsettled
    assert recommend(trials, FLOOR).config == W2


def test_runs_that_took_their_pages_alike_are_one_state_of_the_allocator():
    """Every leg took 96-106% of each batch fresh: one state (a run's faults wander by a few percent),
    and the config's standing is the race's."""
    trials = race_trials({W0: 1100.0, W2: 1000.0}, legs=3, seed=3, block_noise=0.02)
    for t in trials:
        if t.config == W0:
            faulted(t, 0.96 + 0.05 * (t.leg - 1))
    v = verdict(trials, FLOOR)
    assert v.leader == W0 and v.standing(W2).unsettled is None


def test_the_gain_over_defaults_that_take_fresh_pages_is_the_range_their_runs_span():
    """The pick keeps its batches in the heap; PyTorch's defaults took every batch's pages fresh in
    every run, as their allocator's state in each process decided, a state the scan did not set and a
    training process need not share. The race and their runs alone agree, yet the gain is no 95%
    interval: it is the range their runs span, with the cause. Where the defaults collate in the
    heap too, the race's ratio is the gain, with its interval."""
    heap = replace(W0, heap=64 * 2**20)
    for fresh in (True, False):
        trials = [fake_trial(heap, 1500.0), fake_trial(W0, 500.0)]
        trials += race_trials({heap: 1500.0, W0: 500.0}, legs=2, seed=6, block_noise=0.02)
        trials = [faulted(t, 1.0 if fresh and t.config == W0 else 0.0) for t in trials]
        rec = recommend(trials, FLOOR)
        assert rec.config == heap and rec.baseline == W0
        if fresh:
            assert rec.speedup is None and "10 MiB of fresh pages from the kernel per batch" in rec.gain_unsettled
            assert rec.speedup_low < 3.0 <= rec.speedup_high
        else:
            assert rec.gain_unsettled is None and rec.speedup_pairs and rec.speedup == pytest.approx(3.0, rel=0.05)


def test_defaults_whose_speed_follows_their_allocator_are_timed_in_enough_processes_to_see_its_states():
    """PyTorch's defaults took each batch's pages fresh and the kept heap ran 3x them: their speed is
    the state their allocator took on in each process, which a process draws by chance. Seen in one
    state in three processes, they want three more; once two states showed, or six processes did, none.
    Where keeping the heap does not move them, their states are no regime of their speed: none."""
    from loadtune.analysis.race import STATE_PROCESSES, state_processes_wanted, states_note
    from loadtune.model.results import by_config
    heap = replace(W0, heap=64 * 2**20)

    def wanted(trials):
        by = {c.config: c for c in by_config(trials)}
        return state_processes_wanted(trials, by, W0)

    trials = [fake_trial(heap, 1500.0), fake_trial(W0, 500.0)]
    trials += race_trials({heap: 1500.0, W0: 500.0}, legs=2, seed=6, block_noise=0.02)
    trials = [faulted(t, 1.0 if t.config == W0 else 0.0) for t in trials]
    assert STATE_PROCESSES == 6 and wanted(trials) == 3  # the screening's process and two legs'
    one_state = trials + [faulted(fake_trial(W0, 520.0), 1.0) for _ in range(3)]
    assert wanted(one_state) == 0
    by = {c.config: c for c in by_config(one_state)}
    assert "timed in 6 fresh processes" in states_note(by[W0]) and "one state showed in all of them (" in states_note(by[W0])
    both = trials + [faulted(fake_trial(W0, 300.0), 2.0)]  # the samples' pages fresh too, in that process
    assert wanted(both) == 0
    by = {c.config: c for c in by_config(both)}
    assert "both states showed" in states_note(by[W0]) and "10 MiB to 20 MiB" in states_note(by[W0])
    unmoved = [t for t in trials if t.config != heap] + [faulted(fake_trial(heap, 520.0), 0.0)]
    assert wanted(unmoved) == 0  # the heap kept ran within two runs' spread of them


def test_fresh_pages_that_barely_move_the_defaults_leave_the_gain_an_interval():
    """PyTorch's defaults took a quarter of each batch fresh, but keeping the heap moved them by 4%
    (a loader that computes much per byte, as the README's images): the allocator's state barely moves
    their speed, and the gain of two workers over them is the race's interval. Without the heap
    setting measured (not glibc), the state is taken to move it: the gain is the range."""
    heap = replace(W0, heap=64 * 2**20)
    for measured in (True, False):
        rates = {W2: 1000.0, W0: 500.0, **({heap: 520.0} if measured else {})}
        trials = [fake_trial(c, r) for c, r in rates.items()] + race_trials(rates, legs=2, seed=7, block_noise=0.02)
        trials = [faulted(t, 0.25 if t.config == W0 else 0.0) for t in trials]
        rec = recommend(trials, FLOOR)
        assert rec.config == W2 and rec.baseline == W0
        assert (rec.gain_unsettled is None) == measured, rec.gain_unsettled
        assert rec.speedup_low < 2.0 <= rec.speedup_high


def test_where_the_defaults_win_the_figure_against_workers_is_the_analysis_and_in_the_json():
    trials = [fake_trial(W0, 1500.0), fake_trial(W2, 1000.0)] + race_trials({W0: 1500.0, W2: 1000.0}, legs=2, seed=4,
                                                                           block_noise=0.02)
    rec = recommend(trials, FLOOR)
    assert rec.config == W0 == rec.baseline and rec.versus.config == W2 and rec.versus.pairs >= 6
    assert rec.versus.low < rec.versus.value < rec.versus.high and rec.versus.value == pytest.approx(1.5, rel=0.05)
    from loadtune.model.results import Recommendation
    assert Recommendation.from_dict(json.loads(json.dumps(rec.to_dict()))).versus == rec.versus


def test_a_loader_without_workers_is_tried_with_the_heap_kept_where_glibc_could_map_its_batches():
    from loadtune.model.batch import BatchInfo
    from loadtune.search.allocator import heap_trials
    result = empty_result()
    big, small, workers = fake_trial(W0, 500.0), fake_trial(replace(W0, batch_size=8), 900.0), fake_trial(W2, 800.0)
    big.batch, small.batch, workers.batch = BatchInfo(19 * 2**20), BatchInfo(2048), BatchInfo(19 * 2**20)
    result.trials = [big, small, workers]
    wanted = [p.config for p in heap_trials(result)]
    assert wanted == [replace(W0, heap=64 * 2**20)]  # its run took no fresh pages: the next process may
    assert wanted[0].environment == {"MALLOC_MMAP_THRESHOLD_": str(64 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(256 * 2**20)}
    result.trials.append(fake_trial(wanted[0], 520.0))
    assert heap_trials(result) == []


def test_a_wide_ratio_races_on_where_the_legs_left_reach_the_precision_or_one_more_halves_it():
    from loadtune.analysis.race import worth_a_leg
    disagree = race_ratio(legs_of([[-0.03, -0.02, -0.04], [0.03, 0.02, 0.04]]), W1, W2)
    steady = race_ratio(legs_of([[0.12, -0.12, 0.0], [0.12, -0.12, 0.0], [0.12, -0.12, 0.0]]), W1, W2)
    assert worth_a_leg(disagree, WIDE, PAIRS_PER_LEG, legs_left=1)  # a t(1) interval: one more leg halves it
    assert worth_a_leg(steady, WIDE, PAIRS_PER_LEG, legs_left=8) and not worth_a_leg(steady, WIDE, PAIRS_PER_LEG, legs_left=2)
    assert not worth_a_leg(steady, WIDE, PAIRS_PER_LEG, legs_left=0)


def refereed(race_rates: dict, solo_rates: dict, alone_rates: dict, rounds_fit: int = 10, seed: int = 3):
    """A race of W0 and W2 whose legs read ``race_rates``, runs alone at ``solo_rates``, and the referee's
    trials (``engine.referee``) drawn at ``alone_rates`` with a process-to-process spread of ±3%."""
    from loadtune.engine.referee import referee
    rng = random.Random(seed)
    trials = [fake_trial(c, r) for c, r in solo_rates.items()] + race_trials(race_rates, legs=3, seed=seed, block_noise=0.02)
    fitting = iter(range(rounds_fit, -1, -1))
    rounds = referee(trials, FLOOR, lambda c: fake_trial(c, alone_rates[c] * math.exp(rng.gauss(0, 0.03)), rng=rng),
                     lambda n: next(fitting) > 0, trials.extend)
    return trials, rounds


def test_a_race_the_runs_alone_contradict_is_measured_again_alone_and_the_rounds_rule():
    """A copy-on-write dataset's race read w0 at 1.00x w2 where their runs alone read 0.72x (plain loops:
    0.79x). The pair is timed again alone, back to back in fresh processes, until the rounds bear out one
    reading and place the pair against the floor; the verdict, the pick and the gain read the rounds,
    and the note says which reading held."""
    from loadtune.analysis.race import disputes, referee_note, referee_ratio
    solo = [fake_trial(W0, 720.0), fake_trial(W2, 1000.0)]
    trials = solo + race_trials({W0: 1000.0, W2: 1000.0}, legs=3, seed=2, block_noise=0.02)
    assert set(disputes(trials, verdict(trials, FLOOR))[0]) == {W0, W2}
    trials, rounds = refereed({W0: 1000.0, W2: 1000.0}, {W0: 720.0, W2: 1000.0}, {W0: 790.0, W2: 1000.0})
    assert rounds == 3 and sorted(t.referee for t in trials if t.referee) == [1, 1, 2, 2, 3, 3]
    ruled = referee_ratio(trials, W0, W2)
    assert ruled.high < 0.9 and race_ratio(trials, W0, W2) == ruled  # the rounds' reading is the pair's from now on
    v = verdict(trials, FLOOR)
    assert v.leader == W2 and v.standing(W0).status == SLOWER
    assert not disputes(trials, v)  # refereed once: never again
    rec = recommend(trials, FLOOR)
    assert rec.config == W2 and rec.baseline == W0 and rec.speedup_low > 1.1
    note = referee_note(trials)
    assert "the race read 1.0" in note and "the runs alone 0.72×" in note and "the runs alone held" in note


def test_a_race_the_rounds_alone_confirm_is_kept_and_an_unruled_pair_keeps_the_race():
    """Rounds that bear out the race leave the pair's ratio, and the gain, the race's: its turns side by
    side measure that ratio more tightly than a few process pairs. One round rules nothing."""
    from loadtune.analysis.race import by_rounds, leg_ratio, referee_note, referee_ratio
    trials, rounds = refereed({W0: 1000.0, W2: 1000.0}, {W0: 720.0, W2: 1000.0}, {W0: 1000.0, W2: 1000.0})
    assert rounds == 3 and "the race held, and its interval stands" in referee_note(trials)
    assert race_ratio(trials, W0, W2) == leg_ratio(trials, W0, W2) != referee_ratio(trials, W0, W2)
    assert not by_rounds(trials, W0, W2)
    trials, rounds = refereed({W0: 1000.0, W2: 1000.0}, {W0: 720.0, W2: 1000.0}, {W0: 790.0, W2: 1000.0}, rounds_fit=1)
    assert rounds == 1 and race_ratio(trials, W0, W2) == leg_ratio(trials, W0, W2)  # one round rules nothing
    assert "1 round alone, too few to rule" in referee_note(trials)


def test_rounds_too_rough_to_favour_either_reading_give_their_own_ratio():
    """The README example's refereed pair: the race read w0 at 0.69x w4, the runs alone 0.51x, and four
    rounds read 0.68x (0.45-1.01): the race held (the rounds' mean lies at its reading), and the gain
    keeps the race's interval. Rounds whose mean lies halfway between the two readings favour neither;
    their own ratio stands."""
    from loadtune.analysis.race import ALONE_HELD, RACE_HELD, Ruling, t_odds
    from loadtune.analysis.comparison import Comparison
    se, df = math.log(1.01 / 0.45) / 2 / 3.182, 3
    assert t_odds(math.log(0.69 / 0.68), math.log(0.51 / 0.68), se, df) > 5  # the race held
    assert 1 / 5 < t_odds(math.log(0.69 / 0.60), math.log(0.51 / 0.60), se, df) < 5  # halfway: neither
    rounds, raced = Comparison(0.6, 0.4, 0.9, 4, 4, se, df), Comparison(0.69, 0.63, 0.75, 12, 4)
    assert Ruling(raced, 0.51, rounds, None).ratio is rounds and Ruling(raced, 0.51, rounds, ALONE_HELD).ratio is rounds
    assert Ruling(raced, 0.51, rounds, RACE_HELD).ratio is raced
    from loadtune.analysis.race import ruling
    trials, rounds_run = refereed({W0: 1000.0, W2: 1000.0}, {W0: 720.0, W2: 1000.0}, {W0: 850.0, W2: 1000.0})
    ruled = ruling(trials, W0, W2)  # 0.85: between 0.72 and 1.00, neither held, but clearly slower: placed
    assert rounds_run == 3 and ruled.held is None and race_ratio(trials, W0, W2) == ruled.rounds


def with_rounds(race_rates: dict, solo_rates: dict, round_ratios: tuple) -> list:
    """A race of W0 and W2 at ``race_rates``, runs alone at ``solo_rates``, and referee rounds whose
    ratio of W0 to W2 is each of ``round_ratios``."""
    trials = [fake_trial(c, r) for c, r in solo_rates.items()] + race_trials(race_rates, legs=3, seed=5, block_noise=0.02)
    for number, r in enumerate(round_ratios, 1):
        for config, rate in ((W0, 1000.0 * r), (W2, 1000.0)):
            trial = fake_trial(config, rate)
            trial.referee = number
            trials.append(trial)
    return trials


README_ROUNDS = (0.74, 0.53, 0.76, 0.95)  # the README example's four rounds of w0 against w2 alone


def test_rounds_that_spread_as_far_as_the_runs_alone_read_leave_the_race_standing():
    """The README example: the race read w0 at 0.67x w2 (+-8%), their runs alone 0.80x, and four rounds
    alone 0.74, 0.53, 0.76, 0.95: they favour neither reading, and a pair of runs alone lands 0.80
    from 0.67 by chance where pairs spread that far. The disagreement was no evidence: the race's
    interval stands, and the gain with it (before, the rounds' 0.50-1.07 made it undecided)."""
    from loadtune.analysis.race import leg_ratio, referee_note, ruling
    trials = with_rounds({W0: 670.0, W2: 1000.0}, {W0: 800.0, W2: 1000.0}, README_ROUNDS)
    ruled = ruling(trials, W0, W2)
    assert ruled.held is None and ruled.explained and ruled.ratio is ruled.raced
    assert race_ratio(trials, W0, W2) == leg_ratio(trials, W0, W2)
    rec = recommend(trials, FLOOR)
    assert rec.config == W2 and rec.speedup_pairs and rec.speedup_high / rec.speedup_low < 1.2
    assert "no disagreement, and the race's interval stands" in referee_note(trials)


def test_a_gain_the_rounds_left_too_wide_to_print_says_what_ruled_it_not_to_race_more():
    """The same rounds against a race that read w0 at 0.40x: beyond their spread from the runs alone's
    1.00x, and nearer those. The rounds' ratio stands and the gain spans more than 2x; more race legs
    would not narrow a gain the rounds ruled, so the line says what ruled it and what the race read,
    and does not send the user to --race-legs."""
    from conftest import flat
    from loadtune.analysis.noise import run_noise
    from loadtune.analysis.race import ruling
    from loadtune.report.gain import short_gain_text
    trials = with_rounds({W0: 400.0, W2: 1000.0}, {W0: 1000.0, W2: 1000.0}, README_ROUNDS)
    assert not ruling(trials, W0, W2).explained
    result = empty_result()
    result.trials = trials
    rec = recommend(trials, FLOOR)
    assert rec.config == W2 and rec.baseline == W0 and rec.speedup_rounds == 4
    text = flat(short_gain_text(result, rec, run_noise(result.configs)))
    assert "spans more than 2×" in text and "4 rounds timed alone in fresh processes" in text
    assert "the race read 2.5" in text and "--race-legs" not in text


def test_a_race_its_runs_alone_agree_with_or_whose_runs_blocks_explain_the_gap_is_not_refereed():
    """Runs alone 3% off the race; and 28% off, but from runs whose own blocks spread ±60% (a
    handful of blocks a few hundredths of a second long): neither is a dispute."""
    from loadtune.analysis.race import disputes
    _, rounds = refereed({W0: 700.0, W2: 1000.0}, {W0: 720.0, W2: 1000.0}, {W0: 790.0, W2: 1000.0})
    assert rounds == 0
    rng = random.Random(5)
    solo = [fake_trial(W0, 720.0, noise=0.6, rng=rng), fake_trial(W2, 1000.0, noise=0.6, rng=rng)]
    trials = solo + race_trials({W0: 1000.0, W2: 1000.0}, legs=3, seed=2, block_noise=0.02)
    assert not disputes(trials, verdict(trials, FLOOR))


@pytest.mark.slow
def test_a_scan_whose_race_its_runs_alone_contradict_times_the_pair_again_alone(tmp_path):
    """contested.py's loader without workers runs three times slower while another of its trial processes
    lives: in the race, never alone. The race and the runs alone disagree far beyond any noise; the pair
    is timed again alone, back to back, and those rounds side with the runs alone."""
    import shutil

    from loadtune.analysis.race import leg_ratio, referee_ratio
    from loadtune.engine.scan import scan
    from loadtune.report.table import trial_table
    from rich.console import Console

    shutil.copy(SPECS / "contested.py", tmp_path / "contested.py")
    result = scan(str(tmp_path / "contested.py"), json_path=tmp_path / "r.json", race_legs=2, reference_rounds=0,
                  diagnose=False)
    w0, w2 = TrialConfig(16, 0), replace(W2, batch_size=16)
    rounds = {t.referee for t in result.trials if t.referee}
    assert len(rounds) >= 3 and {t.config for t in result.trials if t.referee} == {w0, w2}
    raced, ruled = leg_ratio(result.trials, w0, w2), referee_ratio(result.trials, w0, w2)
    assert raced.value < 0.8 * ruled.value  # three times the cost beside the other loader: the race read it far lower
    assert any("the runs alone held" in n for n in result.notes)
    console = Console(width=80, record=True)
    console.print(trial_table(result, width=80))
    assert "†" in console.export_text()
    sys.modules.pop("contested", None)
