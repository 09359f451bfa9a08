"""What the scan's process and a trial's child say to each other: the request that starts a trial."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadtune.engine.trial.measure import LoaderOptions, Timing
from loadtune.engine.trial.workload import StepWorkload
from loadtune.model.config import TrialConfig

if TYPE_CHECKING:
    from loadtune.engine.distributed.layout import RankSetup


@dataclass(frozen=True)
class TrialRequest:
    """Everything a child needs to run one trial."""

    config: TrialConfig
    device: str
    timing: Timing
    options: LoaderOptions
    timeout_s: float
    start_method: str  # how DataLoader workers start in the user's training (a forkserver child would inherit forkserver)
    workload: StepWorkload | None = None  # the calibrated synthetic step of --step-ms, in place of the spec's
    ranks: RankSetup | None = None  # several ranks per trial, launched by torch.distributed's elastic agent
    task: str = "measure"  # "measure": the timed trial; "stages": the profiling run of stages.py (emits "stages")
