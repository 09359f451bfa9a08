"""``check --against``: the two revisions compared and their rounds, timed in turns (docs/ci.md). Data
only; the verdict is computed in ``analysis.against``."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Revision:
    """One side of the comparison: what the user named it (``origin/main``, a folder, "work tree"),
    the commit it is at (short SHA; None outside git) and, for the head, whether uncommitted changes
    are part of it."""

    name: str
    commit: str | None = None
    dirty: bool = False

    def label(self) -> str:
        """``origin/main 8e01b7d``; the work tree: ``3f2a1c9`` (``+ uncommitted changes``)."""
        parts = [self.name] if self.name else []
        if self.commit and self.commit != self.name:
            parts.append(self.commit)
        text = " ".join(parts) or "?"
        return text + (" + uncommitted changes" if self.dirty else "")


@dataclass(frozen=True)
class DuetRound:
    """One round: a fresh process per side, their blocks timed in turns (``pairs`` turns; the rates are the
    geometric means of the blocks of the turns both completed) and ``ratio``, the median of the turns'
    head / base. Which side goes first alternates between rounds. None: not measured."""

    head_rate: float | None
    base_rate: float | None
    head_first: bool = True
    pairs: int = 0
    ratio: float | None = None


@dataclass
class Against:
    """What a check against another revision compared: the head (the work tree), the base, the spec's
    path inside both, and the rounds."""

    head: Revision
    base: Revision
    spec: str  # the spec's path relative to the trees' root
    rounds: list[DuetRound] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the reader should know: uncommitted changes included, a new spec

    @property
    def head_rate(self) -> float | None:
        rates = [r.head_rate for r in self.rounds if r.head_rate]
        return statistics.median(rates) if rates else None

    @property
    def base_rate(self) -> float | None:
        rates = [r.base_rate for r in self.rounds if r.base_rate]
        return statistics.median(rates) if rates else None

    def title(self) -> str:
        """``head 3f2a1c9 vs base origin/main 8e01b7d``."""
        return f"head {self.head.label()} vs base {self.base.label()}"
