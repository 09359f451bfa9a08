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


def test_the_pace_is_wanted_only_beside_a_gain_raced_side_by_side_that_stayed_wide():
    from loadtune.analysis.pace import gain_halfwidth, gain_pace_text, pace_wanted
    from loadtune.analysis.race import GAIN_WIDE
    from loadtune.model.config import TrialConfig
    from loadtune.model.results import Recommendation

    def rec(low, high, pairs):
        pick = TrialConfig(32, 2)
        return Recommendation(pick, pick, [], TrialConfig(32, 0), 1.42, low, high, "", speedup_pairs=pairs)

    assert gain_halfwidth(rec(1.25, 1.61, 12)) == pytest.approx(1.61 / 1.42 - 1)  # the wider side
    assert pace_wanted(rec(1.25, 1.61, 12), GAIN_WIDE)  # ±13%
    assert not pace_wanted(rec(1.32, 1.53, 12), GAIN_WIDE)  # ±8%
    assert not pace_wanted(rec(1.25, 1.61, 0), GAIN_WIDE)  # not raced: runs alone or rounds
    assert not pace_wanted(None, GAIN_WIDE)
    assert "±13%: the CPU's pace wandered ±6.8%" in gain_pace_text(0.068, 0.13)
    assert "held steady (±2.0%)" in gain_pace_text(0.02, 0.13)


def test_a_scan_whose_gain_stayed_wide_measures_the_pace_and_the_report_says_it_beside_the_gain(tmp_path):
    """The step runs doctor's measurement on this machine (real processes) where the gain is wide, and
    not where it is narrow; the README example's saved scan (its gain ±22%) then says the pace beside the
    gain, in the gain's own lines: the report is no longer for it."""
    import dataclasses
    from types import SimpleNamespace

    from conftest import FIXTURES
    from test_view import render

    from loadtune.engine.scan import pace_beside_gain
    from loadtune.model.results import ScanResult
    from loadtune.report.scan import print_report

    result = ScanResult.load(FIXTURES / "readme_scan.json")
    narrow = ScanResult.load(FIXTURES / "readme_scan.json")
    narrow.recommendation = dataclasses.replace(narrow.recommendation, speedup_low=1.40, speedup_high=1.50)
    for r in (result, narrow):
        r.machine.pace_spread = None
        pace_beside_gain(SimpleNamespace(plan=SimpleNamespace(result=r), fits=lambda *a, **k: True, save=lambda: None))
    assert result.machine.pace_spread is not None and result.machine.pace_spread >= 0
    assert narrow.machine.pace_spread is None
    result.machine.pace_spread = 0.068
    text = render(lambda console: print_report(console, result), 80)
    assert "over 9 turn pairs; ±22%: the CPU's pace wandered ±6.8% (steady: ±3%)" in " ".join(text.split()), text
    assert len(text.splitlines()) == len(render(lambda console: print_report(console, narrow), 80).splitlines())
    assert ScanResult.from_dict(result.to_dict()).machine.pace_spread == 0.068


def test_where_storage_bounds_the_loaders_the_wide_gain_is_set_beside_their_reads_not_the_cpus_pace():
    """The README example's saved scan made storage-bound (read cold, 1 MiB a sample from storage that
    serves 300 MB/s: 286 samples/s, under the CPU's 368): the scan measures no pace, and the gain's line names storage's
    reads instead."""
    import dataclasses
    from types import SimpleNamespace

    from conftest import FIXTURES
    from test_view import render

    from loadtune.analysis.bound import bound_by_storage
    from loadtune.engine.scan import pace_beside_gain
    from loadtune.model.estimate import Estimate
    from loadtune.model.results import ScanResult
    from loadtune.model.storage import COLD, DatasetFiles, StorageState
    from loadtune.report.scan import print_report

    result = ScanResult.load(FIXTURES / "readme_scan.json")
    assert result.stages is not None and not bound_by_storage(result)
    result.storage = StorageState("cold", COLD, "as asked (--storage cold)", DatasetFiles(["/data"], 100, 2**30, "data"))
    result.stages = dataclasses.replace(result.stages, storage_bytes=2**20,
                                        storage_mb_s=Estimate(300.0, 280.0, 320.0, 290.0, 310.0, 10), storage_in_flight=64)
    assert bound_by_storage(result)
    result.machine.pace_spread = None
    pace_beside_gain(SimpleNamespace(plan=SimpleNamespace(result=result), fits=lambda *a, **k: True, save=lambda: None))
    assert result.machine.pace_spread is None
    text = " ".join(render(lambda console: print_report(console, result), 80).replace("│", " ").split())
    assert "Bound: 286 samples/s, set by storage bandwidth" in text
    assert "±22%: storage's bandwidth bounds these loaders, and their turns' reads spread" in text, text
    assert "CPU's pace" not in text
