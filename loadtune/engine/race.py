"""The race: the screening's contenders measured side by side, leg after leg, until the race decides.

In a leg every raced config's loader is alive at once, each in a trial process of its own, and the
parent tells them in turn to time one short block (``engine.trial.duet``): a shuffled order, then its
reverse (``paired.race_orders``). Between its blocks a loader rests frozen, its workers stopped where
they were (``paired.frozen_turn``), so its blocks are windows of one continuous run. Each config's
blocks of a leg come back as a trial of its own (``Trial.leg`` the leg's number), so the pooled
figures, the table and the JSON treat a leg as one more run of each config. Who runs each leg is the
race policy's (``analysis.race.RacePolicy``, autotune's too): every raced config at least two legs, in
fresh processes each, so what differs between processes enters the intervals; then the leader and the
configs still undecided against it, and the pick with the configs whose ratio to it is known too
loosely where one more leg would narrow it, until none is left, the race's legs are spent, or the
scan's budget is. Once its legs have taught the scan how far runs land apart, a cheaper config the
screening had left out as slower, and that spread no longer calls slower, joins for legs of its own
(``search.race.challenger``).

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

from loadtune.analysis.budget import TURN_SHARE, WARMUP_SHARE
from loadtune.analysis.race import PAIRS_PER_LEG, RacePolicy, RaceVerdict, verdict
from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.duet import SideEntry, run_in_turns
from loadtune.engine.trial.paired import race_orders
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.config import TrialConfig
from loadtune.model.trial import Trial


def run_leg(source: SpecRef | LoadedSpec, request: TrialRequest, configs: list[TrialConfig], number: int,
            seed: int, on_event: Callable[[str, Any], None] | None = None, pairs: int = PAIRS_PER_LEG) -> list[Trial]:
    """One leg: ``configs`` raced, a live process each, ``pairs`` turn pairs. Returns each config's trial
    of the leg (failed, with its own error or the leg's, where the leg failed or the config timed no block)."""
    raced = leg_request(request, len(configs))
    sides = {i: (source, replace(raced, config=c)) for i, c in enumerate(configs)}
    got = run_in_turns(sides, race_orders(len(configs), pairs, seed), request.timing.block_s * TURN_SHARE,
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


def leg_request(request: TrialRequest, sides: int) -> TrialRequest:
    """How a raced loader is asked for: its share of the warm-up, blocks cut by time (turns must stay
    short and alike), frozen between its turns; and a trial's time for each of the leg's ``sides``, since
    a side rests while the others take their turns (a disk-bound loader's turns took 10 s each, and a
    leg of three such sides outlasted one trial's time by its third turn pair)."""
    timing = replace(request.timing, warmup_s=request.timing.warmup_s * WARMUP_SHARE, max_s=request.timing.max_s * sides)
    return replace(request, timing=timing, timeout_s=request.timeout_s * sides,
                   entry=SideEntry(whole_epochs=False, frozen=True))


@dataclass
class RaceRun:
    """What the scan gives the race: how to run a leg, whether another fits, what to do after each."""

    run_leg: Callable[[list[TrialConfig], int], list[Trial]]  # (configs, leg number) -> their trials
    fits: Callable[[float], bool]  # would a leg of this many seconds still fit the budget
    recorded: Callable[[list[Trial]], None]  # the leg's trials, to keep and save
    share_s: float = 0.0  # a config's share of a leg until one has run: a screening trial's length
    pick: Callable[[], TrialConfig | None] = lambda: None  # the pick so far (the race's leader if none)
    # given who would race the next leg, a config left out that may join it (``search.race.challenger``)
    challenger: Callable[[list[TrialConfig]], TrialConfig | None] | None = None
    baseline: Callable[[], TrialConfig | None] = lambda: None  # what the pick's gain is over (defaults or --current)


def race(trials: list[Trial], entrants: list[TrialConfig], policy: RacePolicy, race_run: RaceRun) -> str:
    """Race ``entrants`` (or, on a resumed scan, whoever the legs so far left undecided) as ``policy``
    says, until the race decides; ``trials`` holds every trial so far and grows with the legs. Returns
    how it ended: "decided", "futile" (those left undecided sit so near the noise floor that another leg
    could not decide them), "legs" (its legs were spent), "budget" or "failed"."""
    number = policy.legs_run(trials)
    configs = policy.racing(trials, entrants, race_run.pick(), race_run.challenger, race_run.baseline())
    last_wall = race_run.share_s
    while len(configs) >= 2:
        if number >= policy.max_legs:
            return "legs"
        if last_wall and not race_run.fits(last_wall * len(configs)):
            return "budget"
        number += 1
        leg = race_run.run_leg(configs, number)
        race_run.recorded(leg)
        if not any(t.ok for t in leg):
            return "failed"
        last_wall = sum(t.wall_s for t in leg) / len(leg)
        configs = (policy.racing(trials, entrants, race_run.pick(), race_run.challenger, race_run.baseline())
                   if verdict(trials, policy.floor) is not None else [])
    current = verdict(trials, policy.floor)
    if current is not None and current.undecided:  # those left rest: another leg could not decide them
        return "legs" if number >= policy.max_legs else "futile"
    return "decided"


def ending_note(how: str, v: RaceVerdict | None, max_legs: int) -> str | None:
    """What the report says of a race that ended undecided."""
    if v is None or how == "decided" or not v.undecided:
        return None
    why = {"legs": f"its {max_legs} legs were spent (--race-legs)", "budget": "the budget was spent",
           "failed": "a leg failed",
           "futile": "another leg could not decide it: the ratio measured lies too near the noise floor"}.get(how, how)
    parts = []
    for s in v.standings:
        if s.status == "undecided" and not s.unsettled:  # those have a note of their own, and no interval
            r = s.ratio
            parts.append(f"{s.config.label()} {r.value:.2f}× ({r.low:.2f}–{r.high:.2f})" if r else s.config.label())
    if not parts:
        return None
    return (f"the race ended undecided ({why}): against {v.leader.label()}, {', '.join(parts)}; "
            "an undecided config is not picked over the leader")
