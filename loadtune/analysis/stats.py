"""Judging two estimates against each other: their ratio with an interval, and whether the measured
noise can tell them apart."""

from __future__ import annotations

import math
from dataclasses import dataclass
from loadtune.model.estimate import Estimate


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


