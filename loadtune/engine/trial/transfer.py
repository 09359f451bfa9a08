"""Moving batches to the device, whatever their structure, and counting what a move copies.

A batch reaches the device the way a training loop moves it, and loadtune counts exactly what is
moved. The structures are those DataLoader's own ``pin_memory`` handles
(``torch.utils.data._utils.pin_memory``), rebuilt as their own type where possible: mappings (a
Hugging Face ``BatchEncoding`` or an ``OrderedDict`` as much as a dict), namedtuples, tuples and other
sequences; plus dataclasses, and custom batch objects. An object with its own ``.to()`` (a
``BatchEncoding``, a PyG ``Data``, a ``PackedSequence``, a custom batch class) is moved by it, as the
training loop would, and its bytes are counted from the tensors among its attributes; an object
with only ``pin_memory()`` (the DataLoader's custom-batch pattern) or a dataclass has each attribute
moved into a shallow copy. Other leaves (strings, ints, paths, numpy arrays) are left alone. A
batch with no tensor at all gets a note (``unmoved_note``): its copy reads 0 bytes, and the
transfer strategies cannot differ.

``non_blocking`` only overlaps anything when the source is pinned; from pageable memory the copy is
synchronous whatever the flag says.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any

import torch

from loadtune.model.batch import BatchInfo

# what a batch is, as far as moving it goes
TENSOR, LEAF, OWN_TO, MAPPING, NAMEDTUPLE, TUPLE, SEQUENCE, ATTRIBUTES = (
    "tensor", "leaf", "own .to()", "mapping", "namedtuple", "tuple", "sequence", "attributes")
PLAIN_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None))


EXACT = {torch.Tensor: TENSOR, tuple: TUPLE, list: SEQUENCE, dict: MAPPING,
         **{leaf: LEAF for leaf in PLAIN_LEAVES}}  # the usual batches, told apart per batch without the ABCs


def kind_of(batch: Any) -> str:
    """How ``batch`` is moved. An object's own ``.to()`` comes before its structure (as DataLoader
    calls an object's own ``pin_memory()`` first): it is what the training loop calls."""
    kind = EXACT.get(type(batch))
    if kind is not None:
        return kind
    if isinstance(batch, torch.Tensor):
        return TENSOR
    if isinstance(batch, PLAIN_LEAVES) or isinstance(batch, type):
        return LEAF
    if callable(getattr(batch, "to", None)):
        return OWN_TO
    if isinstance(batch, Mapping):
        return MAPPING
    if isinstance(batch, tuple):
        return NAMEDTUPLE if hasattr(batch, "_fields") else TUPLE
    if isinstance(batch, Sequence):
        return SEQUENCE
    if dataclasses.is_dataclass(batch) or callable(getattr(batch, "pin_memory", None)):
        return ATTRIBUTES
    return LEAF


def move_to(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """A copy of ``batch`` with every tensor on ``device`` (an object with its own ``.to()``: what
    that returns)."""
    def move(item: Any) -> Any:
        kind = kind_of(item)
        if kind == TENSOR:
            return item.to(device, non_blocking=non_blocking)
        if kind == LEAF:
            return item
        if kind == OWN_TO:
            return own_to(item, device, non_blocking)
        return rebuild(item, kind, move)

    return move(batch)


def own_to(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """``batch.to(device, non_blocking=...)``; ``batch.to(device)`` for a ``.to`` without that keyword.
    A ``.to()`` that moves in place and returns None leaves the batch itself."""
    try:
        moved = batch.to(device, non_blocking=non_blocking)
    except TypeError:
        moved = batch.to(device)
    return batch if moved is None else moved


def rebuild(batch: Any, kind: str, move: Callable[[Any], Any]) -> Any:
    """The container ``batch`` with ``move`` applied to each item, as its own type where it can be
    built (as DataLoader's ``pin_memory`` does), else a plain dict, tuple or list."""
    if kind == MAPPING:
        moved = {key: move(value) for key, value in batch.items()}
        if type(batch) is dict:
            return moved
        try:
            if isinstance(batch, MutableMapping):  # a copy keeps the mapping's other state (BatchEncoding's encodings)
                clone = copy.copy(batch)
                clone.update(moved)
                return clone
            return type(batch)(moved)
        except TypeError:
            return moved
    if kind == NAMEDTUPLE:
        return type(batch)(*(move(item) for item in batch))
    if kind in (TUPLE, SEQUENCE):
        items = [move(item) for item in batch]
        if type(batch) in (list, tuple):
            return type(batch)(items)
        try:
            if isinstance(batch, MutableSequence):
                clone = copy.copy(batch)
                for i, item in enumerate(items):
                    clone[i] = item
                return clone
            return type(batch)(items)
        except TypeError:
            return tuple(items) if kind == TUPLE else items
    clone = copy.copy(batch)  # ATTRIBUTES: each attribute moved into a shallow copy (frozen dataclasses too)
    for name, value in attributes(batch):
        object.__setattr__(clone, name, move(value))
    return clone


def attributes(obj: Any) -> list[tuple[str, Any]]:
    """A dataclass's fields, else the object's instance attributes (``__dict__`` and ``__slots__``)."""
    if dataclasses.is_dataclass(obj):
        return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj) if hasattr(obj, f.name)]
    found = dict(vars(obj)) if hasattr(obj, "__dict__") else {}
    for cls in type(obj).__mro__:
        slots = getattr(cls, "__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in found and name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                found[name] = getattr(obj, name)
    return list(found.items())


def children(batch: Any, kind: str) -> Iterator[Any]:
    """What a batch holds, in ``move_to``'s order; an object with its own ``.to()`` is looked into
    through its structure when it is a mapping or a sequence, else through its attributes."""
    if kind == OWN_TO:
        kind = MAPPING if isinstance(batch, Mapping) else SEQUENCE if isinstance(batch, Sequence) else ATTRIBUTES
    if kind == MAPPING:
        return iter(batch.values())
    if kind in (NAMEDTUPLE, TUPLE, SEQUENCE):
        return iter(batch)
    if kind == ATTRIBUTES:
        return (value for _, value in attributes(batch))
    return iter(())


def tensors_of(batch: Any) -> list[torch.Tensor]:
    """Every tensor a move copies, in ``move_to``'s order (an object that refers back to itself is
    looked into once)."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()

    def walk(item: Any) -> None:
        kind = kind_of(item)
        if kind == TENSOR:
            found.append(item)
        elif kind != LEAF and id(item) not in seen:
            seen.add(id(item))
            for value in children(item, kind):
                walk(value)

    walk(batch)
    return found


def batch_size_of(batch: Any, _seen: set[int] | None = None) -> int | None:
    """Samples in a batch: the leading dimension of its first tensor, else the length of a list.

    Counting what actually arrived (rather than assuming ``batch_size``) keeps the short last
    batch of an epoch and custom collate functions honest."""
    kind = kind_of(batch)
    if kind == TENSOR:
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    seen = set() if _seen is None else _seen
    if kind == LEAF or id(batch) in seen:
        return None
    seen.add(id(batch))
    for value in children(batch, kind):
        if kind_of(value) != LEAF:
            n = batch_size_of(value, seen)
            if n is not None:
                return n
    return len(batch) if kind in (TUPLE, SEQUENCE) else None


def nbytes_of(batch: Any) -> int:
    """Bytes a move to the device copies: the sum over the batch's tensors (views count their own
    elements, as ``.to`` copies only those)."""
    return sum(t.nelement() * t.element_size() for t in tensors_of(batch))


def batch_info(batch: Any) -> BatchInfo:
    """What one batch holds, for the result: its bytes and each tensor's dtype and shape."""
    leaves = list(tensors_of(batch))
    return BatchInfo(sum(t.nelement() * t.element_size() for t in leaves),
                     [(str(t.dtype).removeprefix("torch."), list(t.shape)) for t in leaves], batch_size_of(batch))


def type_name(obj: Any) -> str:
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ in ("builtins", "__main__") else f"{cls.__module__}.{cls.__qualname__}"


def unmoved_note(batch: Any) -> str | None:
    """A sentence for the result when moving ``batch`` copies no tensor loadtune can see (None when
    it copies one): the host-to-device bytes then read 0 and the transfer strategies cannot differ."""
    if tensors_of(batch):
        return None
    name = type_name(batch)
    if kind_of(batch) == OWN_TO:
        return (f"batches of type {name} are moved by their own .to(), but none of their attributes is a tensor loadtune can "
                "count: host-to-device bytes read 0; keep the tensors in attributes (or return a dict or tuple of tensors "
                "from collate_fn) to have the copy measured")
    return (f"batches of type {name} hold no tensor loadtune can move (it moves tensors inside mappings, sequences, "
            "namedtuples, dataclasses and objects with .to() or pin_memory()): nothing was copied to the GPU, so "
            "host-to-device bytes read 0 and the transfer strategies (sync, non_blocking, stream) cannot differ; return "
            "tensors from collate_fn, or give the batch class a .to(device, non_blocking=False) method")
