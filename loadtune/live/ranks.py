"""Several ranks decide together: under ``torchrun`` every rank tries the same configs at the same
batches, and each figure a decision rests on is exchanged first, so every rank decides from the same
numbers and so the same way. Synchronous training runs at its slowest rank's pace: of a block timed
on every rank, the slowest rank's is the one kept."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loadtune.model.trial import Block


class Ranks:
    """This process's place among the ranks of ``torch.distributed`` (one rank when it is not initialised)."""

    def __init__(self, enabled: bool | None = None):
        import torch.distributed as dist

        active = dist.is_available() and dist.is_initialized()
        if enabled and not active:
            raise ValueError("autotune(distributed=True) needs torch.distributed initialised (torchrun and "
                             "init_process_group) before the loader is made")
        self.dist = dist if active and enabled is not False else None
        self.world = self.dist.get_world_size() if self.dist else 1
        self.rank = self.dist.get_rank() if self.dist else 0

    @property
    def several(self) -> bool:
        return self.world > 1

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order (a collective: every rank must call it at the same point)."""
        if not self.several:
            return [value]
        out: list[Any] = [None] * self.world
        self.dist.all_gather_object(out, value)
        return out

    def most(self, value: float) -> float:
        return max(self.gather(value))

    def least(self, value: int) -> int:
        return min(self.gather(value))

    def slowest(self, block: Block, elapsed: float) -> tuple[Block, float]:
        """The block of the rank that delivered the fewest samples per second, and the longest time
        any rank has spent tuning: what every rank then decides from."""
        blocks, times = zip(*self.gather((block, elapsed)))
        return replace(min(blocks, key=lambda b: b.rate)), max(times)
