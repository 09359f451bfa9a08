"""Estimates that carry their own noise, as pure functions.

A trial yields one throughput figure per timed block. The estimate is their median, with an
approximate 95% interval from the median absolute deviation (MAD): a robust scale, so one slow
block (a GC pause, a neighbour's burst) neither moves the median nor blows the interval up to
cover configs several times apart — which an order-statistic interval from a handful of blocks,
that is just [min, max], does.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

Z95 = 1.96
MAD_TO_SIGMA = 1.4826  # MAD x this estimates the standard deviation of normal data
MEDIAN_EFFICIENCY = 1.2533  # standard error of the median / standard error of the mean, normal data


@dataclass(frozen=True)
class Estimate:
    """Median of repeated measurements, with its interval and quartiles."""

    median: float
    low: float
    high: float
    q1: float
    q3: float
    n: int

    @property
    def rel_spread(self) -> float:
        """Half-width of the interval relative to the median (the ``±x%`` the table shows)."""
        if self.median <= 0:
            return math.inf
        return max(self.high - self.median, self.median - self.low) / self.median


def median_halfwidth(values: Sequence[float]) -> float:
    """Half-width of an approximate 95% interval of the median: 1.96 x its standard error, estimated
    robustly as 1.2533 x 1.4826 x MAD / sqrt(n). Zero for one value (no spread can be seen)."""
    n = len(values)
    if n < 2:
        return 0.0
    mid = statistics.median(values)
    mad = statistics.median(abs(x - mid) for x in values)
    return Z95 * MEDIAN_EFFICIENCY * MAD_TO_SIGMA * mad / math.sqrt(n)


def estimate(values: Sequence[float]) -> Estimate:
    if not values:
        raise ValueError("no measurements to estimate from")
    xs = sorted(values)
    if len(xs) >= 2:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    mid = statistics.median(xs)
    half = median_halfwidth(xs)
    return Estimate(mid, max(0.0, mid - half), mid + half, q1, q3, len(xs))


def indistinguishable(a: Estimate, b: Estimate, floor: float = 0.0) -> bool:
    """True when the data cannot tell ``a`` from ``b``: their intervals overlap, or the medians differ
    by no more than ``floor`` (relative). The floor stands for run-to-run drift that blocks within one
    trial do not see."""
    if a.low <= b.high and b.low <= a.high:
        return True
    top = max(a.median, b.median)
    return top > 0 and abs(a.median - b.median) / top <= floor


@dataclass(frozen=True)
class Ratio:
    """``a / b`` with a conservative interval from the two estimates' intervals."""

    value: float
    low: float
    high: float


def ratio(a: Estimate, b: Estimate) -> Ratio:
    if b.median <= 0:
        return Ratio(math.inf, math.inf, math.inf)
    return Ratio(a.median / b.median, a.low / b.high, a.high / b.low if b.low > 0 else math.inf)
