"""``loadtune check``: a CI gate that fails when loading got slower (SPEC §8).

CI machines differ in speed and are noisy, so absolute samples/s from the baseline's machine are not
compared with today's. In every round the checked config and loadtune's calibration workload are
measured side by side; the figure compared is their ratio, against the same ratio in the baseline.
A slowdown counts as a regression only when it exceeds the tolerance *and* the measured noise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from . import calibration
from . import probe as probe_mod
from .distributed import DistributedError, setup_for
from .distributed import validate as validate_layout
from .machine import MachineInfo, collect
from .measure import LoaderOptions, Timing
from .plan import TrialConfig, transfer_for
from .results import ScanResult, Trial
from .runner import TrialRequest, run_trial
from .spec import LoadedSpec, load_spec
from .workload import StepWorkload, calibrate
from .stats import Estimate, estimate

PASS, REGRESSION, NOTHING = "pass", "regression", "nothing measured"


class BaselineError(ValueError):
    """The baseline cannot be compared with (exit 2): wrong dataset, no recommendation, no calibration."""


@dataclass
class CheckResult:
    config: TrialConfig
    tolerance: float
    baseline_rate: float  # the baseline's samples/s for the config
    baseline_calibration: float  # the baseline's calibration samples/s
    rounds: list[tuple[float | None, float | None]]  # (config, calibration) samples/s per round
    default_rate: float | None  # PyTorch's defaults now, for context
    min_throughput: float | None
    status: str
    reasons: list[str]
    change: float | None = None  # relative change of the normalised throughput
    change_low: float | None = None
    change_high: float | None = None
    environment: list[str] = field(default_factory=list)  # what differs from the baseline's machine
    trials: list[Trial] = field(default_factory=list)

    @property
    def rate_now(self) -> float | None:
        rates = [r for r, _ in self.rounds if r]
        return statistics.median(rates) if rates else None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["config"] = self.config.to_dict()
        data["trials"] = [t.to_dict() for t in self.trials]
        return data


def spec_identity(path: str | None, factory: str | None, dataset_type: str) -> tuple:
    """Which dataset a result is about: file name, factory and class (not the file's content, whose
    edits are exactly what the check is for)."""
    return (Path(path).name if path else None, factory, dataset_type)


def check_baseline(baseline: ScanResult, spec: LoadedSpec) -> None:
    now = spec_identity(spec.ref.path if spec.ref else None, spec.ref.factory if spec.ref else None, type(spec.dataset).__qualname__)
    then = spec_identity(baseline.spec.path, baseline.spec.factory, baseline.spec.dataset_type)
    if now != then:
        raise BaselineError(f"the baseline is of another dataset ({then[0]}:{then[1]}, {then[2]}), not {now[0]}:{now[1]} ({now[2]})")
    if baseline.recommendation is None:
        raise BaselineError("the baseline holds no recommendation (its scan measured nothing); run loadtune scan again")
    if not any(t.ok for t in baseline.calibration):
        raise BaselineError("the baseline has no calibration figure (an older or interrupted scan); run loadtune scan again")


def environment_changes(then: MachineInfo, now: MachineInfo, labels: tuple[str, str] = ("then", "now")) -> list[str]:
    """Differences worth knowing when reading a ratio across machines (``labels`` name the two sides)."""
    out = []
    x, y = labels
    for name in ("usable_cores", "torch", "python", "cpu_model"):
        a, b = getattr(then, name), getattr(now, name)
        if a != b:
            out.append(f"{name}: {a} {x}, {b} {y}")
    if [g.name for g in then.gpus] != [g.name for g in now.gpus]:
        out.append(f"gpus: {[g.name for g in then.gpus] or 'none'} {x}, {[g.name for g in now.gpus] or 'none'} {y}")
    return out


def normalised(rate: Estimate, cal: list[float]) -> tuple[float, float, float]:
    """(value, low, high) of a rate over the median calibration rate."""
    c = statistics.median(cal)
    return rate.median / c, rate.low / c, rate.high / c


def judge(
    baseline: tuple[float, float, float],
    ratios: list[float],
    tolerance: float,
    rate_now: float | None,
    min_throughput: float | None,
) -> tuple[str, list[str], tuple[float, float, float] | None]:
    """Pure verdict: regression when the normalised throughput fell by more than the tolerance and
    by more than the noise of both measurements, or fell under the absolute floor."""
    if not ratios or rate_now is None:
        return NOTHING, ["no round of the checked config could be measured"], None
    now = estimate(ratios)
    base, base_low, base_high = baseline
    change = (now.median / base - 1, now.low / base_high - 1, now.high / base_low - 1 if base_low > 0 else math.inf)
    reasons = []
    if change[0] < -tolerance and change[2] < 0:
        reasons.append(f"throughput fell {-change[0]:.1%} relative to the calibration workload (tolerance {tolerance:.0%}, "
                       f"interval {change[1]:+.1%} to {change[2]:+.1%})")
    if min_throughput is not None and rate_now < min_throughput:
        reasons.append(f"{rate_now:,.0f} samples/s is under the floor of {min_throughput:,.0f}")
    return (REGRESSION if reasons else PASS), reasons, change


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


def junit_xml(result: CheckResult) -> str:
    """One testcase per checked config; the failure text carries the figures."""
    name = quoteattr(f"throughput {result.config.label()}")
    failed = result.status != PASS
    body = ""
    if failed:
        text = "; ".join(result.reasons) + "\n" + summary_line(result)
        body = f'<failure message={quoteattr(result.reasons[0] if result.reasons else result.status)}>{escape(text)}</failure>'
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuite name="loadtune" tests="1" failures="{int(failed)}">\n'
        f'  <testcase classname="loadtune.check" name={name}>{body}<system-out>{escape(summary_line(result))}</system-out></testcase>\n'
        "</testsuite>\n"
    )


def change_text(result: CheckResult, dash: str) -> str:
    if result.change is None:
        return "-"
    high = f"{result.change_high:+.1%}" if result.change_high is not None else "unbounded"
    return f"{result.change:+.1%} ({result.change_low:+.1%}{dash}{high})"


def summary_line(result: CheckResult) -> str:
    now = f"{result.rate_now:,.0f}" if result.rate_now else "-"
    change = change_text(result, " to ")
    return (f"{result.config.label()}: {now} samples/s now, {result.baseline_rate:,.0f} in the baseline; "
            f"normalised change {change}; tolerance {result.tolerance:.0%}; {result.status}")


def markdown(result: CheckResult) -> str:
    """A short table for a CI job summary page."""
    now = f"{result.rate_now:,.0f}" if result.rate_now else "-"
    cal_now = statistics.median([c for _, c in result.rounds if c]) if any(c for _, c in result.rounds) else None
    change = change_text(result, " … ")
    icon = {PASS: "✅ pass", REGRESSION: "❌ regression"}.get(result.status, "⚠️ " + result.status)
    lines = [
        f"### loadtune check: {icon}",
        "",
        "| | baseline | now |",
        "|---|---:|---:|",
        f"| `{result.config.label()}` samples/s | {result.baseline_rate:,.0f} | {now} |",
        f"| calibration samples/s | {result.baseline_calibration:,.0f} | {f'{cal_now:,.0f}' if cal_now else '-'} |",
        f"| normalised change | | {change} |",
        "",
        f"Tolerance {result.tolerance:.0%}" + (f", floor {result.min_throughput:,.0f} samples/s" if result.min_throughput else "") + ".",
    ]
    lines += [f"- {r}" for r in result.reasons] + [f"- environment: {e}" for e in result.environment]
    return "\n".join(lines) + "\n"


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
