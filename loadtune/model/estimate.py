"""Estimates that carry their own noise, as pure functions.

A trial yields one throughput figure per timed block. The estimate is their median, with an
approximate 95% interval from the median absolute deviation (MAD) and Student's t for the few blocks
a trial has: a robust scale, so one slow
block (a GC pause, a neighbour's burst) neither moves the median nor blows the interval up to
cover configs several times apart — which an order-statistic interval from a handful of blocks,
that is just [min, max], does.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

MAD_TO_SIGMA = 1.4826  # MAD x this estimates the standard deviation of normal data (large samples)
MEDIAN_EFFICIENCY = 1.2533  # standard error of the median / standard error of the mean, normal data
# Student's t, 97.5% quantile, by degrees of freedom: a handful of blocks needs a wider interval
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
# MAD underestimates the spread of few values (Croux & Rousseeuw 1992); n > 9: n / (n - 0.8)
MAD_SMALL_N = {2: 1.196, 3: 1.495, 4: 1.363, 5: 1.206, 6: 1.200, 7: 1.140, 8: 1.129, 9: 1.107}


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
        return rel_half_width(self.median, self.low, self.high)


def rel_half_width(median: float, low: float, high: float) -> float:
    """The wider side of ``low``–``high`` around ``median``, relative to it; infinite without a median."""
    if median <= 0:
        return math.inf
    return max(high - median, median - low) / median


def t975(df: int) -> float:
    """Student's t, 97.5% quantile, for ``df`` >= 1 degrees of freedom (1.96 past the table)."""
    return T975[df - 1] if df <= len(T975) else 1.96


def median_stderr(values: Sequence[float]) -> float:
    """Standard error of the median, estimated robustly as 1.2533 x sigma / sqrt(n), sigma from the
    MAD with its small-sample correction. Zero for one value (no spread can be seen)."""
    n = len(values)
    if n < 2:
        return 0.0
    mid = statistics.median(values)
    mad = statistics.median(abs(x - mid) for x in values)
    sigma = MAD_TO_SIGMA * mad * MAD_SMALL_N.get(n, n / (n - 0.8))
    return MEDIAN_EFFICIENCY * sigma / math.sqrt(n)


def median_halfwidth(values: Sequence[float]) -> float:
    """Half-width of an approximate 95% interval of the median: t(n-1) x its standard error."""
    n = len(values)
    return t975(n - 1) * median_stderr(values) if n >= 2 else 0.0


def mean_halfwidth(values: Sequence[float]) -> float:
    """Half-width of a 95% interval of the mean: t(n-1) x s / sqrt(n). For costs, whose mean (not
    median) is what a long run pays. Zero for one value (no spread can be seen)."""
    n = len(values)
    if n < 2:
        return 0.0
    return t975(n - 1) * statistics.stdev(values) / math.sqrt(n)


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


