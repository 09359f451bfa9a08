"""Several ranks per node: ranks launched by torch.distributed's elastic agent with gloo on
the CPU, each over its own shard; per-rank figures; a failing rank named; torchrun detected. Every
scan here is pinned to the CPU, so the file passes the same on 0, 1 or several GPUs; what only a
GPU node does (spawned ranks, each rank's own device and figures) is checked as far as the CPU can."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import QUICK_TIMING, SPECS, assert_check_agrees, live_group_members, quick_request, run_cli

from loadtune.analysis.recommend import recommend, snippet
from loadtune.engine.distributed import layout as distributed
from loadtune.engine.distributed.agent import free_port, with_ranks
from loadtune.engine.distributed.layout import (
    adopt_launcher,
    gather_nodes,
    launcher_env,
    node_path,
)
from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.engine.trial.protocol import RankSetup, TrialRequest
from loadtune.model.config import TrialConfig
from loadtune.model.results import ScanResult
from loadtune.model.trial import Block, RankFigures, Trial

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
    result = loadtune.scan(f"{ranked / 'ranked.py'}:failing_rank1_in_workers", json_path=out, nproc_per_node=2, device="cpu",
                           workers=[0, 1], prefetch=[2],
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
    from loadtune.engine.plan import prepare

    real = machine.collect
    monkeypatch.setattr(machine, "collect", lambda: replace(real(), usable_cores=8))
    alone = prepare(str(ranked / "ranked.py"), device="cpu")
    four = prepare(str(ranked / "ranked.py"), nproc_per_node=4, device="cpu")
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
    from loadtune.engine.options import OptionsError
    from loadtune.engine.plan import prepare

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
    assert node_path(Path("out/loadtune.json"), 2, 1) == Path("out/loadtune.node1.json")
    assert node_path(Path("loadtune.json"), 1, 0) == Path("loadtune.json")
    assert node_path(Path("pages/report.html"), 4, 3) == Path("pages/report.node3.html")  # --html and --plot alike


@pytest.mark.slow
def test_torchrun_runs_the_scan_once_with_its_ranks_and_check_measures_its_baseline_on_as_many(ranked, tmp_path):
    out, summary = tmp_path / "run.json", tmp_path / "check.json"
    env = {**os.environ, "COLUMNS": "120", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
         "--log-dir", tmp_path / "torchrun",  # torchrun's own files: not left in /tmp
         "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "-m", "loadtune", "scan", ranked / "ranked.py", "--device", "cpu",
         "--workers", "0", "--batch-size", "8", "--no-shuffle", "--warmup", "0.1", "--block-time", "0.1", "--blocks", "3",
         "--timeout", "40", "--confirm", "0", "--json", out],
        capture_output=True, text=True, env=env, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stands aside" in proc.stderr and "on 2 ranks" in proc.stdout
    data = json.loads(out.read_text())
    assert data["settings"]["options"]["nproc_per_node"] == 2
    assert [len(t["ranks"]) for t in data["trials"]] == [2]

    recorded = run_cli("check", ranked / "ranked.py", "--baseline", out, "--record", "--rounds", "3")  # on 2 ranks too
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    assert len(json.loads(out.read_text())["reference"]["rounds"]) == 3
    check = run_cli("check", ranked / "ranked.py", "--baseline", out, "--rounds", "2", "--tolerance", "90%", "--budget", "60",
                    "--json", summary)
    # measured and judged; speed is not asserted here, and back-to-back rounds of two ranks on two busy cores
    # can spread so that even 90% is undecided (exit 4: it happened once against a 2-round reference)
    assert check.returncode in (0, 1, 4), check.stderr[-3000:]
    result = json.loads(summary.read_text())
    assert_check_agrees(check.returncode, result)  # the verdict is the rounds' (back to back, pairs 0)
    assert result["rounds"] and all(r["config_rate"] and r["calibration_rate"] for r in result["rounds"])
    measured = [t for t in result["trials"] if t["ranks"]]
    assert measured and all(len(t["ranks"]) == 2 for t in measured)  # the baseline's 2 ranks, not one loader


# ---- ranks on a GPU node: what the CPU can check -------------------------------------------------


def test_ranks_on_cuda_are_never_forked_and_barriers_run_on_gloo():
    """The agent builds torch's LaunchConfig, which calls torch.cuda.is_available() (CUDA then fails in
    any child forked from the agent): on CUDA ranks are spawned, whether the spec came from a file or
    from objects in memory. The barriers are the only collective: one gloo group."""
    for device in ("cuda", "cuda:0"):
        setup = distributed.setup_for(2, 1, 0, device, 1.0)
        assert (setup.start_method, setup.backend) == ("spawn", "gloo")
    assert distributed.setup_for(2, 1, 0, "cpu", 1.0).start_method == "fork"
    assert distributed.setup_for(1, 1, 0, "cuda", 1.0) is None


def test_a_cuda_request_with_forked_ranks_is_refused_by_the_agent():
    from loadtune.engine.distributed.agent import run_ranks
    from loadtune.engine.trial.protocol import TrialRun

    request = with_ranks(replace_device(quick_request(TrialConfig(8, 0)), "cuda:0"), RankSetup(2, start_method="fork"))
    with pytest.raises(ValueError, match="must not be forked"):
        run_ranks(TrialRun(None, None, request, None, Path(".")))


def replace_device(request: TrialRequest, device: str) -> TrialRequest:
    from dataclasses import replace

    return replace(request, device=device)


class Sent(list):
    """The runner's end of the agent's pipe: what the relay passes on."""

    def send(self, message):
        self.append(message)


def test_the_relay_passes_every_figure_of_a_rank_on_and_the_trial_keeps_each_ranks_gpu():
    from loadtune.engine.distributed.agent import Relay
    from loadtune.engine.trial.protocol import Kind, Message, apply
    from loadtune.model.batch import BatchInfo
    from loadtune.model.trial import GPUUsage

    sent = Sent()
    relay = Relay([None, None], sent, RankSetup(2, nnodes=2, node_rank=1))
    small, big = GPUUsage(2**20, 2**21), GPUUsage(2**22, 2**23)
    for local, usage in ((0, small), (1, big)):
        for kind, payload in ((Kind.DEVICE, {"uuid": f"u{local}", "pci_bus_id": None, "index": local}),
                              (Kind.STARTUP, 0.5), (Kind.BATCH, BatchInfo(64, [])), (Kind.BLOCK, Block(8, 1, 0.1)),
                              (Kind.CPU, 0.25), (Kind.GPU_MEMORY, usage), (Kind.MEMORY, 123), (Kind.BARRIER, "start")):
            relay.handle(local, Message(kind, payload))
    kinds = [(m.rank, m.kind) for m in sent]
    for rank in (2, 3):  # node 1's ranks: global ranks 2 and 3
        for kind in (Kind.DEVICE, Kind.STARTUP, Kind.BATCH, Kind.BLOCK, Kind.CPU, Kind.GPU_MEMORY, Kind.MEMORY):
            assert (rank, kind) in kinds
    assert not any(m.kind is Kind.BARRIER for m in sent)  # the agent's own business
    trial = Trial(config=TrialConfig(8, 0), status="failed")
    for message in sent:
        apply(trial, message)
    assert [(r.rank, r.local_rank, r.gpu) for r in trial.ranks] == [(2, 0, small), (3, 1, big)]
    assert trial.gpu is big and trial.cpu_s == 0.5 and trial.batch == BatchInfo(64, [])
    assert [r.gpu for r in Trial.from_dict(trial.to_dict()).ranks] == [small, big]  # kept in the results file


def test_the_parent_samples_each_ranks_own_gpu(monkeypatch):
    """Each rank's DEVICE message starts a sampler of that rank's GPU (found by its UUID); its samples
    land in the rank's figures, and the fullest rank's are the trial's too."""
    import os
    import types

    from loadtune.engine.trial import nvml
    from loadtune.engine.trial.harness import Watch
    from loadtune.engine.trial.memory import MemorySampler
    from loadtune.engine.trial.protocol import Kind, Message, apply
    from loadtune.model.trial import GPUUsage

    fake = types.ModuleType("pynvml")
    fake.nvmlInit = fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetHandleByUUID = lambda name: {"GPU-u0": "h0", "GPU-u1": "h1"}[name]
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu={"h0": 30, "h1": 90}[h])
    nvml.reset()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    try:
        watch, trial = Watch(MemorySampler(os.getpid())), Trial(config=TrialConfig(8, 0), status="failed")
        for rank in (0, 1):
            watch.see(Message(Kind.DEVICE, {"uuid": f"u{rank}", "pci_bus_id": None, "index": rank}, rank, rank), None)
            apply(trial, Message(Kind.GPU_MEMORY, GPUUsage(2**20 * (rank + 1), 2**21 * (rank + 1)), rank, rank))
        watch.set_timed(True)
        watch.tick()
        watch.record(trial)
    finally:
        nvml.reset()
    assert [[u for _, u in r.gpu.utilisation] for r in trial.ranks] == [[30], [90]]
    assert [u for _, u in trial.gpu.utilisation] == [90]  # the trial's GPU is the fullest rank's


def test_each_ranks_copy_is_set_beside_its_own_gpus_peak():
    from loadtune.analysis.copyrate import copy_notes, device_peak
    from loadtune.model.results import ConfigResult

    def ranked_trial(slow_local_rank: int) -> Trial:
        trial = Trial(config=TrialConfig(8, 1, prefetch_factor=2), status="ok")
        for local in (0, 1):
            rate = 50 if local == slow_local_rank else 100
            trial.ranks.append(RankFigures(local, local, 0.1, None, [Block(rate, 1, 1.0, 0, None, 4 * 10**9)] * 3))
        trial.settle_ranks()
        return trial

    result = rank_result([ranked_trial(1)], peaks=[20.0, 8.0])
    config = ConfigResult(result.trials[0].config, result.trials)
    assert device_peak(result, config) == 8.0  # rank 1 is the slowest: its GPU, not cuda:0
    assert "50% of the slowest rank's own GPU's pinned host-to-device peak (8.0 GB/s" in copy_notes(result)[0]
    other = rank_result([ranked_trial(0)], peaks=[20.0, 8.0])
    assert device_peak(other, ConfigResult(other.trials[0].config, other.trials)) == 20.0
    assert device_peak(rank_result([ranked_trial(1)], peaks=None), config) == 20.0  # no per-rank peaks: the scan's device


def rank_result(trials: list[Trial], peaks: list[float] | None) -> ScanResult:
    from conftest import machine_info

    from loadtune.model.results import SpecInfo
    from loadtune.model.settings import ScanSettings

    result = ScanResult(spec=SpecInfo(None, None, None, "D", 64, False, False, False), machine=machine_info(),
                        settings=ScanSettings(device="cuda:0"), trials=trials, h2d_peak_gbps=20.0, h2d_peaks_gbps=peaks)
    result.recommendation = recommend(trials)
    return result


@pytest.mark.slow
def test_spawned_ranks_get_an_in_memory_dataset_pickled():
    """What a GPU node does with a dataset built in the caller's process: the ranks are spawned (fresh
    interpreters), so the objects reach them pickled. Here on the CPU, the same launch."""
    import torch
    from torch.utils.data import TensorDataset

    from loadtune.engine.spec import from_objects

    spec = from_objects(TensorDataset(torch.arange(64.0).unsqueeze(1), torch.arange(64)))
    request = with_ranks(quick_request(TrialConfig(batch_size=8, num_workers=0)), RankSetup(2, window_s=0.3, start_method="spawn"))
    trial = run_trial(spec, request)
    assert trial.status == "ok", trial.error
    assert [r.rank for r in trial.ranks] == [0, 1] and all(r.blocks for r in trial.ranks)
