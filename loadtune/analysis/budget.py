"""How long a scan's parts take, and what a ``--budget`` must hold for the contenders to be raced.

Within a budget the screening fills, no race runs and the pick rests on trials timed alone, minutes
apart: on a 16-core GPU machine the README example within 60 s answered at ±13–29%. So the plan
refuses a budget that cannot hold the fewest screening trials before a race is possible and the
race's first legs (those a verdict needs: ``RacePolicy.min_legs``), before any trial starts
(``engine.plan.check_budget``); while the scan runs, the screening stops where the race's first legs
would no longer fit (``engine.scan.race_reserve``), and a race that stops wider than its target says
what budget more legs would take (``narrowing``).

Pure arithmetic: from the timing options before any trial, from the trials' measured times after.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from loadtune.model.settings import BURSTS, ScanOptions
from loadtune.model.trial import Trial

# a trial process's start before its warm-up (the fork, imports, the workers, a CUDA context), allowed
# until one is measured
STARTUP_S = 2.0
# of the scan's warm-up, per raced loader and per screening trial the race follows: its start-up backlog
# is drained whatever this is
WARMUP_SHARE = 0.5
# a turn's length, as a share of the scan's block: a leg times ``pairs`` turn pairs per config
TURN_SHARE = 0.5
# with a race after it, a screening trial times this many blocks at most (unless --min-blocks asks more),
# after a raced loader's share of the warm-up: it only has to find who races, and the race decides
# between them side by side
SCREEN_BLOCKS = 6
# what a turn takes beyond its timed part (its length, ``BURSTS`` rounds of one batch per worker at
# least), in rounds: one untimed (a rest leaves caches cold), and half of one on average where the
# timed part is rounded up to whole rounds
ROUNDS_PER_TURN = 1.5


def screening_blocks(blocks: int, min_blocks: int) -> int:
    """The blocks a screening trial times at most, of a trial's ``blocks`` (``min_blocks`` at least)."""
    return max(min_blocks, min(blocks, SCREEN_BLOCKS))


def screening_trial_s(opts: ScanOptions) -> float:
    """A screening trial's length from the options: start-up, its share of the warm-up, its blocks."""
    return STARTUP_S + opts.warmup * WARMUP_SHARE + opts.block_time * screening_blocks(opts.blocks, opts.min_blocks)


def leg_seconds(opts: ScanOptions, racers: int, pairs: int, ready_s: float | None = None, round_s: float = 0.0) -> float:
    """A leg's length: the racers start and warm up together (``ready_s``; from the options where not
    measured), then each times ``2 × pairs`` turns of half a block and ``BURSTS`` rounds of one batch
    per worker (``round_s``) at least, one racer at a time, each turn ``ROUNDS_PER_TURN`` rounds longer."""
    ready = STARTUP_S + opts.warmup * WARMUP_SHARE if ready_s is None else ready_s
    return ready + racers * 2 * pairs * (max(opts.block_time * TURN_SHARE, BURSTS * round_s) + ROUNDS_PER_TURN * round_s)


def screening_trials(trials: list[Trial]) -> list[Trial]:
    """The trials timed alone, one loader each: the screening's (and a fallback's closing rounds)."""
    return [t for t in trials if t.ok and not t.raced and not t.ranks]


def ready_seconds(trials: list[Trial]) -> float | None:
    """How long a screening trial took before its first timed block (start-up and warm-up), the
    median; None before one finished."""
    spans = [t.wall_s - sum(b.seconds for b in t.blocks) for t in screening_trials(trials)]
    return statistics.median(spans) if spans else None


def round_seconds(trials: list[Trial]) -> float:
    """How long one batch per worker took in the screening trials, the median (0: none measured)."""
    rounds = [sum(b.seconds for b in t.blocks) / batches * max(1, t.config.num_workers)
              for t in screening_trials(trials) if (batches := sum(b.batches for b in t.blocks))]
    return statistics.median(rounds) if rounds else 0.0


def measured_leg_s(opts: ScanOptions, trials: list[Trial], racers: int, pairs: int) -> float:
    """A leg's length as the screening's trials measured the racers' start-up and their batches."""
    return leg_seconds(opts, racers, pairs, ready_seconds(trials), round_seconds(trials))


def readable(seconds: float) -> int:
    """``seconds`` rounded up to a figure one would type: 5 s steps to a minute, 10 s to five, then 30 s."""
    step = 5 if seconds <= 60 else 10 if seconds <= 300 else 30
    return int(math.ceil(seconds / step - 1e-9) * step)


@dataclass(frozen=True)
class RaceNeeds:
    """What a budget must hold for the scan to race: ``trials`` screening trials before a race is
    possible, ``legs`` legs of ``racers`` (the fewest a verdict needs), and one trial's time more, which
    the search keeps for the closing calibration."""

    trials: int
    trial_s: float
    racers: int
    legs: int
    leg_s: float

    @property
    def screening_s(self) -> float:
        return self.trials * self.trial_s

    @property
    def legs_s(self) -> float:
        return self.legs * self.leg_s

    @property
    def total_s(self) -> float:
        return self.screening_s + self.legs_s + self.trial_s

    def allows(self, budget: float) -> bool:
        return budget >= self.total_s

    @property
    def smallest_budget(self) -> int:
        """The least budget, in a figure one would type, that allows a race."""
        return readable(self.total_s)


def race_needs(opts: ScanOptions, trials: int, racers: int, legs: int, pairs: int) -> RaceNeeds:
    """What ``opts``' budget must hold, from the timing options alone (no trial has run)."""
    return RaceNeeds(trials, screening_trial_s(opts), racers, legs, leg_seconds(opts, racers, pairs))


def too_short(budget: float, needs: RaceNeeds) -> str:
    """Why a budget is refused, and what to do: one paragraph."""
    legs = f"{needs.legs} leg{'s' if needs.legs != 1 else ''}"
    return (f"--budget {budget:g} s is too short for a race: it must hold the screening's first {needs.trials} trials, "
            f"PyTorch's defaults and a config with workers among them (≈ {needs.screening_s:.0f} s, ≈ {needs.trial_s:.1f} s "
            f"each), and the race's first {legs}, those a verdict needs (≈ {needs.legs_s:.0f} s: {needs.racers} loaders "
            f"taking turns, ≈ {needs.leg_s:.1f} s a leg), with ≈ {needs.trial_s:.1f} s kept for the closing calibration: "
            f"≈ {needs.total_s:.0f} s in all. Without a race the pick would rest on trials timed alone, far less precise. "
            f"Give --budget {needs.smallest_budget} or more (the least that allows a race; legs often take longer, and "
            f"more lets the race reach its precision), or drop --budget, or pass --race-legs 0 to pick from the "
            f"screening alone within {budget:g} s")


@dataclass(frozen=True)
class RaceClock:
    """The race's time when it stopped: a leg's measured length, the scan's seconds so far, the budget
    and ``--race-legs``, and a trial's time kept for the closing calibration."""

    leg_s: float
    spent_s: float
    budget: float | None
    max_legs: int
    closing_s: float = 0.0


def mean_leg_s(trials: list[Trial]) -> float | None:
    """A leg's measured length, the mean over the legs run (each raced trial holds its share of its leg)."""
    walls: dict[int, float] = {}
    for t in trials:
        if t.raced:
            walls[t.leg] = walls.get(t.leg, 0.0) + t.wall_s
    return statistics.fmean(walls.values()) if walls else None


def narrowing(more: int, legs_run: int, clock: RaceClock | None) -> str:
    """What would give the race ``more`` legs: ``--race-legs`` past its limit, and with a budget, the
    budget that holds them at the legs' measured length."""
    legs = legs_run + more
    if clock is None:
        return f" (--race-legs {legs}, or a --budget that allows them)"
    pace = f"a leg takes about {clock.leg_s:.0f} s here"
    if clock.budget is None:
        return f" (--race-legs {legs}: {pace}, about {readable(more * clock.leg_s)} s more)"
    budget = readable(clock.spent_s + more * clock.leg_s + clock.closing_s)
    if legs > clock.max_legs:
        return f" (--race-legs {legs} with --budget {budget}: {pace})"
    return f" (--budget {budget}: {pace})"
