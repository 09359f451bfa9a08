"""Where tuning stands against its budget, and so what still fits in it.

The budget is the first epoch (``TUNE_EPOCHS`` epochs at most, or ``tune_epochs``), or less: a share
of the first epoch's batches or a time (``tuner.Budget``). Blocks are sized so that about
``PLANNED_WINDOWS`` windows fit it, and a window is not opened when it could not end before tuning
must (docs/autotune.md#how-a-config-is-measured).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loadtune.live.meter import MAX_BLOCK_BATCHES, MIN_BLOCK_BATCHES, block_batches, warmup_batches, whole_bursts
from loadtune.live.ranks import Ranks
from loadtune.live.tuner import Budget, LiveOptions
from loadtune.model.config import TrialConfig

STEP_MEMORY = 256  # per-batch step times kept for sizing blocks
PLANNED_WINDOWS = 8  # windows a budget is sized for: the worker sweep, a refinement or two, the side-by-side round
# epochs tuning may take at most (configs switching inside an epoch), unless tune_epochs says otherwise: an
# epoch of a long run ends tuning early anyway, and a short one (seconds) costs little each
TUNE_EPOCHS = 20


@dataclass
class Progress:
    """The epoch, the batches and the time tuning has used, and the step's pace seen so far."""

    options: LiveOptions
    in_epoch: bool  # configs switch inside an epoch (one shared order); else one config per epoch
    epochs_allowed: int
    budget: Budget | None = None
    epoch: int = 0
    delivered: int = 0  # batches delivered this epoch
    epoch_batches: int = 0  # the fewest any rank has this epoch: no exchange past it
    t0: float | None = None  # the first tuned batch requested
    elapsed: float = 0.0  # tuning's time as the ranks agree on it (the longest any rank took)
    steps: list[float] = field(default_factory=list)
    last_block: int = MIN_BLOCK_BATCHES
    last_interval: float = 0.0  # seconds per batch of the last block timed (as the ranks agree)

    def begin(self, now: float) -> None:
        """The first tuned batch is requested: the budget starts (its share of this, the first, epoch)."""
        self.t0 = now
        self.budget = Budget(self.fraction_batches(), self.options.tune_seconds, self.epochs_allowed)

    def fraction_batches(self) -> int | None:
        if self.options.tune_fraction is None or not self.in_epoch:
            return None
        return max(1, int(self.options.tune_fraction * self.epoch_batches))

    def note_step(self, step: float) -> None:
        """The step's time after a batch came (its noise sizes the blocks)."""
        self.steps = (self.steps + [max(0.0, step)])[-STEP_MEMORY:]

    def past_shared(self) -> bool:
        """Past the batches every rank has this epoch: no exchange here."""
        return self.in_epoch and self.delivered >= self.epoch_batches

    def budget_over(self, batches: int) -> str | None:
        """Why tuning must end, ``batches`` delivered and ``elapsed`` spent."""
        return self.budget.over(batches, self.elapsed)

    def block_size(self, config: TrialConfig, interval: float) -> int:
        """A block's batches for ``config`` at ``interval`` seconds a batch: by time and the step's noise,
        within the budget's room, in whole bursts of its workers (those three always: a block of part
        of a burst times a burst or a gap)."""
        if self.options.block_batches:
            return self.options.block_batches
        return whole_bursts(min(block_batches(self.steps, interval, self.options.block_s), self.block_room()), config.num_workers)

    def block_room(self) -> int:
        """The most batches a block may take so that about ``PLANNED_WINDOWS`` windows fit the budget in
        batches (the first epoch, or its ``tune_fraction``): a noisy step gets fewer, longer blocks only
        where the budget has room, and otherwise a wider interval, which the decision weighs."""
        if not self.in_epoch:
            return MAX_BLOCK_BATCHES
        batches = self.budget.batches if self.budget.batches is not None else self.epoch_batches * self.epochs_allowed
        return max(MIN_BLOCK_BATCHES, batches // (PLANNED_WINDOWS * self.options.max_blocks))

    def window_misfit(self, config: TrialConfig, running: TrialConfig | None, batches: int) -> str | None:
        """Why a window of ``config`` cannot end before tuning must: the budget, or the epoch's end.
        ``running``: the config of the loader running now; ``batches``: those delivered while tuning."""
        same = running is not None and running == config
        backlog = 0 if running is None or same else warmup_batches(running)
        block = self.options.block_batches or whole_bursts(self.last_block, config.num_workers)
        need = backlog + (0 if same else warmup_batches(config)) + self.options.min_blocks * block
        left = self.epoch_batches - self.delivered
        if need > left:  # the window runs on into the next epochs, warming up again at each one's start
            need += math.ceil((need - left) / self.epoch_batches) * warmup_batches(config)
        if need > left + (self.epochs_allowed - self.epoch) * self.epoch_batches:
            last = "the first epoch" if self.epochs_allowed == 1 else f"the {self.epochs_allowed} epochs tuning may take"
            return f"{last} end before another window could"
        if self.budget.batches is not None and batches + need > self.budget.batches:
            return f"the tuning budget ({self.budget.batches} batches of the first epoch) ends before another window could"
        if self.budget.seconds is not None and self.elapsed + need * self.last_interval > self.budget.seconds:
            return f"the tuning budget ({self.budget.seconds:g} s) ends before another window could"
        return None

    def epochs_over(self, now: float, ranks: Ranks) -> str | None:
        """Why tuning must end at this epoch's end: the epochs it may take, or its seconds (as the ranks agree)."""
        if self.epoch >= self.epochs_allowed:
            return ("the first epoch ended" if self.epochs_allowed == 1
                    else f"the tuning budget ({self.epochs_allowed} epochs) is spent")
        seconds = self.options.tune_seconds
        if seconds is not None and ranks.most(now - self.t0) >= seconds:
            return f"the tuning budget ({seconds:g} s) is spent"
        return None
