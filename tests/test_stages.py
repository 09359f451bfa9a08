"""Where the time goes: the stage profile on real datasets in real processes (loadtune/engine/stages.py),
each dataset built to be bound by one stage, and memory growth from copy-on-write (loadtune/analysis/footprint.py).

What is asserted is attribution (which stage, which ordering), never a speed: each ratio below sits
well inside what the dataset was built to show, so that a busy machine does not tip it."""

from __future__ import annotations

import pytest

from loadtune.analysis.bound import COLLATION, DATASET_CPU, HANDOFF, IO_WAIT, MAIN, STEP, BatchCosts, compute_bound
from loadtune.analysis.footprint import GROWTH_NOISE, copy_on_write, trial_growth
from loadtune.engine.trial.setup import Timing
from loadtune.model.config import TrialConfig
from loadtune.model.results import by_config
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.spec import SpecRef
from loadtune.engine.stages import run_profile
from conftest import SPECS, quick_request

pytestmark = pytest.mark.slow  # every test here runs a profile or trials in their own processes


def profile(spec: str, batch_size: int = 32):
    costs, why = run_profile(SpecRef.parse(SPECS / spec), quick_request(TrialConfig(batch_size, 0)))
    assert costs is not None, why
    return costs


def bound_of(costs, max_workers: int = 4):
    return compute_bound(BatchCosts.of(costs), usable_cores=2, max_workers=max_workers)


def test_cpu_work_is_attributed_to_the_dataset_cpu():
    costs = profile("bound_by.py:cpu")
    assert costs.fetch_wall.mean < 2 * costs.fetch_cpu.mean  # computing, not waiting
    assert costs.fetch_cpu.mean * costs.batch_size > 3 * costs.collate.mean
    assert len(costs.fetch_cpu.seconds) >= 5 and costs.fetch_cpu.estimate is not None  # repeated: carries its noise
    assert costs.handoff is not None and costs.receive is not None  # a real worker handed batches over
    assert costs.consumer is None  # no step and no accelerator: nothing consumes the batch
    assert bound_of(costs).stage == DATASET_CPU


def test_sleep_is_attributed_to_waiting_and_more_workers_lift_it():
    costs = profile("bound_by.py:waiting")
    assert costs.fetch_wall.mean > 3 * costs.fetch_cpu.mean
    few, many = bound_of(costs, max_workers=4), bound_of(costs, max_workers=64)
    assert few.stage == IO_WAIT and few.ceiling.name == "workers"
    assert few.workers_needed is not None and few.workers_needed > 4
    assert many.rate > few.rate


def test_large_tensors_are_bound_by_moving_them():
    costs = profile("bound_by.py:large")
    assert costs.collate.mean > 2 * costs.batch_size * costs.fetch_cpu.mean  # moving 19 MiB, not fetching views, is the cost
    assert costs.batch_bytes == 32 * 3 * 224 * 224 * 4
    assert bound_of(costs).stage in (COLLATION, HANDOFF, MAIN)


def test_a_slow_step_is_the_bound():
    costs = profile("slow_step.py")
    assert costs.consumer is not None and costs.consumer_received is not None
    assert costs.consumer.mean > 3 * (costs.collate.mean + costs.batch_size * costs.fetch_wall.mean)  # the step, 20 ms a batch, dominates
    assert bound_of(costs).stage == STEP


def test_iterable_dataset_is_profiled_from_its_stream():
    costs = profile("unsharded_iterable.py", batch_size=16)
    assert sum(costs.fetch_cpu.units) >= 5 * 16


def test_a_failing_dataset_fails_the_profile_with_its_own_error():
    costs, why = run_profile(SpecRef.parse(SPECS / "failing.py"), quick_request(TrialConfig(256, 0)))
    assert costs is None and "corrupt record at index 77" in why


def trials_of(factory: str):
    """PyTorch's defaults and two persistent workers, over whole epochs (each worker touches its share)."""
    out = []
    for config in (TrialConfig(16, 0), TrialConfig(16, 2, False, 2, True, "none")):
        request = quick_request(config, Timing(warmup_s=0.2, block_s=0.2, blocks=3, max_s=30))
        trial = run_trial(SpecRef.parse(f"{SPECS / 'cow.py'}:{factory}"), request)
        assert trial.ok, trial.error
        out.append(trial)
    return out


def test_copy_on_write_growth_is_detected_for_python_objects_not_for_a_tensor():
    objects = trials_of("python_objects")
    grown = trial_growth(objects[1])
    assert grown is not None and grown.bytes > 2 * GROWTH_NOISE
    note = copy_on_write(by_config(objects))
    assert note is not None and "copy-on-write" in note and "numpy arrays or torch tensors" in note

    tensor = trials_of("tensor")
    assert trial_growth(tensor[1]).bytes < grown.bytes / 2  # a forked worker's own pages may grow, the data's do not
    assert copy_on_write(by_config(tensor)) is None
    assert tensor[1].memory.shm_peak_bytes > 0  # batches in flight between the workers and the main process


def test_the_profile_runs_as_the_pick_starts_with_its_environment():
    """A pick that keeps its batches in the heap is profiled in the heap: with glibc's defaults its
    collation would be timed with every 96 MiB batch faulted in anew, a bound of 414 samples/s beside the
    pick's 1,500. The profile is PyTorch's defaults at the pick's batch size otherwise."""
    from loadtune.engine.scan import profile_config
    pick = TrialConfig(32, 0, heap=256 * 2**20, start_method="forkserver")
    config = profile_config(pick, "cpu")
    assert config.heap == pick.heap and config.environment == pick.environment and config.start_method == "forkserver"
    assert config.num_workers == 0 and config.batch_size == 32 and not config.pin_memory
    assert profile_config(TrialConfig(64, 4, prefetch_factor=2), "cpu").environment == {}
