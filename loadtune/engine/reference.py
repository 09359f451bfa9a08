"""Paired rounds: a config and its shaped calibration (and PyTorch's defaults, unless the config is
them) measured together. ``check --record`` (or a scan asked to) records such rounds of the pick as the
reference later checks compare with; ``check`` measures the same rounds today (docs/ci.md).

A round is one trial process holding every loader, with the same loader settings (the defaults with
PyTorch's), device and consumer, timed block by block in turn (``engine.trial.paired``): another
process's load, a slower machine or a pace that changes within seconds hit them alike, and the ratio of
the config to the calibration is the dataset's own; its ratio to the defaults is the gain a user gets
from the pick, side by side. Each round is a fresh process, so the rounds' spread holds what differs
from one process to the next. With several ranks per trial the loaders are measured as trials back to
back instead, and so is a config that carries environment variables (the heap setting): its process
starts with them exported, which the defaults and the calibration beside it must not share.
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
from loadtune.model.config import TrialConfig, pytorch_default
from loadtune.model.paired import CALIBRATION, CONFIG, DEFAULTS, CalibrationShape, PairedReference, PairedRound, turn_order
from loadtune.model.results import ScanResult
from loadtune.model.trial import Trial

DEFAULT_LENGTH = 10_000  # samples of the shaped calibration when the user's dataset has no length


@dataclass(frozen=True)
class PairedEntry:
    """The child's entry of a paired round: the user's loader, the shaped calibration's and (``defaults``)
    PyTorch's defaults over the user's dataset, built in the trial process with the request's knobs
    (pickled by value: a shape, a length, a config)."""

    shape: CalibrationShape
    length: int
    config_first: bool
    defaults: TrialConfig | None = None

    def __call__(self, run: TrialRun) -> None:
        import torch

        request = run.request
        measure_alternating(run.spec, calibration_for(self.shape, self.length), request.config, torch.device(request.device),
                            request.timing, request.options, run.emit, self.config_first, request.workload, run.measured,
                            self.defaults)


def defaults_beside(config: TrialConfig, device: str) -> TrialConfig | None:
    """PyTorch's defaults at the config's batch size, measured in every round beside it; None when the
    config is them."""
    return None if config.is_pytorch_default else pytorch_default(config.batch_size, device.startswith("cuda"))


def paired_round(source: SpecRef | LoadedSpec, shape: CalibrationShape, length: int | None, request: TrialRequest,
                 index: int, defaults: TrialConfig | None = None) -> tuple[PairedRound, list[Trial]]:
    """One round (with ``defaults`` in it unless None); even rounds start with the config before the
    calibration, odd ones the other way round."""
    config_first = index % 2 == 0
    if request.ranks is not None or request.config.environment:
        return back_to_back(source, calibration_for(shape, length), request, config_first, defaults)
    entry = PairedEntry(shape, length or DEFAULT_LENGTH, config_first, defaults)
    trial = run_trial(source, replace(request, entry=entry))
    return round_of(trial, config_first), [trial]


def round_of(trial: Trial, config_first: bool) -> PairedRound:
    """The round's rates (geometric means over the turns every loader completed) and the medians of
    the turns' ratios; None when the trial measured no turn."""
    with_defaults = bool(trial.default_blocks)
    columns = [trial.blocks, trial.calibration_blocks] + ([trial.default_blocks] if with_defaults else [])
    turns = [rates for rates in zip(*([b.rate for b in blocks] for blocks in columns)) if all(r > 0 for r in rates)]
    if trial.status != "ok" or not turns:
        return PairedRound(None, None, config_first, 0)
    rates = [math.exp(statistics.fmean(math.log(turn[i]) for turn in turns)) for i in range(len(columns))]
    defaults = (rates[2], statistics.median(t[0] / t[2] for t in turns)) if with_defaults else (None, None)
    return PairedRound(rates[0], rates[1], config_first, len(turns), statistics.median(t[0] / t[1] for t in turns), *defaults)


def back_to_back(source: SpecRef | LoadedSpec, calibration: LoadedSpec, request: TrialRequest, config_first: bool,
                 defaults: TrialConfig | None = None) -> tuple[PairedRound, list[Trial]]:
    """Several ranks, or a config started with its own environment: the config, the calibration (and the
    defaults) as trials, one after the other."""
    runs = {CONFIG: (source, request), CALIBRATION: (calibration, request)}
    if defaults is not None:
        runs[DEFAULTS] = (source, replace(request, config=defaults))
    rates: dict[str, float | None] = {}
    trials = []
    for role in turn_order(defaults is not None, config_first):
        trial = run_trial(*runs[role])
        trials.append(trial)
        rates[role] = trial.estimate.median if trial.ok and trial.estimate else None
    return PairedRound(rates[CONFIG], rates[CALIBRATION], config_first, default_rate=rates.get(DEFAULTS)), trials


def calibration_for(shape: CalibrationShape, length: int | None) -> LoadedSpec:
    return shaped_spec(shape, length or DEFAULT_LENGTH)


def record_reference(result: ScanResult, source: SpecRef | LoadedSpec, request: TrialRequest, rounds: int,
                     machine: MachineInfo, keep_going: Callable[[], bool] = lambda: True,
                     on_round: Callable[[int, PairedRound], None] | None = None) -> PairedReference | None:
    """``result``'s pick (``request.config``) in ``rounds`` paired rounds with its shaped calibration (and
    PyTorch's defaults, so that checks measure the same rounds and can state the gain side by side), on
    ``machine``, for ``check``; None when the pick's per-sample costs were not measured (no stage profile
    at its batch size, no CPU reading). ``keep_going`` is asked before each round (a scan's budget)."""
    shape = shape_for(result, request.config, unit_seconds_isolated())
    if shape is None:
        return None
    reference = PairedReference(request.config, shape, recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                machine=machine, defaults=defaults_beside(request.config, request.device))
    for i in range(rounds):
        if not keep_going():
            break
        paired, _ = paired_round(source, shape, result.spec.length, request, i, reference.defaults)
        reference.rounds.append(paired)
        if on_round:
            on_round(i + 1, paired)
    return reference
