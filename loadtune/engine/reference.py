"""Paired rounds: a config and its shaped calibration measured together. ``check --record`` (or a scan
asked to) records such rounds of the pick as the reference later checks compare with; ``check`` measures
the same rounds today (docs/ci.md).

A round is one trial process holding both loaders, with the same loader settings, device and consumer,
timed block by block in turn (``engine.trial.paired``): another process's load, a slower machine or a
pace that changes within seconds hit both alike, and their ratio is the dataset's own. Each round is a
fresh process, so the rounds' spread holds what differs from one process to the next. With several
ranks per trial the two are measured as two trials back to back instead.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from loadtune.engine.calibration import shape_for, shaped_spec, unit_seconds_isolated
from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.paired import measure_alternating
from loadtune.engine.trial.protocol import TrialRequest, TrialRun
from loadtune.model.machine import MachineInfo
from loadtune.model.paired import CalibrationShape, PairedReference, PairedRound
from loadtune.model.results import ScanResult, Trial

DEFAULT_LENGTH = 10_000  # samples of the shaped calibration when the user's dataset has no length


@dataclass(frozen=True)
class PairedEntry:
    """The child's entry of a paired round: the user's loader and the shaped calibration's, built in
    the trial process with the request's knobs (pickled by value: a shape and a length)."""

    shape: CalibrationShape
    length: int
    config_first: bool

    def __call__(self, run: TrialRun) -> None:
        import torch

        request = run.request
        measure_alternating(run.spec, calibration_for(self.shape, self.length), request.config, torch.device(request.device),
                            request.timing, request.options, run.emit, self.config_first, request.workload, run.measured)


def paired_round(source: SpecRef | LoadedSpec, shape: CalibrationShape, length: int | None, request: TrialRequest,
                 index: int) -> tuple[PairedRound, list[Trial]]:
    """One round; even rounds start with the config, odd ones with the calibration."""
    config_first = index % 2 == 0
    if request.ranks is not None:
        return back_to_back(source, calibration_for(shape, length), request, config_first)
    trial = run_trial(source, replace(request, entry=PairedEntry(shape, length or DEFAULT_LENGTH, config_first)))
    return round_of(trial, config_first), [trial]


def round_of(trial: Trial, config_first: bool) -> PairedRound:
    """The round's rates (geometric means over the block pairs both loaders completed) and the median
    of the pairs' ratios; None when the trial measured no pair."""
    pairs = [(c.rate, k.rate) for c, k in zip(trial.blocks, trial.calibration_blocks) if c.rate > 0 and k.rate > 0]
    if trial.status != "ok" or not pairs:
        return PairedRound(None, None, config_first, 0)
    config_rate = math.exp(statistics.fmean(math.log(c) for c, _ in pairs))
    calibration_rate = math.exp(statistics.fmean(math.log(k) for _, k in pairs))
    return PairedRound(config_rate, calibration_rate, config_first, len(pairs), statistics.median(c / k for c, k in pairs))


def back_to_back(source: SpecRef | LoadedSpec, calibration: LoadedSpec, request: TrialRequest,
                 config_first: bool) -> tuple[PairedRound, list[Trial]]:
    """Several ranks: the config and the calibration as two trials, one after the other."""
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
                     machine: MachineInfo, keep_going: Callable[[], bool] = lambda: True,
                     on_round: Callable[[int, PairedRound], None] | None = None) -> PairedReference | None:
    """``result``'s pick (``request.config``) in ``rounds`` paired rounds with its shaped calibration, on
    ``machine``, for ``check``; None when the pick's per-sample costs were not measured (no stage profile
    at its batch size, no CPU reading). ``keep_going`` is asked before each round (a scan's budget)."""
    shape = shape_for(result, request.config, unit_seconds_isolated())
    if shape is None:
        return None
    reference = PairedReference(request.config, shape, recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                machine=machine)
    for i in range(rounds):
        if not keep_going():
            break
        paired, _ = paired_round(source, shape, result.spec.length, request, i)
        reference.rounds.append(paired)
        if on_round:
            on_round(i + 1, paired)
    return reference
