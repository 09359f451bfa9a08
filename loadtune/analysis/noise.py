"""Run-to-run noise, learned from the scan's own repeats, as pure functions.

The blocks of one trial share one run: its worker processes, the cores the scheduler gave them,
what else the machine did meanwhile. Their spread says how well that run's level is known, not how
far the next run of the same config lands from it. On a shared 2-core VM the two differ several-fold:
the blocks' 95% interval held a 10x longer run of the same config in 20 of 36 pairs.

Every config a scan measures more than once (PyTorch's defaults, the contenders of the closing
rounds) shows how far runs of one config land apart. Pooled over configs, that between-run spread
widens each config's interval into one for what a long run of it gives, sets how far apart two
configs measured at different times must be before they count as different, and backs the paired
comparison of two configs measured side by side in the same rounds.

A config whose main process takes every batch's pages fresh from the kernel
(``footprint.takes_fresh_pages``) runs at one of two or more speeds, set by its allocator's state in
that process (a loader without workers and 19 MiB batches: 330 or 560 samples/s). Its runs teach
that, not the machine's run-to-run noise: pooled, they widened every row's interval to ±97-119% in 3
of 18 scans of such a pair. Where its runs ran at separate speeds they stay out of the pool, and the
config's own interval spans every run of it measured.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from functools import cached_property

from loadtune.analysis.comparison import Prior, compare, singly
from loadtune.analysis.footprint import takes_fresh_pages
from loadtune.analysis.stats import Ratio, indistinguishable, ratio
from loadtune.model.config import TrialConfig
from loadtune.model.estimate import Estimate, median_stderr, t975
from loadtune.model.results import ConfigResult
from loadtune.model.trial import Trial

Z975 = 1.96


@dataclass(frozen=True)
class RunNoise:
    """How far one run's level lies from its config's long-run level: a relative standard deviation
    (on the log scale), and the degrees of freedom it was learned with (0: no config was repeated).
    ``within``: the mean variance of a run's log median from its own blocks, over those runs."""

    between: float
    df: int
    within: float = 0.0
    apart: tuple[TrialConfig, ...] = ()  # configs kept out for running at separate speeds (``run_noise``)

    @property
    def learned(self) -> bool:
        return self.df > 0


NOTHING_LEARNED = RunNoise(0.0, 0, 0.0)


def run_level(trial: Trial) -> tuple[float, float] | None:
    """log of a run's median block rate, and that log's variance from the run's own blocks."""
    rates = trial.pace_rates if trial.ok else []
    if not rates:
        return None
    mid = statistics.median(rates)
    if mid <= 0:
        return None
    rel = median_stderr(rates) / mid
    return math.log(mid), rel * rel


def run_levels(config: ConfigResult) -> list[tuple[float, float]]:
    return [level for t in config.trials if (level := run_level(t)) is not None]


@dataclass(frozen=True)
class Spread:
    """One config's run levels (logs) and each run's variance from its own blocks."""

    levels: list[float]
    within: list[float]

    @property
    def df(self) -> int:
        return len(self.levels) - 1

    @cached_property
    def squares(self) -> float:
        mean = statistics.fmean(self.levels)
        return sum((x - mean) ** 2 for x in self.levels)

    def gapped(self, variance: float, df: int) -> bool:
        """Two of its runs, next to each other in speed, lie further apart than two runs of one config
        land 95% of the time (a level ``variance`` learned with ``df``): it ran at separate speeds."""
        bound = t975(df) * math.sqrt(2 * variance)
        ordered = sorted(self.levels)
        return any(b - a > bound for a, b in zip(ordered, ordered[1:]))


def spread_of(config: ConfigResult) -> Spread | None:
    levels = run_levels(config)
    return Spread([x for x, _ in levels], [w for _, w in levels]) if len(levels) >= 2 else None


def pooled(spreads: list[Spread]) -> RunNoise:
    df = sum(s.df for s in spreads)
    if not df:
        return NOTHING_LEARNED
    within = statistics.fmean(w for s in spreads for w in s.within)
    return RunNoise(math.sqrt(max(0.0, sum(s.squares for s in spreads) / df - within)), df, within)


def run_noise(configs: list[ConfigResult]) -> RunNoise:
    """The between-run spread, pooled over every config measured more than once: the variance of run
    levels about their config's mean, less what the runs' own blocks explain. A config whose speed
    rests on its allocator's state (module docstring) stays out of the pool where its runs ran at
    separate speeds, judged by the others' spread: those speeds are its own, not the machine's."""
    steady, fresh = [], {}
    for config in configs:
        if (spread := spread_of(config)) is not None:
            if takes_fresh_pages(config):
                fresh[config.config] = spread
            else:
                steady.append(spread)
    base = pooled(steady)
    if not base.learned:
        return pooled(list(fresh.values()))
    variance = sum(s.squares for s in steady) / base.df
    apart = tuple(c for c, s in fresh.items() if s.gapped(variance, base.df))
    return replace(pooled(steady + [s for c, s in fresh.items() if c not in apart]), apart=apart)


def alone(config: ConfigResult) -> ConfigResult:
    """The config's runs timed alone (the screening's, closing rounds'), where it has any: what its
    absolute figure rests on. A raced leg's blocks are short and follow a rest while the others take
    their turns: they compare configs side by side, but read the level a few percent low (on a
    heavy-tailed dataset, legs at 2,450-2,800 samples/s where its runs alone read 2,610-2,620 and long
    runs of a plain DataLoader 2,620-2,750). The legs still teach how far runs land apart (``run_noise``)."""
    solo = [t for t in config.trials if not t.raced]
    if len(solo) == len(config.trials) or not any(t.ok for t in solo):
        return config
    return ConfigResult(config.config, solo)


def long_run(config: ConfigResult, noise: RunNoise) -> Estimate | None:
    """The config's figure with a 95% interval for what a long run of it gives (``learned_interval``);
    for a config whose speed rests on its allocator's state, widened to span every run of it measured,
    legs included (module docstring)."""
    est = learned_interval(alone(config), noise)
    levels = [math.exp(x) for x, _ in run_levels(config)]
    if est is None or not spans(config, levels):
        return est
    return Estimate(est.median, min(est.low, *levels), max(est.high, *levels), est.q1, est.q3, est.n)


def spans_runs(config: ConfigResult) -> bool:
    """Its interval spans every run of it measured: its speed rests on its allocator's state, and it ran
    more than once."""
    return spans(config, run_levels(config))


def spans(config: ConfigResult, levels: list) -> bool:
    """``spans_runs`` given the config's run levels, where the caller has read them already."""
    return len(levels) > 1 and takes_fresh_pages(config)


def speeds_apart(config: ConfigResult, noise: RunNoise) -> tuple[float, float] | None:
    """The slowest and the fastest of its runs where ``run_noise`` kept it out of the pool for running
    at separate speeds (``RunNoise.apart``): a gain over it holds at the speed its runs in the race
    had, and another process may land at another."""
    if config.config not in noise.apart:
        return None
    levels = sorted(math.exp(x) for x, _ in run_levels(config))
    return levels[0], levels[-1]


def learned_interval(config: ConfigResult, noise: RunNoise) -> Estimate | None:
    """Its runs' levels, the spread between runs (for the next run, and for the mean of the ``k``
    measured), and their blocks' (never taken as less than the repeated runs' typical: three blocks can
    agree by chance, and a trial's blocks' interval held a later long run in 38 of 54 pairs, this one
    in 52). Unchanged (the blocks' interval) when nothing was learned: that is all the data shows then."""
    est = config.estimate
    levels = run_levels(config)
    if est is None or not levels or not noise.learned:
        return est
    k = len(levels)
    within = max(statistics.fmean(w for _, w in levels), noise.within)
    half = t975(noise.df) * math.sqrt(noise.between ** 2 * (1 + 1 / k) + within / k)
    centre = math.log(est.median)
    return Estimate(est.median, math.exp(centre - half), math.exp(centre + half), est.q1, est.q3, est.n)


def tie_floor(noise: RunNoise, minimum: float) -> float:
    """How far apart (relative) two single runs of the same config land 95% of the time: below it, two
    configs measured at different times cannot be told apart. ``minimum`` below that: differences
    smaller than it are not worth a worker, however well measured."""
    if not noise.learned:
        return minimum
    return max(minimum, math.exp(Z975 * math.sqrt(2) * noise.between) - 1)


def paired_logs(a: ConfigResult, b: ConfigResult) -> list[float]:
    """log(a / b) in each closing round (round >= 1: configs shuffled and measured side by side) where
    both were measured (a raced trial's round is 0: its leg is ``Trial.leg``)."""
    mine = {t.round: t.estimate.median for t in a.trials if t.ok and t.round >= 1 and t.estimate}
    return [math.log(mine[t.round] / t.estimate.median) for t in b.trials
            if t.ok and t.round in mine and t.estimate and t.estimate.median > 0 and mine[t.round] > 0]


@dataclass(frozen=True)
class Gain:
    """``a / b`` with its 95% interval, and how many side-by-side rounds it rests on (0: from figures
    measured at different times)."""

    ratio: Ratio
    rounds: int


def paired_ratio(a: ConfigResult, b: ConfigResult, noise: RunNoise) -> Gain | None:
    """``a / b`` from the rounds that measured both side by side (``analysis.comparison``). The spread of
    the round ratios and what the scan learned a pair's spread to be (twice the between-run variance,
    an upper bound: drift the two share cancels; plus their runs' own block noise) are pooled with
    their degrees of freedom, so one or two rounds already give an honest interval. None without a
    paired round, or with one and nothing learned."""
    blocks = sum(statistics.fmean(w for _, w in levels) for levels in (run_levels(a), run_levels(b)) if levels)
    c = compare(singly(paired_logs(a, b)), prior=Prior(2 * noise.between ** 2 + blocks, noise.df), least=1)
    return Gain(Ratio(c.value, c.low, c.high), c.pairs) if c is not None else None


def gain(a: ConfigResult, b: ConfigResult, noise: RunNoise) -> Gain | None:
    """``a / b``: side by side where paired rounds exist, else from the two long-run intervals."""
    paired = paired_ratio(a, b, noise)
    if paired is not None:
        return paired
    ea, eb = long_run(a, noise), long_run(b, noise)
    return Gain(ratio(ea, eb), 0) if ea and eb else None


def clearly_faster(a: ConfigResult, b: ConfigResult, noise: RunNoise, minimum: float) -> bool:
    """``a`` beats ``b`` beyond the noise: judged side by side where they were measured in the same
    rounds (the ratio's interval above 1, the ratio beyond ``minimum``), else from figures taken at
    different times, whose medians must differ beyond the between-run spread too."""
    paired = paired_ratio(a, b, noise)
    if paired is not None:
        return paired.ratio.low > 1 and paired.ratio.value > 1 + minimum
    return a.estimate.median > b.estimate.median and not indistinguishable(
        a.estimate, b.estimate, tie_floor(noise, minimum))
