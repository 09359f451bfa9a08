"""The race: the screening's contenders measured side by side, leg after leg, until the race decides.

In a leg every raced config's loader is alive at once, each in a trial process of its own, and the
parent tells them in turn to time one short block (``engine.trial.duet``): a shuffled order, then its
reverse (``paired.race_orders``). Between its blocks a loader rests frozen, its workers stopped where
they were (``paired.frozen_turn``), so its blocks are windows of one continuous run. Each config's
blocks of a leg come back as a trial of its own (``Trial.raced``, ``round`` the leg's number), so the
pooled figures, the table and the JSON treat a leg as one more run of each config. Every raced config runs at least two legs, in fresh processes
each, so what differs between processes enters the intervals; after that the verdict
(``analysis.race``) sends the leader and the configs still undecided against it, and the pick with the
configs whose ratio to it is known too loosely (``WIDE``) where one more leg would narrow it, into the
next leg, until none is left, the race's legs are spent, or the scan's budget is.

Why a process per config rather than every loader in one: a loader in a shared process paid for its
neighbours' workers. Each fork of a neighbour's workers makes the shared process's pages
copy-on-write again, and a loader without workers, which loads in that process, read up to 3x slow
beside loaders that restart their workers every epoch. In processes of their own, each config's main
process is as it is in training, and the turn switch (a message on a pipe) costs well under a
millisecond against blocks of a tenth of a second and more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from loadtune.analysis.race import RaceVerdict, next_leg, raced_configs, relative_to, verdict
from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.duet import SideEntry, run_in_turns
from loadtune.engine.trial.paired import race_orders
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.config import TrialConfig
from loadtune.model.trial import Trial

PAIRS_PER_LEG = 3  # turn pairs a leg times: a fresh process every few pairs
# legs every raced config runs before the race may decide: a leg's pairs share their processes (where
# each landed on the cores, its memory), and what differs between processes enters a ratio's interval
# only from its second leg on; decided in one leg, intervals held long runs' ratio in 16 of 21 races
MIN_LEGS = 2
# from its second leg on, a config whose ratio to the pick (the figure the table prints) is known no
# better than this races on with the pick, where one more leg would bring it within this or halve it (two
# legs that disagree give a t(1) interval: PyTorch's defaults read 0.53x (0.33-0.87) the pick on
# iterable); one that another leg would narrow only a little rests (analysis.race.narrows)
WIDE = 0.05
# of the scan's warm-up, per raced loader and per screening trial the race follows: its start-up backlog is
# drained whatever this is
WARMUP_SHARE = 0.5
# a turn's length, as a share of the scan's block: a leg times PAIRS_PER_LEG turn pairs per config
TURN_SHARE = 0.5


def run_leg(source: SpecRef | LoadedSpec, request: TrialRequest, configs: list[TrialConfig], number: int,
            seed: int, on_event: Callable[[str, Any], None] | None = None, frozen: bool = True,
            turn_share: float = TURN_SHARE) -> list[Trial]:
    """One leg: ``configs`` raced, a live process each. Returns each config's trial of the leg (failed,
    with its own error or the leg's, where the leg failed or the config timed no block). ``frozen``
    False: resting loaders' workers run on and settle (as ``check --against``'s), for comparison;
    ``turn_share`` other than ``TURN_SHARE``: turns of another length, for comparison."""
    raced = leg_request(request, frozen)
    sides = {i: (source, replace(raced, config=c)) for i, c in enumerate(configs)}
    got = run_in_turns(sides, race_orders(len(configs), PAIRS_PER_LEG, seed), request.timing.block_s * turn_share,
                       on_event=on_event)
    trials = [got[i] for i in range(len(configs))]
    failed = next((t.error for t in trials if t.error is not None), None)
    for t in trials:
        t.leg = number
        t.startup_s = None  # its workers started beside the other racers': the screening's start-up is its own
        t.wall_s /= len(configs)  # its share of the leg, which its process lived through whole
        if t.ok and failed is not None:  # a leg cut short by a neighbour's failure is no leg
            t.status, t.error = "failed", failed
    return trials


def leg_request(request: TrialRequest, frozen: bool = True) -> TrialRequest:
    """How a raced loader is asked for: its share of the warm-up, blocks cut by time (turns must stay
    short and alike), frozen between its turns unless ``frozen`` is False."""
    timing = replace(request.timing, warmup_s=request.timing.warmup_s * WARMUP_SHARE)
    return replace(request, timing=timing, entry=SideEntry(whole_epochs=False, frozen=frozen))


@dataclass
class RaceRun:
    """What the scan gives the race: how to run a leg, whether another fits, what to do after each."""

    run_leg: Callable[[list[TrialConfig], int], list[Trial]]  # (configs, leg number) -> their trials
    fits: Callable[[float], bool]  # would a leg of this many seconds still fit the budget
    recorded: Callable[[list[Trial]], None]  # the leg's trials, to keep and save
    share_s: float = 0.0  # a config's share of a leg until one has run: a screening trial's length
    pick: Callable[[], TrialConfig | None] = lambda: None  # the pick so far (the race's leader if none)


def race(trials: list[Trial], entrants: list[TrialConfig], noise_floor: float, race_run: RaceRun, max_legs: int) -> str:
    """Race ``entrants`` (or, on a resumed scan, whoever the legs so far left undecided) until the race
    decides, ``max_legs`` at most; ``trials`` holds every trial so far and grows with the legs. Returns how it ended:
    "decided", "futile" (those left undecided sit so near the noise floor that another leg could not
    decide them), "legs" (its legs were spent) or "budget"."""
    done = [t for t in trials if t.raced]
    number = max((t.leg for t in done), default=0)
    current = verdict(trials, noise_floor)
    configs = racing(trials, entrants, current, number, max_legs, noise_floor, race_run.pick())
    last_wall = race_run.share_s
    while len(configs) >= 2:
        if number >= max_legs:
            return "legs"
        if last_wall and not race_run.fits(last_wall * len(configs)):
            return "budget"
        number += 1
        leg = race_run.run_leg(configs, number)
        race_run.recorded(leg)
        if not any(t.ok for t in leg):
            return "failed"
        last_wall = sum(t.wall_s for t in leg) / len(leg)
        current = verdict(trials, noise_floor)
        configs = [] if current is None else racing(trials, entrants, current, number, max_legs, noise_floor,
                                                    race_run.pick())
    if current is not None and current.undecided:  # those left rest: another leg could not decide them
        return "legs" if number >= max_legs else "futile"
    return "decided"


def racing(trials: list[Trial], entrants: list[TrialConfig], current: RaceVerdict | None, legs_run: int,
           max_legs: int, noise_floor: float, pick: TrialConfig | None = None) -> list[TrialConfig]:
    """Who runs the next leg: every entrant until the race has a verdict, every config raced so far
    until ``MIN_LEGS`` legs are run (``max_legs`` permitting), then the leader, the undecided that one
    more leg could decide, and ``pick`` (a raced config; else the leader) with those whose ratio to it
    is wider than ``WIDE`` where one more leg would narrow it (``analysis.race.next_leg``)."""
    if current is None:
        return entrants
    raced = raced_configs(trials)
    if legs_run < min(MIN_LEGS, max_legs):
        return raced
    pick = pick if pick in raced else current.leader
    return next_leg(current, WIDE, noise_floor, PAIRS_PER_LEG, pick, relative_to(trials, pick))


def ending_note(how: str, v: RaceVerdict | None, max_legs: int) -> str | None:
    """What the report says of a race that ended undecided."""
    if v is None or how == "decided" or not v.undecided:
        return None
    why = {"legs": f"its {max_legs} legs were spent (--race-legs)", "budget": "the budget was spent",
           "failed": "a leg failed",
           "futile": "another leg could not decide it: the ratio measured lies too near the noise floor"}.get(how, how)
    parts = []
    for s in v.standings:
        if s.status == "undecided":
            r = s.ratio
            parts.append(f"{s.config.label()} {r.value:.2f}× ({r.low:.2f}–{r.high:.2f})" if r else s.config.label())
    return (f"the race ended undecided ({why}): against {v.leader.label()}, {', '.join(parts)}; "
            "an undecided config is not picked over the leader")
