"""``CUDAPrefetcher``: copy batch n+1 to the GPU on a side stream while batch n is consumed.

The pattern of NVIDIA apex's ImageNet ``data_prefetcher``, for batches of any nesting. It is what
loadtune's ``stream`` transfer strategy measures, and what the recommendation tells you to paste:

    from loadtune import CUDAPrefetcher

    loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
    for epoch in range(epochs):
        for images, labels in CUDAPrefetcher(loader, "cuda"):
            loss = criterion(model(images), labels)   # already on the GPU
            ...

Two things make it correct, not just fast: the compute stream waits for the side stream before a
batch is handed out (``wait_stream``), and every moved tensor is marked as used by the compute
stream (``record_stream``), so the caching allocator does not hand its memory to the next copy while
the step still reads it. The copy overlaps the step only from pinned memory (``pin_memory=True``);
from pageable memory the host blocks while the driver stages it, though the GPU's earlier work
still runs meanwhile. On a CPU device it passes batches through unchanged.

The first batch is handed out as soon as its copy is issued, before the second is asked of the
loader: time to the first batch then counts one batch, as it does for a loop that copies in the
step, so the strategies' start-up times compare. From the second batch on, batch n+1 is fetched and
its copy issued before batch n is handed out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from loadtune.engine.loaders import start
from loadtune.engine.trial.transfer import move_to, nbytes_of, tensors_of


class CUDAPrefetcher:
    """Wraps any iterable of batches (a DataLoader, usually); iterate it like the loader itself.

    Each ``iter()`` starts a fresh pass over ``loader`` (one epoch of a DataLoader). ``bytes_moved``
    counts the bytes of the batches handed out so far, for throughput figures."""

    def __init__(self, loader: Iterable, device: torch.device | str | int | None = None):
        self.loader = loader
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.bytes_moved = 0
        self.loader_iterator: Iterator[Any] | None = None  # the current pass over ``loader`` (its backlog is readable)

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        if self.device.type != "cuda":
            return iter(self.loader)  # nothing to overlap: a pass-through, so the same loop runs on a CPU
        return self._prefetch()

    def _prefetch(self) -> Iterator[Any]:
        side = torch.cuda.Stream(self.device)
        source = self.loader_iterator = start(self.loader)
        for copy in pipelined(source, lambda batch: self._move(batch, side), lambda copy: self._ready(copy, side)):
            self.bytes_moved += copy.nbytes
            yield copy.batch

    def _ready(self, copy: Copy, side: torch.cuda.Stream) -> None:
        """Make the step wait for this batch's copy (and no later one), and keep its memory from
        being reused while the step may still read it."""
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(side)  # the step's kernels start after the copy, not before
        for tensor in tensors_of(copy.batch):
            if tensor.device.type == "cuda":
                tensor.record_stream(current)  # freed memory waits for the step, not just the copy

    def _move(self, batch: Any, side: torch.cuda.Stream) -> Any:
        with torch.cuda.stream(side):
            return move_to(batch, self.device, non_blocking=True)


@dataclass
class Copy:
    """A batch whose copy has been issued: the moved batch, and the bytes of the one it came from."""

    batch: Any
    nbytes: int


def pipelined(source: Iterator[Any], issue: Callable[[Any], Any], ready: Callable[[Copy], None]) -> Iterator[Copy]:
    """The batches of ``source``, each copy issued by ``issue`` and made safe to use by ``ready``
    before it is handed out. The first goes out alone; after it, batch n+1's copy is issued after
    batch n is ready (the step waits for its own copy, not for the next one) and before batch n is
    handed out (so the copy overlaps the step)."""

    def fetch() -> Copy | None:
        try:
            batch = next(source)
        except StopIteration:
            return None
        return Copy(issue(batch), nbytes_of(batch))

    pending = fetch()
    if pending is None:
        return
    ready(pending)
    yield pending  # the first batch alone: start-up waits for one batch, as with the other strategies
    pending = fetch()
    while pending is not None:
        ready(pending)
        following = fetch()  # batch n+1's copy goes out while batch n is consumed
        yield pending
        pending = following
