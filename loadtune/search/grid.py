"""The exhaustive grid: every valid combination, in a shuffled order so that drift of the machine favours
no part of the grid, then the contenders side by side."""

from __future__ import annotations

from loadtune.model.config import Skip, TrialConfig
from loadtune.model.results import ScanResult
from loadtune.search.strategy import Proposal, measured, skipped_keys
from loadtune.search.allocator import heap_trials
from loadtune.search.closing import closing_rounds


class GridSearch:
    """Every valid combination in a shuffled order, then the contenders side by side."""

    name = "grid"

    def __init__(self, configs: list[TrialConfig], noise_floor: float, confirm_rounds: int = 1, seed: int = 0):
        self.configs, self.noise_floor, self.rounds, self.seed = configs, noise_floor, confirm_rounds, seed
        self.planned = len(configs)

    def propose(self, result: ScanResult) -> list[Proposal]:
        done = set(measured(result)) | {c for c in self.configs if c.key in skipped_keys(result)}
        pending = [Proposal(c) for c in self.configs if c not in done]
        return pending or heap_trials(result) or closing_rounds(result, self.rounds, self.noise_floor, self.seed)

    def first_trials(self) -> list[TrialConfig]:
        """Its shuffled order up to where PyTorch's defaults and a config with workers have both run."""
        out: list[TrialConfig] = []
        for config in self.configs:
            out.append(config)
            if any(c.is_pytorch_default for c in out) and any(c.num_workers for c in out):
                break
        return out

    def notes(self, result: ScanResult) -> list[Skip]:
        return []  # the grid measures everything it was given

    def remarks(self, result: ScanResult) -> list[str]:
        return []
