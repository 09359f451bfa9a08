"""The race's decisions, as pure functions of its legs: how two raced configs compare side by side,
and where each stands against the leader.

A leg is one trial process in which every raced config's loader is alive and their timed blocks take
turns, a shuffled order and then its reverse (a turn pair). Each config's blocks in the leg are saved
as a trial of its own (``Trial.raced``, ``round`` the leg's number), block ``i`` of every one of them
timed in turn ``i``. The observation that compares two configs is one turn pair's mean of
``log(a / b)``: neighbouring blocks, in an order that cancels drift within the pair, so what the
machine does meanwhile hits both alike. Turn pairs are the batches of a batch-means interval:
consecutive blocks are correlated (a neighbour's burst spans several), turn pairs far less so, and
legs (fresh processes) add what differs from one process to the next.

A config stands against the leader as ``slower`` (its ratio below ``1 - floor`` with 95% confidence,
one-sided), ``tied`` (above ``1 - floor`` with 95% confidence: it cannot be more than the floor slower;
the two one-sided tests of an equivalence test), or ``undecided``. The race goes on with the leader
and the undecided. When it ends, the pick is the cheapest of the leader, those tied with it, and those
still undecided whose ratio lies within the floor (``close``: no test could separate them, and their
measured difference is smaller than a worker is worth); an undecided config further behind is never
picked over the leader.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from loadtune.model.config import TrialConfig
from loadtune.model.estimate import t975
from loadtune.model.trial import Trial

MIN_PAIRS = 3  # turn pairs before a ratio gets an interval: fewer give t(1), t(2) intervals that decide nothing
# Student's t, 95% one-sided (the 90% two-sided quantile), by degrees of freedom: the decisions' bounds
T95 = [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
       1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697]

LEADER, TIED, SLOWER, UNDECIDED = "leader", "tied", "slower", "undecided"


@dataclass(frozen=True)
class RaceRatio:
    """``a / b`` side by side in the race: the mean over turn pairs (geometric), its 95% interval, and
    how many turn pairs and legs it rests on."""

    value: float
    low: float
    high: float
    pairs: int
    legs: int
    sure_low: float = 0.0  # one-sided 95% bounds: what the verdicts test against the floor
    sure_high: float = math.inf
    se: float = 0.0  # of the log ratio, and its degrees of freedom: what another leg could narrow
    df: int = 0
    within: float = 0.0  # variance of one turn pair's log ratio within a leg (``variance_parts``)
    between: float = 0.0  # what the legs' means vary beyond it: with ``within``, what another leg would narrow

    @property
    def halfwidth(self) -> float:
        """The interval's half-width, relative (the larger side)."""
        return max(self.high / self.value - 1, 1 - self.low / self.value)

    def text(self) -> str:
        return f"{self.value:.2f}× ({self.low:.2f}–{self.high:.2f})"


@dataclass(frozen=True)
class Standing:
    """Where a raced config stands against the leader: its ratio to it (None for the leader) and the verdict."""

    config: TrialConfig
    status: str  # LEADER, TIED, SLOWER, UNDECIDED
    ratio: RaceRatio | None


@dataclass(frozen=True)
class RaceVerdict:
    """The race so far: the leader and every other raced config's standing against it."""

    leader: TrialConfig
    standings: list[Standing]

    @property
    def undecided(self) -> list[TrialConfig]:
        return [s.config for s in self.standings if s.status == UNDECIDED]

    @property
    def decided(self) -> bool:
        return not self.undecided

    def standing(self, config: TrialConfig) -> Standing | None:
        return next((s for s in self.standings if s.config == config), None)


def legs(trials: list[Trial]) -> dict[int, dict[TrialConfig, Trial]]:
    """The race's legs by number: each raced config's trial in it."""
    out: dict[int, dict[TrialConfig, Trial]] = {}
    for t in trials:
        if t.raced:
            out.setdefault(t.leg, {})[t.config] = t
    return out


def raced_configs(trials: list[Trial]) -> list[TrialConfig]:
    """Every config that ran in a leg that measured it, in order of first appearance."""
    return list(dict.fromkeys(t.config for t in trials if t.raced and t.ok))


def pair_logs(a: Trial, b: Trial) -> list[float]:
    """One leg's observations of ``a / b``: per turn pair, the mean of the two turns' log ratios. A pair
    counts only when both loaders completed a block in both its turns."""
    out = []
    for k in range(0, min(len(a.blocks), len(b.blocks)) - 1, 2):
        ra = (a.blocks[k].rate, a.blocks[k + 1].rate)
        rb = (b.blocks[k].rate, b.blocks[k + 1].rate)
        if min(ra + rb) > 0:
            out.append((math.log(ra[0] / rb[0]) + math.log(ra[1] / rb[1])) / 2)
    return out


def race_ratio(trials: list[Trial], a: TrialConfig, b: TrialConfig) -> RaceRatio | None:
    """``a / b`` from every leg that raced both; None before ``MIN_PAIRS`` turn pairs."""
    groups = []
    for leg in legs(trials).values():
        ta, tb = leg.get(a), leg.get(b)
        if ta is not None and tb is not None and ta.ok and tb.ok:
            got = pair_logs(ta, tb)
            if got:
                groups.append(got)
    logs = [x for g in groups for x in g]
    n = len(logs)
    if n < MIN_PAIRS:
        return None
    mean = statistics.fmean(logs)
    within, between = variance_parts(groups)
    se, df = mean_error(within, between, n, len(groups))
    half, sure = t975(df) * se, t95(df) * se
    return RaceRatio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, len(groups),
                     math.exp(mean - sure), math.exp(mean + sure), se, df, within, between)


def variance_parts(groups: list[list[float]]) -> tuple[float, float]:
    """The turn pairs' variance within a leg, and what the legs add beyond it, with legs as groups.

    Within a leg the pairs share a process: its workers' placement on the cores, its memory layout.
    When the legs' means disagree beyond what their pairs' spread explains, that process-to-process
    component counts for the mean over legs (a one-way random-effects model), so a ratio that differs
    from one process to the next is not credited with the precision of its many pairs. When they agree
    (or there is one leg), there is no such component, and the within part is the pairs' plain variance."""
    logs = [x for g in groups for x in g]
    n, k = len(logs), len(groups)
    if k >= 2 and n - k >= 1:
        within = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups) / (n - k)
        legs_spread = statistics.variance([statistics.fmean(g) for g in groups])  # of the legs' means
        extra = legs_spread - within / (n / k)  # beyond their pairs' noise (n / k pairs per leg)
        if extra > 0:
            return within, extra
    return statistics.variance(logs), 0.0


def mean_error(within: float, between: float, n: int, k: int) -> tuple[float, int]:
    """Standard error of the mean of ``n`` turn pairs over ``k`` legs, and its degrees of freedom, from
    the variance parts (``variance_parts``): Satterthwaite's where the legs add a part of their own."""
    a, b = within / n, between / k
    if b <= 0:
        return math.sqrt(a), n - 1
    df = (a + b) ** 2 / (a * a / (n - k) + b * b / (k - 1))
    return math.sqrt(a + b), max(1, int(df))


def after_another_leg(ratio: RaceRatio, pairs: int) -> float:
    """The half-width (relative) ``ratio``'s interval would have after one more leg of ``pairs`` turn
    pairs, were its variance parts to stay as measured: more pairs shrink the within part, one more leg
    the legs' part, and both add degrees of freedom. Two legs that disagree leave one degree of freedom
    (t = 12.7); a third gives two or more (t <= 4.3)."""
    se, df = mean_error(ratio.within, ratio.between, ratio.pairs + pairs, ratio.legs + 1)
    return math.exp(t975(df) * se) - 1


def t95(df: int) -> float:
    """Student's t, 95% one-sided, for ``df`` >= 1 (1.645 past the table)."""
    return T95[df - 1] if df <= len(T95) else 1.645


def leader_of(trials: list[Trial], configs: list[TrialConfig]) -> TrialConfig | None:
    """The config that the race puts ahead: the one whose worst ratio to any other is highest (it beats
    every other where there is such a config)."""
    def worst(c: TrialConfig) -> float:
        ratios = [r.value for d in configs if d != c and (r := race_ratio(trials, c, d)) is not None]
        return min(ratios, default=-math.inf)

    return max(configs, key=worst, default=None)


def standing_of(ratio: RaceRatio | None, floor: float) -> str:
    """A config's verdict against the leader from their ratio (config / leader)."""
    if ratio is None:
        return UNDECIDED
    if ratio.sure_high < 1 - floor:
        return SLOWER
    if ratio.sure_low >= 1 - floor:
        return TIED
    return UNDECIDED


def close(standing: Standing, floor: float) -> bool:
    """Undecided, and its measured ratio to the leader within the floor: picked like a tied config once
    the race has ended (no test separated them, and the difference measured is not worth a worker)."""
    return standing.status == UNDECIDED and standing.ratio is not None and standing.ratio.value >= 1 - floor


def verdict(trials: list[Trial], floor: float) -> RaceVerdict | None:
    """Where every raced config stands against the leader; None before any leg measured enough turn
    pairs for a ratio (a leg cut short has no leader)."""
    configs = raced_configs(trials)
    leader = leader_of(trials, configs)
    if leader is None:
        return None
    ratios = {c: race_ratio(trials, c, leader) for c in configs if c != leader}
    if all(r is None for r in ratios.values()):
        return None
    standings = [Standing(leader, LEADER, None)]
    standings += [Standing(c, standing_of(r, floor), r) for c, r in ratios.items()]
    return RaceVerdict(leader, standings)


def could_decide(ratio: RaceRatio | None, floor: float, pairs: int) -> bool:
    """Whether ``pairs`` more turn pairs could bring an undecided ratio to a verdict, were the ratio and
    the pairs' spread to stay as measured: its standard error shrinks as the square root of the pairs,
    and one of the two tests must then clear ``1 - floor``. A ratio that sits on the floor (0.975 with
    a ±2% interval) would need tens of legs; racing it on spends the budget and changes no pick (an
    undecided config is picked exactly as when the legs run out). Without a ratio yet: it could."""
    if ratio is None or ratio.se <= 0 or ratio.pairs < 1:
        return True
    se = ratio.se * math.sqrt(ratio.pairs / (ratio.pairs + pairs))
    return abs(math.log(ratio.value) - math.log(1 - floor)) >= t95(ratio.df + pairs) * se


def narrows(ratio: RaceRatio, wide: float, pairs: int) -> bool:
    """Whether a ratio's interval is wider than ``wide`` and one more leg of ``pairs`` turn pairs would
    bring it within ``wide`` or halve it (``after_another_leg``); without ``pairs``, whether it is wider.
    An interval that another leg would narrow only a little (a workload whose blocks spread widely, with
    its degrees of freedom already plenty) rests: the leg would cost its time and change little."""
    if ratio.halfwidth <= wide:
        return False
    return pairs <= 0 or after_another_leg(ratio, pairs) <= max(wide, ratio.halfwidth / 2)


def next_leg(v: RaceVerdict, wide: float = math.inf, floor: float | None = None, pairs: int = 0,
             pick: TrialConfig | None = None, to_pick: dict[TrialConfig, RaceRatio] | None = None) -> list[TrialConfig]:
    """Who races on: the leader and the undecided, and the pick with every config whose ratio to it
    ``narrows`` (a verdict may stand, but the figure the table prints beside it tells a reader nothing);
    nobody when none of them is left. ``pick`` is the leader unless given, ``to_pick`` each other raced
    config's ratio to it (``relative_to``). With ``floor`` and ``pairs`` (a leg's turn pairs), an
    undecided config that one more leg could not decide (``could_decide``) rests unless its ratio to the
    pick narrows."""
    pick = pick or v.leader
    if to_pick is None:
        to_pick = {s.config: s.ratio for s in v.standings if s.ratio is not None}
    loose = {c for c, r in to_pick.items() if c != pick and narrows(r, wide, pairs)}

    def races_on(s: Standing) -> bool:
        if s.config in loose:
            return True
        return s.status == UNDECIDED and (floor is None or could_decide(s.ratio, floor, pairs))

    rest = [s.config for s in v.standings if s.status != LEADER and races_on(s)]
    if not rest and not loose:
        return []
    return list(dict.fromkeys([v.leader, *([pick] if loose else []), *rest]))


def race_order(trials: list[Trial], floor: float) -> list[TrialConfig]:
    """The raced configs as the race ranks them: the leader, then the others by their ratio to it."""
    v = verdict(trials, floor)
    if v is None:
        return []
    rest = sorted((s for s in v.standings if s.status != LEADER), key=lambda s: -(s.ratio.value if s.ratio else 0.0))
    return [v.leader, *(s.config for s in rest)]


def relative_to(trials: list[Trial], pick: TrialConfig) -> dict[TrialConfig, RaceRatio]:
    """Every raced config's ratio to ``pick``, side by side (where they shared enough turn pairs)."""
    return {c: r for c in raced_configs(trials) if c != pick and (r := race_ratio(trials, c, pick)) is not None}
