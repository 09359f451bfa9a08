"""Search strategies as pure functions: fed synthetic measurements, checked for what they propose."""

from dataclasses import replace

import pytest
from conftest import SPECS, drive, empty_result, fake_trial

import loadtune
import loadtune.analysis.recommend
from loadtune.search.space import SearchSpace, build_grid
from loadtune.model.config import TrialConfig
from loadtune.model.trial import Block, MemoryUsage, Trial
from loadtune.search.adaptive import AdaptiveSearch
from loadtune.search.grid import GridSearch


def adaptive(workers=(0, 1, 2, 4), prefetch=(2, 4), persistent=None, max_workers=64, batch_sizes=(32,), confirm_rounds=1):
    space = SearchSpace(batch_sizes=list(batch_sizes), workers=list(workers), prefetch=list(prefetch), persistent=persistent)
    defaults = [TrialConfig(bs, 0) for bs in batch_sizes]
    return AdaptiveSearch(space, False, defaults, 0.02, max_workers=max_workers, memory_available=64 * 2**30,
                          confirm_rounds=confirm_rounds)


def swept_workers(result):
    return sorted({t.config.num_workers for t in result.trials if t.round == 0})


def test_rising_curve_extends_past_the_grid_while_it_gains():
    # storage-latency-bound: each worker adds throughput up to 16 workers, then flat
    result = drive(adaptive(max_workers=64), lambda c: 1000 * min(max(c.num_workers, 1), 16))
    workers = swept_workers(result)
    assert {0, 1, 2, 4, 8, 16}.issubset(workers)  # went past the grid's 4, doubling
    assert max(workers) <= 64 and 64 not in workers  # and stopped once 32 did not gain over 16


def test_extension_respects_the_cap():
    result = drive(adaptive(max_workers=8), lambda c: 1000 * max(c.num_workers, 1))
    assert max(swept_workers(result)) == 8


def test_w1_no_faster_than_w0_does_not_end_the_sweep():
    # costly samples, but one worker only moves the work out of the main process: w1 ~ w0, then it scales
    rate = {0: 500, 1: 470, 2: 490, 4: 900, 8: 910, 16: 905}
    result = drive(adaptive(workers=(0, 1, 2, 4, 8, 16)), lambda c: rate[c.num_workers])
    assert 4 in swept_workers(result)
    assert loadtune.analysis.recommend.recommend(result.trials).config.num_workers == 4


def test_zero_workers_winning_stops_the_sweep_early():
    # tiny samples: inter-process transfer costs more than producing them
    result = drive(adaptive(workers=(0, 1, 2, 4, 8)), lambda c: 100_000 if c.num_workers == 0 else 15_000 + 100 * c.num_workers)
    # num_workers=0 is another regime, not a step of the worker curve: the sweep judges 1, 2, 4 against
    # each other, and two counts without a gain (2 and 4) end it: 8 never runs
    assert swept_workers(result) == [0, 1, 2, 4]
    rec = loadtune.analysis.recommend.recommend(result.trials)
    assert rec.config.num_workers == 0


def test_non_monotone_curve_finds_the_peak():
    peak = {0: 1000, 1: 1900, 2: 3000, 4: 2500, 8: 2000, 16: 1500}
    result = drive(adaptive(workers=(0, 1, 2, 4, 8, 16)), lambda c: peak[c.num_workers])
    rec = loadtune.analysis.recommend.recommend(result.trials)
    assert rec.config.num_workers == 2
    assert swept_workers(result) == [0, 1, 2, 4, 8]  # two counts past the peak, then it stops


def test_refinement_tries_prefetch_and_persistent_only_where_epochs_end():
    rate = lambda c: 1000 * min(max(c.num_workers, 1), 2)  # noqa: E731
    long_epochs = drive(adaptive(), rate, epochs=0)
    short_epochs = drive(adaptive(), rate, epochs=2)
    tried = lambda r: {(t.config.prefetch_factor, t.config.persistent_workers) for t in r.trials if t.config.num_workers == 2}  # noqa: E731
    assert (4, True) in tried(long_epochs) or (4, True) in tried(short_epochs)
    assert all(pw for _, pw in tried(long_epochs))  # no epoch ended: the persistent toggle is not worth a trial
    assert any(not pw for _, pw in tried(short_epochs))  # epochs end inside trials: it is measured
    notes = adaptive().notes(long_epochs)
    assert any("persistent_workers" in n.what for n in notes)


def test_restarting_workers_is_not_tried_again_once_it_clearly_lost():
    # short epochs, restarts cost half the rate; two batch sizes and two prefetch values give several
    # leaders in turn, each of which would get its own persistent toggle
    def rate(c):
        return 1000 * min(max(c.num_workers, 1), 4) * (1 if c.persistent_workers or not c.num_workers else 0.5) * (
            1.1 if c.batch_size == 64 else 1) * (1.03 if c.prefetch_factor == 4 else 1)

    result = drive(adaptive(batch_sizes=(32, 64)), rate, epochs=2)
    restarting = [t.config for t in result.trials if t.config.num_workers and not t.config.persistent_workers]
    assert len(restarting) == 1  # measured once, beside the first leader, and clearly slower
    pick = loadtune.analysis.recommend.recommend(result.trials).config
    assert pick.persistent_workers and pick.batch_size == 64
    saving = loadtune.analysis.recommend.persistent_saving(result.configs, pick, 1000)
    assert saving is None or saving.seconds > 0  # from the pair measured, when it shares the pick's workers and batch size
    # where restarting ties (long epochs next to start-up), the toggle is tried around each leader
    even = drive(adaptive(batch_sizes=(32, 64)), lambda c: rate(replace(c, persistent_workers=True)), epochs=2)
    assert len([t for t in even.trials if t.config.num_workers and not t.config.persistent_workers]) > 1


def test_confirmation_remeasures_contenders_side_by_side():
    # 2 and 4 workers tie; 0 and 1 are far behind
    rate = {0: 1000, 1: 1800, 2: 3000, 4: 3010}
    result = drive(adaptive(workers=(0, 1, 2, 4), prefetch=(2,), persistent=True), lambda c: rate[c.num_workers])
    confirm = [t for t in result.trials if t.round == 1]
    assert sorted(t.config.num_workers for t in confirm) == [0, 2, 4]  # and PyTorch's defaults, for the gain
    clear = drive(adaptive(workers=(0, 1, 2), prefetch=(2,), persistent=True, max_workers=2), lambda c: {0: 1, 1: 2, 2: 9}[c.num_workers] * 1000)
    # a clear winner is measured beside PyTorch's defaults all the same: the stated gain is side by side
    assert sorted(t.config.num_workers for t in clear.trials if t.round == 1) == [0, 2]
    rec = loadtune.analysis.recommend.recommend(clear.trials)
    assert rec.config.num_workers == 2 and rec.speedup_rounds == 1
    zero = drive(adaptive(workers=(0, 1, 2), prefetch=(2,), persistent=True, max_workers=2), lambda c: {0: 9, 1: 2, 2: 3}[c.num_workers] * 1000)
    # the defaults win: the best config with workers is their partner in the round
    assert sorted(t.config.num_workers for t in zero.trials if t.round == 1) == [0, 2]


def test_a_pick_tied_only_by_wide_intervals_is_measured_again_beside_the_fastest():
    from loadtune.search.closing import SETTLE_ROUNDS

    # 2 workers are 8% slower than 4; blocks spread ±30%, so one side-by-side round leaves them tied
    rate = {0: 1000, 1: 1800, 2: 2760, 4: 3000}
    strategy = adaptive(workers=(0, 1, 2, 4), prefetch=(2,), persistent=True, max_workers=4)
    result = drive(strategy, lambda c: rate[c.num_workers], noise=0.3)
    settle = [t for t in result.trials if t.round > 1]
    assert settle and max(t.round for t in settle) <= 1 + SETTLE_ROUNDS
    for r in {t.round for t in settle}:
        assert len([t for t in settle if t.round == r]) <= 2  # the pick and the fastest, nothing else
    assert {t.config.num_workers for t in settle} <= {2, 4}
    # blocks within ±0.5%: 8% apart is clear after the search, and nothing is re-measured at all
    clear = drive(strategy, lambda c: rate[c.num_workers])
    assert not [t for t in clear.trials if t.round > 1]
    # confirm=0 asks for no re-measuring: none
    none = drive(adaptive(workers=(0, 1, 2, 4), prefetch=(2,), persistent=True, max_workers=4, confirm_rounds=0),
                 lambda c: rate[c.num_workers], noise=0.3)
    assert not [t for t in none.trials if t.round]


def test_grid_runs_every_config_once_then_confirms():
    configs, _ = build_grid(SearchSpace([32], [0, 1, 2], [2, 4]), accelerator=False)
    strategy = GridSearch(configs, 0.02, confirm_rounds=1)
    result = drive(strategy, lambda c: 1000 * (1 + min(c.num_workers, 1)))  # every worker count ties
    search = [t.config for t in result.trials if t.round == 0]
    assert sorted(search, key=lambda c: c.key) == sorted(configs, key=lambda c: c.key)
    assert [t for t in result.trials if t.round == 1]


@pytest.mark.parametrize(
    "name, rate",
    [
        ("cpu-bound", lambda c: 1000 * min(max(c.num_workers, 1), 2) * (1.02 if c.prefetch_factor == 4 else 1)),
        ("io-bound", lambda c: 500 * min(max(c.num_workers, 1), 12)),
        ("ipc-bound", lambda c: 50_000 if c.num_workers == 0 else 12_000),
        ("epoch-restarts", lambda c: 800 * min(max(c.num_workers, 1), 2) * (1.5 if c.persistent_workers else 1)),
    ],
)
def test_adaptive_reaches_the_grids_best_with_fewer_trials(name, rate):
    space = SearchSpace([32], [0, 1, 2, 4, 8, 16], [2, 4])
    configs, _ = build_grid(space, accelerator=False)
    grid = drive(GridSearch(configs, 0.02, 0), rate)
    fast = drive(AdaptiveSearch(space, False, [TrialConfig(32, 0)], 0.02, 16, 64 * 2**30, 0), rate, epochs=1)
    best = max(rate(c) for c in configs)
    pick = loadtune.analysis.recommend.recommend(fast.trials).config
    assert rate(pick) >= 0.95 * best
    assert len(fast.trials) <= len(grid.trials) / 2


@pytest.mark.slow
def test_default_search_runs_fewer_trials_than_the_grid_and_keeps_its_budget(tmp_path):
    """The grid's size from its plan (a grid scan runs every config it plans: tests/test_ci_output.py's log)."""
    from loadtune.engine.plan import prepare

    common = dict(workers=[0, 1, 2, 4], prefetch=[2, 4], warmup=0.2, block_time=0.1, blocks=3, confirm=0)
    grid = prepare(str(SPECS / "tiny.py"), search="grid", **common).strategy.configs
    budget = 8.0
    fast = loadtune.scan(str(SPECS / "tiny.py"), budget=budget, json_path=tmp_path / "b.json", **common)
    assert len(fast.trials) < len(grid) == 13
    # no trial starts past the budget: the opening calibration and every trial before the last ran inside it
    assert fast.calibration[0].wall_s + sum(t.wall_s for t in fast.trials[:-1]) < budget
    assert fast.recommendation is not None


def test_confirmation_never_reproposes_a_skipped_config():
    from loadtune.model.config import Skip
    from loadtune.search.closing import closing_rounds

    rate = {0: 1000, 1: 1800, 2: 3000, 4: 3010}
    result = drive(adaptive(workers=(0, 1, 2, 4), prefetch=(2,), persistent=True, max_workers=4), lambda c: rate[c.num_workers])
    contenders_ = {t.config for t in result.trials if t.round == 1}
    result.trials = [t for t in result.trials if t.round == 0]
    result.skipped = [Skip(c.label(), "CUDA out of memory", c.key) for c in contenders_]
    assert closing_rounds(result, 1, 0.02, 0) == []


def test_other_batch_sizes_start_at_the_best_counts_and_a_leading_one_gets_its_neighbours():
    # per-sample cost sets the best worker count (4); batch size 128 is 20% faster at any count, 64 20% slower
    def rate(c):
        return 1000 * min(max(c.num_workers, 1), 4) * {32: 1.0, 64: 0.8, 128: 1.2}[c.batch_size]
    strategy = adaptive(workers=(0, 1, 2, 4, 8, 16), batch_sizes=(32, 64, 128), max_workers=16)
    result = drive(strategy, rate)
    search = [t.config for t in result.trials if t.round == 0]
    by_batch = {b: sorted({c.num_workers for c in search if c.batch_size == b}) for b in (32, 64, 128)}
    assert {1, 2, 4, 8}.issubset(by_batch[32])  # the sweep ran at the first batch size only
    assert 4 in by_batch[64] and not {1, 2} & set(by_batch[64])  # at the best counts; it did not lead: no neighbours
    assert {2, 4, 8}.issubset(by_batch[128])  # it led: the counts either side were measured too
    full_grid = len(build_grid(strategy.space, accelerator=False)[0])
    assert len(search) < full_grid / 2
    assert loadtune.analysis.recommend.recommend(result.trials).config.batch_size == 128


def test_notes_say_why_the_sweep_stopped():
    rising = lambda c: 1000 * max(c.num_workers, 1)  # noqa: E731
    strategy = adaptive(workers=(0, 1, 2, 4, 8), max_workers=8)
    result = empty_result()
    for _ in range(3):  # cut short, as a spent budget does: w0 then w1, w2
        p = strategy.propose(result)[0]
        result.trials.append(fake_trial(p.config, rising(p.config)))
    (note,) = [n for n in strategy.notes(result) if n.what.startswith("num_workers")]
    assert "4,8" in note.what and "ended" in note.why and "stopped rising" not in note.why

    strategy = adaptive(workers=(0, 1, 2, 4, 8), max_workers=8)
    result = empty_result()
    while proposals := strategy.propose(result):
        config = proposals[0].config
        if proposals[0].round:
            break
        trial = fake_trial(config, rising(config))
        if config.num_workers >= 2:  # e.g. killed for memory from two workers on
            trial.status, trial.blocks = "failed", []
        result.trials.append(trial)
    (note,) = [n for n in strategy.notes(result) if n.what.startswith("num_workers")]
    assert "failed" in note.why and "stopped rising" not in note.why


def test_a_pick_the_confirmation_made_is_itself_confirmed():
    # The search: two 4-worker configs tie at ~1500; 2 workers reads 950 +-15%, clearly behind. The
    # round re-measures the 4-worker pair at ~1100 (the machine drifted), the pooled intervals
    # widen, and 2 workers becomes the cheapest config tied with the fastest: the pick. It is
    # re-measured before it is recommended.
    from loadtune.search.closing import closing_rounds

    def run(config, rates, round_=0):
        t = Trial(config, "ok", startup_s=0.05, blocks=[Block(int(r), 10, 1.0) for r in rates],
                  memory=MemoryUsage(200 * 2**20, 1 + config.num_workers, "pss"))
        t.round = round_
        return t

    w2, w4a, w4b = (TrialConfig(32, 2, prefetch_factor=2), TrialConfig(32, 4, prefetch_factor=2),
                    TrialConfig(32, 4, prefetch_factor=4))
    result = empty_result()
    result.trials = [run(w2, [950, 900, 1000, 1050, 850]), run(w4a, [1500, 1490, 1510, 1500, 1495]),
                     run(w4b, [1480, 1475, 1485, 1480, 1470])]
    first = closing_rounds(result, 1, 0.02, 0)
    assert {p.config for p in first} == {w4a, w4b}  # 2 workers is not a contender yet
    result.trials += [run(w4a, [1100, 1050, 1150, 1090, 1110], 1), run(w4b, [1080, 1040, 1120, 1070, 1090], 1)]
    assert loadtune.analysis.recommend.recommend(result.trials).config == w2  # the pooled rounds made it the pick
    assert [(p.config, p.round) for p in closing_rounds(result, 1, 0.02, 0)] == [(w2, 1)]
    result.trials.append(run(w2, [880, 900, 920, 890, 910], 1))
    # confirmed, not again; still tied with the fastest only through the drift the search saw, so the
    # two are measured once more side by side (settling), and nothing else
    settle = closing_rounds(result, 1, 0.02, 0)
    assert settle and {p.config for p in settle} <= {w2, w4a} and {p.round for p in settle} == {2}
