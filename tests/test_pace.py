"""The CPU's pace: the spread of fixed work between adjacent windows, from stamps and measured for real."""

import math

import pytest

from loadtune.analysis.pace import STEADY, pace_of, window_counts
from loadtune.engine.pace import measure_pace


def stamps_at(per_window: list[int], window_s: float = 0.1) -> list[float]:
    """Units spread evenly inside each window, ``per_window[i]`` in window ``i`` (from 0)."""
    return [i * window_s + (k + 0.5) * window_s / n for i, n in enumerate(per_window) for k in range(n)]


def test_windows_count_the_stamps_inside_them_and_leave_out_the_rest():
    stamps = stamps_at([3, 5, 2, 4]) + [-0.01, 0.45]
    assert window_counts(stamps, 0.1, 0.0, 0.4) == [3, 5, 2, 4]
    assert window_counts(stamps, 0.2, 0.0, 0.4) == [8, 6]


def test_a_steady_pace_reads_no_spread_and_is_called_steady():
    pace = pace_of(stamps_at([20] * 10), 0.1, 0.0, 1.0, processes=2)
    assert pace.pairs == 5 and pace.spread == pytest.approx(0.0, abs=1e-12) and pace.steady and pace.processes == 2


def test_a_pace_that_moves_between_neighbouring_windows_reads_their_log_ratio():
    # pairs (20, 25) and (25, 20): log ratios -0.223 and +0.223, a spread of 0.223
    pace = pace_of(stamps_at([20, 25, 25, 20]), 0.1, 0.0, 0.4, processes=1)
    assert pace.spread == pytest.approx(math.log(25 / 20)) and not pace.steady and pace.spread > STEADY


def test_too_few_pairs_or_an_empty_window_give_no_reading():
    assert pace_of(stamps_at([20, 20]), 0.1, 0.0, 0.2, processes=1) is None  # one pair
    assert pace_of(stamps_at([20, 0, 20, 20]), 0.1, 0.0, 0.4, processes=1) is None  # a unit longer than a window


def test_the_pace_is_measured_on_this_machine_from_real_processes():
    pace = measure_pace(seconds=1.5, processes=1)
    assert pace is not None and pace.processes == 1 and pace.window_s == 0.1
    assert pace.pairs >= 4 and math.isfinite(pace.spread) and pace.spread >= 0
