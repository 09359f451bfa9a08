"""What to try next, when to stop, and what to settle on: the scan's own search, statistics and rule.

The candidates come from the scan's adaptive search (``search/adaptive.py``: PyTorch's defaults, then
more workers while throughput rises, then prefetch and pinning around the best); then the contenders
race side by side on the live loop (``live/race.py``: the scan's entrants and verdicts), or, with
several ranks or one config per epoch, are measured again in closing rounds. The pick is
``analysis/recommend.py``'s: the cheapest config the race (or the measured noise) cannot tell from
the fastest. Only the batch size is the user's, not searched, and ``persistent_workers``,
which changes nothing inside an epoch, is not measured (docs/autotune.md#persistent-workers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from loadtune.analysis.race import RacePolicy
from loadtune.analysis.recommend import recommend
from loadtune.engine.plan import worker_cap
from loadtune.engine.trial.setup import Timing
from loadtune.live.race import Leg
from loadtune.model.config import TrialConfig
from loadtune.model.results import Recommendation, ScanResult
from loadtune.model.trial import Trial
from loadtune.model.settings import NOISE_FLOOR, ScanOptions
from loadtune.search.adaptive import AdaptiveSearch
from loadtune.search.race import entrants, race_memory_limit
from loadtune.search.space import SearchSpace, default_workers
from loadtune.search.strategy import Proposal

SEARCHED = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "in_order")


class AutotuneError(ValueError):
    """An invalid autotune argument: one paragraph naming it and what to do."""


@dataclass
class LiveOptions:
    """How autotune tunes. The budget: the first epoch (``tune_epochs`` epochs), or less: a share of its
    batches (``tune_fraction``) or a time (``tune_seconds``), whichever ends first."""

    tune_fraction: float | None = None
    tune_seconds: float | None = None
    tune_epochs: int | None = None  # None: 1 where configs switch inside an epoch; else until the search ends
    workers: list[int] | None = None  # None: 0, 1, 2, 4, ... up to 2x the cores per rank, extended while it pays
    prefetch: list[int] = field(default_factory=lambda: [2, 4])
    block_s: float = 0.2  # a timed block lasts at least this long (longer for a step that varies)
    block_batches: int | None = None  # batches per timed block, fixed; None: from block_s and the step's variation
    min_blocks: int = 3
    max_blocks: int = 8
    target_spread: float = 0.05  # a window ends once its median is known this well (relative), or at max_blocks
    noise_floor: float = NOISE_FLOOR
    confirm: int = 1  # rounds in which the contenders are measured again (without a race); 0: neither
    race_legs: int = 3  # legs of the race of the contenders at most; 0: closing rounds instead
    seed: int = 0

    @classmethod
    def names(cls) -> set[str]:
        return {f.name for f in fields(cls)}

    def validate(self) -> None:
        if self.tune_fraction is not None and not (_number(self.tune_fraction) and 0 < self.tune_fraction <= 1):
            raise AutotuneError(f"tune_fraction must be a share of the first epoch in (0, 1], got {self.tune_fraction!r}")
        for name in ("tune_seconds", "block_s"):
            value = getattr(self, name)
            if value is not None and not (_number(value) and 0 < value < math.inf):
                raise AutotuneError(f"{name} must be a positive number of seconds, got {value!r}")
        for name, low in (("tune_epochs", 1), ("block_batches", 1), ("min_blocks", 2), ("max_blocks", 2), ("confirm", 0),
                          ("race_legs", 0), ("seed", None)):
            value = getattr(self, name)
            if value is None and name in ("tune_epochs", "block_batches"):
                continue
            if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low):
                raise AutotuneError(f"{name} must be a whole number{f' >= {low}' if low is not None else ''}, got {value!r}")
        if self.min_blocks > self.max_blocks:
            raise AutotuneError(f"min_blocks ({self.min_blocks}) is above max_blocks ({self.max_blocks})")
        for name in ("target_spread", "noise_floor"):
            value = getattr(self, name)
            if not (_number(value) and 0 <= value < 1):
                raise AutotuneError(f"{name} must be a fraction in [0, 1), got {value!r}")

    def timing(self) -> Timing:
        """When a window has measured enough: the scan's rule (at least ``min_blocks``, then until the
        median is known to ``target_spread``, at most ``max_blocks``)."""
        return Timing(block_s=self.block_s, blocks=self.max_blocks, min_blocks=self.min_blocks, target_spread=self.target_spread)

    def scan_options(self, batch_size: int, space: SearchSpace, device: str, shuffle: bool, drop_last: bool) -> ScanOptions:
        """The options a saved result records (``loadtune show`` reads them)."""
        return ScanOptions(batch_size=[batch_size], workers=self.workers, prefetch=list(space.prefetch), pin=space.pin,
                           persistent=space.persistent, device=device, shuffle=shuffle, drop_last=drop_last,
                           block_time=self.block_s, blocks=self.max_blocks,
                           min_blocks=self.min_blocks, target_spread=self.target_spread, noise_floor=self.noise_floor,
                           confirm=self.confirm, race_legs=self.race_legs, seed=self.seed, diagnose=False, reference_rounds=0)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def search_space(batch_size: int, fixed: dict, options: LiveOptions, cores: int) -> SearchSpace:
    """The knobs to try: the user's fixed ones (given to autotune) narrow it. ``persistent_workers``
    is True unless the user set it: it only acts at an epoch's end, where it keeps the tuned workers."""
    workers = [fixed["num_workers"]] if "num_workers" in fixed else list(options.workers or default_workers(cores))
    prefetch = [fixed["prefetch_factor"]] if fixed.get("prefetch_factor") else list(options.prefetch)
    space = SearchSpace([batch_size], workers, prefetch, fixed.get("pin_memory"), fixed.get("persistent_workers", True),
                        in_order=[fixed.get("in_order", True)])
    try:
        space.validate()
    except ValueError as exc:
        raise AutotuneError(str(exc)) from None
    return space


def make_search(space: SearchSpace, options: LiveOptions, accelerator: bool, cores: int, ranks: int,
                memory: int, races: bool = False) -> AdaptiveSearch:
    """The scan's adaptive search over ``space``, starting from PyTorch's defaults where they are in it.
    ``cores``: the node's usable cores, shared by its ``ranks``. ``races``: the contenders race after
    the search, so it has no closing rounds."""
    default = TrialConfig(space.batch_sizes[0], 0, False, None, False, "sync" if accelerator else "none")
    references = [default] if 0 in space.workers and space.pin is not True else []
    if accelerator:
        space.transfers = ["sync"]  # how the loop copies batches is the user's code, not a knob here
    return AdaptiveSearch(space, accelerator, references, options.noise_floor, worker_cap(cores, ranks), memory,
                          confirm_rounds=0 if races else options.confirm, seed=options.seed, extend=options.workers is None)


def wait_share(trial: Trial) -> float:
    """The share of the timed blocks the loop spent waiting for data."""
    seconds = sum(b.seconds for b in trial.blocks)
    return sum(b.wait_s or 0.0 for b in trial.blocks) / seconds if seconds > 0 else 1.0


def not_the_bottleneck(trial: Trial, noise_floor: float) -> str | None:
    """Why no config can beat this one by more than the noise floor, if so: a faster loader can only
    remove the time the loop waits for data, and here that wait is a smaller share of the loop's time
    than the smallest difference the recommendation counts (the step's time is the step's)."""
    if not trial.ok:
        return None
    share = wait_share(trial)
    if share > noise_floor:
        return None
    return (f"loading is not the bottleneck: at {trial.config.label()} the step waited for data {share:.1%} of the "
            f"time, below the noise floor ({noise_floor:.0%})")


@dataclass
class Budget:
    """How much of the run tuning may take. ``batches``: of the first epoch (``tune_fraction``)."""

    batches: int | None
    seconds: float | None
    epochs: int

    def over(self, batches: int, seconds: float) -> str | None:
        """Why tuning must end, once ``batches`` and ``seconds`` are spent on it."""
        if self.batches is not None and batches >= self.batches:
            return f"the tuning budget ({self.batches} batches of the first epoch) is spent"
        if self.seconds is not None and seconds >= self.seconds:
            return f"the tuning budget ({self.seconds:g} s) is spent"
        return None


class Tuner:
    """The search's state: the windows and race legs measured so far (as a scan's trials), why it ended,
    and what it had yet to try when it was cut short."""

    def __init__(self, result: ScanResult, search: AdaptiveSearch, options: LiveOptions, races: bool = False):
        self.result, self.search, self.options, self.races = result, search, options, races
        self.stop: str | None = None
        self.untried: list[TrialConfig] = []

    @property
    def trials(self) -> list[Trial]:
        return self.result.trials

    def next(self) -> Proposal | Leg | None:
        """The next config to try, the next leg of the race, or None: tuning is over (``stop`` says why)."""
        if self.stop is not None:
            return None
        raced = any(t.raced for t in self.trials)  # the race follows the search: it is not asked again
        proposals = [] if raced else self.search.propose(self.result)
        if proposals:
            return proposals[0]
        leg = self.next_leg()
        if leg is None and self.stop is None:
            self.stop = "the search is complete"
        return leg

    def next_leg(self) -> Leg | None:
        """The race's next leg, as the scan's race policy says (``analysis.race.RacePolicy``): the
        screening's entrants (``search/race.py``), then who races on; None when it needs none (``stop``
        then says how it ended)."""
        if not self.races:
            return None
        policy = RacePolicy(self.options.noise_floor, self.options.race_legs)
        raced = [t for t in self.trials if t.raced]
        number = policy.legs_run(self.trials)
        if not raced:
            limit = race_memory_limit(None, self.result.machine.memory_available_bytes)
            # no runner-up for a lone contender: on the live loop its legs cost the training run speed, and
            # there is no table whose ± they would teach
            configs = entrants(self.result, policy.floor, limit, policy.racers, runner_up_too=False).configs
        else:  # a leg cut too short to rank anyone races again
            configs = policy.racing(self.trials, [t.config for t in raced if t.leg == number])
            if len(configs) < 2:
                self.stop = "the search is complete and the race decided"
            elif number >= policy.max_legs:
                self.stop = f"the search is complete; the race's {policy.max_legs} legs were spent"
                return None
        return Leg(tuple(configs), number + 1) if len(configs) >= 2 else None

    def record(self, trial: Trial) -> None:
        self.trials.append(trial)
        if trial.round == 0 and not trial.raced and self.stop is None:
            self.stop = not_the_bottleneck(trial, self.options.noise_floor)

    def end(self, why: str) -> None:
        """Tuning must end (a budget, the epochs): keep what the search had yet to try."""
        if self.stop is None:
            self.stop = why
            if not any(t.raced for t in self.trials):
                self.untried = [p.config for p in self.search.propose(self.result)]

    def decide(self) -> Recommendation | None:
        """The cheapest config the race (or the noise) cannot tell from the fastest; None when nothing was measured."""
        return recommend(self.trials, self.options.noise_floor) if any(t.ok for t in self.trials) else None
