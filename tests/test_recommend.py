"""The recommendation and the DataLoader snippet (loadtune/analysis/recommend.py): the cheapest config
among those the noise cannot tell from the fastest, and its speed-up over PyTorch's defaults."""

from __future__ import annotations

import ast
import warnings

import pytest

from loadtune.model.estimate import estimate
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, SequentialSampler

from loadtune.model.config import TrialConfig
from loadtune.analysis.recommend import MEMORY_GRAIN, baseline_for, cost, persistent_saving, recommend, snippet
from loadtune.model.results import by_config
from loadtune.model.trial import Block, MemoryUsage, Trial, TrialError

MiB = 2**20


def cfg(workers: int, bs: int = 32, pin: bool = False, pf: int | None = None, persist: bool = False, transfer: str = "none"):
    if workers and pf is None:
        pf = 2
    return TrialConfig(bs, workers, pin, pf if workers else None, persist if workers else False, transfer)


def trial(config: TrialConfig, rates, memory_mib: int = 100) -> Trial:
    """One block per rate, each one second long, so each block's rate is exactly the given figure."""
    blocks = [Block(samples=int(r), batches=max(1, int(r) // config.batch_size), seconds=1.0) for r in rates]
    mem = MemoryUsage(peak_bytes=memory_mib * MiB, peak_processes=1 + config.num_workers, method="pss")
    return Trial(config=config, status="ok", blocks=blocks, memory=mem)


def failed(config: TrialConfig) -> Trial:
    return Trial(config=config, status="failed", error=TrialError(kind="exception", message="boom"))


NOISY = [95, 100, 105, 98, 102]  # ±5%


def scaled(rates, f):
    return [r * f for r in rates]


# ---------------------------------------------------------------- recommend


def test_tied_configs_cheapest_wins():
    trials = [
        trial(cfg(0), scaled(NOISY, 1.0)),
        trial(cfg(2), scaled(NOISY, 10.0)),
        trial(cfg(4), scaled(NOISY, 10.3)),  # faster within the noise, twice the workers
        trial(cfg(8), scaled(NOISY, 10.1)),
    ]
    rec = recommend(trials)
    assert rec.best == cfg(4)
    assert rec.config == cfg(2)
    assert set(rec.tied) == {cfg(2), cfg(4), cfg(8)}
    assert rec.tied[0] == rec.config
    assert "fewest workers" in rec.reason


def test_a_noisy_fastest_does_not_tie_configs_that_others_clearly_beat():
    # the fastest by median was measured once with blocks from 640 to 1,700 (a heavy-tailed dataset);
    # its interval takes in num_workers=0 at half the rate, which the tight 2-worker configs clearly beat
    wild = [1715, 1654, 1333, 1110, 1423, 638]
    trials = [
        trial(cfg(0), scaled(NOISY, 7.5)),
        trial(cfg(2), scaled(NOISY, 12.0)),
        trial(cfg(2, pf=4), wild),
    ]
    assert all(t.estimate.low <= trials[2].estimate.high for t in trials)  # every interval meets the wild one's
    rec = recommend(trials)
    assert rec.best == cfg(2, pf=4)
    assert rec.config == cfg(2) and cfg(0) not in rec.tied
    assert set(rec.tied) == {cfg(2), cfg(2, pf=4)}


def test_clear_winner_beyond_noise():
    trials = [
        trial(cfg(0), scaled(NOISY, 1.0)),
        trial(cfg(1), scaled(NOISY, 2.0)),
        trial(cfg(2), scaled(NOISY, 3.0)),
        trial(cfg(4), scaled(NOISY, 4.0)),
    ]
    rec = recommend(trials)
    assert rec.config == cfg(4) == rec.best
    assert rec.tied == [cfg(4)]
    assert rec.reason.startswith("fastest config, clear")


def test_noise_floor_merges_tight_but_close_trials():
    tight = [1000, 1000, 1000, 1000, 1000]
    trials = [trial(cfg(1), tight), trial(cfg(2), scaled(tight, 1.015))]
    assert recommend(trials, noise_floor=0.02).config == cfg(1)
    assert recommend(trials, noise_floor=0.0).config == cfg(2)


def test_prefers_no_pinning_among_equals():
    trials = [
        trial(cfg(2, pin=True, transfer="non_blocking"), scaled(NOISY, 10.2)),
        trial(cfg(2, pin=False, transfer="sync"), scaled(NOISY, 10.0)),
    ]
    rec = recommend(trials)
    assert rec.best.pin_memory is True
    assert rec.config == cfg(2, pin=False, transfer="sync")


def test_less_memory_wins_among_equal_workers():
    trials = [
        trial(cfg(2, pf=4), scaled(NOISY, 10.2), memory_mib=900),
        trial(cfg(2, pf=8), scaled(NOISY, 10.0), memory_mib=400),
    ]
    assert recommend(trials).config == cfg(2, pf=8)


def test_memory_difference_below_grain_is_ignored():
    a = trial(cfg(2, pf=4), NOISY, memory_mib=100)
    b = trial(cfg(2, pf=2), NOISY, memory_mib=100)
    b.memory.peak_bytes += MEMORY_GRAIN // 4  # sampling noise, not cost
    # same workers, memory equal at the grain: the smaller prefetch wins
    assert cost(b) < cost(a)
    assert recommend([a, b]).config == cfg(2, pf=2)


def test_ignores_failed_trials():
    trials = [
        trial(cfg(0), scaled(NOISY, 1.0)),
        trial(cfg(2), scaled(NOISY, 5.0)),
        failed(cfg(1)),  # cheaper, but it failed
        failed(cfg(4)),
    ]
    rec = recommend(trials)
    assert rec.config == cfg(2)
    assert cfg(1) not in rec.tied and cfg(4) not in rec.tied


def test_ok_status_without_blocks_is_ignored():
    empty = Trial(config=cfg(1), status="ok", blocks=[])
    rec = recommend([empty, trial(cfg(2), NOISY)])
    assert rec.config == cfg(2)


def test_none_when_nothing_succeeded():
    assert recommend([]) is None
    assert recommend([failed(cfg(0)), failed(cfg(2))]) is None


def test_speedup_vs_pytorch_default_at_pick_batch_size():
    trials = [
        trial(cfg(0, bs=32), [100] * 5),
        trial(cfg(0, bs=64), [200] * 5),
        trial(cfg(4, bs=64), [600] * 5),
        trial(cfg(4, bs=32), [300] * 5),
    ]
    rec = recommend(trials)
    assert rec.config == cfg(4, bs=64)
    assert rec.baseline == cfg(0, bs=64)
    assert rec.speedup == pytest.approx(3.0)
    assert rec.speedup_low == pytest.approx(3.0) and rec.speedup_high == pytest.approx(3.0)


def test_speedup_interval_brackets_value():
    trials = [trial(cfg(0), NOISY), trial(cfg(2), scaled(NOISY, 3.0))]
    rec = recommend(trials)
    assert rec.speedup == pytest.approx(3.0)
    base, pick = estimate(NOISY), estimate(scaled(NOISY, 3.0))
    assert rec.speedup_low == pytest.approx(pick.low / base.high)  # conservative: worst case of both intervals
    assert rec.speedup_high == pytest.approx(pick.high / base.low)
    assert rec.speedup_low < 3.0 < rec.speedup_high


def test_where_the_defaults_are_the_pick_their_gain_over_themselves_is_exactly_one():
    """Runs that land far apart (a disk-bound loader's did, 2.6x) made the defaults' gain over themselves
    an interval of that spread: 0.11-9.2x in the JSON of a scan that picked them."""
    spread = [40, 160, 60, 150, 70]
    rec = recommend([trial(cfg(0), spread), trial(cfg(0), scaled(spread, 0.5)), trial(cfg(2), scaled(spread, 0.6))])
    assert rec.config == rec.baseline == cfg(0)
    assert (rec.speedup, rec.speedup_low, rec.speedup_high) == (1.0, 1.0, 1.0)


def test_no_speedup_when_default_not_measured_at_that_batch_size():
    trials = [trial(cfg(0, bs=32), [100] * 5), trial(cfg(2, bs=64), [500] * 5)]
    rec = recommend(trials)
    assert rec.config == cfg(2, bs=64)
    assert rec.baseline is None
    assert rec.speedup is None and rec.speedup_low is None and rec.speedup_high is None


def test_no_speedup_when_default_failed():
    trials = [failed(cfg(0)), trial(cfg(2), [500] * 5)]
    rec = recommend(trials)
    assert rec.baseline is None and rec.speedup is None


def test_baseline_is_default_with_accelerator():
    trials = [
        trial(cfg(0, pin=True, transfer="non_blocking"), [150] * 5),
        trial(cfg(0, transfer="sync"), [100] * 5),
        trial(cfg(2, pin=True, transfer="non_blocking"), [400] * 5),
    ]
    assert baseline_for(trials, 32).config == cfg(0, transfer="sync")
    rec = recommend(trials)
    assert rec.speedup == pytest.approx(4.0)


def test_pick_is_the_default_itself():
    trials = [trial(cfg(0), scaled(NOISY, 10.0)), trial(cfg(2), scaled(NOISY, 10.1))]
    rec = recommend(trials)
    assert rec.config == cfg(0)
    assert rec.baseline == cfg(0)
    assert rec.speedup == pytest.approx(1.0)


def test_non_monotone_curve_best_in_the_middle():
    # throughput rises with workers then falls (oversubscription)
    curve = {0: 100, 1: 190, 2: 350, 4: 600, 8: 420, 16: 250}
    trials = [trial(cfg(w), scaled(NOISY, v / 100)) for w, v in curve.items()]
    rec = recommend(trials)
    assert rec.config == cfg(4) == rec.best
    assert rec.tied == [cfg(4)]


def test_non_monotone_curve_with_plateau_picks_left_edge():
    curve = {0: 100, 1: 300, 2: 590, 4: 600, 6: 605, 8: 300}
    trials = [trial(cfg(w), scaled(NOISY, v / 100)) for w, v in curve.items()]
    rec = recommend(trials)
    assert rec.best == cfg(6)
    assert rec.config == cfg(2)
    assert set(rec.tied) == {cfg(2), cfg(4), cfg(6)}


# ---------------------------------------------------------------- snippet


class Tiny(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.tensor([i])


def build_from_snippet(code: str) -> DataLoader:
    ast.parse(code)  # valid Python
    ns = {"DataLoader": DataLoader, "dataset": Tiny(), "collate_fn": lambda items: torch.cat(items)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(code, ns)
    return ns["loader"]


CONFIGS = [
    cfg(0),
    cfg(0, bs=7, transfer="sync"),
    cfg(1, pf=2),
    cfg(4, pf=4, persist=True),
    cfg(3, pf=8, pin=True, transfer="non_blocking"),
    cfg(2, pf=3, persist=True, pin=True, transfer="non_blocking"),
    TrialConfig(16, 2, False, None, False, "none"),  # prefetch unset: PyTorch's default 2
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label())
@pytest.mark.parametrize("has_collate_fn", [False, True])
def test_snippet_builds_matching_loader(config, has_collate_fn):
    code = snippet(config, shuffle=False, drop_last=False, has_collate_fn=has_collate_fn)
    loader = build_from_snippet(code)
    assert loader.batch_size == config.batch_size
    assert loader.num_workers == config.num_workers
    assert loader.pin_memory == config.pin_memory
    assert loader.persistent_workers == config.persistent_workers
    if config.num_workers:
        assert loader.prefetch_factor == (config.prefetch_factor or 2)
    else:
        assert loader.prefetch_factor is None
    assert isinstance(loader.sampler, SequentialSampler)
    assert loader.drop_last is False
    if has_collate_fn:
        assert "collate_fn=collate_fn" in code
        assert loader.collate_fn is not None and loader.collate_fn.__name__ == "<lambda>"
    else:
        assert "collate_fn" not in code


def test_snippet_shuffle_and_drop_last():
    loader = build_from_snippet(snippet(cfg(2), shuffle=True, drop_last=True, has_collate_fn=False))
    assert isinstance(loader.sampler, RandomSampler)
    assert loader.drop_last is True
    assert len(loader) == 10 // 32  # drop_last with batch 32 over 10 samples: no batch


def test_snippet_iterates_with_collate_fn():
    loader = build_from_snippet(snippet(cfg(0, bs=4), shuffle=False, drop_last=False, has_collate_fn=True))
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_snippet_transfer_hint():
    assert "non_blocking=True" in snippet(cfg(2, pin=True, transfer="non_blocking"), False, False, False)
    assert "batch.to(device)" in snippet(cfg(2, transfer="sync"), False, False, False)
    assert ".to(" not in snippet(cfg(2), False, False, False)


# ---------------------------------------------------------------- persistent_workers saving


def test_persistent_saving_from_two_distinct_rates():
    configs = by_config([trial(cfg(2, persist=False), scaled(NOISY, 4.0)), trial(cfg(2, persist=True), scaled(NOISY, 8.0))])
    # 800 samples an epoch: 2 s at 400 samples/s, 1 s at 800 samples/s
    saving = persistent_saving(configs, cfg(2, persist=True), 800)
    assert saving.seconds == pytest.approx(1.0) and saving.at == cfg(2, persist=True)
    assert persistent_saving(configs, cfg(0), 800) is None  # no workers, nothing to keep alive


def test_persistent_saving_falls_back_to_a_twin_at_the_same_workers_and_batch_size():
    # the pick (prefetch 4) was not measured without persistent_workers; its prefetch-2 twin was
    configs = by_config([trial(cfg(2, persist=False), scaled(NOISY, 4.0)), trial(cfg(2, persist=True), scaled(NOISY, 8.0)),
                         trial(cfg(2, pf=4, persist=True), scaled(NOISY, 8.1))])
    saving = persistent_saving(configs, cfg(2, pf=4, persist=True), 800)
    assert saving.seconds == pytest.approx(1.0) and saving.at == cfg(2, persist=True)
    assert persistent_saving(configs, cfg(4, persist=True), 800) is None  # other workers: start-up differs
    assert persistent_saving(configs, cfg(2, bs=64, persist=True), 800) is None


def test_persistent_saving_inside_the_noise_is_none_of_it():
    configs = by_config([trial(cfg(2, persist=False), scaled(NOISY, 4.0)), trial(cfg(2, persist=True), scaled(NOISY, 4.04))])
    assert persistent_saving(configs, cfg(2, persist=True), 800).seconds == 0.0  # not "-0.02 s per epoch"
    assert persistent_saving(by_config([trial(cfg(2, persist=True), NOISY)]), cfg(2, persist=True), 800) is None


@pytest.mark.parametrize("low, high, raced, tied, said", [
    (1.05, 1.30, True, False, "win: 1.20×"),
    (0.82, 1.60, True, False, "are undecided against 1.20×"),  # the race's leader, no tie: not "the cheapest"
    (0.82, 1.60, True, True, "cannot be told apart from 1.20×"),
    (0.82, 1.60, False, False, "are undecided against 1.20×"),  # rounds, no tie: not "the cheapest" either
    (0.82, 1.60, False, True, "cannot be told apart from 1.20×"),  # rounds, and the pick's rule tied them
    (0.82, 2.42, True, False, "are undecided against the best config"),  # over 2x wide: no figure, and so no interval
    (1.30, 3.10, True, False, "win: at least 1.30× the best config"),  # its lower end is the claim that holds
])
def test_defaults_that_are_the_pick_win_only_where_the_interval_clears_a_tie(low, high, raced, tied, said):
    import dataclasses
    import json

    from conftest import FIXTURES

    from loadtune.analysis.noise import run_noise
    from loadtune.model.results import ScanResult, Versus
    from loadtune.report.gain import gain_text

    result = ScanResult.from_dict(json.loads((FIXTURES / "tiny_scan.json").read_text()))  # its pick: PyTorch's defaults
    rival = next(c.config for c in result.configs if c.config.num_workers == 2)
    versus = Versus(rival, 1.2, low, high, pairs=9) if raced else Versus(rival, 1.2, low, high, rounds=3)
    rec = dataclasses.replace(result.recommendation, versus=versus,
                              tied=[*result.recommendation.tied, *([rival] if tied else [])])
    text = gain_text(result, rec, run_noise(result.configs))
    assert said in text and (f"95% interval {low:.2f}×–{high:.2f}×" in text) == (high <= 2 * low)
    assert ("win" in text) == (low > 1)  # a tie is never called a win
    assert ("cheapest" in text) == (low <= 1 and tied)  # nor an undecided pair the cheapest's
    assert "rounds' evidence" in text if low <= 1 and not tied and not raced else True


def test_the_reason_gives_a_ratio_known_no_better_than_twofold_by_the_bound_that_holds():
    from loadtune.analysis.comparison import SLOWER, Comparison
    from loadtune.analysis.race import LEADER, RaceVerdict, Standing
    from loadtune.analysis.recommend import race_reason

    leader, wide, narrow = cfg(4), cfg(0), cfg(2)
    raced = RaceVerdict(leader, [Standing(leader, LEADER, None),
                                 Standing(wide, SLOWER, Comparison(0.27, 0.08, 0.91, 9, 3)),
                                 Standing(narrow, SLOWER, Comparison(0.80, 0.75, 0.85, 9, 3))])
    pick = by_config([trial(leader, NOISY)])[0]
    reason = race_reason(pick, raced, [pick])
    assert f"{wide.label()} at most 0.91×" in reason and "0.27" not in reason
    assert f"{narrow.label()} 0.80×" in reason
