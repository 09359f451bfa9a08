"""What one batch holds (its bytes, each tensor's dtype and shape), as recorded in a trial's result."""

from __future__ import annotations

from dataclasses import dataclass, field



@dataclass
class BatchInfo:
    """What one batch holds: its bytes and each tensor's dtype and shape (for the report's advice)."""

    nbytes: int
    tensors: list[tuple[str, list[int]]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict) -> "BatchInfo":
        return cls(int(data["nbytes"]), [(str(d), list(s)) for d, s in data.get("tensors", [])])


