"""The race's decisions, as pure functions of its legs: how two raced configs compare side by side,
and where each stands against the leader.

A leg is one trial process in which every raced config's loader is alive and their timed blocks take
turns, a shuffled order and then its reverse (a turn pair). Each config's blocks in the leg are saved
as a trial of its own (``Trial.leg`` the leg's number), block ``i`` of every one of them timed in turn
``i``. The observation that compares two configs is one turn pair's mean of ``log(a / b)``:
neighbouring blocks, in an order that cancels drift within the pair, so what the machine does
meanwhile hits both alike. Turn pairs are the batches of a batch-means interval: consecutive blocks are
correlated (a neighbour's burst spans several), turn pairs far less so, and legs (fresh processes, the
comparison's groups: ``analysis.comparison``) add what differs from one process to the next.

A config stands against the leader as ``slower`` (its whole 95% interval below ``1 - floor``), ``tied``
(its whole interval within the floor either side of 1: from ``1 - floor`` to ``1 / (1 - floor)``), or
``undecided``: the verdict reads the interval printed beside it (``Comparison.against_floor``). A tie is
an interval inside the floor, not a point ratio near 1: 1.00× (0.76–1.31) is undecided. One whose
standing rests on a state the scan did not set is undecided whatever it reads (``unsettled``). Who
races each leg is ``RacePolicy``'s, the scan's and autotune's alike. When the race ends, the pick is
the cheapest of the leader and those tied with it (``recommend.race_pick``); a config still undecided,
however near 1 its ratio reads, is never picked over the leader (the cheaper one by default would
be a guess): the pick's reason says it was undecided, with its interval, and the notes say why the race
ended there and what would narrow it (``engine.race.ending_note``, ``precision_note``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from loadtune.analysis.budget import RaceClock, narrowing
from loadtune.analysis.comparison import UNDECIDED, Comparison, after_more, compare, singly
from loadtune.analysis.footprint import fault_regimes, fresh_text, takes_fresh_pages
from loadtune.analysis.noise import NOTHING_LEARNED, Z975, RunNoise, alone, long_run, run_levels, run_noise, tie_floor
from loadtune.analysis.stats import Ratio, ratio
from loadtune.model.config import TrialConfig
from loadtune.model.estimate import t975
from loadtune.model.results import ConfigResult, by_config
from loadtune.model.trial import Trial

MIN_PAIRS = 3  # turn pairs before a ratio gets an interval: fewer give t(1), t(2) intervals that decide nothing
PAIRS_PER_LEG = 3  # turn pairs a leg times: a fresh process every few pairs
# legs every raced config runs before the race may decide: a leg's pairs share their processes (where
# each landed on the cores, its memory), and what differs between processes enters a ratio's interval
# only from its second leg on; decided in one leg, intervals held long runs' ratio in 16 of 21 races
MIN_LEGS = 2
# from its second leg on, a config whose ratio to the pick (the figure the table prints) is known no
# better than this races on with the pick, where the legs left would bring it within this or one more
# would halve it (``worth_a_leg``); the precision worth acting on
WIDE = 0.05
# ...and the gain over the baseline (the headline figure), where the legs left cannot bring it within
# WIDE, races on toward this instead: a gain known to +-15% after two legs reaches +-10% in two or three
# more, where +-5% would take ten
GAIN_WIDE = 0.10
# while wider than GAIN_WIDE, the gain races every leg left that narrows it by this share at least:
# three legs that disagree leave a t(2) = 4.3 interval, which each further leg narrows by a fifth or more
GAIN_STEP = 0.10
# loaders alive at once in a leg, at most: each racer adds its own turns and warm-up to every leg (a
# fourth cost 8% of the summed time to the answer: benchmarks/RESULTS.md, "Three racers, not four")
MAX_RACERS = 3

LEADER = "leader"
# how far apart (beyond both intervals) a race's ratio and the same configs' runs alone must lie to be two
# states rather than drift: a leg reads a few percent low beside a lighter neighbour, the allocator's states
# 1.5-3.5x apart (benchmarks/RESULTS.md, "Fresh pages")
REGIME_GAP = 0.15
# how far a race's ratio and the same pair's runs alone may read apart (points) before the pair is
# measured again alone (``disputes``), and the rounds of that measurement that settle it
DISPUTE_GAP = 0.15
REFEREE_LEAST = 3
# the odds by which the rounds must favour one reading (the race's or the runs' alone) to say it held: at
# 5 to 1, neither reading favoured beforehand, the other one held at most one time in six
HELD_ODDS = 5.0
RACE_HELD, ALONE_HELD = "race", "alone"


@dataclass(frozen=True)
class Standing:
    """Where a raced config stands against the leader: its ratio to it (None for the leader) and the verdict."""

    config: TrialConfig
    status: str  # LEADER, TIED, SLOWER, UNDECIDED
    ratio: Comparison | None
    unsettled: str | None = None  # why its standing rests on a state the scan did not set (``unsettled``)


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

    @property
    def order(self) -> list[TrialConfig]:
        """The raced configs as the race ranks them: the leader, then the others by their ratio to it."""
        rest = sorted((s for s in self.standings if s.status != LEADER), key=lambda s: -(s.ratio.value if s.ratio else 0.0))
        return [self.leader, *(s.config for s in rest)]


def legs(trials: list[Trial]) -> dict[int, dict[TrialConfig, Trial]]:
    """The race's legs by number: each raced config's trial in it."""
    out: dict[int, dict[TrialConfig, Trial]] = {}
    for t in trials:
        if t.raced:
            out.setdefault(t.leg, {})[t.config] = t
    return out


def legs_raced(trials: list[Trial], config: TrialConfig) -> int:
    """How many legs ``config`` ran in (a leg that failed it counts: it is not raced again for that)."""
    return len({t.leg for t in trials if t.raced and t.config == config})


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


def leg_ratio(trials: list[Trial], a: TrialConfig, b: TrialConfig) -> Comparison | None:
    """``a / b`` side by side in the race: every leg that raced both, each leg's turn pairs a group
    (``analysis.comparison``); None before ``MIN_PAIRS`` turn pairs."""
    groups = []
    for leg in legs(trials).values():
        ta, tb = leg.get(a), leg.get(b)
        if ta is not None and tb is not None and ta.ok and tb.ok:
            groups.append(pair_logs(ta, tb))
    return compare(groups, least=MIN_PAIRS)


def race_ratio(trials: list[Trial], a: TrialConfig, b: TrialConfig) -> Comparison | None:
    """``a / b`` as the scan rules it: where the referee measured the pair again alone, as its ruling
    has it (``Ruling.ratio``), else side by side in the race (``leg_ratio``)."""
    ruled = ruling(trials, a, b)
    return ruled.ratio if ruled is not None else leg_ratio(trials, a, b)


def by_rounds(trials: list[Trial], a: TrialConfig, b: TrialConfig) -> bool:
    """Whether the pair's ratio is the referee's rounds' (``Ruling.ratio``), not the race's turns."""
    ruled = ruling(trials, a, b)
    return ruled is not None and ruled.ratio is ruled.rounds


def referee_logs(trials: list[Trial], a: TrialConfig, b: TrialConfig) -> list[float]:
    """log(a / b) in each referee round that measured both: two trials of their own, one after the
    other in fresh processes (``Trial.referee``, the round's number)."""
    rounds: dict[int, dict[TrialConfig, float]] = {}
    for t in trials:
        if t.referee and t.config in (a, b) and t.estimate is not None and t.estimate.median > 0:
            rounds.setdefault(t.referee, {})[t.config] = t.estimate.median
    return [math.log(r[a] / r[b]) for r in rounds.values() if a in r and b in r]


def referee_ratio(trials: list[Trial], a: TrialConfig, b: TrialConfig) -> Comparison | None:
    """``a / b`` from the referee's rounds (``referee_logs``), each round a process pair of its own;
    None before ``REFEREE_LEAST`` rounds."""
    return compare(singly(referee_logs(trials, a, b)), least=REFEREE_LEAST)


@dataclass(frozen=True)
class Ruling:
    """A pair the referee measured again alone: the race's reading, the runs' alone, the rounds', and
    which of the first two the rounds bear out (``RACE_HELD``, ``ALONE_HELD``, or None: neither by
    ``HELD_ODDS``)."""

    raced: Comparison
    solo: float
    rounds: Comparison
    held: str | None
    # the rounds' own spread covers the gap between the two readings: one pair of runs alone lands
    # that far from the race by chance (``ruling``), so their disagreement was no evidence
    explained: bool = False

    @property
    def ratio(self) -> Comparison:
        """The pair's ratio: the race's where the rounds bear it out (its turns side by side measure
        the same ratio more tightly than a few process pairs: four rounds of the README example read
        0.68x (0.45-1.01) where the race read 0.69x (0.61-0.78)), or favour neither reading while their
        own spread explains the runs alone's (the dispute was one process pair's luck); else the
        rounds' own (the race read something training does not see, or the rounds cannot yet say
        which reading held and the gap is more than runs alone spread)."""
        return self.raced if self.held == RACE_HELD or (self.held is None and self.explained) else self.rounds


def ruling(trials: list[Trial], a: TrialConfig, b: TrialConfig) -> Ruling | None:
    """The referee's ruling on ``a / b``; None where its rounds are too few (``referee_ratio``) or a
    reading to weigh them against is missing. A reading held where the rounds' mean is ``HELD_ODDS``
    times likelier under it than under the other (Student's t with the rounds' own error)."""
    rounds = referee_ratio(trials, a, b)
    if rounds is None:
        return None
    raced = leg_ratio(trials, a, b)
    by = {c.config: c for c in by_config([t for t in trials if not t.referee])}
    solo = solo_point(by[a], by[b]) if a in by and b in by else None
    if raced is None or solo is None:
        return None
    odds = t_odds(math.log(raced.value / rounds.value), math.log(solo / rounds.value), rounds.se, rounds.df)
    held = RACE_HELD if odds >= HELD_ODDS else ALONE_HELD if odds <= 1 / HELD_ODDS else None
    return Ruling(raced, solo, rounds, held, within_spread(raced, solo, rounds))


def within_spread(raced: Comparison, solo: float, rounds: Comparison) -> bool:
    """Whether one pair of runs alone lands ``solo`` from the race's reading by chance, judged by how far
    the referee's rounds (each a pair of runs alone in fresh processes) spread from one another: the
    gap within Student's t of the rounds' spread and the race's own error. The dispute was raised with
    the runs' blocks for their error; the rounds measure what a process pair adds (on the README
    example, rounds of 0.74, 0.53, 0.76 and 0.95: a pair reading 0.80 beside a race's 0.67 is no
    disagreement). ``rounds`` is ``referee_ratio``'s: one round a group, so its ``within`` is the rounds'
    own variance and its ``df`` theirs."""
    return abs(math.log(solo / raced.value)) <= t975(rounds.df) * math.sqrt(rounds.within + raced.se ** 2)


def t_odds(near: float, far: float, se: float, df: int) -> float:
    """How much likelier an estimate lies ``near`` (in standard errors ``se``) a true value than ``far``
    from another, with Student's t of ``df`` degrees of freedom: the few rounds' error is itself rough."""
    if se <= 0 or df < 1:
        return math.inf if abs(near) < abs(far) else 0.0 if abs(near) > abs(far) else 1.0
    density = lambda d: (1 + (d / se) ** 2 / df) ** (-(df + 1) / 2)
    return density(near) / density(far)


def solo_point(a: ConfigResult, b: ConfigResult) -> float | None:
    """``a / b`` from their runs timed alone (``solo_ratio``'s point: their medians), where both have one."""
    solo = solo_ratio(a, b, NOTHING_LEARNED)
    return solo.value if solo is not None else None


def block_noise(config: ConfigResult) -> float:
    """The variance its runs alone's own blocks leave in their mean level (log scale): what a handful
    of short blocks can move a run's median by, apart from where the process landed."""
    levels = run_levels(alone(config))
    return statistics.fmean(w for _, w in levels) / len(levels) if levels else 0.0


def disputes(trials: list[Trial], v: RaceVerdict | None) -> list[tuple[TrialConfig, TrialConfig]]:
    """The raced configs, each with the leader, whose race ratio and runs alone read more than
    ``DISPUTE_GAP`` apart (their points: the runs alone's intervals, which carry the spread between
    processes, are often too wide to disagree beyond) by more than the race's own error and the runs'
    blocks explain, and that the referee has not measured yet. A reading that holds only in the race's
    processes says nothing of training's (a race read a copy-on-write dataset's w0 at 1.00x w2, its
    runs alone 0.72x, plain loops 0.79x), and which of the two held is measured, not voted: the pair
    timed again alone, in fresh processes, back to back (``engine.referee``). Pairs where one config's
    speed follows its allocator's state are left out: their runs differ by that state (``unsettled``)."""
    if v is None:
        return []
    by = {c.config: c for c in by_config(trials)}
    regimes = allocator_regimes(trials, by, raced_configs(trials))
    out = []
    for s in v.standings:
        a, b = s.config, v.leader
        if s.status == LEADER or a in regimes or b in regimes or referee_logs(trials, a, b):
            continue
        raced, solo = leg_ratio(trials, a, b), solo_point(by[a], by[b])
        if raced is None or solo is None:
            continue
        gap = abs(math.log(raced.value / solo))
        if gap > math.log(1 + DISPUTE_GAP) and gap > Z975 * math.sqrt(raced.se ** 2 + block_noise(by[a]) + block_noise(by[b])):
            out.append((a, b))
    return out


def referee_note(trials: list[Trial]) -> str | None:
    """What the scan says of each pair it refereed: the race's reading, the runs' alone, the rounds',
    and which of the first two held (``ruling``)."""
    pairs = list(dict.fromkeys(tuple(sorted((t.config for t in trials if t.referee == r), key=lambda c: c.key))
                               for r in {t.referee for t in trials if t.referee}))
    parts = []
    for pair in pairs:
        if len(pair) != 2:
            continue
        a, b = pair
        ruled = ruling(trials, a, b)
        if ruled is None:
            if referee_ratio(trials, a, b) is not None:
                continue  # rounds enough, but no race or no runs alone to weigh them against
            rounds = len(referee_logs(trials, a, b))
            parts.append(f"{a.label()} / {b.label()}: {rounds} round{'s' if rounds != 1 else ''} alone, too few to "
                         "rule (the budget, or a failed trial): the race's reading stands")
            continue
        said = (f"{a.label()} / {b.label()}: the race read {ruled.raced.value:.2f}×, the runs alone {ruled.solo:.2f}×; "
                f"{ruled.rounds.pairs} rounds alone in fresh processes read {ruled.rounds.text()}: ")
        parts.append(said + {RACE_HELD: "the race held, and its interval stands",
                             ALONE_HELD: "the runs alone held, and the rounds' interval stands"}.get(
            ruled.held, "they favour neither reading, and pairs of runs alone spread as far as the runs alone read "
                        "from the race: no disagreement, and the race's interval stands" if ruled.explained else
                        "too few to say which held, and the rounds' interval stands"))
    if not parts:
        return None
    return ("measured again where the race and the runs alone disagreed by more than "
            f"{DISPUTE_GAP:.0%}, and ruled by those rounds: " + "; ".join(parts))


def leader_of(trials: list[Trial], configs: list[TrialConfig]) -> TrialConfig | None:
    """The config that the race puts ahead: the one whose worst ratio to any other is highest (it beats
    every other where there is such a config)."""
    def worst(c: TrialConfig) -> float:
        ratios = [r.value for d in configs if d != c and (r := race_ratio(trials, c, d)) is not None]
        return min(ratios, default=-math.inf)

    return max(configs, key=worst, default=None)


def standing_of(ratio: Comparison | None, floor: float) -> str:
    """A config's verdict against the leader from their ratio (config / leader)."""
    return UNDECIDED if ratio is None else ratio.against_floor(floor)


def verdict(trials: list[Trial], floor: float) -> RaceVerdict | None:
    """Where every raced config stands against the leader; None before any leg measured enough turn
    pairs for a ratio (a leg cut short has no leader). The leader is one whose speed the scan
    controlled where there is one (not one whose allocator ran in states that move its speed:
    ``fault_regimes``, ``allocator_moves``); a config whose standing rests on a state the scan did
    not set is undecided, whatever its ratio reads (``unsettled``)."""
    configs = raced_configs(trials)
    by = {c.config: c for c in by_config(trials)}
    regimes = allocator_regimes(trials, by, configs)
    leader = leader_of(trials, [c for c in configs if c not in regimes] or configs)
    if leader is None:
        return None
    ratios = {c: race_ratio(trials, c, leader) for c in configs if c != leader}
    if all(r is None for r in ratios.values()):
        return None
    standings = [Standing(leader, LEADER, None)]
    for c, r in ratios.items():
        why = unsettled(trials, by, c, leader, regimes, pair_noise(trials, by, c, leader), r)
        standings.append(Standing(c, UNDECIDED if why else standing_of(r, floor), r, why))
    return RaceVerdict(leader, standings)


def pair_noise(trials: list[Trial], by: dict[TrialConfig, ConfigResult], a: TrialConfig, b: TrialConfig) -> RunNoise:
    """The run-to-run spread that ``a`` and ``b``'s runs alone are judged with (``unsettled``). Where
    neither takes its batches' pages fresh (``footprint.takes_fresh_pages``), their speed follows no
    state of their own, only the machine's pace: the spread is learned from every run of the scan, the
    other configs' legs included, as a machine that wanders moves every run's level, solo or raced (on
    such a machine the README example's w2 read 0.70x w4 alone and 1.0x side by side, and long loops
    agreed with the race). Where one does, a gap between its runs alone and its legs is that state's
    signature, and the runs alone are judged by their own spread: on 96 MiB batches, the other
    configs' legs would have hidden the defaults' two speeds (3.1x side by side, 2.6x in long loops).
    Never the pair's own legs either way: their levels would widen it by the very gap the test looks for."""
    steady = not any(takes_fresh_pages(by[c]) for c in (a, b) if c in by)
    return run_noise(by_config([t for t in trials if not t.raced or (steady and t.config not in (a, b))]))


# fresh processes, at least, that a config whose speed follows its allocator's state is timed in. Which state
# a process lands in is chance: the heap's history, which Python's hash randomization and the address-space
# layout shuffle from one process to the next (with both fixed, a process lands in the same state every time:
# benchmarks/RESULTS.md, "Fresh pages"). Where one process in three lands in the rarer state, six show both
# nine times in ten.
STATE_PROCESSES = 6


def state_processes_wanted(trials: list[Trial], by: dict[TrialConfig, ConfigResult], config: TrialConfig) -> int:
    """How many more fresh processes ``config`` needs before the range of its speed can be said to span
    its allocator's states: where it takes its batches' pages fresh and that state moves its speed
    (``allocator_moves``), and its runs so far show one state (not ``fault_regimes``), up to
    ``STATE_PROCESSES`` processes in all (each run is one: the screening's, each leg's, each round's);
    else none. A training job's process draws its state as the scan's do, so a range that saw one state
    says nothing of the other."""
    c = by.get(config)
    if c is None or not c.ok or not takes_fresh_pages(c) or fault_regimes(c) or not allocator_moves(trials, by, c):
        return 0
    return max(0, STATE_PROCESSES - sum(1 for t in c.trials if t.ok))


def states_note(config: ConfigResult) -> str:
    """What the processes timed for a config's allocator states found (``state_processes_wanted``)."""
    runs = sum(1 for t in config.trials if t.ok)
    found = ("both states showed" if fault_regimes(config) else
             "one state showed in all of them (a rarer one, where there is one, came in none)")
    return (f"{config.config.label()} was timed in {runs} fresh processes: its speed follows the state its allocator "
            "takes on in each process by chance (the heap's history, which hash randomization and the address-space "
            f"layout shuffle), as a training job's process does; {found}: {fresh_text(config)}")


def allocator_regimes(trials: list[Trial], by: dict[TrialConfig, ConfigResult], configs: list[TrialConfig]) -> set[TrialConfig]:
    """Those of ``configs`` whose runs took pages in states of their allocator (``footprint.fault_regimes``)
    that move their speed (``allocator_moves``): their standing rests on a state the scan did not set."""
    return {c for c in configs if fault_regimes(by[c]) and allocator_moves(trials, by, by[c])}


def allocator_moves(trials: list[Trial], by: dict[TrialConfig, ConfigResult], config: ConfigResult) -> bool:
    """Whether the allocator's state moves ``config``'s speed by ``REGIME_GAP`` or more, as far as the scan
    measured it: the same loader with the heap kept (``TrialConfig.heap``) ran that much faster, side by
    side where both raced, else over their runs alone (``noise.alone``: a leg reads a config's level low
    while the others take their turns, so the kept heap's screening run against the plain loader's legs
    read the README's images 1.18x apart where their runs alone put the heap at 0.93x), and then by more
    than two single runs of one config land apart (``noise.tie_floor``: on a wandering machine runs
    alone, minutes apart, read them 1.38x apart where their legs put the heap at 0.8x). Without that
    measurement (not glibc), it is taken to. A loader that computes much per byte (the README's images:
    up to 6 MiB of 18 MiB batches fresh) loses little to its faults: the states its allocator ran in
    are no regimes of its speed, and its verdicts and the gain over it keep their intervals."""
    kept = next((c for c in by.values() if c.ok and c.config.heap and c.config.with_knobs(heap=None) == config.config), None)
    if kept is None:
        return True
    raced = race_ratio(trials, kept.config, config.config)
    if raced is not None:
        return raced.value >= 1 + REGIME_GAP
    mine, theirs = alone(kept).estimate, alone(config).estimate
    floor = tie_floor(run_noise(list(by.values())), REGIME_GAP)
    return mine is None or theirs is None or mine.median >= (1 + floor) * theirs.median


def unsettled(trials: list[Trial], by: dict[TrialConfig, ConfigResult], a: TrialConfig, b: TrialConfig,
              regimes: set[TrialConfig], noise: RunNoise, raced: Comparison | None = None) -> str | None:
    """Why ``a``'s standing against ``b`` rests on a state the scan did not set, if it does: one of them
    ran in two states of its allocator (``footprint.fault_regimes``), or the race's ratio and their runs
    alone disagree beyond both intervals (a ratio that holds only in the processes that measured it says
    nothing of the next). Another leg in that state does not settle it. ``raced``: their race ratio,
    where the caller has it."""
    for c in (a, b):
        if c in regimes:
            return f"{fresh_text(by[c])}, as its allocator's state in each process had it"
    solo = solo_ratio(by[a], by[b], noise)
    raced = raced or race_ratio(trials, a, b)
    if solo is None or raced is None or max(solo.low / raced.high, raced.low / solo.high) <= 1 + REGIME_GAP:
        return None
    return (f"side by side {a.label()} read {raced.text()} {b.label()}, its runs alone {solo.value:.2f}× "
            f"({solo.low:.2f}–{solo.high:.2f}): the two disagree beyond both intervals")


def joined_note(trials: list[Trial], entrants: list[TrialConfig]) -> str | None:
    """What a race says of the config that joined it after its first legs (``RacePolicy.racing``'s
    challenger): who, from which leg, and why its run alone had not been enough to leave it out."""
    first: dict[TrialConfig, int] = {}
    for t in trials:
        if t.raced and t.config not in entrants:
            first[t.config] = min(first.get(t.config, t.leg), t.leg)
    if not first:
        return None
    who = ", ".join(f"{c.label()} (from leg {leg})" for c, leg in first.items())
    return (f"joined the race once its legs had measured how far runs land apart: {who}. Its run alone had read "
            "it clearly slower than the pick, which that spread no longer did, and it is cheaper")


def unsettled_configs(v: RaceVerdict | None) -> frozenset[TrialConfig]:
    """The raced configs whose standing rests on a state the scan did not set."""
    return frozenset(s.config for s in v.standings if s.unsettled) if v is not None else frozenset()


def run_range(config: ConfigResult) -> tuple[float, float] | None:
    """The slowest and the fastest of its runs' medians (solo and legs): the range it was seen at."""
    levels = [t.estimate.median for t in config.trials if t.ok and t.estimate is not None]
    return (min(levels), max(levels)) if levels else None


def unsettled_note(trials: list[Trial], v: RaceVerdict | None) -> str | None:
    """What a race says when a standing rested on a state the scan did not set: who, why, and the range
    of speeds it ran at; none of them is given a verdict or an interval."""
    if v is None or not any(s.unsettled for s in v.standings):
        return None
    by = {c.config: c for c in by_config(trials)}
    parts = []
    for s in v.standings:
        if s.unsettled:
            seen = run_range(by[s.config])
            span = f"; it ran at {seen[0]:,.0f}–{seen[1]:,.0f} samples/s" if seen else ""
            parts.append(f"{s.config.label()} against {v.leader.label()}: {s.unsettled}{span}")
    return ("a speed that follows a state the scan did not set is not a property of the config: " + "; ".join(parts)
            + ". It is left undecided and not picked; no verdict or gain rests on it")


def solo_ratio(a: ConfigResult, b: ConfigResult, noise: RunNoise) -> Ratio | None:
    """``a / b`` from their runs timed alone, each with its interval for a long run; None where either has
    no such run."""
    if not any(t.ok and not t.raced for t in a.trials) or not any(t.ok and not t.raced for t in b.trials):
        return None
    ea, eb = long_run(alone(a), noise), long_run(alone(b), noise)
    return ratio(ea, eb) if ea is not None and eb is not None else None


def could_decide(ratio: Comparison | None, floor: float, pairs: int) -> bool:
    """Whether ``pairs`` more turn pairs could bring an undecided ratio to a verdict, were the ratio and
    the pairs' spread to stay as measured: its standard error shrinks as the square root of the pairs,
    and its interval must then clear the edge of the tie band (``1 - floor`` to ``1 / (1 - floor)``:
    ``Comparison.against_floor``) nearest the ratio: below the band, ``1 - floor`` (slower); inside it,
    the nearer edge (tied needs both, and the farther one follows); above it, ``1 / (1 - floor)``. A
    ratio that sits on an edge (0.975 with a ±2% interval) would need tens of legs; racing it on spends
    the budget and changes no pick (an undecided config is not picked, whenever the legs run out).
    Without a ratio yet: it could."""
    if ratio is None or ratio.se <= 0 or ratio.pairs < 1:
        return True
    se = ratio.se * math.sqrt(ratio.pairs / (ratio.pairs + pairs))
    edge = min(abs(math.log(ratio.value) - math.log(1 - floor)), abs(math.log(ratio.value) + math.log(1 - floor)))
    return edge >= t975(ratio.df + pairs) * se


MAX_LEGS_AHEAD = 30  # how far ``legs_to`` looks: past it, more legs are not the cure


def legs_to(ratio: Comparison, wide: float, pairs: int) -> int | None:
    """How many more legs of ``pairs`` turn pairs would bring ``ratio``'s interval within ``wide``,
    were its variance parts to stay as measured (0: it is within; None: not within ``MAX_LEGS_AHEAD``)."""
    for extra in range(MAX_LEGS_AHEAD + 1):
        if (ratio.halfwidth if not extra else after_more(ratio, extra * pairs, extra)) <= wide:
            return extra
    return None


def worth_a_leg(ratio: Comparison, wide: float, pairs: int, legs_left: int) -> bool:
    """Whether a ratio wider than ``wide`` races another leg: the legs left could bring it within
    ``wide`` (``legs_to``), or one more would halve it (two legs that disagree leave a t(1) interval,
    0.53x (0.33-0.87), which a third leg more than halves). Otherwise racing on would spend the legs and
    fall short: it rests, and the note says what would narrow it."""
    if legs_left <= 0 or pairs <= 0:
        return False
    more = legs_to(ratio, wide, pairs)
    return (more is not None and more <= legs_left) or after_more(ratio, pairs) <= ratio.halfwidth / 2


def gain_worth_a_leg(ratio: Comparison, pairs: int, legs_left: int) -> bool:
    """Whether the gain over the baseline, wider than ``GAIN_WIDE``, races another leg: where one more
    narrows it by ``GAIN_STEP`` at least. Unlike other ratios (``worth_a_leg``), the gain does not rest
    because the legs left cannot bring it all the way within ``GAIN_WIDE``: it is the figure the user
    reads first, and ±19% narrowed to ±11% decides more than ±19% kept (two README example scans on a
    2-core VM stopped at three legs of six, at ±19% and ±36%, where a fourth would have cut them to ±14%
    and ±19%)."""
    if legs_left <= 0 or pairs <= 0:
        return False
    return after_more(ratio, pairs) <= (1 - GAIN_STEP) * ratio.halfwidth


def next_leg(v: RaceVerdict, wide: float = math.inf, floor: float | None = None, pairs: int = 0,
             pick: TrialConfig | None = None, to_pick: dict[TrialConfig, Comparison] | None = None,
             legs_left: int | None = None, baseline: TrialConfig | None = None) -> list[TrialConfig]:
    """Who races on: the leader and the undecided, and the pick with every config whose ratio to it is
    wider than ``wide`` (a verdict may stand, but the figure the table prints beside it is not yet
    precise enough to act on); nobody when none of them is left. ``pick`` is the leader unless given,
    ``to_pick`` each other raced config's ratio to it (``relative_to``). With ``floor`` and ``pairs`` (a
    leg's turn pairs), an undecided config that one more leg could not decide (``could_decide``) rests
    unless its ratio to the pick is wide; with ``legs_left``, a wide ratio rests unless another leg is
    worth it (``worth_a_leg``). The ``baseline``'s ratio, the gain, that the legs left cannot bring within
    ``wide`` races on while it is wider than ``GAIN_WIDE`` and another leg narrows it (``gain_worth_a_leg``)."""
    pick = pick or v.leader
    if to_pick is None:
        to_pick = {s.config: s.ratio for s in v.standings if s.ratio is not None}
    apart = {s.config for s in v.standings if s.unsettled}  # their intervals are not what more legs narrow

    def too_wide(c: TrialConfig, r: Comparison) -> bool:
        if c == pick or c in apart or r.halfwidth <= wide:
            return False
        if legs_left is None or worth_a_leg(r, wide, pairs, legs_left):
            return True
        return c == baseline and r.halfwidth > GAIN_WIDE and gain_worth_a_leg(r, pairs, legs_left)

    loose = {c for c, r in to_pick.items() if too_wide(c, r)}

    def races_on(s: Standing) -> bool:
        if s.unsettled:  # another leg in a state the scan did not set settles nothing
            return False
        if s.config in loose:
            return True
        return s.status == UNDECIDED and (floor is None or could_decide(s.ratio, floor, pairs))

    rest = [s.config for s in v.standings if s.status != LEADER and races_on(s)]
    if not rest and not loose:
        return []
    return list(dict.fromkeys([v.leader, *([pick] if loose else []), *rest]))


def precision_note(trials: list[Trial], pick: TrialConfig, wide: float, pairs: int, legs_run: int,
                   apart: frozenset[TrialConfig] = frozenset(), clock: RaceClock | None = None) -> str | None:
    """What a race that stopped before every ratio to the pick was within ``wide`` says: how wide each
    is, how many more legs would narrow it (or that more legs are not the cure), and what gives the
    race those legs (``budget.narrowing``: with ``clock``, the ``--race-legs`` and ``--budget`` that hold
    them at the legs' measured length). ``apart``: configs whose standing rests on a state the scan did
    not set (``unsettled``): more legs are not their cure."""
    loose = {c: r for c, r in relative_to(trials, pick).items() if r.halfwidth > wide and c not in apart}
    if not loose:
        return None
    parts, needed = [], {c: legs_to(r, wide, pairs) for c, r in loose.items()}
    for c, r in loose.items():
        more = needed[c]
        cure = (f"about {more} more leg{'s' if more != 1 else ''} would bring it within ±{wide:.0%}" if more is not None
                else "more legs would barely narrow it: its turns spread too widely (loadtune doctor "
                "measures whether this machine's own CPU pace wanders)")
        parts.append(f"{c.label()} {r.text()}, ±{r.halfwidth:.0%}: {cure}")
    most = max((m for m in needed.values() if m is not None), default=None)
    hint = narrowing(most, legs_run, clock) if most else ""
    return (f"the race stopped before its ratios to the pick {pick.label()} were within ±{wide:.0%}: "
            + "; ".join(parts) + hint)


def can_race(race_legs: int, confirm: int, ranks: int) -> bool:
    """Whether the contenders race: unless the user asked for no race (``race_legs`` 0) or no
    re-measuring (``confirm`` 0), and with one rank per trial: several ranks' blocks would have to take
    turns together, which neither the scan's agent (it runs whole trials) nor autotune's ranks (they
    gather whole windows) do. Where it cannot, the closing rounds are the fallback (``search/closing.py``)."""
    return race_legs > 0 and confirm > 0 and ranks == 1


@dataclass(frozen=True)
class RacePolicy:
    """How the race is run, the scan's and autotune's alike: ``floor`` the noise floor the verdicts test
    against, ``max_legs`` the legs at most (``--race-legs``), the rest as measured (module constants)."""

    floor: float
    max_legs: int
    pairs_per_leg: int = PAIRS_PER_LEG
    min_legs: int = MIN_LEGS
    wide: float = WIDE
    racers: int = MAX_RACERS

    def racing(self, trials: list[Trial], entrants: list[TrialConfig], pick: TrialConfig | None = None,
               challenger: Callable[[list[TrialConfig]], TrialConfig | None] | None = None,
               baseline: TrialConfig | None = None) -> list[TrialConfig]:
        """Who runs the next leg: ``entrants`` until the race has a verdict (a leg cut short has none),
        every config raced so far until ``min_legs`` legs are run (``max_legs`` permitting), then the
        leader, the undecided that one more leg could decide, and ``pick`` (a raced config; else the
        leader) with those whose ratio to it is wider than ``wide`` where one more leg would narrow it
        (``next_leg``); a config that joined late races its own first legs beside the best of those
        that ran theirs and the raced ``baseline`` (PyTorch's defaults or the user's settings: the gain
        over it is the headline, and a joiner that becomes the pick must have met it from its first
        leg), then the leader and the pick, racers permitting. A pick that never shared a leg with the
        raced baseline races it next. Where a racer's slot is free and the legs left hold a newcomer's
        first legs, ``challenger`` (given who would race) may name a config to join; one, at most, as
        each costs legs of its own. Empty: the race is over, whatever the legs left."""
        current = verdict(trials, self.floor)
        if current is None:
            return entrants
        raced = raced_configs(trials)
        run = self.legs_run(trials)
        if run < self.first_legs:
            return raced
        pick = pick if pick in raced else current.leader
        to_pick = relative_to(trials, pick)
        base = [baseline] if baseline in raced and baseline != pick else []
        going = next_leg(current, self.wide, self.floor, self.pairs_per_leg, pick, to_pick, self.max_legs - run,
                         base[0] if base else None)
        young = [c for c in raced if legs_raced(trials, c) < self.first_legs]
        if young:  # beside the best of those that ran their first legs: its ratio to them is the one it lacks
            best = [c for c in current.order if c not in young][:1]
            going = list(dict.fromkeys([*best, *young, *base, current.leader, pick, *going]))[:self.racers]
        elif base and baseline not in to_pick:  # the gain over the baseline is no paired figure yet
            going = list(dict.fromkeys([pick, baseline, *going]))[:self.racers]
        if challenger is not None and set(raced) <= set(entrants) and self.max_legs - run >= self.first_legs:
            beside = going or list(dict.fromkeys([current.leader, pick]))
            if len(beside) < self.racers:  # the baseline too, where a slot is left beside the newcomer's
                beside = list(dict.fromkeys([*beside, *base]))[:self.racers - 1]
            joining = challenger(beside) if len(beside) < self.racers else None
            if joining is not None and joining not in raced:
                going = [*beside, joining]
        return going

    @property
    def first_legs(self) -> int:
        """The legs every raced config runs before the race may decide (``max_legs`` permitting)."""
        return min(self.min_legs, self.max_legs)

    @staticmethod
    def legs_run(trials: list[Trial]) -> int:
        return max((t.leg for t in trials if t.raced), default=0)


def race_order(trials: list[Trial], floor: float) -> list[TrialConfig]:
    """The raced configs as the race ranks them (``RaceVerdict.order``); none before a verdict."""
    v = verdict(trials, floor)
    return v.order if v is not None else []


def relative_to(trials: list[Trial], pick: TrialConfig) -> dict[TrialConfig, Comparison]:
    """Every raced config's ratio to ``pick``, side by side (where they shared enough turn pairs)."""
    return {c: r for c in raced_configs(trials) if c != pick and (r := race_ratio(trials, c, pick)) is not None}
