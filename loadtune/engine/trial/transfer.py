"""Moving batches to the device, whatever their nesting.

Tensors inside tuples, lists, dicts and namedtuples are moved; other leaves (strings, ints, paths)
are left alone, as a training loop would. ``non_blocking`` only overlaps anything when the source is
pinned; from pageable memory the copy is synchronous whatever the flag says.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from loadtune.model.batch import BatchInfo


def move_to(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """A copy of ``batch`` with every tensor on ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        moved = {k: move_to(v, device, non_blocking) for k, v in batch.items()}
        if type(batch) is dict:
            return moved
        try:
            return type(batch)(moved)  # OrderedDict and friends keep their type
        except TypeError:
            return moved
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(move_to(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to(v, device, non_blocking) for v in batch)
    return batch


def batch_size_of(batch: Any) -> int | None:
    """Samples in a batch: the leading dimension of its first tensor, else the length of a list.

    Counting what actually arrived (rather than assuming ``batch_size``) keeps the short last
    batch of an epoch and custom collate functions honest."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    if isinstance(batch, dict):
        for value in batch.values():
            n = batch_size_of(value)
            if n is not None:
                return n
        return None
    if isinstance(batch, (list, tuple)):
        for value in batch:
            if isinstance(value, (torch.Tensor, dict, list, tuple)):
                n = batch_size_of(value)
                if n is not None:
                    return n
        return len(batch) if not (isinstance(batch, tuple) and hasattr(batch, "_fields")) else None
    return None


def tensors_of(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor leaf of a nested batch, in ``move_to``'s order."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, dict):
        for value in batch.values():
            yield from tensors_of(value)
    elif isinstance(batch, (list, tuple)):
        for value in batch:
            yield from tensors_of(value)


def nbytes_of(batch: Any) -> int:
    """Bytes a move to the device copies: the sum over the batch's tensors (views count their own
    elements, as ``.to`` copies only those)."""
    return sum(t.nelement() * t.element_size() for t in tensors_of(batch))


def batch_info(batch: Any) -> BatchInfo:
    """What one batch holds, for the result: its bytes and each tensor's dtype and shape."""
    leaves = list(tensors_of(batch))
    return BatchInfo(sum(t.nelement() * t.element_size() for t in leaves),
                     [(str(t.dtype).removeprefix("torch."), list(t.shape)) for t in leaves])
