"""The bound arithmetic (loadtune/analysis/bound.py): the highest throughput the stage costs allow and
the stage that sets it, as pure functions of stage costs, no processes."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from loadtune.engine import machine
from loadtune.analysis.bound import (COLLATION, COPY, DATASET_CPU, HANDOFF, IO_WAIT, MAIN, STEP, STORAGE, STORAGE_BANDWIDTH,
                                     BatchCosts, Fetched, compute_bound, pick_fraction)
from loadtune.model.config import TrialConfig
from loadtune.analysis.recommend import recommend
from loadtune.model.results import ScanResult, SpecInfo
from loadtune.model.estimate import Estimate
from loadtune.model.stages import StageCost, StageCosts
from loadtune.model.trial import Block, MemoryUsage, Trial
from loadtune.model.settings import ScanSettings
from loadtune.analysis.bound import scan_bound

MS = 1e-3


def costs(**given) -> BatchCosts:
    """Seconds per batch of 10 samples; everything not given costs nothing."""
    base = dict(batch_size=10, fetch_cpu=0.0, fetch_wall=0.0, fetch_main=None, collate=0.0, handoff=0.0,
                receive=0.0, touch=0.0, consumer=0.0)
    base.update(given)
    if base["fetch_main"] is None:
        base["fetch_main"] = base["fetch_wall"]
    return BatchCosts(**base)


def test_cpu_bound_dataset_shares_the_cores_with_the_main_process():
    c = costs(fetch_cpu=10 * MS, fetch_wall=10 * MS, collate=0.5 * MS, handoff=1 * MS, receive=1 * MS)
    bound = compute_bound(c, usable_cores=4, max_workers=16)
    # every batch costs 10 + 1 (worker side, collation included) + 1 (main) ms of CPU, four cores share it
    assert bound.rate == pytest.approx(4 * 10 / (12 * MS))
    assert bound.stage == DATASET_CPU and bound.ceiling.name == "CPU"
    assert bound.fraction(bound.rate / 2) == pytest.approx(0.5)
    assert bound.workers_needed is None


def test_waiting_dataset_is_bound_by_the_workers_the_search_can_reach():
    c = costs(fetch_cpu=0.5 * MS, fetch_wall=20 * MS, handoff=1 * MS, receive=0.5 * MS)
    bound = compute_bound(c, usable_cores=2, max_workers=8)
    assert bound.rate == pytest.approx(8 * 10 / (21 * MS))  # eight workers, each 20 ms waiting + 1 ms hand-off
    assert bound.stage == IO_WAIT and bound.ceiling.name == "workers"
    # the next cap is the CPU (2 cores, 2 ms of CPU a batch): that many workers would reach it
    assert bound.workers_needed == math.ceil((2 * 10 / (2 * MS)) / (10 / (21 * MS)))
    more = compute_bound(c, usable_cores=2, max_workers=64)
    assert more.rate > bound.rate  # a wider worker range lifts this cap, and only this one


def test_main_thread_and_slow_step():
    c = costs(fetch_cpu=0.1 * MS, fetch_wall=0.1 * MS, receive=0.2 * MS, consumer=30 * MS)
    bound = compute_bound(c, usable_cores=8, max_workers=16)
    assert bound.stage == STEP
    assert bound.rate == pytest.approx(10 / (30.1 * MS))  # num_workers=0 does fetch + step in turn: the better mode
    receive_heavy = costs(fetch_cpu=5 * MS, fetch_wall=5 * MS, receive=3 * MS, touch=1 * MS, consumer=0.5 * MS)
    bound = compute_bound(receive_heavy, usable_cores=8, max_workers=16)
    assert bound.ceiling.name == "main thread" and bound.stage == MAIN
    assert bound.rate == pytest.approx(10 / (4.5 * MS))


def test_in_process_wins_when_the_hand_off_costs_more_than_the_samples():
    c = costs(fetch_cpu=0.2 * MS, fetch_wall=0.2 * MS, collate=0.1 * MS, handoff=3 * MS, receive=2 * MS)
    bound = compute_bound(c, usable_cores=2, max_workers=16)
    assert bound.ceiling.name == "in-process loading"
    assert bound.rate == pytest.approx(10 / (0.3 * MS))
    assert bound.stage == DATASET_CPU
    workers_caps = [x for x in bound.ceilings if x.name != "in-process loading"]
    assert min(x.rate for x in workers_caps) < bound.rate
    assert min(workers_caps, key=lambda x: x.rate).stage in (HANDOFF, MAIN)


def test_no_workers_in_range_leaves_only_the_main_process():
    c = costs(fetch_cpu=5 * MS, fetch_wall=5 * MS, collate=1 * MS)
    bound = compute_bound(c, usable_cores=8, max_workers=0)
    assert [x.name for x in bound.ceilings] == ["in-process loading"]
    assert bound.rate == pytest.approx(10 / (6 * MS))


def test_collation_heavy_batches():
    c = costs(fetch_cpu=0.01 * MS, fetch_wall=0.01 * MS, collate=8 * MS, handoff=9 * MS, receive=0.5 * MS)
    bound = compute_bound(c, usable_cores=2, max_workers=16)
    assert bound.stage == COLLATION
    assert bound.rate == pytest.approx(max(10 / (8.01 * MS), 2 * 10 / (9.51 * MS)))


def test_cuda_caps_copy_and_step():
    c = costs(fetch_cpu=1 * MS, fetch_wall=1 * MS, handoff=0.5 * MS, receive=0.2 * MS, consumer=4 * MS,
              pin=1 * MS, copy=4 * MS, step=2 * MS, cuda=True)
    bound = compute_bound(c, usable_cores=16, max_workers=64)
    assert bound.stage == COPY and bound.rate == pytest.approx(10 / (4 * MS))
    assert {"pin thread", "copy", "step"} <= {x.name for x in bound.ceilings}


def stage(values_ms: list[float], units: int = 1) -> StageCost:
    return StageCost([v * MS * units for v in values_ms], [units] * len(values_ms))


def test_storage_bandwidth_caps_both_modes_however_many_workers():
    # 7 MiB fetched a sample (readahead through a mapping) from storage that serves 1,000 MB/s: about 136
    # samples/s, below the workers' 8 x 10 / 21 ms = 3,810 and num_workers=0's 10 / 21 ms = 476
    c = costs(fetch_cpu=1 * MS, fetch_wall=20 * MS, handoff=1 * MS, storage=10 * 7 * 2**20 / 1e9,
              storage_fetched=Fetched(7 * 2**20, "the profile's cold fetch"))
    bound = compute_bound(c, usable_cores=2, max_workers=8)
    assert bound.ceiling.name == STORAGE and bound.stage == STORAGE_BANDWIDTH
    assert bound.rate == pytest.approx(1e9 / (7 * 2**20))
    assert "1,000 MB/s read cold / 7 MiB fetched a sample (the profile's cold fetch)" in bound.ceiling.detail
    assert compute_bound(replace(c, storage=None), usable_cores=2, max_workers=8).stage == IO_WAIT  # warm: no such cap
    fast = compute_bound(replace(c, storage=c.storage / 100), usable_cores=2, max_workers=8)  # 100x the bandwidth
    assert fast.ceiling.name == "workers" and fast.workers_needed is not None
    assert fast.workers_needed * (fast.rate / 8) <= 100 * bound.rate * 1.01  # more workers stop at storage's cap


def test_the_storage_cap_counts_only_in_a_cold_scan_and_spans_the_bandwidths_interval():
    stages = StageCosts(batch_size=10, device="cpu", fetch_cpu=stage([1.0, 1.1, 0.9], 10),
                        fetch_wall=stage([1.0, 1.1, 0.9], 10), collate=stage([0.1, 0.1, 0.1]),
                        storage_bytes=2**20, storage_mb_s=Estimate(100.0, 80.0, 125.0, 90.0, 110.0, 10))
    assert BatchCosts.of(stages).storage is None  # warm: the bandwidth is no cost
    cold = BatchCosts.of(stages, cold=True)
    assert cold.storage == pytest.approx(10 * 2**20 / 100e6)
    assert BatchCosts.of(stages, -1, cold=True).storage < cold.storage < BatchCosts.of(stages, +1, cold=True).storage
    bound = compute_bound(cold, 2, 4, spread=(BatchCosts.of(stages, -1, True), BatchCosts.of(stages, +1, True)))
    assert bound.stage == STORAGE_BANDWIDTH
    assert bound.low == pytest.approx(80e6 / 2**20) and bound.high == pytest.approx(125e6 / 2**20)
    assert StageCosts.from_dict(json.loads(json.dumps(stages.to_dict()))) == stages


def test_a_cold_scans_storage_cap_reads_the_fewest_bytes_any_configs_runs_fetched():
    """Readahead serves each loader differently: the profile's short cold fetch read 2 MiB a sample, the
    configs' timed runs 1.5 and 1 MiB; the most any config could reach is the bandwidth over 1 MiB."""
    from loadtune.model.storage import COLD, WARM, StorageState

    stages = StageCosts(batch_size=10, device="cpu", fetch_cpu=stage([0.1, 0.1, 0.1], 10),
                        fetch_wall=stage([0.1, 0.1, 0.1], 10), collate=stage([0.1, 0.1, 0.1]), max_workers=2,
                        storage_bytes=2 * 2**20, storage_mb_s=Estimate(100.0, 90.0, 110.0, 95.0, 105.0, 10))
    result = result_with_stages(stages)
    for trial, mib in zip(result.trials, (1.5, 1.0)):
        trial.blocks = [replace(b, storage_bytes=int(mib * 2**20 * b.samples)) for b in trial.blocks]
    result.storage = StorageState("cold", COLD, "as asked")
    bound = scan_bound(result)
    assert bound.stage == STORAGE_BANDWIDTH and bound.rate == pytest.approx(100e6 / 2**20)
    assert "1 MiB fetched a sample (the fewest of any config: w2" in bound.ceiling.detail
    result.storage = StorageState("warm", WARM, "as asked")
    assert all(c.name != STORAGE for c in scan_bound(result).ceilings)


def test_stage_cost_mean_is_total_over_units_and_carries_its_noise():
    cost = StageCost([0.010, 0.030, 0.020], [10, 10, 10])
    assert cost.mean == pytest.approx(0.002)
    assert cost.values == pytest.approx([0.001, 0.003, 0.002])
    assert cost.estimate.median == pytest.approx(0.002) and cost.rel_spread > 0


def result_with_stages(stages: StageCosts | None) -> ScanResult:
    config = TrialConfig(10, 2, False, 2, False, "none")
    trial = Trial(config=config, status="ok", blocks=[Block(400, 40, 1.0)] * 3,
                  memory=MemoryUsage(100 * 2**20, 3, "pss"))
    base = Trial(config=TrialConfig(10, 0), status="ok", blocks=[Block(100, 10, 1.0)] * 3,
                 memory=MemoryUsage(90 * 2**20, 1, "pss"))
    info = machine.collect()
    info.usable_cores = 2
    return ScanResult(
        spec=SpecInfo(None, None, None, "D", 100, False, False, False), machine=info,
        settings=ScanSettings(),
        trials=[base, trial], recommendation=recommend([base, trial]), stages=stages, state="complete",
    )


def test_scan_result_carries_stages_through_json_and_old_files_load(tmp_path):
    stages = StageCosts(batch_size=10, device="cpu", fetch_cpu=stage([1.0, 1.1, 0.9], 10),
                        fetch_wall=stage([1.0, 1.1, 0.9], 10), collate=stage([0.1, 0.1, 0.1]),
                        handoff=stage([0.2, 0.2, 0.3]), receive=stage([0.1, 0.1, 0.1]), max_workers=2)
    result = result_with_stages(stages)
    bound = scan_bound(result)
    assert bound.stage == DATASET_CPU
    assert bound.rate == pytest.approx(2 * 10 / ((10 + 0.7 / 3 + 0.1) * MS), rel=1e-6)
    assert pick_fraction(result) == pytest.approx(400 / bound.rate)

    path = tmp_path / "r.json"
    result.save(path)
    loaded = ScanResult.load(path)
    assert loaded.stages == stages and scan_bound(loaded) == bound

    data = json.loads(path.read_text())
    del data["stages"]  # a file from before the diagnosis
    path.write_text(json.dumps(data))
    old = ScanResult.load(path)
    assert old.stages is None and scan_bound(old) is None and pick_fraction(old) is None


def test_the_pick_is_set_against_the_bound_at_its_long_run_rate():
    # heavy-tailed costs: most blocks run at 500/s, one holding the slow samples at 100/s. The median
    # block reads 500/s, but the long run (what a mean-cost bound describes) is 700 samples / 2.4 s
    blocks = [Block(100, 10, 0.2), Block(100, 10, 0.2), Block(100, 10, 0.2), Block(100, 10, 1.0), Block(300, 30, 0.8)]
    result = result_with_stages(StageCosts(batch_size=10, device="cpu", fetch_cpu=stage([1.0], 10),
                                           fetch_wall=stage([1.0], 10), collate=stage([0.1]), max_workers=2))
    pick = result.config_result(result.recommendation.config)
    pick.trials[0].blocks = blocks
    assert pick.estimate.median == pytest.approx(500)
    assert pick_fraction(result) == pytest.approx((700 / 2.4) / scan_bound(result).rate)


def test_caps_carry_an_interval_and_caps_inside_it_tie():
    # a waiting dataset on few cores: the CPU cap (2 cores, 3.3 ms a batch: 6,061/s) and the workers cap
    # (16 workers, 21 ms each: 7,619/s) are 26% apart; how sure the profile is decides whether they tie
    c = costs(fetch_cpu=1.7 * MS, fetch_wall=20 * MS, handoff=1 * MS, receive=0.6 * MS)
    apart = compute_bound(c, 2, 16, spread=(c, c))
    assert apart.ceiling.name == "CPU" and apart.rate == pytest.approx(2 * 10 / (3.3 * MS))
    assert apart.ties == [] and apart.stages == [DATASET_CPU] and apart.low == apart.high == apart.rate
    cheap = costs(fetch_cpu=1.0 * MS, fetch_wall=19.3 * MS, handoff=0.9 * MS, receive=0.5 * MS)
    dear = costs(fetch_cpu=2.4 * MS, fetch_wall=20.7 * MS, handoff=1.1 * MS, receive=0.7 * MS)
    close = compute_bound(c, 2, 16, spread=(cheap, dear))
    cpu, workers = close.ceiling, close.ties[0]
    assert cpu.name == "CPU" and cpu.low < cpu.rate < cpu.high
    assert cpu.high == pytest.approx(2 * 10 / (2.4 * MS)) and cpu.low == pytest.approx(2 * 10 / (4.2 * MS))
    assert workers.low == pytest.approx(16 * 10 / (21.8 * MS)) and workers.high == pytest.approx(16 * 10 / (20.2 * MS))
    assert [t.name for t in close.ties] == ["workers"] and close.stages == [DATASET_CPU, IO_WAIT]
    # the bound's own interval: the lowest cap at either end (the workers cap is the lower one when costs are low)
    assert close.low == pytest.approx(cpu.low) and close.high == pytest.approx(workers.high)
    assert close.fraction_interval(close.rate) == pytest.approx((cpu.rate / workers.high, cpu.rate / cpu.low))


def test_the_bound_of_a_scan_takes_its_interval_from_the_costs_spread():
    steady = StageCosts(batch_size=10, device="cpu", fetch_cpu=stage([1.0] * 6, 10), fetch_wall=stage([1.0] * 6, 10),
                        collate=stage([0.1] * 6), max_workers=2)
    noisy = replace(steady, fetch_cpu=stage([0.6, 1.4, 0.8, 1.2, 0.7, 1.3], 10),
                    fetch_wall=stage([0.6, 1.4, 0.8, 1.2, 0.7, 1.3], 10))
    exact, spread = scan_bound(result_with_stages(steady)), scan_bound(result_with_stages(noisy))
    assert exact.low == pytest.approx(exact.rate) == pytest.approx(exact.high)
    assert spread.rate == pytest.approx(exact.rate)  # the same mean cost
    assert spread.low < spread.rate < spread.high
    half = noisy.fetch_cpu.halfwidth / noisy.fetch_cpu.mean
    assert 0.1 < half < 0.5  # t(5) x sd / sqrt(6) of the per-sample costs, relative
    assert spread.ceiling.rel_halfwidth > 0.8 * half


def test_the_panel_names_ties_and_reads_the_pick_against_the_bounds_spread():
    from rich.console import Console

    from loadtune.report.diagnosis import bound_text

    def panel(stages: StageCosts) -> str:
        console = Console(width=400, record=True)
        console.print(bound_text(result_with_stages(stages)))
        return console.export_text()

    # the pick runs at 400/s. The CPU cap (2 cores, 5 ms a sample, noisy) is 392/s, and eight workers
    # waiting 16 ms a sample allow 497/s: inside the CPU cap's interval
    near = StageCosts(batch_size=10, device="cpu", fetch_cpu=stage([3.5, 6.5, 4.0, 6.0, 3.8, 6.2], 10),
                      fetch_wall=stage([16.0] * 6, 10), collate=stage([1.0] * 6), max_workers=8)
    text = panel(near)
    assert "from the stage costs' spread" in text and "is at the bound within its spread" in text
    assert "ties with it" in text and IO_WAIT in text and text.count("To move it:") == 2
    far = replace(near, fetch_cpu=stage([5.0] * 6, 10), fetch_wall=stage([5.0] * 6, 10))
    text = panel(far)
    assert "ties with it" not in text and "spread" not in text and "this config is at the bound." in text
    slow = replace(near, fetch_cpu=stage([2.0] * 6, 10), fetch_wall=stage([2.0] * 6, 10))  # a bound of 952/s
    assert "this config reaches 42% of it." in panel(slow)
    fast = replace(near, fetch_cpu=stage([10.0] * 6, 10), fetch_wall=stage([10.0] * 6, 10))  # 198/s: below the pick
    assert "measured 202% of it" in panel(fast) and "not a ceiling" in panel(fast)


def test_the_cpu_cap_uses_the_cpu_the_fastest_config_with_workers_used_while_timed():
    stages = StageCosts(batch_size=10, device="cpu", fetch_cpu=stage([1.0] * 6, 10), fetch_wall=stage([1.0] * 6, 10),
                        collate=stage([0.1] * 6), max_workers=2)
    result = result_with_stages(stages)
    profiled = scan_bound(result)  # 2 cores over 10 + 0.1 ms of CPU a batch
    assert profiled.ceiling.name == "CPU" and profiled.rate == pytest.approx(2 * 10 / (10.1 * MS))
    pick = result.config_result(result.recommendation.config)
    pick.trials[0].cpu_s = 1.5  # 1,200 samples in 3 s: 1.25 ms of CPU a sample, half a core busy
    assert pick.cpu_per_sample == pytest.approx(1.25e-3) and pick.busy_cores == pytest.approx(0.5)
    measured = scan_bound(result)
    assert measured.ceiling.name == "CPU" and measured.rate == pytest.approx(2 / 1.25e-3)
    assert "used by w2 pf2 bs10 while timed" in measured.ceiling.detail
    assert measured.stage == DATASET_CPU  # the profile's parts still say whose share is largest
    assert measured.low == measured.high == measured.rate  # one run: one reading, no interval
    in_process = result.configs[0]
    in_process.trials[0].cpu_s = 30.0  # num_workers=0 is not a loader with workers: never used for this cap
    assert scan_bound(result).rate == pytest.approx(measured.rate)


def test_the_measured_cpu_cap_spans_its_runs_and_ties_with_a_cap_inside_that_span():
    # a waiting dataset: 8 workers, 16 ms a sample each, allow 8 / 16 ms = 500/s; the pick's two runs read
    # 3.6 and 4.4 ms of CPU a sample, so the cores allow 455-556/s: the waits and the CPU cannot be told apart
    stages = StageCosts(batch_size=10, device="cpu", fetch_cpu=stage([1.0] * 6, 10), fetch_wall=stage([16.0] * 6, 10),
                        collate=stage([0.0] * 6), max_workers=8)
    result = result_with_stages(stages)
    first = result.trials[1]  # the run with workers
    first.cpu_s = 3 * 400 * 3.6e-3
    result.trials.append(replace(first, cpu_s=3 * 400 * 4.4e-3))
    bound = scan_bound(result)
    cpu = next(c for c in bound.ceilings if c.name == "CPU")
    assert cpu.rate == pytest.approx(2 / 4.0e-3)  # the runs pooled
    assert cpu.low == pytest.approx(2 / 4.4e-3) and cpu.high == pytest.approx(2 / 3.6e-3)
    assert "its runs: 36-44 ms" in cpu.detail
    assert bound.ceiling.name == "CPU" and bound.stages == [DATASET_CPU, IO_WAIT]
    assert bound.low == pytest.approx(cpu.low) and bound.high == pytest.approx(500, rel=0.01)
