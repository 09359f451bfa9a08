"""Estimates that carry their own noise, as pure functions.

A trial yields one throughput figure per timed block. The estimate is the median of those figures
with a distribution-free confidence interval of the median (from binomial order statistics): no
normality is assumed, and an outlier block (a GC pause, a neighbour's burst) moves it little.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """Median of repeated measurements, with its confidence interval and quartiles."""

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


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Order-statistic interval for the median; with too few values for the level, (min, max)."""
    xs = sorted(values)
    n = len(xs)
    alpha = 1 - confidence
    k = 1
    while k < n // 2 and _binom_cdf(k, n) <= alpha / 2:
        k += 1
    # x_(k) .. x_(n+1-k) (1-based) covers the median with >= confidence when P(X <= k-1) <= alpha/2
    return xs[k - 1], xs[n - k]


def estimate(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    if not values:
        raise ValueError("no measurements to estimate from")
    xs = sorted(values)
    if len(xs) >= 2:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    low, high = median_interval(xs, confidence)
    return Estimate(statistics.median(xs), low, high, q1, q3, len(xs))


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
