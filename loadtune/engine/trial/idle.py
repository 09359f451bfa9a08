"""How long the consumer waited for data: the "wait %" of the table.

On the CPU the consumer is the trial's main thread, so its wait is the host time spent inside
``next(loader)`` (the Meter times that with ``perf_counter``). On a GPU that host time says little:
kernels run asynchronously, so the host may wait in ``next()`` while the GPU is still busy with the
previous step, and a synchronous ``.to(device)`` blocks the host until that step is done. What
matters is whether the GPU's compute stream sat idle, and CUDA events answer it without any
synchronisation per batch: an event is recorded at the block's start and before and after each
step; after the block's closing synchronisation, the gaps between one step's end and the next
step's start (the copy on the compute stream and any wait for the loader included) are summed.
"""

from __future__ import annotations

import torch


class GPUIdleClock:
    """Events on the compute stream: [block start, before step 1, after step 1, before step 2, ...]."""

    def __init__(self, device: torch.device):
        self.device = device
        self.events: list[torch.cuda.Event] = []
        self.spare: list[torch.cuda.Event] = []  # recycled: creating an event per batch costs more than recording one

    def _record(self) -> None:
        event = self.spare.pop() if self.spare else torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        self.events.append(event)

    def begin(self) -> None:
        """A block starts: right after the previous block's synchronisation, so the stream is empty."""
        self.spare += self.events
        self.events = []
        self._record()

    before_step = _record
    after_step = _record

    def idle_s(self) -> float:
        """Seconds the stream idled between steps in this block. Only after the device was synchronised."""
        ev = self.events
        return sum(ev[i].elapsed_time(ev[i + 1]) for i in range(0, len(ev) - 1, 2)) / 1000
