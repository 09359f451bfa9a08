"""``show``'s selection of rows (pure) and the table at terminal widths, on a saved real scan."""

from dataclasses import replace

import pytest
from conftest import FIXTURES
from rich.console import Console

from loadtune.model.config import Skip
from loadtune.analysis.recommend import recommend
from loadtune.report.text import STATUS_STYLES, spread_text, status_cell
from loadtune.report.scan import print_recommendation, print_report
from loadtune.report.table import trial_table
from loadtune.model.results import ScanResult
from loadtune.model.trial import Trial, TrialError
from loadtune.analysis.view import Filters, ViewError, key_knobs, parse_statuses, rows, select


@pytest.fixture
def result():
    """A real grid scan of tests/specs/tiny.py: w0, w1, w2, w4 x prefetch 2, 4 at batch size 32."""
    return ScanResult.load(FIXTURES / "tiny_scan.json")


def labels(selected):
    return [r.config.config.label() if r.config else r.skip.what for r in selected]


def test_default_rows_are_fastest_first_then_skipped(result):
    everything = rows(result)
    measured = [r for r in everything if r.rank is not None]
    medians = [r.config.estimate.median for r in measured]
    assert medians == sorted(medians, reverse=True) and len(measured) == 7
    assert [r.rank for r in measured] == list(range(1, 8))
    assert everything[-1].status == "skipped" and everything[-1].skip.what == "pin_memory=True"


def test_filters_by_knobs_keep_scan_wide_notes(result):
    two = select(result, Filters(workers=frozenset({2})))
    assert sorted(labels(two)) == ["pin_memory=True", "w2 pf2 bs32", "w2 pf4 bs32"]
    medians = [r.config.estimate.median for r in two if r.config]
    assert medians == sorted(medians, reverse=True) and two[-1].skip is not None
    assert select(result, Filters(batch_size=frozenset({64}))) == [rows(result)[-1]]  # nothing at 64; the note stays
    assert all(not r.config.config.pin_memory for r in select(result, Filters(pin=False)) if r.config)
    assert [r for r in select(result, Filters(pin=True)) if r.config] == []


def test_status_filter_and_ranks_stay_the_whole_scans(result):
    ok = select(result, Filters(status=frozenset({"ok"})))
    assert len(ok) == 7 and all(r.status == "ok" for r in ok)
    assert [r.status for r in select(result, Filters(status=parse_statuses("skipped")))] == ["skipped"]
    third = select(result, Filters(workers=frozenset({1})))[0]
    assert third.rank == next(r.rank for r in rows(result) if r.config and r.config.config == third.config.config)


@pytest.mark.parametrize("sort, key", [
    ("rate", lambda r: -r.config.estimate.median),
    ("workers", lambda r: (r.config.config.num_workers, -r.config.estimate.median)),
    ("memory", lambda r: r.config.memory.peak_bytes),
    ("startup", lambda r: r.config.startup_s),
])
def test_sort_orders_measured_rows_and_keeps_the_rest_after(result, sort, key):
    out = select(result, sort=sort)
    measured = [r for r in out if r.rank is not None]
    assert [key(r) for r in measured] == sorted(key(r) for r in measured)
    assert out[len(measured):] == [r for r in rows(result) if r.rank is None]


def test_top_cuts_after_sorting(result):
    assert [r.config.config.num_workers for r in select(result, sort="workers", top=3)] == [0, 1, 1]
    assert len(select(result, top=100)) == 8


@pytest.mark.parametrize("call, needle", [
    (lambda r: select(r, sort="speed"), "--sort"),
    (lambda r: select(r, top=0), "--top"),
    (lambda r: parse_statuses("ok,broken"), "--status"),
    (lambda r: parse_statuses(","), "--status"),
])
def test_bad_values_are_refused_naming_the_flag(result, call, needle):
    with pytest.raises(ViewError, match=needle):
        call(result)


def test_failed_excluded_and_skipped_rows_get_their_status(result):
    failed = Trial(replace(result.trials[0].config, num_workers=8, prefetch_factor=2), "failed",
                   error=TrialError("exception", "the dataset raised"))
    excluded = Trial(replace(result.trials[0].config, num_workers=16, prefetch_factor=2), "excluded")
    result.trials += [failed, excluded]
    result.skipped.append(Skip("w32 pf2 bs32", "CUDA out of memory at batch size 32", "bs=32,w=32,pin=0,pf=2,pw=0,tx=none"))
    statuses = {r.status for r in rows(result)}
    assert statuses == {"ok", "failed", "excluded", "skipped"}
    assert [r.status for r in select(result, Filters(status=frozenset({"failed", "excluded"})))] == ["failed", "excluded"]
    assert labels(select(result, Filters(workers=frozenset({32})))) == ["pin_memory=True", "w32 pf2 bs32"]  # by its key
    assert key_knobs("bs=32,w=32,pin=1,pf=2,pw=0,tx=none") == {"batch_size": 32, "num_workers": 32, "pin_memory": True}
    assert key_knobs("not a key") is None
    for status in ("ok", "failed", "skipped", "excluded"):
        assert status_cell(status).style == STATUS_STYLES[status]
    assert status_cell("something new").plain == "something new"  # a status from a later stage still shows
    assert status_cell("ok", runs=3).plain == "ok ×3"


def render(renderable_or_fn, width):
    console = Console(width=width, record=True, color_system=None)
    if callable(renderable_or_fn):
        renderable_or_fn(console)
    else:
        console.print(renderable_or_fn)
    return console.export_text()


def assert_fits_with_cells_intact(text, result, width):
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    for config in result.configs:
        if config.ok:  # label and figure on one line: nothing wrapped or cut
            assert any(config.config.label() in line and spread_text(config.estimate) in line for line in lines), config.config.label()


def test_full_report_fits_80_columns(result):
    text = render(lambda console: print_report(console, result, details=True), 80)
    assert_fits_with_cells_intact(text, result, 80)
    assert "█" in text and "start" in text and "mem" in text  # at 80 nothing needs dropping for these labels
    assert "loader = DataLoader(" in text


def test_narrow_terminal_drops_secondary_columns_first(result):
    at_60 = render(trial_table(result, width=60), 60)
    assert_fits_with_cells_intact(at_60, result, 60)
    assert "█" not in at_60 and "start" not in at_60  # the bar went first, then start-up
    at_50 = render(trial_table(result, width=50), 50)
    assert_fits_with_cells_intact(at_50, result, 50)
    assert " mem " not in at_50 and "PSS" not in at_50 and "status" in at_50


def test_long_gpu_style_labels_fit_80_columns(result):
    """The same measured figures under the longest labels a GPU scan produces."""
    gpu = {c.key: replace(c, pin_memory=True, transfer="non_blocking", persistent_workers=True, start_method="forkserver")
           for c in {t.config for t in result.trials if t.config.num_workers}}
    result.trials = [replace(t, config=gpu.get(t.config.key, t.config)) for t in result.trials]
    result.recommendation = recommend(result.trials)
    text = render(lambda console: print_report(console, result, details=True), 80)
    assert "w4 pf2 pin persist non-blocking forkserver bs32" in text
    assert_fits_with_cells_intact(text, result, 80)


def test_quiet_output_is_the_recommendation_without_the_table(result):
    text = render(lambda console: print_recommendation(console, result), 80)
    assert "Recommendation" in text and "loader = DataLoader(" in text and "num_workers=0" in text
    assert "fastest first" not in text and "w4 pf4 bs32" not in text
    assert "pin_memory=True skipped" in text  # the notes that qualify the recommendation stay


def test_filters_from_command_line_text():
    from loadtune.model.config import PlanError
    from loadtune.analysis.view import filters_from

    f = filters_from("32,64", "2", False, "ok,failed")
    assert f == Filters(frozenset({32, 64}), frozenset({2}), False, frozenset({"ok", "failed"}))
    assert not filters_from().any and f.any
    with pytest.raises(PlanError, match="--workers"):
        filters_from(workers="two")


# ---- one order, one figure a row; no figure wider than 2x; the answer in a screen ---------------------

SAVED = ["race_scan.json", "tiny_scan.json", "slowable_before.json", "slowable_after.json", "readme_scan.json",
         "disk_bound_scan.json"]


@pytest.mark.parametrize("name", SAVED)
def test_no_row_prints_a_speed_above_a_row_ranked_over_it_unless_it_says_why(name):
    result = ScanResult.load(FIXTURES / name)
    ranked = [r for r in rows(result) if r.rank is not None]
    for above, below in zip(ranked, ranked[1:]):
        assert below.speed.median <= above.speed.median or below.speed.apart, (above.config.config.label(), below.config.config.label())
    text = render(lambda console: print_report(console, result), 80)
    for row in ranked:
        if row.speed.apart:
            assert "timed alone" in text


def test_a_raced_row_prints_the_picks_speed_times_its_ratio():
    result = ScanResult.load(FIXTURES / "race_scan.json")
    table = rows(result)
    pick = next(r for r in table if r.config and r.config.config == result.recommendation.config)
    raced = [r for r in table if r.speed is not None and r.speed.ratio is not None]
    assert raced and pick.speed.raced
    for row in raced:
        assert row.speed.median == pytest.approx(pick.speed.median * row.speed.ratio.value)


def test_where_the_pick_prints_no_one_figure_neither_does_a_raced_row():
    """A disk-bound scan's pick ran 62.9-165 samples/s from run to run, too wide for one figure; a row
    raced beside it printed 59.3, the pick's median times its ratio, where its own runs read 106-141.
    It prints its runs' range too, still ranked by the race."""
    result = ScanResult.load(FIXTURES / "disk_bound_scan.json")
    table = rows(result)
    pick = next(r for r in table if r.config and r.config.config == result.recommendation.config)
    raced = [r for r in table if r.speed is not None and r.speed.ratio is not None]
    assert pick.speed.wide and raced
    assert all(r.speed.wide and r.speed.runs is not None for r in raced)
    text = render(lambda console: print_report(console, result), 120)
    for r in raced:
        line = next(line for line in text.splitlines() if r.config.config.label() in line and "×" in line)
        assert " runs " in line, line


def test_an_interval_past_two_fold_or_a_spread_past_half_is_too_wide():
    from loadtune.analysis.view import too_wide

    assert not too_wide(0.9, 1.1) and not too_wide(60, 119) and not too_wide(60, 118, 100)
    assert too_wide(0.5, 1.2) and too_wide(0.0, 194.28) and too_wide(1.0, float("inf"))
    assert too_wide(40, 160, 100)  # ±60%, though the ends are 4x apart too


def printed_numbers_within_two_fold(text: str) -> None:
    import re

    for spread in re.findall(r"±(\d+(?:\.\d+)?)%", text):
        assert float(spread) <= 50, text
    for low, high in re.findall(r"(\d+\.\d+)×?[–-](\d+\.\d+)×?\)", text):
        assert float(high) <= 2 * float(low), (low, high, text)


@pytest.mark.parametrize("name", SAVED)
def test_the_short_report_prints_no_figure_wider_than_two_fold(name):
    result = ScanResult.load(FIXTURES / name)
    printed_numbers_within_two_fold(render(lambda console: print_report(console, result), 80))


def test_the_readme_examples_report_fits_a_screen():
    """The README's example scan, saved: the default report is at most 40 lines at 80 columns, every
    line within them, the pick, the gain and the snippet in it; the details hold the rest."""
    result = ScanResult.load(FIXTURES / "readme_scan.json")
    text = render(lambda console: print_report(console, result), 80)
    lines = text.splitlines()
    assert len(lines) <= 40 and max(len(line) for line in lines) <= 80, text
    assert "Recommendation" in text and "loader = DataLoader(" in text and "PyTorch's defaults" in text
    assert "Where the time goes" not in text and "Bound:" in text
    full = render(lambda console: print_report(console, result, details=True), 80)
    assert "Where the time goes" in full and len(full.splitlines()) > len(lines)


def test_a_setting_carried_in_the_environment_shows_as_the_user_sets_it():
    from loadtune.analysis.recommend import snippet
    from loadtune.model.config import TrialConfig

    config = TrialConfig(batch_size=32, num_workers=0, heap=64 * 1024 * 1024)
    assert config.label() == "w0 +MALLOC env bs32"
    code = snippet(config, shuffle=True, drop_last=False, has_collate_fn=False)
    exports = [line for line in code.splitlines() if "export " in line]
    assert len(exports) == 2 and all(line.lstrip("# ").startswith("export MALLOC_") for line in exports)
