"""``loadtune check``: a CI gate that fails when loading got slower, and not when the machine did.

``check --record`` (``record_baseline``) measures the baseline scan's pick in paired rounds beside a
calibration workload shaped like the dataset (``engine.reference``), on the machine that runs the
checks, from the code they compare against, and saves the rounds in the baseline as its reference. A check measures the
same rounds today, with the same loader settings, so another process's load or a slower machine moves
both loaders of a round alike; the verdict compares the ratio of the two with the reference's
(``analysis.verdict``), and measures more rounds while the interval is too wide to decide, up to a
time budget (docs/ci.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadtune.engine import probe as probe_mod
from loadtune.engine.distributed.agent import with_ranks
from loadtune.engine.distributed.layout import DistributedError, setup_for
from loadtune.engine.distributed.layout import validate as validate_layout
from loadtune.engine.calibration import unit_seconds_isolated
from loadtune.engine.machine import collect
from loadtune.engine.storage import readied
from loadtune.engine.trial.setup import LoaderOptions, scan_timing
from loadtune.model.config import TrialConfig
from loadtune.model.results import ScanResult
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.engine.spec import LoadedSpec, SpecRef, load_spec
from loadtune.engine.trial.workload import StepWorkload, calibrate
from loadtune.model.check import INCONCLUSIVE, CheckResult
from loadtune.model.paired import PairedReference, PairedRound
from loadtune.model.trial import Trial
from loadtune.engine.reference import paired_round, record_reference
from loadtune.analysis.environment import environment_changes, spec_identity
from loadtune.analysis.verdict import MIN_BASELINE_ROUNDS, MIN_ROUNDS, beyond_range, judge, machine_change, next_step, side_by_side_gain


DEFAULT_BUDGET_S = 180.0  # seconds a check may take, its setup included, before it settles for "inconclusive"
MAX_ROUNDS = 60  # a cap beside the budget: rounds take seconds, so the budget (180 s) usually ends it first


class BaselineError(ValueError):
    """The baseline cannot be compared with (exit 2): wrong dataset, no recommendation, no calibration."""


REFERENCE_ROUNDS = 8  # rounds ``check --record`` measures: the baseline's noise enters every check (docs/ci.md)
RECORD_HINT = ("record one with this command and --record, on the machine that runs the checks, from the code they compare "
               "against (docs/ci.md)")


def check_baseline(baseline: ScanResult, spec: LoadedSpec) -> None:
    """The baseline is a scan of this dataset with a pick, and holds a reference to compare with."""
    check_scan(baseline, spec)
    reference = baseline.reference
    if reference is None or reference.measured < MIN_BASELINE_ROUNDS:
        raise BaselineError(f"the baseline has no paired reference for check (a scan records none unless asked to): "
                            f"{RECORD_HINT}")


def check_scan(baseline: ScanResult, spec: LoadedSpec) -> None:
    """The baseline is a scan of this dataset, with a pick."""
    now = spec_identity(spec.ref.path if spec.ref else None, spec.ref.factory if spec.ref else None, type(spec.dataset).__qualname__)
    then = spec_identity(baseline.spec.path, baseline.spec.factory, baseline.spec.dataset_type)
    if now != then:
        raise BaselineError(f"the baseline is of another dataset ({then[0]}:{then[1]}, {then[2]}), not {now[0]}:{now[1]} ({now[2]})")
    if baseline.recommendation is None:
        raise BaselineError("the baseline holds no recommendation (its scan measured nothing); run loadtune scan again")


def baseline_step(step: dict | None, device: str, source: SpecRef | None = None) -> StepWorkload | None:
    """The baseline's ``--step-ms`` step, to run the same work now: its own calibration where the device
    type is the same, else calibrated here to the same milliseconds (dropping it would compare a loader
    feeding a step with one feeding nothing)."""
    if not step:
        return None
    if step["device_type"] == device.partition(":")[0]:
        return StepWorkload.from_dict(step)
    return calibrated_step(step["ms"], device, source, "the baseline's ")


def calibrated_step(ms: float, device: str, source: SpecRef | None, whose: str = "a ") -> StepWorkload:
    """A synthetic step of ``ms`` milliseconds calibrated on ``device`` (CUDA: in a child, never in this
    process, with the spec's settings)."""
    if device.startswith("cuda"):
        got = probe_mod.run(device, ms, source=source)
        if got.workload is None:
            raise BaselineError(f"{whose}{ms:g} ms step could not be calibrated on {device}: {got.error}")
        return got.workload
    return calibrate(ms, "cpu")


def run_check(
    spec_target: Any,
    baseline: ScanResult,
    config: TrialConfig | None = None,
    tolerance: float = 0.10,
    min_throughput: float | None = None,
    rounds: int = 3,
    budget_s: float = DEFAULT_BUDGET_S,
    on_round: Callable[[int, PairedRound], None] | None = None,
) -> CheckResult:
    """Measure the baseline's pick and its shaped calibration (and PyTorch's defaults, where its
    reference holds them) in paired rounds, with the baseline's own timing and loader options: at least
    ``rounds``, then more while the verdict is inconclusive and another round fits in ``budget_s``."""
    started = time.monotonic()
    spec = load_spec(spec_target)
    check_baseline(baseline, spec)
    reference = baseline.reference
    config = config or reference.config
    if config != reference.config:
        raise BaselineError(f"the baseline's reference is of {reference.config.label()}, not {config.label()}: scan with "
                            "that config recommended (or narrowed to it) to check it")
    if rounds < MIN_ROUNDS:
        raise BaselineError(f"--rounds {rounds} cannot decide: at least {MIN_ROUNDS} paired rounds show the noise")
    if rounds > MAX_ROUNDS:
        raise BaselineError(f"--rounds {rounds} is more than the {MAX_ROUNDS} rounds a check measures at most")
    request = check_request(baseline, spec, config)
    cpu = cpu_change(reference.shape.unit_s)
    trials: list[Trial] = []
    paired: list[PairedRound] = []
    first_round = time.monotonic()
    stop, early = False, None
    while not stop:
        got, round_trials = paired_round(spec.ref, reference.shape, spec.length, request, len(paired), reference.defaults)
        paired.append(got)
        trials += round_trials
        if on_round:
            on_round(len(paired), got)
        _, stop, early = next_step(reference.rounds, paired, tolerance, rounds,
                                   rounds_at_end(len(paired), first_round, started, budget_s), min_throughput)
    return outcome(baseline, config, paired, tolerance, min_throughput, trials, started, early, cpu)


def cpu_change(unit_s: float | None) -> float | None:
    """CPU time of one unit of the calibration's work on this machine against the baseline's (``unit_s``,
    read the same way when it was recorded), less one; None when the baseline has none."""
    return unit_seconds_isolated() / unit_s - 1 if unit_s else None


def rounds_at_end(done: int, first_round: float, started: float, budget_s: float) -> int:
    """How many rounds the check will have measured when its budget runs out, at the pace of those so far
    (``MAX_ROUNDS`` at most): another round starts only where it fits."""
    now = time.monotonic()
    per_round = (now - first_round) / done
    more = int((budget_s - (now - started)) // per_round) if per_round > 0 else MAX_ROUNDS
    return min(MAX_ROUNDS, done + max(0, more))


def record(spec_target: Any, baseline: ScanResult, config: TrialConfig | None = None, rounds: int = REFERENCE_ROUNDS,
           on_round: Callable[[int, PairedRound], None] | None = None) -> PairedReference:
    """The reference later checks compare with, measured here and now: the baseline's pick (or
    ``config``) in ``rounds`` paired rounds beside its shaped calibration, with the settings a check
    uses. Returned, not saved: ``record_baseline`` puts it in the baseline once it holds enough rounds."""
    spec = load_spec(spec_target)
    check_scan(baseline, spec)
    config = config or baseline.recommendation.config
    if rounds < MIN_BASELINE_ROUNDS:
        raise BaselineError(f"--rounds {rounds} cannot make a reference: at least {MIN_BASELINE_ROUNDS} paired rounds show the noise")
    request = check_request(baseline, spec, config)
    reference = record_reference(baseline, spec.ref, request, rounds, collect(), on_round=on_round)
    if reference is None:
        raise BaselineError(f"the baseline has no per-sample costs of {config.label()} to shape the calibration with (no stage "
                            "profile at its batch size, no CPU reading of its trials): scan with the stage profile on")
    return reference


class ReferenceIncomplete(RuntimeError):
    """``record_baseline`` measured too few paired rounds for a reference that can decide a check: the
    baseline file is left as it was (exit 3, as when nothing could be measured)."""


@dataclass(frozen=True)
class Recorded:
    """What ``record_baseline`` saved: the baseline holding its new reference, the file, and the
    reference it replaced (None when it had none)."""

    baseline: ScanResult
    path: Path
    replaced: PairedReference | None


def record_baseline(spec_target: Any, path: str | Path, config: TrialConfig | None = None, rounds: int = REFERENCE_ROUNDS,
                    baseline: ScanResult | None = None, on_start: Callable[[TrialConfig | None, int], None] | None = None,
                    on_round: Callable[[int, PairedRound], None] | None = None) -> Recorded:
    """``check --record``: measure the reference (``record``) and write it into the baseline scan at
    ``path``, atomically and only once it holds enough rounds to decide, so a baseline is never left
    with a reference that cannot (``ReferenceIncomplete`` otherwise). ``baseline``: the scan at ``path``
    when already loaded (it gets the reference); ``on_start(config, rounds)``: before any work, with the
    config recorded (None for a baseline without a pick, which ``record`` then refuses)."""
    path = Path(path)
    baseline = ScanResult.load(path) if baseline is None else baseline
    before = baseline.reference
    if on_start:
        on_start(config or (baseline.recommendation.config if baseline.recommendation else None), rounds)
    reference = record(spec_target, baseline, config, rounds, on_round=on_round)
    if reference.measured < MIN_BASELINE_ROUNDS:
        raise ReferenceIncomplete(f"only {reference.measured} of {rounds} paired rounds were measured (see the rounds above): "
                                  f"{path} is left as it was")
    baseline.reference = reference
    baseline.save(path)
    return Recorded(baseline, path, before)


def check_request(baseline: ScanResult, spec: LoadedSpec, config: TrialConfig) -> TrialRequest:
    """The request every trial of a check (or of its reference) uses for ``config``: the baseline's
    timing, loader options, step, device (the CPU when this machine has no accelerator) and ranks."""
    opts = baseline.settings.options
    machine = collect()
    device = baseline.settings.device if machine.has_accelerator or baseline.settings.device == "cpu" else "cpu"
    work = baseline_step(baseline.settings.step, device, spec.ref)
    try:  # a baseline of several ranks is checked on as many: this machine must hold them
        validate_layout(opts.nproc_per_node, opts.nnodes, opts.node_rank, len(machine.gpus),
                        "cpu" if device == "cpu" else "cuda")
    except DistributedError as exc:
        raise BaselineError(f"the baseline's layout cannot run here: {exc}") from None
    ranks = setup_for(opts.nproc_per_node, opts.nnodes, opts.node_rank, device, opts.blocks * opts.block_time)
    loader = LoaderOptions(shuffle=opts.shuffle, drop_last=opts.drop_last, seed=opts.seed)
    timing = replace(scan_timing(opts), cache=readied(baseline.storage))  # the page cache's state the baseline measured in
    request = TrialRequest(config, device, timing, loader, opts.timeout, machine.start_method, workload=work)
    return with_ranks(request, ranks)


def outcome(baseline: ScanResult, config: TrialConfig, paired: list[PairedRound], tolerance: float,
            min_throughput: float | None, trials: list[Trial], started: float,
            early: str | None = None, cpu: float | None = None) -> CheckResult:
    """The verdict and its figures, with how the machine moved and what differs around it; ``early``: why
    an undecided check stopped before its budget ran out; ``cpu``: this CPU's speed against the baseline's."""
    reference, here = baseline.reference, collect()
    status, reasons, change = judge(reference.rounds, paired, tolerance, min_throughput, cpu, reference.shape.unit_readings)
    reasons += [early] if early and status == INCONCLUSIVE else []
    moved = machine_change(reference.rounds, paired)
    if moved is not None and (moved.high < -tolerance or moved.low > tolerance) and not beyond_range(moved):
        reasons.append(f"the machine itself ran the shaped calibration {moved.value:+.0%} against the baseline's "
                       f"({moved.low:+.0%} to {moved.high:+.0%}): the paired ratio discounts that")
    picked = baseline.config_result(config)
    gain, gain_then = side_by_side_gain(paired), side_by_side_gain(reference.rounds)
    if gain is not None and gain.high < 1:
        reasons.append(f"PyTorch's defaults loaded faster than {config.label()} in the same rounds (the pick "
                       f"{gain.value:.2f}×, {gain.low:.2f}–{gain.high:.2f}×): the pick no longer pays; scan again")
    return CheckResult(
        config=config, tolerance=tolerance, baseline_rate=picked.estimate.median if picked and picked.ok else None,
        rounds=paired, baseline_rounds=list(reference.rounds), shape=reference.shape,
        min_throughput=min_throughput, status=status, reasons=reasons,
        change=change.value if change else None, change_low=change.low if change else None,
        change_high=change.high if change else None,
        machine_change=moved.value if moved else None, machine_low=moved.low if moved else None,
        machine_high=moved.high if moved else None,
        cpu_change=cpu, environment=environment_changes(reference.machine or baseline.machine, here), machine=here,
        reference_recorded_at=reference.recorded_at, defaults=reference.defaults, gain=gain.value if gain else None,
        gain_low=gain.low if gain else None, gain_high=gain.high if gain else None,
        baseline_gain=gain_then.value if gain_then else None, wall_s=time.monotonic() - started,
        trials=trials,
    )


def explicit_config(saved: ScanResult, **given) -> TrialConfig | None:
    """The baseline's pick with the given knobs replaced, or None when none is given."""
    if all(v is None for v in given.values()) or saved.recommendation is None:
        return None
    names = {"workers": "num_workers", "batch_size": "batch_size", "prefetch": "prefetch_factor",
             "pin": "pin_memory", "persistent": "persistent_workers"}
    return saved.recommendation.config.with_knobs(**{names[k]: v for k, v in given.items() if v is not None})


def parse_tolerance(text: str | float) -> float:
    """``"10%"`` or ``0.1`` -> 0.1."""
    value = str(text).strip()
    try:
        number = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise ValueError(f"expected a percentage like 10% or a fraction like 0.1, got {text!r}") from None
    if not 0 <= number < 1 or math.isnan(number):
        raise ValueError(f"tolerance must be between 0% and 100%, got {text!r}")
    return number
