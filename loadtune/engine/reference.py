"""Paired rounds: a config and its shaped calibration measured back to back, which one goes first
alternating round by round. A scan records such rounds of its pick as the reference ``check`` later
compares with; ``check`` measures the same rounds today (docs/ci.md).

Both trials of a round run with the same loader settings, device and consumer, so another process's
load, a slower machine or drift within the run hit both alike, and their ratio is the dataset's own.
"""

from __future__ import annotations

from collections.abc import Callable

from loadtune.engine.calibration import shape_for, shaped_spec, unit_seconds_isolated
from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.paired import CalibrationShape, PairedReference, PairedRound
from loadtune.model.results import ScanResult, Trial

DEFAULT_LENGTH = 10_000  # samples of the shaped calibration when the user's dataset has no length


def paired_round(source: SpecRef | LoadedSpec, calibration: LoadedSpec, request: TrialRequest,
                 index: int) -> tuple[PairedRound, list[Trial]]:
    """One round; even rounds measure the config first, odd ones the calibration first."""
    config_first = index % 2 == 0
    order = [("config", source), ("calibration", calibration)]
    if not config_first:
        order.reverse()
    rates: dict[str, float | None] = {}
    trials = []
    for role, src in order:
        trial = run_trial(src, request)
        trials.append(trial)
        rates[role] = trial.estimate.median if trial.ok and trial.estimate else None
    return PairedRound(rates["config"], rates["calibration"], config_first), trials


def calibration_for(shape: CalibrationShape, length: int | None) -> LoadedSpec:
    return shaped_spec(shape, length or DEFAULT_LENGTH)


def record_reference(result: ScanResult, source: SpecRef | LoadedSpec, request: TrialRequest, rounds: int,
                     keep_going: Callable[[], bool] = lambda: True) -> PairedReference | None:
    """The scan's pick in ``rounds`` paired rounds with its shaped calibration, for ``check``; None when
    the pick's per-sample costs were not measured (no stage profile at its batch size, no CPU reading).
    ``keep_going`` is asked before each round (the scan's budget)."""
    shape = shape_for(result, request.config, unit_seconds_isolated())
    if shape is None:
        return None
    calibration = calibration_for(shape, result.spec.length)
    reference = PairedReference(request.config, shape)
    for i in range(rounds):
        if not keep_going():
            break
        paired, _ = paired_round(source, calibration, request, i)
        reference.rounds.append(paired)
    return reference
