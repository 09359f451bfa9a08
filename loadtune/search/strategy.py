"""How a search strategy talks to the scan: it proposes the trials it still wants, given what has been
measured so far.

Strategies are pure functions of the measurements: ``propose(result)`` returns the trials still
wanted, first one first, and given the same measurements they make the same proposals, so an
interrupted scan resumes by asking again. ``GridSearch`` and ``AdaptiveSearch`` both end with the
side-by-side rounds of ``closing.closing_rounds`` (the fallback where the race cannot run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from loadtune.model.config import Skip, TrialConfig
from loadtune.model.results import ConfigResult, ScanResult, by_config


@dataclass(frozen=True)
class Proposal:
    """One trial a strategy wants: a config, in the search (round 0) or in a side-by-side round."""

    config: TrialConfig
    round: int = 0  # 0: search; 1, 2, ...: closing rounds


def measured(result: ScanResult, round_: int = 0) -> dict[TrialConfig, ConfigResult]:
    """Configs with a finished trial in this round (failed ones included: they are not retried); the
    race's legs are not the search's."""
    return {c.config: c for c in by_config([t for t in result.trials if t.round == round_ and not t.raced])}


def skipped_keys(result: ScanResult) -> set[str]:
    """Keys of single configs that were skipped (never measured, never proposed again)."""
    return {s.key for s in result.skipped if s.key}


class Strategy(Protocol):
    """What the scan asks of a search: the next trials, and what to tell the user at the end."""

    name: str
    planned: int | None  # trials the search plans before closing rounds, when known up front (the grid)

    def propose(self, result: ScanResult) -> list[Proposal]:
        """The trials still wanted, first one first; empty when the search is done."""

    def first_trials(self) -> list[TrialConfig]:
        """The trials it runs whatever they measure before a race is possible: PyTorch's defaults and a
        config with workers among them (what a ``--budget`` must hold before the race's legs)."""

    def notes(self, result: ScanResult) -> list[Skip]:
        """Knob values the search chose not to measure, and why (shown as skipped rows)."""

    def remarks(self, result: ScanResult) -> list[str]:
        """Sentences about how the search went, for the report's notes."""
