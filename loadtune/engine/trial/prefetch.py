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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

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
        source = self.loader_iterator = iter(self.loader)
        ahead = self._copy(source, side)
        while ahead is not None:
            batch, nbytes = ahead
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(side)  # the step's kernels start after the copy, not before
            for tensor in tensors_of(batch):
                if tensor.device.type == "cuda":
                    tensor.record_stream(current)  # freed memory waits for the step, not just the copy
            ahead = self._copy(source, side)  # batch n+1 goes out while batch n is consumed
            self.bytes_moved += nbytes
            yield batch

    def _copy(self, source: Iterator[Any], side: torch.cuda.Stream) -> tuple[Any, int] | None:
        """Start the next batch's copy on the side stream; None when the loader is exhausted."""
        try:
            batch = next(source)
        except StopIteration:
            return None
        return self._move(batch, side), nbytes_of(batch)

    def _move(self, batch: Any, side: torch.cuda.Stream) -> Any:
        with torch.cuda.stream(side):
            return move_to(batch, self.device, non_blocking=True)
