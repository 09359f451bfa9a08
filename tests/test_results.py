"""The scan result model and its JSON file (loadtune/model/results.py, trial.py, scanfile.py): saved
whole or not at all, read back unchanged, and anything else refused with a clear error."""

from __future__ import annotations

import json
import os

import pytest
from conftest import FIXTURES

from loadtune.engine import machine
from loadtune.model.config import Skip, TrialConfig
from loadtune.analysis.recommend import recommend
from loadtune.model.settings import ScanOptions, ScanSettings
from loadtune.model.results import Recommendation, ScanResult, SpecInfo
from loadtune.model.scanfile import SCHEMA, SCHEMA_VERSION, ResultError, check_writable
from loadtune.model.trial import Block, MemoryUsage, Trial, TrialError


@pytest.fixture(scope="module")
def machine_info():
    return machine.collect()


def make_result(machine_info) -> ScanResult:
    base = TrialConfig(32, 0, False, None, False, "none")
    fast = TrialConfig(32, 2, False, 4, True, "none")
    bad = TrialConfig(32, 8, False, 2, False, "none")
    trials = [
        Trial(
            config=base,
            status="ok",
            reference=True,
            startup_s=0.01,
            warmup=Block(samples=320, batches=10, seconds=1.0, epochs=0),
            blocks=[Block(320, 10, 0.5, 0), Block(352, 11, 0.55, 1), Block(288, 9, 0.5, 0)],
            memory=MemoryUsage(peak_bytes=150 * 2**20, peak_processes=1, method="pss", samples=[(0.0, 100), (0.5, 150 * 2**20)]),
            wall_s=2.5,
        ),
        Trial(
            config=fast,
            status="ok",
            startup_s=0.4,
            warmup=Block(samples=640, batches=20, seconds=1.0),
            blocks=[Block(1600, 50, 0.5, 1), Block(1664, 52, 0.5, 0), Block(1536, 48, 0.5, 1)],
            memory=MemoryUsage(peak_bytes=420 * 2**20, peak_processes=3, method="pss", samples=[(0.1, 1), (0.2, 2)]),
            wall_s=3.1,
        ),
        Trial(
            config=bad,
            status="failed",
            error=TrialError(
                kind="exception",
                message="index 17 out of range",
                exception_type="IndexError",
                traceback="Traceback ...\nIndexError: index 17 out of range\n",
                log_tail="some log",
            ),
            wall_s=0.7,
        ),
    ]
    rec = recommend(trials)
    assert rec is not None and rec.config == fast
    return ScanResult(
        spec=SpecInfo(
            path="/data/spec.py",
            factory="dataset",
            sha256="ab" * 32,
            dataset_type="Squares",
            length=512,
            iterable=False,
            has_step=True,
            has_collate_fn=False,
        ),
        machine=machine_info,
        settings=ScanSettings(ScanOptions(blocks=3, workers=[0, 2, 8]), device="cpu", grid_size=2, references=[base.key]),
        trials=trials,
        skipped=[Skip("pin_memory=True", "no accelerator")],
        recommendation=rec,
        state="complete",
    )


def test_round_trip(tmp_path, machine_info):
    result = make_result(machine_info)
    path = tmp_path / "loadtune.json"
    result.save(path)
    loaded = ScanResult.load(path)
    assert loaded.to_dict() == result.to_dict()
    # structure survives, not just the dict
    assert loaded.trials[0].config == result.trials[0].config
    assert loaded.trials[2].error == result.trials[2].error
    assert loaded.trials[0].memory.samples == [(0.0, 100), (0.5, 150 * 2**20)]
    assert loaded.recommendation == result.recommendation
    assert loaded.machine == result.machine
    assert loaded.skipped == result.skipped
    assert [t.ok for t in loaded.trials] == [True, True, False]
    assert loaded.trials[1].estimate == result.trials[1].estimate
    assert loaded.config_result(result.trials[1].config).trials == [loaded.trials[1]]
    assert loaded.ok_trials == loaded.trials[:2]


def test_round_trip_without_recommendation(tmp_path, machine_info):
    result = make_result(machine_info)
    result.recommendation = None
    result.trials = [result.trials[2]]
    result.state = "running"
    path = tmp_path / "partial.json"
    result.save(path)
    loaded = ScanResult.load(path)
    assert loaded.recommendation is None
    assert loaded.to_dict() == result.to_dict()


def test_recommendation_with_no_baseline_round_trips():
    rec = Recommendation(
        config=TrialConfig(8, 2, False, 2),
        best=TrialConfig(8, 4, False, 2),
        tied=[TrialConfig(8, 2, False, 2), TrialConfig(8, 4, False, 2)],
        baseline=None,
        speedup=None,
        speedup_low=None,
        speedup_high=None,
        reason="x",
    )
    assert Recommendation.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec


def test_file_is_strict_json_with_schema(tmp_path, machine_info):
    path = tmp_path / "out.json"
    make_result(machine_info).save(path)

    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    data = json.loads(path.read_text(), parse_constant=refuse)
    assert data["schema"] == SCHEMA == "loadtune/scan"
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["state"] == "complete"
    assert len(data["trials"]) == 3
    # raw blocks are kept, with the derived estimate alongside for readers
    assert data["trials"][0]["blocks"][1] == {"samples": 352, "batches": 11, "seconds": 0.55, "epochs": 1}
    assert data["trials"][1]["samples_per_s"]["median"] == pytest.approx(3200.0)
    assert data["trials"][2]["samples_per_s"] is None
    assert data["recommendation"]["config"]["num_workers"] == 2


def test_loaded_estimate_recomputed_from_blocks(tmp_path, machine_info):
    path = tmp_path / "out.json"
    make_result(machine_info).save(path)
    data = json.loads(path.read_text())
    data["trials"][1]["samples_per_s"]["median"] = 1.0  # a stale derived figure is not trusted
    path.write_text(json.dumps(data))
    assert ScanResult.load(path).trials[1].estimate.median == pytest.approx(3200.0)


def test_save_overwrites_and_leaves_no_temp_files(tmp_path, machine_info):
    result = make_result(machine_info)
    path = tmp_path / "loadtune.json"
    result.save(path)
    result.state = "interrupted"
    result.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loadtune.json"]
    assert ScanResult.load(path).state == "interrupted"


def test_failed_save_keeps_old_file_and_leaves_no_temp(tmp_path, machine_info):
    result = make_result(machine_info)
    path = tmp_path / "loadtune.json"
    result.save(path)
    before = path.read_text()
    result.settings.options.seed = object()  # not JSON
    with pytest.raises(TypeError):
        result.save(path)
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loadtune.json"]


def test_saved_file_mode_follows_umask(tmp_path, machine_info):
    old = os.umask(0o022)
    try:
        path = tmp_path / "loadtune.json"
        make_result(machine_info).save(path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


# ---------------------------------------------------------------- load errors


def test_load_missing_file(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(ResultError) as info:
        ScanResult.load(path)
    assert str(path) in str(info.value) and "cannot read" in str(info.value)


def test_load_not_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"schema": "loadtune/scan",\n  oops\n}')
    with pytest.raises(ResultError) as info:
        ScanResult.load(path)
    msg = str(info.value)
    assert str(path) in msg and "not valid JSON" in msg and "line 2" in msg


def test_load_binary_file(tmp_path):
    path = tmp_path / "binary.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00")
    with pytest.raises(ResultError) as info:
        ScanResult.load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("payload", [{"name": "package.json", "version": "1.0"}, [1, 2, 3], "loadtune/scan", None])
def test_load_foreign_json(tmp_path, payload):
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(ResultError) as info:
        ScanResult.load(path)
    msg = str(info.value)
    assert str(path) in msg and "not a loadtune scan result" in msg


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0, "1", None])
def test_load_wrong_schema_version(tmp_path, machine_info, version):
    path = tmp_path / "old.json"
    data = make_result(machine_info).to_dict()
    data["schema_version"] = version
    path.write_text(json.dumps(data))
    with pytest.raises(ResultError) as info:
        ScanResult.load(path)
    msg = str(info.value)
    assert str(path) in msg and "schema version" in msg and repr(version) in msg


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d.pop("trials"),
        lambda d: d["trials"][0].pop("config"),
        lambda d: d["trials"][0]["config"].pop("num_workers"),  # a key it does not know is ignored, a missing one is not
        lambda d: d.update(spec="not a dict"),
        lambda d: d["trials"].append(7),
        lambda d: d["machine"].pop("usable_cores"),
        lambda d: d.update(recommendation={"config": None}),
        lambda d: d.update(settings=None),
        lambda d: d.update(settings="options"),
        lambda d: d["trials"][0]["blocks"][0].update(seconds="x"),
        lambda d: d["trials"][0]["blocks"][0].update(samples=None),
        lambda d: d["trials"][0].update(blocks="not a list"),
    ],
)
def test_load_malformed_result(tmp_path, machine_info, damage):
    path = tmp_path / "broken.json"
    data = make_result(machine_info).to_dict()
    damage(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ResultError) as info:
        ScanResult.load(path)
    assert str(path) in str(info.value) and "malformed" in str(info.value)


# ---------------------------------------------------------------- check_writable


def test_check_writable_accepts_new_file(tmp_path):
    check_writable(tmp_path / "new.json")
    assert list(tmp_path.iterdir()) == []  # the probe is removed


def test_check_writable_missing_folder(tmp_path):
    path = tmp_path / "missing" / "out.json"
    with pytest.raises(ResultError) as info:
        check_writable(path)
    assert "does not exist" in str(info.value)
    assert not (tmp_path / "missing").exists()


def test_check_writable_directory(tmp_path):
    with pytest.raises(ResultError) as info:
        check_writable(tmp_path)
    assert "is a folder" in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_check_writable_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(ResultError, match="cannot write"):
            check_writable(ro / "out.json")
    finally:
        ro.chmod(0o755)


# ---------------------------------------------------------------- model


def test_block_rate():
    assert Block(samples=300, batches=3, seconds=1.5).rate == 200.0
    assert Block(samples=300, batches=3, seconds=0.0).rate == 0.0


def test_trial_ok_and_estimate():
    t = Trial(config=TrialConfig(8, 0), status="ok", blocks=[Block(100, 1, 1.0), Block(300, 3, 1.0), Block(200, 2, 1.0)])
    assert t.ok and t.estimate.median == 200.0
    assert not Trial(config=TrialConfig(8, 0), status="ok").ok
    f = Trial(config=TrialConfig(8, 0), status="failed", blocks=[Block(100, 1, 1.0)])
    assert not f.ok and f.estimate is None


# ---------------------------------------------------------------- readers ignore keys they do not know


def with_extra_keys(value):
    """``value`` (JSON) with a key no loadtune writes added to every object, at every level."""
    if isinstance(value, dict):
        return {**{k: with_extra_keys(v) for k, v in value.items()}, "added_by_a_newer_loadtune": [1, {"x": 2}]}
    if isinstance(value, list):
        return [with_extra_keys(v) for v in value]
    return value


def without_extra_keys(value):
    if isinstance(value, dict):
        return {k: without_extra_keys(v) for k, v in value.items() if k != "added_by_a_newer_loadtune"}
    if isinstance(value, list):
        return [without_extra_keys(v) for v in value]
    return value


def everything_saved() -> ScanResult:
    """A result with every kind of object a scan file holds: GPUs, ranks, load, stages, a reference, a step."""
    from loadtune.model.batch import BatchInfo, BatchSizes
    from loadtune.model.machine import GPUInfo
    from loadtune.model.paired import CalibrationShape, PairedReference, PairedRound
    from loadtune.model.load import LoadReading
    from loadtune.model.stages import StageCost, StageCosts
    from loadtune.model.trial import GPUUsage, RankFigures, TrialError

    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    result.machine.gpus = [GPUInfo(0, "H100", 80 * 2**30)]
    result.settings.step = {"ms": 5.0, "device_type": "cpu", "size": 64, "iterations": 3, "calibrated_ms": 5.1}
    trial = result.trials[0]
    trial.gpu = GPUUsage(1, 2, 3, utilisation=[(0.5, 40)])
    trial.batch, trial.batch_sizes = BatchInfo(4096, [("float32", [31, 32])], 31), BatchSizes(30.7, 2, 212, True)
    trial.load = LoadReading(2.0, 2, 2.0, 1.0, [1.0, 1.0], 2.0, 0.01, 2, 0.001)
    trial.ranks = [RankFigures(0, 0, 0.1, Block(8, 1, 0.1), [Block(8, 1, 0.1)], 10, GPUUsage(1, 2))]
    result.trials.append(fake_failed(trial.config, TrialError("exception", "bad record", "ValueError", index=3)))
    cost = StageCost([0.1, 0.1], [10, 10])
    result.stages = StageCosts(32, "cpu", cost, cost, cost, consumer=cost)
    shape = CalibrationShape(10, 0.0, 64, 1e-6, "trial CPU", 3, 31)
    result.reference = PairedReference(trial.config, shape, [PairedRound(100.0, 90.0, True, 3, 1.1)], "2026-01-01T00:00:00+00:00",
                                       result.machine, trial.config)
    return result


def fake_failed(config, error):
    from loadtune.model.trial import Trial

    return Trial(config, "failed", error=error)


def test_a_file_with_keys_of_a_newer_loadtune_at_every_level_reads_as_without_them():
    """The schema promises tolerant readers: every object read back from JSON ignores keys it does not know."""
    data = everything_saved().to_dict()
    extra = with_extra_keys(json.loads(json.dumps(data)))
    assert extra["reference"]["rounds"][0]["added_by_a_newer_loadtune"]  # the keys are there, at every level
    read = ScanResult.from_dict(extra)
    assert without_extra_keys(read.to_dict()) == without_extra_keys(ScanResult.from_dict(data).to_dict())
    assert read.reference.rounds[0].block_ratio == 1.1 and read.trials[0].batch_sizes.mean == 30.7


def test_varying_batches_label_every_config_by_the_mean_of_the_batches_timed():
    from loadtune.model.batch import BatchSizes

    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    config = result.trials[0].config
    assert result.varying_batches is None and result.label(config) == config.label()
    for t, sizes in zip(result.ok_trials[:2], (BatchSizes(20.0, 16, 48, True), BatchSizes(40.0, 16, 40, False))):
        t.batch_sizes = sizes
    batches = [sum(b.batches for b in t.blocks) for t in result.ok_trials[:2]]
    pooled = result.varying_batches
    assert pooled.mean == pytest.approx((20 * batches[0] + 40 * batches[1]) / sum(batches))  # over every batch timed
    assert (pooled.smallest, pooled.largest, pooled.varying) == (16, 48, True)
    assert result.label(config).endswith(f"bs{pooled.label}") and pooled.label.startswith("~")
    saved = result.to_dict()["batch_sizes"]
    assert saved == {"mean": pooled.mean, "smallest": 16, "largest": 48, "varying": True}
    assert BatchSizes(7.25, 2, 9, True).label == "~7.2" and BatchSizes(30.7, 2, 212, True).label == "~31"
