"""Comparing two scans: the arithmetic as pure functions, then on saved real scans."""

import json
import math
from dataclasses import replace

import pytest
from conftest import FIXTURES
from rich.console import Console

from loadtune.analysis.compare import FASTER, ONLY_A, ONLY_B, SAME, SLOWER, UNMEASURED, compare, diff_config, judge, pair_configs, select_diffs
from loadtune.model.config import TrialConfig
from loadtune.report.compare import print_comparison
from loadtune.report.text import rate
from loadtune.model.results import ConfigResult, ScanResult
from loadtune.model.trial import Block, Trial, TrialError
from loadtune.model.estimate import estimate
from loadtune.analysis.view import Filters, ViewError


def measured(config, rates):
    """A config measured with one block per rate (1 s each, so the block's rate is the value)."""
    return ConfigResult(config, [Trial(config, "ok", blocks=[Block(int(r), 1, 1.0) for r in rates])])


W0 = TrialConfig(32, 0)
W2 = TrialConfig(32, 2, prefetch_factor=2)
W4 = TrialConfig(32, 4, prefetch_factor=2)


def test_beyond_the_noise_either_way():
    a, b = estimate([1000, 1010, 990, 1005, 995]), estimate([1500, 1490, 1510, 1505, 1495])
    r, verdict = judge(a, b, 0.02)
    assert verdict == FASTER and r.value == pytest.approx(1.5)
    assert r.low < r.value < r.high and r.low > 1  # the whole interval says faster
    assert judge(b, a, 0.02)[1] == SLOWER


def test_within_the_noise_overlapping_intervals_or_under_the_floor():
    noisy_a, noisy_b = estimate([1000, 1300, 800, 1100, 900]), estimate([1100, 1400, 850, 1200, 950])
    r, verdict = judge(noisy_a, noisy_b, 0.0)
    assert verdict == SAME and r.low < 1 < r.high
    tight_a, tight_b = estimate([1000, 1000, 1000]), estimate([1010, 1010, 1010])  # no spread, 1% apart
    assert judge(tight_a, tight_b, 0.0)[1] == FASTER
    assert judge(tight_a, tight_b, 0.02)[1] == SAME  # drift between scans: the floor calls 1% the same


def test_configs_on_one_side_or_unmeasured_have_no_ratio():
    a, b = measured(W0, [100, 101, 99]), measured(W0, [200, 201, 199])
    assert diff_config(a, None, 0.02).verdict == ONLY_A
    only_b = diff_config(None, b, 0.02)
    assert only_b.verdict == ONLY_B and only_b.ratio is None and only_b.a_status is None and only_b.b_status == "ok"
    failed = ConfigResult(W0, [Trial(W0, "failed", error=TrialError("exception", "boom"))])
    d = diff_config(a, failed, 0.02)
    assert d.verdict == UNMEASURED and d.b is None and d.b_status == "failed" and d.ratio is None
    assert diff_config(a, b, 0.02).ratio.value == pytest.approx(2.0)


def test_with_a_learned_run_to_run_spread_two_close_configs_are_within_noise():
    """Tight blocks, 6% apart: the blocks' intervals do not overlap, but runs of one config landed
    ~5% apart on that machine (two runs of W2 in each scan), so two scans cannot tell them apart."""
    from loadtune.analysis.noise import run_noise

    def runs(config, levels):
        return ConfigResult(config, [Trial(config, "ok", blocks=[Block(int(v), 1, 1.0)] * 5) for v in levels])

    a_configs, b_configs = [runs(W0, [1000]), runs(W2, [2000, 2100])], [runs(W0, [1060]), runs(W2, [2000, 2110])]
    noise = (run_noise(a_configs), run_noise(b_configs))
    assert noise[0].learned and noise[1].learned
    blocks_only = diff_config(a_configs[0], b_configs[0], 0.02)
    assert blocks_only.verdict == FASTER  # what the blocks alone would say
    learned = diff_config(a_configs[0], b_configs[0], 0.02, noise)
    assert learned.verdict == SAME and learned.a.low < 1000 * 0.95 and learned.b.high > 1060 * 1.05


def test_pairing_matches_by_key_and_keeps_one_sided_configs():
    a = [measured(W0, [1]), measured(W2, [1])]
    b = [measured(W4, [1]), measured(replace(W2), [1]), measured(TrialConfig(32, 0, transfer="sync"), [1])]
    pairs = pair_configs(a, b)
    assert [(x.config.key if x else None, y.config.key if y else None) for x, y in pairs] == [
        (W0.key, None), (W2.key, W2.key), (None, W4.key), (None, TrialConfig(32, 0, transfer="sync").key)]


def load(name):
    return ScanResult.load(FIXTURES / name)


def test_before_and_after_a_real_slowdown():
    """slowable.py scanned as is, then with 1 ms more per sample (and one more worker count)."""
    before, after = load("slowable_before.json"), load("slowable_after.json")
    cmp = compare(before, after, "before.json", "after.json")
    by_label = {d.config.label(): d for d in cmp.diffs}
    w0 = by_label["w0 bs16"]
    assert w0.verdict == SLOWER and w0.ratio.high < 1  # 1 ms per sample is far beyond any noise here
    assert w0.ratio.value == pytest.approx(w0.b.median / w0.a.median)
    assert by_label["w2 pf2 persist bs16"].verdict == ONLY_B
    assert cmp.a_pick == before.recommendation.config and cmp.b_pick == after.recommendation.config
    assert cmp.dataset == [] or all("edited" not in line for line in cmp.dataset)  # same file: only the env changed
    assert cmp.calibration is not None and cmp.calibration.low <= cmp.calibration.value <= cmp.calibration.high


def test_a_scan_against_itself_is_all_within_noise():
    scan = load("tiny_scan.json")
    cmp = compare(scan, scan)
    assert {d.verdict for d in cmp.diffs} == {SAME}
    assert all(d.ratio.value == 1.0 for d in cmp.diffs)
    assert cmp.settings == [line for line in cmp.settings if "busy" in line]  # only the busy-machine notes


def test_machine_device_and_dataset_differences_are_named():
    a = load("tiny_scan.json")
    b = load("tiny_scan.json")
    b.machine = replace(b.machine, usable_cores=a.machine.usable_cores + 6, torch="9.9.9", load_average=0.0)
    a.machine = replace(a.machine, load_average=0.0)
    b.settings = replace(b.settings, device="cuda:0")
    b.spec = replace(b.spec, sha256="0" * 64)
    cmp = compare(a, b)
    text = " ".join(cmp.settings)
    assert f"usable_cores: {a.machine.usable_cores} in A, {a.machine.usable_cores + 6} in B" in text
    assert "torch: 2.13.0+cpu in A, 9.9.9 in B" in text.replace(a.machine.torch, "2.13.0+cpu")
    assert "device: cpu in A, cuda:0 in B" in text
    assert any("edited" in line for line in cmp.dataset)
    b.spec = replace(b.spec, dataset_type="Other")
    assert any("different datasets" in line for line in compare(a, b).dataset)


def test_select_filters_sorts_and_cuts():
    a = [measured(W0, [300, 301, 299]), measured(W2, [200, 201, 199]), measured(W4, [100, 101, 99])]
    b = [measured(W0, [150, 151, 149]), measured(W2, [400, 401, 399]), measured(W4, [100, 101, 99])]
    diffs = [diff_config(x, y, 0.02) for x, y in pair_configs(a, b)]
    assert [d.config.num_workers for d in select_diffs(diffs)] == [0, 2, 4]  # A's rate, fastest first
    assert [d.config.num_workers for d in select_diffs(diffs, sort="ratio")] == [0, 4, 2]  # biggest slowdown first
    assert [d.config.num_workers for d in select_diffs(diffs, Filters(workers=frozenset({2, 4})), top=1)] == [2]
    with pytest.raises(ViewError, match="--sort"):
        select_diffs(diffs, sort="memory")


def test_json_form_is_valid_json_without_infinities():
    a = [measured(W0, [0, 0, 100])]  # a low end of zero makes the ratio's high end unbounded
    b = [measured(W0, [100, 100, 100])]
    d = diff_config(a[0], b[0], 0.02)
    assert math.isinf(d.ratio.high)
    cmp = compare(load("tiny_scan.json"), load("tiny_scan.json"))
    cmp.diffs = [d]
    text = json.dumps(cmp.to_dict(), allow_nan=False)  # raises on inf or nan
    assert json.loads(text)["configs"][0]["ratio"]["high"] is None


def test_rendered_comparison_fits_80_columns():
    before, after = load("slowable_before.json"), load("slowable_after.json")
    cmp = compare(before, after, "slowable_before.json", "slowable_after.json")
    console = Console(width=80, record=True, color_system=None)
    print_comparison(console, cmp, cmp.diffs)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80
    for d in cmp.diffs:  # labels unwrapped; figures whole (at 80 columns the ± folds under its median)
        row = next(i for i, line in enumerate(lines) if d.config.label() in line)
        for est in (d.a, d.b):
            if est is not None:
                assert rate(est.median) in lines[row] and f"±{est.rel_spread:.1%}" in lines[row + 1]
    text = "\n".join(lines)
    assert "slower" in text and "only in B" in text and "B recommends" in text
