"""Several ranks per node: ranks launched by torch.distributed's elastic agent with gloo on
the CPU, each over its own shard; per-rank figures; a failing rank named; torchrun detected."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import QUICK_TIMING, SPECS, live_group_members, quick_request, run_cli

from loadtune.analysis.recommend import recommend, snippet
from loadtune.engine.distributed import layout as distributed
from loadtune.engine.distributed.agent import free_port, with_ranks
from loadtune.engine.distributed.layout import (
    adopt_launcher,
    gather_nodes,
    launcher_env,
    node_json_path,
)
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.measure import LoaderOptions, Timing
from loadtune.engine.trial.protocol import RankSetup, TrialRequest
from loadtune.model.config import TrialConfig
from loadtune.model.results import Block, RankFigures, ScanResult, Trial

TWO = RankSetup(nproc_per_node=2, window_s=0.3)


@pytest.fixture
def ranked(tmp_path):
    """The recording spec copied into a folder of its own: each rank's fetched indices land there."""
    shutil.copy(SPECS / "ranked.py", tmp_path / "ranked.py")
    yield tmp_path
    sys.modules.pop("ranked", None)  # imported in this process by a scan: the next copy is another file


def fetched(folder: Path) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for path in folder.glob("fetched-*.txt"):
        rank = path.name.split("-")[1]
        out.setdefault(rank, set()).update(int(line) for line in path.read_text().split())
    return out


def run_ranks_trial(folder: Path, factory: str, config: TrialConfig, setup: RankSetup = TWO, pids=None) -> Trial:
    request = with_ranks(quick_request(config), setup)
    on_event = (lambda kind, payload: pids.append(payload) if kind == "process" else None) if pids is not None else None
    return run_trial(SpecRef.parse(f"{folder / 'ranked.py'}:{factory}"), request, on_event)


@pytest.mark.slow
def test_two_ranks_measure_disjoint_shards_that_cover_the_dataset(ranked):
    trial = run_ranks_trial(ranked, "dataset", TrialConfig(batch_size=8, num_workers=1, prefetch_factor=2, persistent_workers=True))
    assert trial.status == "ok", trial.error
    assert [r.rank for r in trial.ranks] == [0, 1]  # figures from both ranks
    for rank in trial.ranks:
        assert rank.blocks and rank.startup_s > 0 and rank.warmup is not None
        assert rank.memory_bytes > 10 * 2**20
    slowest = trial.slowest_rank
    assert trial.blocks == slowest.blocks  # the trial's own figure is the slowest rank's pace ...
    assert trial.estimate.median == pytest.approx(2 * slowest.estimate.median)  # ... times the ranks
    assert trial.startup_s == max(r.startup_s for r in trial.ranks)
    assert trial.aggregate_rate == pytest.approx(sum(r.window_rate for r in trial.ranks))
    assert trial.memory.peak_processes >= 5  # the agent, two ranks, a worker each
    seen = fetched(ranked)
    assert set(seen) == {"0", "1"}
    assert not seen["0"] & seen["1"]  # DistributedSampler: no sample loaded by both ranks
    assert seen["0"] | seen["1"] == set(range(64))  # and none left out
    window = [sum(b.seconds for b in r.blocks) for r in trial.ranks]
    assert max(window) - min(window) < TWO.window_s  # the ranks measured the same window, give or take a batch


@pytest.mark.slow
def test_iterable_dataset_sees_its_rank_and_shards_itself(ranked):
    trial = run_ranks_trial(ranked, "stream", TrialConfig(batch_size=4, num_workers=2, prefetch_factor=2, persistent_workers=True))
    assert trial.status == "ok", trial.error
    seen = fetched(ranked)
    assert set(seen) == {"0", "1"}  # RANK as the launcher sets it, in the workers too
    assert not seen["0"] & seen["1"] and seen["0"] | seen["1"] == set(range(64))


@pytest.mark.slow
def test_a_rank_whose_dataset_raises_is_named_and_the_others_end(ranked):
    pids: list[int] = []
    trial = run_ranks_trial(ranked, "failing_rank1", TrialConfig(batch_size=8, num_workers=1, prefetch_factor=2), pids=pids)
    assert trial.status == "failed"
    assert trial.error.rank == 1 and trial.error.kind == "exception"
    assert trial.error.message.startswith("rank 1: the dataset raised ValueError at index 7")
    assert not live_group_members(pids[0])  # agent, ranks and workers all gone


@pytest.mark.slow
def test_a_rank_killed_by_a_signal_is_named(ranked):
    trial = run_ranks_trial(ranked, "killed_rank1", TrialConfig(batch_size=8, num_workers=0))
    assert trial.status == "failed"
    assert trial.error.rank == 1 and trial.error.kind == "killed"
    assert "rank 1" in trial.error.message and "SIGKILL" in trial.error.message


@pytest.mark.slow
def test_a_rank_that_hangs_is_named_and_no_rank_waits_past_the_timeout(ranked):
    pids: list[int] = []
    request = with_ranks(quick_request(TrialConfig(batch_size=8, num_workers=0), Timing(0.1, 0.1, 3, max_s=19), 24.0), TWO)
    trial = run_trial(SpecRef.parse(f"{ranked / 'ranked.py'}:hanging_rank1"), request,
                      lambda kind, payload: pids.append(payload) if kind == "process" else None)
    assert trial.status == "failed" and trial.error.kind == "peer" and trial.error.rank == 1, trial.error
    assert "rank 1 never reached the warmup barrier" in trial.error.message  # it hung in its warm-up; rank 0 gave up
    assert trial.wall_s < 24  # the barrier's timeout, not the runner's kill, ended it
    assert not live_group_members(pids[0])


@pytest.mark.slow
def test_scan_with_ranks_searches_per_rank_and_goes_on_after_a_failing_config(ranked, tmp_path):
    import loadtune

    out = tmp_path / "scan.json"
    result = loadtune.scan(f"{ranked / 'ranked.py'}:failing_rank1_in_workers", json_path=out, nproc_per_node=2, workers=[0, 1], prefetch=[2],
                           persistent=False, shuffle=False, batch_size=8, warmup=0.1, block_time=0.1, blocks=3,
                           timeout=40, confirm=0)
    assert result.settings.ranks["nproc_per_node"] == 2 and result.settings.ranks["backend"] == "gloo"
    assert all(len(t.ranks) == 2 for t in result.ok_trials) and not result.calibration[0].ranks  # the yardstick runs alone
    failed = [t for t in result.trials if not t.ok]
    assert [t.config.num_workers for t in failed] == [1] and failed[0].error.rank == 1
    assert result.recommendation.config.num_workers == 0  # the scan went on past the failing config
    loaded = ScanResult.load(out)
    assert [t.error.rank if t.error else None for t in loaded.trials] == [t.error.rank if t.error else None for t in result.trials]
    ok = next(c for c in loaded.configs if c.ok)
    assert ok.estimate == result.config_result(ok.config).estimate
    assert ok.aggregate_rate == result.config_result(ok.config).aggregate_rate > 0


def test_default_worker_grid_shares_the_cores_between_ranks(ranked, monkeypatch):
    from dataclasses import replace

    from loadtune.engine import machine
    from loadtune.engine.scan import prepare

    real = machine.collect
    monkeypatch.setattr(machine, "collect", lambda: replace(real(), usable_cores=8))
    alone = prepare(str(ranked / "ranked.py"))
    four = prepare(str(ranked / "ranked.py"), nproc_per_node=4)
    assert max(alone.strategy.space.workers) == 16  # 2 x 8 cores
    assert max(four.strategy.space.workers) == 4  # 2 x (8 cores / 4 ranks)
    assert four.strategy.max_workers == alone.strategy.max_workers // 4


def test_a_request_with_ranks_runs_the_agent_and_one_without_them_a_single_loader():
    single = quick_request(TrialConfig(8, 0))
    with pytest.raises(ValueError, match="with_ranks"):
        TrialRequest(TrialConfig(8, 0), "cpu", QUICK_TIMING, LoaderOptions(shuffle=False), 60.0, "fork", ranks=TWO)
    assert with_ranks(single, TWO).entry is not None and with_ranks(with_ranks(single, TWO), None) == single


@pytest.mark.parametrize("options, words", [
    ({"nproc_per_node": 0}, "nproc_per_node must be a whole number >= 1"),
    ({"nnodes": 2, "node_rank": 2}, "node_rank 2 is not below nnodes 2"),
    ({"nproc_per_node": 2, "device": "cuda:1"}, "each rank uses the GPU of its local rank"),
])
def test_impossible_layouts_are_refused_before_any_work(ranked, options, words):
    from loadtune.engine.scan import OptionsError, prepare

    with pytest.raises(OptionsError, match=words):
        prepare(str(ranked / "ranked.py"), **options)


def rank_trial(config: TrialConfig, rates: list[list[float]]) -> Trial:
    trial = Trial(config=config, status="ok")
    for rank, per_block in enumerate(rates):
        trial.ranks.append(RankFigures(rank, rank, 0.1, None, [Block(int(r), 1, 1.0) for r in per_block]))
    trial.settle_ranks()
    return trial


def test_the_recommendation_ranks_by_the_slowest_rank_not_the_sum():
    even = rank_trial(TrialConfig(8, 1, prefetch_factor=2), [[100, 101, 99, 100], [100, 100, 101, 99]])
    lopsided = rank_trial(TrialConfig(8, 2, prefetch_factor=2), [[300, 301, 299, 300], [60, 61, 59, 60]])
    assert lopsided.aggregate_rate > even.aggregate_rate
    assert even.estimate.median == 200 and lopsided.estimate.median == 120  # 2 ranks x the slowest
    assert recommend([even, lopsided]).config == even.config


def test_old_results_without_ranks_still_load(tmp_path):
    trial = rank_trial(TrialConfig(8, 1, prefetch_factor=2), [[100, 100], [50, 50]])
    data = trial.to_dict()
    assert Trial.from_dict(data).estimate == trial.estimate
    del data["ranks"]
    old = Trial.from_dict(data)
    assert old.ranks == [] and old.estimate.median == 50  # an old file: its blocks, as before


def test_snippet_for_ranks_uses_a_distributed_sampler():
    code = snippet(TrialConfig(32, 2, prefetch_factor=2), shuffle=True, drop_last=False, has_collate_fn=False, distributed=True)
    assert "sampler=DistributedSampler(dataset)," in code and "shuffle=True" not in code


def test_launcher_environment_is_detected():
    env = {"TORCHELASTIC_RUN_ID": "x", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8", "RANK": "5",
           "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
           "TORCHELASTIC_USE_AGENT_STORE": "True"}
    got = launcher_env(env)
    assert (got.local_rank, got.local_world_size, got.node_rank, got.nnodes, got.store) == (1, 4, 1, 2, "node0:29500")
    # without the agent sharing its store nobody listens at MASTER_ADDR:MASTER_PORT: not taken for a meeting point
    assert launcher_env({**env, "TORCHELASTIC_USE_AGENT_STORE": "False"}).store is None
    assert launcher_env({}) is None
    with pytest.raises(distributed.DistributedError, match="incomplete"):
        launcher_env({"TORCHELASTIC_RUN_ID": "x"})


def test_under_torchrun_local_rank_0_scans_and_the_others_stand_aside():
    base = {"TORCHELASTIC_RUN_ID": "x", "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2", "GROUP_RANK": "0",
            "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    other = {**base, "LOCAL_RANK": "1", "RANK": "1"}
    assert "stands aside" in adopt_launcher({}, other).stand_aside
    first, overrides = {**base, "LOCAL_RANK": "0", "RANK": "0"}, {"nproc_per_node": None}
    adopted = adopt_launcher(overrides, first)
    assert adopted.launched and adopted.stand_aside is None
    assert overrides == {"nproc_per_node": 2, "nnodes": 1, "node_rank": 0}
    assert not any(k in first for k in ("LOCAL_RANK", "MASTER_PORT", "TORCHELASTIC_RUN_ID"))  # no leak into the trials
    with pytest.raises(distributed.DistributedError, match="contradicts the launcher"):
        adopt_launcher({"nproc_per_node": 3}, {**base, "LOCAL_RANK": "0"})


def test_nodes_meet_at_the_endpoint_and_node_0_gets_every_summary():
    endpoint = f"127.0.0.1:{free_port()}"
    got = {}
    node1 = threading.Thread(target=lambda: got.setdefault(1, gather_nodes(endpoint, 2, 1, {"node_rank": 1}, timeout_s=30)))
    node1.start()
    got[0] = gather_nodes(endpoint, 2, 0, {"node_rank": 0}, timeout_s=30)
    node1.join(30)
    assert got == {0: [{"node_rank": 0}, {"node_rank": 1}], 1: None}
    assert node_json_path(Path("out/loadtune.json"), 2, 1) == Path("out/loadtune.node1.json")
    assert node_json_path(Path("loadtune.json"), 1, 0) == Path("loadtune.json")


@pytest.mark.slow
def test_torchrun_runs_the_scan_once_with_its_ranks_and_check_measures_its_baseline_on_as_many(ranked, tmp_path):
    out, summary = tmp_path / "run.json", tmp_path / "check.json"
    env = {**os.environ, "COLUMNS": "120", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
         "--log-dir", tmp_path / "torchrun",  # torchrun's own files: not left in /tmp
         "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "-m", "loadtune", "scan", ranked / "ranked.py",
         "--workers", "0", "--batch-size", "8", "--no-shuffle", "--warmup", "0.1", "--block-time", "0.1", "--blocks", "3",
         "--timeout", "40", "--confirm", "0", "--json", out],
        capture_output=True, text=True, env=env, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stands aside" in proc.stderr and "on 2 ranks" in proc.stdout
    data = json.loads(out.read_text())
    assert data["settings"]["options"]["nproc_per_node"] == 2
    assert [len(t["ranks"]) for t in data["trials"]] == [2]

    check = run_cli("check", ranked / "ranked.py", "--baseline", out, "--rounds", "2", "--tolerance", "90%", "--json", summary)
    assert check.returncode in (0, 1), check.stderr[-3000:]  # measured and judged (speed is not asserted here)
    measured = [t for t in json.loads(summary.read_text())["trials"] if t["ranks"]]
    assert measured and all(len(t["ranks"]) == 2 for t in measured)  # the baseline's 2 ranks, not one loader
