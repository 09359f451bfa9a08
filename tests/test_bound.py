"""The bound arithmetic (loadtune/bound.py, SPEC §6): pure functions of stage costs, no processes."""

from __future__ import annotations

import json
import math

import pytest

from loadtune import machine
from loadtune.bound import (
    COLLATION, COPY, DATASET_CPU, HANDOFF, IO_WAIT, MAIN, STEP, BatchCosts, compute_bound, pick_fraction,
)
from loadtune.plan import TrialConfig
from loadtune.recommend import recommend
from loadtune.results import Block, MemoryUsage, ScanResult, SpecInfo, StageCost, StageCosts, Trial

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
        settings={"options": {"shuffle": True, "drop_last": False}, "device": "cpu", "references": []},
        trials=[base, trial], recommendation=recommend([base, trial]), stages=stages, state="complete",
    )


def test_scan_result_carries_stages_through_json_and_old_files_load(tmp_path):
    stages = StageCosts(batch_size=10, device="cpu", fetch_cpu=stage([1.0, 1.1, 0.9], 10),
                        fetch_wall=stage([1.0, 1.1, 0.9], 10), collate=stage([0.1, 0.1, 0.1]),
                        handoff=stage([0.2, 0.2, 0.3]), receive=stage([0.1, 0.1, 0.1]), max_workers=2)
    result = result_with_stages(stages)
    bound = result.bound
    assert bound.stage == DATASET_CPU
    assert bound.rate == pytest.approx(2 * 10 / ((10 + 0.7 / 3 + 0.1) * MS), rel=1e-6)
    assert pick_fraction(result) == pytest.approx(400 / bound.rate)

    path = tmp_path / "r.json"
    result.save(path)
    loaded = ScanResult.load(path)
    assert loaded.stages == stages and loaded.bound == bound

    data = json.loads(path.read_text())
    del data["stages"]  # a file from before the diagnosis
    path.write_text(json.dumps(data))
    old = ScanResult.load(path)
    assert old.stages is None and old.bound is None and pick_fraction(old) is None


def test_the_pick_is_set_against_the_bound_at_its_long_run_rate():
    # heavy-tailed costs: most blocks run at 500/s, one holding the slow samples at 100/s. The median
    # block reads 500/s, but the long run (what a mean-cost bound describes) is 700 samples / 2.4 s
    blocks = [Block(100, 10, 0.2), Block(100, 10, 0.2), Block(100, 10, 0.2), Block(100, 10, 1.0), Block(300, 30, 0.8)]
    result = result_with_stages(StageCosts(batch_size=10, device="cpu", fetch_cpu=stage([1.0], 10),
                                           fetch_wall=stage([1.0], 10), collate=stage([0.1]), max_workers=2))
    pick = result.config_result(result.recommendation.config)
    pick.trials[0].blocks = blocks
    assert pick.estimate.median == pytest.approx(500)
    assert pick_fraction(result) == pytest.approx((700 / 2.4) / result.bound.rate)
