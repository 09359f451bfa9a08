"""Run-to-run noise (loadtune/analysis/noise.py) as pure functions, checked by simulation: seeded
measurements with a run level (each run of a config lands somewhere around its long-run rate, and the
machine drifts between rounds) as well as block noise, as on a shared VM. The rules must hold their
stated error rates on such data, which a blocks-only interval does not."""

import math
import random
import statistics

from loadtune.analysis.noise import clearly_faster, gain, long_run, run_noise, speeds_apart, tie_floor
from loadtune.analysis.recommend import recommend
from loadtune.model.config import TrialConfig
from loadtune.model.results import ConfigResult, by_config
from loadtune.model.trial import Block, MemoryUsage, Trial

BETWEEN = 0.05  # a run's level: 5% (log sd) around its config's long-run rate
DRIFT = 0.04  # the machine's pace in a round, shared by every config measured in it
BLOCKS = 0.02  # block-to-block noise inside a run


def run(config: TrialConfig, level: float, rng: random.Random, round_: int = 0, blocks: int = 5) -> Trial:
    rates = [level * math.exp(rng.gauss(0, BLOCKS)) for _ in range(blocks)]
    t = Trial(config, "ok", startup_s=0.05, blocks=[Block(int(r * 10), 10, 10.0) for r in rates],
              memory=MemoryUsage(200 * 2**20 + 40 * 2**20 * config.num_workers, 1 + config.num_workers, "pss"))
    t.round = round_
    return t


def scan(rng: random.Random, truths: dict[TrialConfig, float], repeated: list[TrialConfig], rounds: int = 1) -> list[Trial]:
    """Every config once in the search (each trial at its own time: its own drift), then ``repeated``
    side by side in ``rounds`` closing rounds (one drift per round, shared)."""
    trials = [run(c, rate * math.exp(rng.gauss(0, BETWEEN) + rng.gauss(0, DRIFT)), rng) for c, rate in truths.items()]
    for r in range(1, rounds + 1):
        drift = rng.gauss(0, DRIFT)
        trials += [run(c, truths[c] * math.exp(rng.gauss(0, BETWEEN) + drift), rng, r) for c in repeated]
    return trials


def long_run_of(truth: float, rng: random.Random) -> float:
    """What a user later gets from a long run: its own run level and the machine's pace then."""
    return truth * math.exp(rng.gauss(0, BETWEEN) + rng.gauss(0, DRIFT))


CONFIGS = [TrialConfig(32, w, prefetch_factor=2 if w else None) for w in (0, 1, 2, 4, 8)]
TRUTH = dict(zip(CONFIGS, (1000.0, 1800.0, 2900.0, 3000.0, 2950.0)))


def test_the_long_run_interval_covers_95_percent_of_long_runs_where_the_blocks_interval_does_not():
    rng = random.Random(1)
    inside = blocks_inside = total = 0
    for _ in range(300):
        configs = by_config(scan(rng, TRUTH, CONFIGS[2:] + CONFIGS[:1]))
        noise = run_noise(configs)
        assert noise.learned and noise.df == 4
        for c in configs:
            later = long_run_of(TRUTH[c.config], rng)
            est = long_run(c, noise)
            inside += est.low <= later <= est.high
            blocks_inside += c.estimate.low <= later <= c.estimate.high
            total += 1
    assert inside / total >= 0.92  # 95% stated; the scan learns the spread from 4 degrees of freedom
    assert blocks_inside / total < 0.6  # what the table used to print as 95%


def test_a_raced_configs_absolute_figure_rests_on_its_runs_alone_and_still_covers_long_runs():
    """Raced legs (short blocks after a rest) read the level 6% low in this simulation, as they did on a
    heavy-tailed dataset; the legs teach the run-to-run spread, the runs timed alone give the figure.
    Pooled with the legs, the figure would read low."""
    rng = random.Random(3)
    inside = total = 0
    alone_bias, pooled_bias = [], []
    for _ in range(300):
        trials = [run(c, rate * math.exp(rng.gauss(0, BETWEEN) + rng.gauss(0, DRIFT)), rng) for c, rate in TRUTH.items()]
        for leg in (1, 2, 3):
            drift = rng.gauss(0, DRIFT)
            for c in CONFIGS[2:]:
                t = run(c, TRUTH[c] * 0.94 * math.exp(rng.gauss(0, BETWEEN) + drift), rng, leg)
                t.round, t.leg = 0, leg
                trials.append(t)
        configs = by_config(trials)
        noise = run_noise(configs)
        for c in configs[2:]:
            later = long_run_of(TRUTH[c.config], rng)
            est = long_run(c, noise)
            assert est.n == 5  # the run timed alone: its 5 blocks, not the legs'
            inside += est.low <= later <= est.high
            alone_bias.append(math.log(est.median / TRUTH[c.config]))
            pooled_bias.append(math.log(c.estimate.median / TRUTH[c.config]))  # every run pooled, legs included
            total += 1
    assert inside / total >= 0.92
    assert abs(statistics.fmean(alone_bias)) < 0.015 and statistics.fmean(pooled_bias) < -0.03


def test_the_between_run_spread_is_learned_not_assumed():
    rng = random.Random(2)
    learned = [run_noise(by_config(scan(rng, TRUTH, CONFIGS, rounds=3))).between for _ in range(50)]
    spread = math.sqrt(BETWEEN**2 + DRIFT**2)  # search runs and closing rounds see both
    assert 0.6 * spread < sorted(learned)[25] < 1.4 * spread
    quiet = run_noise(by_config([run(c, r, rng) for c, r in TRUTH.items() for _ in range(2)]))
    assert quiet.between < 0.01  # the same level every run: only the blocks' noise, which is subtracted
    assert tie_floor(quiet, 0.02) < 0.025  # the floor given is the least difference that counts
    assert not run_noise(by_config([run(c, r, rng) for c, r in TRUTH.items()])).learned  # nothing repeated


def test_two_equal_configs_are_called_different_at_most_5_percent_of_the_time():
    a, b = TrialConfig(32, 2, prefetch_factor=2), TrialConfig(32, 4, prefetch_factor=2)
    truths = {CONFIGS[0]: 1000.0, a: 3000.0, b: 3000.0}
    rng = random.Random(3)
    alarms = 0
    for _ in range(400):
        configs = {c.config: c for c in by_config(scan(rng, truths, list(truths), rounds=2))}
        noise = run_noise(list(configs.values()))
        alarms += clearly_faster(configs[b], configs[a], noise, 0.02) or clearly_faster(configs[a], configs[b], noise, 0.02)
    assert alarms / 400 <= 0.06


def test_a_real_gap_is_found_side_by_side_and_the_cheaper_config_is_not_picked():
    # 2 workers are 15% slower than 4: the pick must be 4 workers in most scans, not the cheaper "tie"
    # (runs 5% apart and 3 paired rounds: a 10% gap is found about half the time, said in docs/measuring.md)
    a, b = TrialConfig(32, 2, prefetch_factor=2), TrialConfig(32, 4, prefetch_factor=2)
    truths = {CONFIGS[0]: 1000.0, a: 2550.0, b: 3000.0}
    rng = random.Random(4)
    picks = [recommend(scan(rng, truths, list(truths), rounds=3)).config for _ in range(200)]
    assert picks.count(b) / len(picks) >= 0.8


def test_the_gain_over_the_defaults_is_paired_and_its_interval_covers_the_truth():
    rng = random.Random(5)
    covered = 0
    for _ in range(300):
        configs = {c.config: c for c in by_config(scan(rng, TRUTH, [CONFIGS[0], CONFIGS[3]], rounds=2))}
        g = gain(configs[CONFIGS[3]], configs[CONFIGS[0]], run_noise(list(configs.values())))
        assert g.rounds == 2
        covered += g.ratio.low <= 3.0 <= g.ratio.high
    assert covered / 300 >= 0.93


def test_without_a_paired_round_the_gain_comes_from_the_long_run_intervals():
    rng = random.Random(6)
    trials = scan(rng, TRUTH, CONFIGS[:2], rounds=0) + [run(CONFIGS[0], 1000.0, rng), run(CONFIGS[3], 3000.0, rng)]
    configs = {c.config: c for c in by_config(trials)}
    g = gain(configs[CONFIGS[3]], configs[CONFIGS[0]], run_noise(list(configs.values())))
    assert g.rounds == 0 and g.ratio.low < g.ratio.value < g.ratio.high
    assert ConfigResult(CONFIGS[1], []).estimate is None and long_run(ConfigResult(CONFIGS[1], []), run_noise([])) is None


def test_the_caption_says_what_the_spread_learned_is_even_when_it_is_nothing():
    from loadtune.analysis.noise import RunNoise
    from loadtune.report.table import spread_caption
    assert "4.0% between runs" in spread_caption(RunNoise(0.04, 6, 0.001))
    assert "agreed within their blocks' own noise" in spread_caption(RunNoise(0.0, 6, 0.001))  # not "0.0%"
    assert "run-to-run noise unknown" in spread_caption(RunNoise(0.0, 0, 0.0))
    assert "w0 bs32: its speed rests on its allocator's state" in spread_caption(RunNoise(0.04, 6, 0.001), ["w0 bs32"])


def allocator_runs(levels: list[float], fresh_share: float, rng: random.Random) -> list[Trial]:
    """Runs of a loader without workers at ``levels``, its main process faulting in ``fresh_share`` of
    each 19 MiB batch anew (``footprint.takes_fresh_pages`` from a tenth on)."""
    from loadtune.model.batch import BatchInfo
    trials = []
    for i, level in enumerate(levels):
        t = run(CONFIGS[0], level, rng, round_=i)
        t.blocks = [Block(b.samples, b.batches, b.seconds, faulted_bytes=int(b.batches * fresh_share * 19 * 2**20))
                    for b in t.blocks]
        t.batch = BatchInfo(19 * 2**20)
        trials.append(t)
    return trials


def test_a_loader_at_its_allocators_two_speeds_widens_its_own_interval_not_every_rows():
    """The README's pair on a 2-core VM: ``w0`` read 537 and 558 in two runs and 334 and 333 in two
    others (its allocator's state), ``w2`` 655-705. Pooled, ``w0``'s speeds set every row's ± past
    ±100%. Taking fresh pages, ``w0`` stays out of the pool: ``w2``'s ± is its runs' spread, and
    ``w0``'s spans both of its speeds. Without the fresh pages the same runs are pooled (the test can
    fail), and runs of a fresh-page config that agree stay in the pool."""
    rng = random.Random(3)
    w2 = [run(CONFIGS[2], level, rng, round_=i) for i, level in enumerate((655.0, 654.0, 703.0, 705.0))]
    modes = [537.0, 558.0, 334.0, 333.0]

    configs = by_config(allocator_runs(modes, 0.2, rng) + w2)
    noise = run_noise(configs)
    assert noise.df == 3 and noise.between < 0.06
    w0_est, w2_est = long_run(configs[0], noise), long_run(configs[1], noise)
    assert w2_est.rel_spread < 0.30 and w2_est.low <= 655 and w2_est.high >= 705
    assert w0_est.low < 340 and w0_est.high > 540  # each run's level is its blocks' median: within 2-3%
    slowest, fastest = speeds_apart(configs[0], noise)  # the panel names them beside a gain over w0
    assert slowest < 340 and fastest > 540 and speeds_apart(configs[1], noise) is None

    pooled = run_noise(by_config(allocator_runs(modes, 0.0, rng) + w2))
    assert pooled.df == 6 and pooled.between > 0.15
    assert long_run(by_config(allocator_runs(modes, 0.0, rng) + w2)[1], pooled).rel_spread > 0.6

    agreeing = by_config(allocator_runs([540.0, 545.0, 550.0, 538.0], 0.2, rng) + w2)
    assert run_noise(agreeing).df == 6 and speeds_apart(agreeing[0], run_noise(agreeing)) is None
