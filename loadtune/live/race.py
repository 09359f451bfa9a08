"""autotune's contenders side by side on the live loop: a leg of the scan's race, in one training loop.

After the search has screened configs one window at a time, the contenders' loaders (two or three)
are alive together, each drawing from the epoch's one order (``live/order.py``), and the loop's batches
come from them in turns: a shuffled order of the contenders, then its reverse (``paired.race_orders``).
A turn first delivers, untimed, what the loader's workers finished while it rested and one more batch
per worker (they restart together and deliver in bursts), and waits (delivering) until the loader
that ran before it has no batch in flight, so its workers do not share the cores with this block;
then it times a block of whole bursts. Every batch trains: nothing is skipped or repeated, only the
batches' order within the epoch changes while the race runs (batches, not samples, interleave).

A leg's blocks become one trial per config (``Trial.leg`` the leg's number), so the scan's race policy
and verdicts (``analysis/race.py``) and its pick (``analysis/recommend.race_pick``) decide here too.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from loadtune.analysis.race import PAIRS_PER_LEG
from loadtune.engine.trial.paired import race_orders
from loadtune.live.meter import Pending, whole_bursts
from loadtune.model.config import TrialConfig
from loadtune.model.trial import Block, Trial

SETTLE_TURNS = 4  # a turn waits at most this many of its blocks' batches for the loader before it to settle


@dataclass(frozen=True)
class Leg:
    """The search's next step when it races: these configs, in leg ``number``."""

    configs: tuple[TrialConfig, ...]
    number: int


@dataclass
class LiveLeg:
    """A leg in progress: whose turn it is, whether its block is being timed, the blocks so far."""

    leg: Leg
    turns: deque[TrialConfig]
    block_size: dict[TrialConfig, int]
    blocks: dict[TrialConfig, list[Block]] = field(default_factory=dict)
    current: TrialConfig | None = None
    untimed: int = 0  # batches of the current turn still to deliver untimed (at least)
    waited: int = 0  # batches delivered untimed this turn
    pending: Pending | None = None  # the block being timed; None while the turn is untimed

    @classmethod
    def begin(cls, leg: Leg, block_batches: dict[TrialConfig, int], seed: int) -> LiveLeg:
        """The leg's turns (``PAIRS_PER_LEG`` shuffled-then-reversed pairs) and each config's block:
        ``block_batches`` of it, in whole bursts of its workers."""
        configs = list(leg.configs)
        turns = deque(configs[i] for order in race_orders(len(configs), PAIRS_PER_LEG, seed) for i in order)
        sizes = {c: whole_bursts(block_batches[c], c.num_workers) for c in configs}
        return cls(leg, turns, sizes, {c: [] for c in configs})

    def next_turn(self) -> TrialConfig | None:
        """The next config to run; None: the leg is over."""
        self.pending, self.waited = None, 0
        self.current = self.turns.popleft() if self.turns else None
        return self.current

    def resume(self, ready: int, before_settled: bool) -> None:
        """The untimed start of the current turn: the ``ready`` batches its workers hold, then one burst
        of one batch per worker (none without workers: the block may start at once)."""
        self.untimed = ready + self.current.num_workers
        self.start_if_ready(before_settled)

    def untimed_batch(self, before_settled: bool) -> None:
        """One batch delivered untimed; the block starts once the untimed batches are out and the
        loader before has settled (or it waited ``SETTLE_TURNS`` blocks' worth of batches)."""
        self.untimed -= 1
        self.waited += 1
        self.start_if_ready(before_settled)

    def start_if_ready(self, before_settled: bool) -> None:
        patience = SETTLE_TURNS * self.block_size[self.current]
        if self.pending is None and self.untimed <= 0 and (before_settled or self.waited >= patience):
            self.pending = Pending()

    def timed_batch(self, interval: float, wait: float, samples: int) -> bool:
        """One batch of the block; True once the block is full (it is then kept)."""
        self.pending.add(interval, wait, samples)
        if self.pending.batches < self.block_size[self.current]:
            return False
        self.blocks[self.current].append(self.pending.block())
        self.pending = None
        return True

    def trials(self) -> list[Trial]:
        """Each config's trial of the leg, cut to the turns every config completed (a leg cut short by
        the epoch's end or the budget keeps its whole turns)."""
        whole = min(len(b) for b in self.blocks.values())
        return [Trial(c, "ok" if whole else "failed", blocks=b[:whole], leg=self.leg.number)
                for c, b in self.blocks.items()]
