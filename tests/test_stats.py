"""Estimates with their own noise (loadtune/stats.py)."""

from __future__ import annotations

import math
import random

import pytest

from loadtune.model.estimate import Estimate, estimate, median_halfwidth

from loadtune.analysis.stats import indistinguishable, ratio


def est(median: float, low: float, high: float) -> Estimate:
    return Estimate(median=median, low=low, high=high, q1=low, q3=high, n=5)


# ---------------------------------------------------------------- estimate


def test_estimate_odd_known_data():
    e = estimate([5.0, 1.0, 4.0, 2.0, 3.0])
    assert e.median == 3.0
    assert (e.q1, e.q3) == (2.0, 4.0)
    # MAD = 1: half-width t(4) x 1.2533 x 1.4826 x 1.206 (small-sample MAD factor) x 1 / sqrt(5)
    assert e.high - e.median == pytest.approx(2.776 * 1.2533 * 1.4826 * 1.206 / math.sqrt(5))
    assert e.median - e.low == pytest.approx(e.high - e.median)
    assert e.n == 5


def test_estimate_even_known_data():
    e = estimate([10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
    assert e.median == 55.0
    assert e.q1 == pytest.approx(32.5)
    assert e.q3 == pytest.approx(77.5)
    assert median_halfwidth([10, 20, 30, 40, 50, 60, 70, 80, 90, 100]) == pytest.approx(
        2.262 * 1.2533 * 1.4826 * (10 / 9.2) * 25 / math.sqrt(10))
    assert e.n == 10


def test_estimate_single_value():
    e = estimate([7.0])
    assert e.median == e.low == e.high == e.q1 == e.q3 == 7.0
    assert e.n == 1
    assert e.rel_spread == 0.0


def test_estimate_empty_raises():
    with pytest.raises(ValueError):
        estimate([])


def test_estimate_outlier_moves_median_and_interval_little():
    e = estimate([100, 101, 99, 100, 1])  # one GC pause
    assert e.median == 100
    assert e.rel_spread < 0.04  # the pause does not make 100/s look like anything from 1 to 101


def test_one_slow_block_does_not_tie_configs_four_times_apart():
    slow = estimate([16.0, 18.0, 49.0])  # a loaded machine: one block caught a burst of luck
    fast = estimate([170.0, 174.0, 181.0])
    assert not indistinguishable(slow, fast, 0.02)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 10, 20, 50])
def test_interval_contains_median_and_narrows_with_more_blocks(n):
    rng = random.Random(n)
    xs = [rng.gauss(100, 5) for _ in range(n)]
    e = estimate(xs)
    assert e.low <= e.median <= e.high
    more = estimate([rng.gauss(100, 5) for _ in range(4 * n)])
    assert more.rel_spread < e.rel_spread * 1.5  # about half as wide with four times the blocks


@pytest.mark.parametrize("n", [3, 5, 10])
def test_interval_coverage_is_about_95_percent_even_for_few_blocks(n):
    rng = random.Random(7)
    hits = 0
    for _ in range(3000):
        e = estimate([rng.gauss(100, 5) for _ in range(n)])
        hits += e.low <= 100 <= e.high
    assert (0.85 if n == 3 else 0.90) <= hits / 3000 <= 0.995  # three blocks: a median interval can only be rough


def test_identical_blocks_give_zero_width():
    assert estimate([50.0, 50.0, 50.0]).rel_spread == 0.0


# ---------------------------------------------------------------- rel_spread


def test_rel_spread_uses_wider_side():
    assert est(100, 90, 105).rel_spread == pytest.approx(0.10)
    assert est(100, 98, 120).rel_spread == pytest.approx(0.20)


def test_rel_spread_of_zero_median_is_infinite():
    assert est(0, 0, 0).rel_spread == math.inf


# ---------------------------------------------------------------- indistinguishable


def test_overlapping_intervals_are_indistinguishable():
    a, b = est(100, 95, 105), est(103, 101, 108)
    assert indistinguishable(a, b)
    assert indistinguishable(b, a)


def test_touching_intervals_are_indistinguishable():
    assert indistinguishable(est(100, 95, 105), est(110, 105, 115))


def test_separated_intervals_are_distinguishable():
    a, b = est(100, 98, 102), est(150, 148, 152)
    assert not indistinguishable(a, b)
    assert not indistinguishable(b, a)


def test_floor_merges_close_medians_with_tight_intervals():
    a, b = est(100, 99.9, 100.1), est(101.5, 101.4, 101.6)  # 1.48% apart, intervals disjoint
    assert not indistinguishable(a, b)
    assert not indistinguishable(a, b, floor=0.01)
    assert indistinguishable(a, b, floor=0.02)
    assert indistinguishable(b, a, floor=0.02)


def test_floor_relative_to_larger_median():
    a, b = est(98, 98, 98), est(100, 100, 100)
    assert indistinguishable(a, b, floor=0.02)  # 2/100 == floor
    assert not indistinguishable(a, b, floor=0.019)


def test_zero_medians_not_merged_by_floor():
    assert not indistinguishable(est(0, 0, 0), est(5, 5, 5), floor=0.5)


# ---------------------------------------------------------------- ratio


def test_ratio_value_and_conservative_interval():
    a = est(200, 180, 220)
    b = est(100, 90, 110)
    r = ratio(a, b)
    assert r.value == pytest.approx(2.0)
    assert r.low == pytest.approx(180 / 110)
    assert r.high == pytest.approx(220 / 90)
    assert r.low <= r.value <= r.high


def test_ratio_of_equal_point_estimates():
    r = ratio(est(50, 50, 50), est(50, 50, 50))
    assert (r.value, r.low, r.high) == (1.0, 1.0, 1.0)


def test_ratio_with_zero_denominator_is_infinite():
    r = ratio(est(10, 9, 11), est(0, 0, 0))
    assert r.value == math.inf
    r = ratio(est(10, 9, 11), est(5, 0, 6))  # low end of the baseline at zero
    assert r.high == math.inf
