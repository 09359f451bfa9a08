"""TODO docstring."""

from __future__ import annotations




from dataclasses import dataclass


from loadtune.model.config import TrialConfig
from loadtune.model.results import ConfigResult, ScanResult, by_config


@dataclass(frozen=True)
class Proposal:
    config: TrialConfig
    round: int = 0  # 0: search; 1, 2, ...: confirmation rounds


def measured(result: ScanResult, round_: int = 0) -> dict[TrialConfig, ConfigResult]:
    """Configs with a finished trial in this round (failed ones included: they are not retried)."""
    return {c.config: c for c in by_config([t for t in result.trials if t.round == round_])}


def skipped_keys(result: ScanResult) -> set[str]:
    return {s.key for s in result.skipped if s.key}


