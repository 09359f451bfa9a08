"""The race: the screening's contenders measured side by side, leg after leg, until the race decides.

A leg is one trial process in which every raced config's loader is alive at once and their short
timed blocks take turns (``engine.trial.paired.measure_race``): a shuffled order, then its reverse.
Each config's blocks of a leg come back as a trial of its own (``Trial.raced``, ``round`` the leg's
number), so the pooled figures, the table and the JSON treat a leg as one more run of each config.
After each leg the verdict (``analysis.race``) sends the leader and the configs still undecided
against it into the next leg, in a fresh process (what differs between processes enters the
intervals), until none is undecided, the race's legs are spent, or the scan's budget is.

Why one process rather than several live trial processes told in turn to run a block: the loaders
then share one main process, one pin-memory thread's core and one view of the machine, and the turn
switch is a function call, not a round trip; a config that crashes the process cannot be raced, but
the screening already ran every config alone, so what races has loaded without failing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from loadtune.analysis.race import RaceVerdict, next_leg, verdict
from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.paired import measure_race
from loadtune.engine.trial.protocol import Kind, TrialRequest, TrialRun
from loadtune.model.config import TrialConfig
from loadtune.model.results import Trial

PAIRS_PER_LEG = 5  # turn pairs a leg times: a fresh process every few pairs
WARMUP_SHARE = 0.5  # of the scan's warm-up, per raced loader: its start-up backlog is drained whatever this is


@dataclass(frozen=True)
class RaceEntry:
    """The child's entry of a leg (pickled by value: the configs, the pairs, a seed)."""

    configs: tuple[TrialConfig, ...]
    pairs: int
    seed: int

    def __call__(self, run: TrialRun) -> None:
        import torch

        request = run.request
        measure_race(run.spec, list(self.configs), torch.device(request.device), request.timing, request.options,
                     run.emit, self.pairs, self.seed, request.workload, run.measured)


RACE_FIGURES: dict[str, Callable[[Trial, Any], None]] = {
    "startup": lambda t, s: setattr(t, "startup_s", s),
    "batch": lambda t, info: setattr(t, "batch", info),
    "warmup": lambda t, block: setattr(t, "warmup", block),
    "block": lambda t, block: t.blocks.append(block),
}


def run_leg(source: SpecRef | LoadedSpec, request: TrialRequest, configs: list[TrialConfig], number: int,
            seed: int, on_event: Callable[[str, Any], None] | None = None) -> list[Trial]:
    """One leg: ``configs`` raced in one trial process. Returns each config's trial of the leg (failed,
    with the leg's error, where the leg failed or the config timed no block)."""
    trials = [Trial(config=c, status="failed", raced=True, round=number) for c in configs]

    def hear(kind: str, payload: Any) -> None:
        if kind == Kind.RACE:
            index, what, value = payload
            RACE_FIGURES[what](trials[index], value)
        elif on_event is not None:
            on_event(kind, payload)

    entry = RaceEntry(tuple(configs), PAIRS_PER_LEG, seed)
    timing = replace(request.timing, warmup_s=request.timing.warmup_s * WARMUP_SHARE)
    leg = run_trial(source, replace(request, config=configs[0], timing=timing, entry=entry, needs_blocks=False), hear)
    for t in trials:
        t.status = "ok" if leg.status == "ok" and t.blocks else "failed"
        t.error = leg.error if t.status != "ok" else None
        t.load, t.warnings, t.wall_s = leg.load, list(leg.warnings), leg.wall_s / len(configs)
    return trials


@dataclass
class RaceRun:
    """What the scan gives the race: how to run a leg, whether another fits, what to do after each."""

    run_leg: Callable[[list[TrialConfig], int], list[Trial]]  # (configs, leg number) -> their trials
    fits: Callable[[float], bool]  # would a leg of this many seconds still fit the budget
    recorded: Callable[[list[Trial]], None]  # the leg's trials, to keep and save


def race(trials: list[Trial], entrants: list[TrialConfig], noise_floor: float, race_run: RaceRun, max_legs: int) -> str:
    """Race ``entrants`` (or, on a resumed scan, whoever the legs so far left undecided) until the race
    decides, ``max_legs`` at most; ``trials`` holds every trial so far and grows with the legs. Returns how it ended:
    "decided", "legs" (its legs were spent) or "budget"."""
    done = [t for t in trials if t.raced]
    number = max((t.round for t in done), default=0)
    current = verdict(trials, noise_floor)
    configs = entrants if current is None else next_leg(current)
    last_wall = 0.0
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
        configs = next_leg(current) if current is not None else []
    return "decided"


def ending_note(how: str, v: RaceVerdict | None, max_legs: int) -> str | None:
    """What the report says of a race that ended undecided."""
    if v is None or how == "decided" or not v.undecided:
        return None
    why = {"legs": f"its {max_legs} legs were spent (--race-legs)", "budget": "the budget was spent",
           "failed": "a leg failed"}.get(how, how)
    parts = []
    for s in v.standings:
        if s.status == "undecided":
            r = s.ratio
            parts.append(f"{s.config.label()} {r.value:.2f}× ({r.low:.2f}–{r.high:.2f})" if r else s.config.label())
    return (f"the race ended undecided ({why}): against {v.leader.label()}, {', '.join(parts)}; "
            "an undecided config is not picked over the leader")
