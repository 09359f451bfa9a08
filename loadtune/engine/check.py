"""``loadtune check``: a CI gate that fails when loading got slower (SPEC §8).

CI machines differ in speed and are noisy, so absolute samples/s from the baseline's machine are not
compared with today's. In every round the checked config and loadtune's calibration workload are
measured side by side; the figure compared is their ratio, against the same ratio in the baseline.
A slowdown counts as a regression only when it exceeds the tolerance *and* the measured noise.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from loadtune.engine import calibration
from loadtune.engine import probe as probe_mod
from loadtune.engine.distributed.layout import DistributedError, setup_for
from loadtune.engine.distributed.layout import validate as validate_layout
from loadtune.engine.machine import collect
from loadtune.engine.trial.measure import LoaderOptions, Timing
from loadtune.model.config import TrialConfig, transfer_for
from loadtune.model.results import ScanResult
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.engine.spec import LoadedSpec, load_spec
from loadtune.engine.trial.workload import StepWorkload, calibrate
from loadtune.model.check import CheckResult
from loadtune.analysis.environment import environment_changes, spec_identity
from loadtune.analysis.verdict import judge, normalised


class BaselineError(ValueError):
    """The baseline cannot be compared with (exit 2): wrong dataset, no recommendation, no calibration."""


def check_baseline(baseline: ScanResult, spec: LoadedSpec) -> None:
    now = spec_identity(spec.ref.path if spec.ref else None, spec.ref.factory if spec.ref else None, type(spec.dataset).__qualname__)
    then = spec_identity(baseline.spec.path, baseline.spec.factory, baseline.spec.dataset_type)
    if now != then:
        raise BaselineError(f"the baseline is of another dataset ({then[0]}:{then[1]}, {then[2]}), not {now[0]}:{now[1]} ({now[2]})")
    if baseline.recommendation is None:
        raise BaselineError("the baseline holds no recommendation (its scan measured nothing); run loadtune scan again")
    if not any(t.ok for t in baseline.calibration):
        raise BaselineError("the baseline has no calibration figure (an older or interrupted scan); run loadtune scan again")


def baseline_step(step: dict | None, device: str) -> StepWorkload | None:
    """The baseline's ``--step-ms`` step, to run the same work now: its own calibration where the device
    type is the same, else calibrated here to the same milliseconds (dropping it would compare a loader
    feeding a step with one feeding nothing)."""
    if not step:
        return None
    if step["device_type"] == device.partition(":")[0]:
        return StepWorkload.from_dict(step)
    if device.startswith("cuda"):
        got = probe_mod.run(device, step["ms"])  # CUDA is measured in a child, never in this process
        if got.workload is None:
            raise BaselineError(f"the baseline's {step['ms']:g} ms step could not be calibrated on {device}: {got.error}")
        return got.workload
    return calibrate(step["ms"], "cpu")


def run_check(
    spec_target: Any,
    baseline: ScanResult,
    config: TrialConfig | None = None,
    tolerance: float = 0.10,
    min_throughput: float | None = None,
    rounds: int = 3,
) -> CheckResult:
    """Measure the config (the baseline's pick unless given), PyTorch's defaults and the calibration
    workload in interleaved rounds, with the baseline's own timing and loader options."""
    spec = load_spec(spec_target)
    check_baseline(baseline, spec)
    config = config or baseline.recommendation.config
    picked = baseline.config_result(config)
    if picked is None or not picked.ok:
        raise BaselineError(f"the baseline has no measurement of {config.label()}; scan that config first")
    opts = baseline.settings["options"]
    timing = Timing(warmup_s=opts["warmup"], block_s=opts["block_time"], blocks=opts["blocks"], max_s=opts["timeout"] * 0.8,
                    min_blocks=opts.get("min_blocks", 3), target_spread=opts.get("target_spread", 0.0))
    loader = LoaderOptions(shuffle=opts["shuffle"], drop_last=opts["drop_last"], seed=opts["seed"])
    machine = collect()
    device = baseline.settings["device"] if machine.has_accelerator or baseline.settings["device"] == "cpu" else "cpu"
    work = baseline_step(baseline.settings.get("step"), device)
    try:  # a baseline of several ranks is checked on as many: this machine must hold them
        validate_layout(opts.get("nproc_per_node", 1), opts.get("nnodes", 1), opts.get("node_rank", 0), len(machine.gpus),
                        "cpu" if device == "cpu" else "cuda")
    except DistributedError as exc:
        raise BaselineError(f"the baseline's layout cannot run here: {exc}") from None
    ranks = setup_for(opts.get("nproc_per_node", 1), opts.get("nnodes", 1), opts.get("node_rank", 0), device,
                      opts["blocks"] * opts["block_time"], spec.ref)  # a baseline of several ranks is checked on as many
    request = lambda c, dev, w=None, r=None: TrialRequest(c, dev, timing, loader, opts["timeout"], machine.start_method,  # noqa: E731
                                                          workload=w, ranks=r)
    default = TrialConfig(config.batch_size, 0, transfer=transfer_for(False, device.startswith("cuda")))
    trials, pairs, defaults = [], [], []
    for _ in range(rounds):
        cal = run_trial(calibration.REF, request(calibration.CONFIG, "cpu"))
        mine = run_trial(spec.ref, request(config, device, work, ranks))
        base = run_trial(spec.ref, request(default, device, work, ranks)) if default != config else None
        trials += [t for t in (cal, mine, base) if t is not None]
        pairs.append((mine.estimate.median if mine.ok else None, cal.estimate.median if cal.ok else None))
        if base is not None and base.ok:
            defaults.append(base.estimate.median)
    cal_then = [t.estimate.median for t in baseline.calibration if t.ok]
    ratios = [r / c for r, c in pairs if r and c]
    rates = [r for r, _ in pairs if r]
    status, reasons, change = judge(normalised(picked.estimate, cal_then), ratios, tolerance,
                                    statistics.median(rates) if rates else None, min_throughput)
    return CheckResult(
        config=config, tolerance=tolerance, baseline_rate=picked.estimate.median,
        baseline_calibration=statistics.median(cal_then), rounds=pairs,
        default_rate=statistics.median(defaults) if defaults else None, min_throughput=min_throughput,
        status=status, reasons=reasons, change=change[0] if change else None,
        change_low=change[1] if change else None,
        change_high=change[2] if change and math.isfinite(change[2]) else None,  # None: unbounded (a noisy baseline)
        environment=environment_changes(baseline.machine, machine), trials=trials,
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
