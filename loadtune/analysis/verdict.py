"""TODO docstring."""

from __future__ import annotations




import math
import statistics

from loadtune.model.estimate import Estimate, estimate
from loadtune.model.check import NOTHING, PASS, REGRESSION


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


