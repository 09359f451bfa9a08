"""Reading a saved file's objects back: every dataclass read from JSON goes through ``from_known``.

The schemas promise tolerant readers (a key a newer loadtune added is ignored, not an error), and
``cls(**data)`` breaks that promise with a TypeError on the first key this version does not know.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` less the keys ``cls`` has no field for."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def from_known(cls: type[T], data: dict[str, Any], **parsed: Any) -> T:
    """``cls`` built from ``data``'s keys that it knows, ``parsed`` (the fields its reader converted
    itself: nested objects, tuples) laid over them."""
    return cls(**{**known(cls, data), **parsed})
