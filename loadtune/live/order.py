"""One epoch's order of samples, shared by every loader that tries a config in it.

The loader's own batch sampler (the user's sampler, shuffle, ``drop_last``, or their ``batch_sampler``)
is iterated once per epoch; each trial loader gets a ``Handout`` as its ``batch_sampler`` and draws the
next batches of indices from that one iterator. Closing a handout stops its loader from taking more:
the loader then delivers what its workers already hold and ends, and the next loader goes on from
where the order stands. No index is drawn twice, none is skipped, and as long as the old loader's
batches are delivered before the new one's, the epoch's batches arrive in the sampler's own order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any


class EpochOrder:
    """The batches of indices of the current epoch, drawn lazily from ``batch_sampler``."""

    def __init__(self, batch_sampler: Iterable[list[Any]]):
        self.batch_sampler = batch_sampler
        self._batches: Iterator[list[Any]] = iter(())
        self.handed = 0  # batches handed out this epoch
        self.exhausted = True

    def new_epoch(self) -> None:
        """Start the next epoch's order (a sampler's ``set_epoch`` or a shuffle's new draw applies here)."""
        self._batches = iter(self.batch_sampler)
        self.handed = 0
        self.exhausted = False

    def take(self) -> list[Any] | None:
        """The next batch of indices, or None once the epoch's order is exhausted."""
        batch = next(self._batches, None)
        if batch is None:
            self.exhausted = True
        else:
            self.handed += 1
        return batch

    def length(self) -> int:
        """Batches in an epoch; a batch sampler that cannot say counts as endless."""
        try:
            return len(self.batch_sampler)  # type: ignore[arg-type]
        except TypeError:
            return 2**62

    def __len__(self) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]


class Handout:
    """The ``batch_sampler`` of one loader: the next batches of the shared order, until closed. The
    sizes of the batches handed out wait in ``sizes`` until theirs is delivered (loaders deliver in
    order), so samples are counted without looking inside a batch."""

    def __init__(self, order: EpochOrder):
        self.order = order
        self.closed = False
        self.sizes: deque[int] = deque()

    def __iter__(self) -> Iterator[list[Any]]:
        self.sizes.clear()  # a new pass (the next epoch of a persistent loader): nothing is in flight
        while not self.closed:
            batch = self.order.take()
            if batch is None:
                return
            self.sizes.append(len(batch))
            yield batch

    def __len__(self) -> int:
        return len(self.order)

    def close(self) -> None:
        """Hand out nothing more: the loader finishes the batches it already asked for, then ends."""
        self.closed = True

    def delivered(self) -> int:
        """The size of the batch just delivered (the oldest handed out); 0 if none is known."""
        return self.sizes.popleft() if self.sizes else 0
