"""The referee: a pair whose race ratio and runs alone disagree, measured again alone.

A race compares loaders alive side by side; the screening times each alone. Where the two read a
pair more than ``analysis.race.DISPUTE_GAP`` apart, one of them measured something training will
not see, and the scan does not outvote either: it times the pair again the way a user's own loop
runs, each config alone in a fresh trial process, the two back to back in an order that alternates
from round to round (a b, b a, ...), so the machine's drift hits both alike. Each round's ratio of
the two medians is one observation (``analysis.race.referee_ratio``); from then on the pair's ratio
is the race's where the rounds bear out the race, else the rounds' (they bear out the runs alone, or
cannot say which reading held: ``analysis.race.ruling``); the verdict, the pick and the gain read it
(``analysis.race.race_ratio``).
"""

from __future__ import annotations

from collections.abc import Callable

from loadtune.analysis.comparison import UNDECIDED
from loadtune.analysis.race import REFEREE_LEAST, disputes, referee_ratio, ruling, verdict
from loadtune.model.config import TrialConfig
from loadtune.model.trial import Trial

MAX_ROUNDS = 4  # rounds at most for one pair: past ``REFEREE_LEAST``, only while unruled (each costs two trials)
MAX_PAIRS = 2  # pairs refereed at most in one scan


def referee(trials: list[Trial], floor: float, run_alone: Callable[[TrialConfig], Trial],
            fits: Callable[[int], bool], recorded: Callable[[list[Trial]], None]) -> int:
    """Referee each disputed pair of the race (``analysis.race.disputes``) while ``fits`` (given the
    trials a round takes) allows: ``REFEREE_LEAST`` rounds, then more, up to ``MAX_ROUNDS``, while the
    ratio cannot yet be placed against the floor. ``run_alone`` times one config in a fresh process;
    ``recorded`` keeps a round's two trials. Returns the rounds run."""
    done = 0
    number = max((t.referee for t in trials), default=0)
    for a, b in disputes(trials, verdict(trials, floor))[:MAX_PAIRS]:
        for r in range(MAX_ROUNDS):
            if r >= REFEREE_LEAST and placed(trials, a, b, floor):
                break
            if not fits(2):
                break
            number += 1
            pair = []
            for config in ((a, b) if r % 2 == 0 else (b, a)):
                trial = run_alone(config)
                trial.referee = number
                pair.append(trial)
            recorded(pair)
            done += 1
            if not all(t.ok for t in pair):
                break
    return done


def placed(trials: list[Trial], a: TrialConfig, b: TrialConfig, floor: float) -> bool:
    """Whether the rounds have ruled the pair: they bear out the race's reading (whose interval then
    stands), or their own ratio is placed against the floor (one clearly slower than the other, either
    way round, or the two tied); or there is nothing to rule on (a failed round). A fourth round where
    neither reading is borne out but the rounds' ratio is placed would cost two trials and seldom
    decide between readings three rounds could not."""
    ruled = ruling(trials, a, b)
    if ruled is None or ruled.ratio is ruled.raced:  # the race's reading stands
        return True
    return any(r is not None and r.against_floor(floor) != UNDECIDED for r in (ruled.rounds, referee_ratio(trials, b, a)))
