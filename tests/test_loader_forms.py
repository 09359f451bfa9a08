"""The whole loader as the spec (docs/spec-file.md#the-whole-loader): the spec's own sampler or
batch_sampler and worker_init_fn, a loader factory, a finished DataLoader or DataModule, planned
(engine/plan.py) and measured in real trials (engine/trial/measure.py). Lightning, Hugging Face
datasets, torchdata and webdataset are optional: their tests are skipped where they are not installed."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import QUICK, SPECS, flat, quick_request, run_cli

from loadtune.engine.options import OptionsError
from loadtune.engine.plan import prepare
from loadtune.engine.spec import SpecError, SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.model.config import TrialConfig

FAST = {"warmup": 0.2, "block_time": 0.1, "blocks": 3, "timeout": 30.0}


def per_batch(trial) -> float:
    """Samples per batch over the timed blocks: what the trial counted, batch by batch."""
    return sum(b.samples for b in trial.blocks) / sum(b.batches for b in trial.blocks)


# ---------------------------------------------------------------- planning against the user's loader


def test_a_batch_sampler_fixes_the_batch_size_and_the_order():
    plan = prepare(str(SPECS / "bucketed.py"), workers=[0, 1])
    assert plan.options.batch_size == [4] and plan.options.shuffle is False
    skip = next(s for s in plan.result.skipped if s.what == "batch_size")
    assert "set by the spec's batch_sampler (4 per batch, its own): not searched" == skip.why
    assert plan.result.spec.loader_args == ["batch_sampler", "worker_init_fn"]


@pytest.mark.parametrize("options, fragment", [
    ({"shuffle": True}, "shuffle is set (--shuffle or the options), but the spec's batch_sampler decides it"),
    ({"drop_last": True}, "drop_last is set"),
    ({"batch_size": [8]}, "sets its own batch size (4), which loadtune cannot change"),
    ({"current": "batch_size=8"}, "current: batch_size=8, but the spec's batch_sampler batches 4 samples"),
    ({"nproc_per_node": 2}, "orders the samples itself, while several ranks need loadtune's DistributedSampler"),
])
def test_options_that_conflict_with_the_users_loader_are_refused(options, fragment):
    with pytest.raises(OptionsError) as info:
        prepare(str(SPECS / "bucketed.py"), workers=[0], **options)
    assert fragment in str(info.value)


def test_a_factory_that_drops_its_knobs_is_refused_before_any_trial(tmp_path):
    path = tmp_path / "dropping.py"
    path.write_text("from torch.utils.data import DataLoader\n\ndef loader(**knobs):\n    return DataLoader(list(range(8)))\n")
    with pytest.raises(SpecError, match=r"loader\(\) ignores the knobs it is given: called with num_workers=2"):
        prepare(str(path), workers=[0, 2])


def test_a_stream_that_batches_itself_needs_its_batch_size_declared(tmp_path):
    path = tmp_path / "stream.py"
    path.write_text(textwrap.dedent("""
        from torch.utils.data import DataLoader, IterableDataset

        class Batches(IterableDataset):
            def __iter__(self):
                return iter([[1, 2, 3]] * 4)

        def loader(**knobs):
            return DataLoader(Batches(), batch_size=None, **knobs)
        """))
    with pytest.raises(OptionsError, match=r"loader\(\*\*knobs\) batches by itself \(batch_size=None\)"):
        prepare(str(path), workers=[0])
    plan = prepare(str(path), workers=[0], batch_size=3)
    assert any(s.what == "batch_size" and "as declared" in s.why for s in plan.result.skipped)


def test_a_batch_sampler_without_a_batch_size_is_read_for_its_mean(tmp_path):
    """Batches cut to a token budget have no one size: the plan reads the mean off the sampler's
    indices (no sample loaded), and needs no number from the user."""
    path = tmp_path / "budget.py"
    path.write_text(textwrap.dedent("""
        from torch.utils.data import DataLoader

        class Budget:
            def __iter__(self):
                return iter([[0, 1, 2, 3, 4, 5], [6, 7], [8, 9, 10, 11]])

            def __len__(self):
                return 3

        def loader(**knobs):
            return DataLoader(list(range(12)), batch_sampler=Budget(), **knobs)
        """))
    plan = prepare(str(path), workers=[0])
    assert plan.options.batch_size == [4]
    skip = next(s for s in plan.result.skipped if s.what == "batch_size")
    assert skip.why == "set by loader(**knobs) (4 per batch, on average, read off its batch_sampler): not searched"


def test_loader_kwargs_from_python():
    from torch.utils.data import SubsetRandomSampler

    plan = prepare(list(range(20)), loader_kwargs={"sampler": SubsetRandomSampler(range(10))}, workers=[0])
    assert plan.result.spec.loader_args == ["sampler"] and plan.options.shuffle is False
    with pytest.raises(SpecError, match="loader_kwargs sets num_workers"):
        prepare(list(range(20)), loader_kwargs={"num_workers": 2})


# ---------------------------------------------------------------- measured in real trials


@pytest.mark.slow
def test_scan_with_the_specs_batch_sampler_worker_init_fn_and_current(tmp_path):
    """One CLI scan: the spec's batch_sampler batches (samples counted from its batches of 3 and 2, not
    from the 4 it claims, and labelled by their mean), its worker_init_fn runs in every worker (else
    every sample fails), and --current is measured, marked and the gain stated over it."""
    out = tmp_path / "scan.json"
    proc = run_cli("scan", SPECS / "bucketed.py", "--workers", "0,1", "--current", "num_workers=2", "--no-diagnose",
                   "--reference-rounds", "0", "--json", out, *QUICK)
    assert proc.returncode == 0, proc.stderr
    saved = json.loads(out.read_text())
    mine = TrialConfig(4, 2, prefetch_factor=2)
    assert saved["settings"]["current"] == mine.key
    trials = [t for t in saved["trials"] if t["status"] == "ok"]
    assert {t["config"]["num_workers"] for t in trials} == {0, 1, 2}  # theirs measured beside the search's
    for t in trials:  # the screening times whole epochs of 50 samples in 20 batches (3s, then 2s); the race's blocks cut them anywhere
        per_batch = sum(b["samples"] for b in t["blocks"]) / sum(b["batches"] for b in t["blocks"])
        assert 2 <= per_batch <= 3 if t.get("raced") else per_batch == pytest.approx(2.5)
    text = flat(proc.stdout)
    assert f"{mine.label('~2.5')} current" in text and "batch_size skipped: set by the spec's batch_sampler" in text
    assert saved["batch_sizes"] == {"mean": 2.5, "smallest": 2, "largest": 3, "varying": True}  # the screening's
    assert "bs~2.5: the loader's own batches, of varying size: 2.5 samples on average over the batches timed (2–3)" in text
    assert "set batch_size" not in text  # batches that vary by design are no mismatch
    assert "your current settings" in text and "**loader_kwargs(), # your batch_sampler, worker_init_fn" in text


@pytest.mark.slow
def test_lightning_datamodule_rebuilt_with_the_knobs():
    pytest.importorskip("lightning")
    plan = prepare(f"{SPECS / 'lightning_module.py'}:Numbers4", workers=[0, 2], **FAST)
    assert plan.options.current == {"num_workers": 1, "pin_memory": False, "prefetch_factor": 2, "persistent_workers": True,
                                    "batch_size": 4}  # its train_dataloader()'s own settings
    assert plan.result.spec.loader == "datamodule" and plan.result.spec.loader_name == "Numbers4"
    trial = run_trial(plan.source, quick_request(TrialConfig(6, 2, prefetch_factor=2)))
    assert trial.ok, trial.error
    assert per_batch(trial) == pytest.approx(6)  # the batch size changed; its sampler, collate (the step checks) kept


@pytest.mark.slow
def test_hugging_face_dataset_with_torch_format():
    pytest.importorskip("datasets")
    trial = run_trial(SpecRef(str(SPECS / "hf_table.py")), quick_request(TrialConfig(8, 1, prefetch_factor=2)))
    assert trial.ok, trial.error
    assert per_batch(trial) == pytest.approx(8) and trial.batch.tensors[0][1] == [8, 4]


@pytest.mark.slow
def test_stateful_dataloader_factory():
    pytest.importorskip("torchdata.stateful_dataloader")
    plan = prepare(str(SPECS / "stateful.py"), workers=[0, 1], batch_size=[5, 10], **FAST)  # its knobs are checked
    assert plan.result.spec.loader == "factory" and plan.result.spec.loader_name == "loader"
    trial = run_trial(plan.source, quick_request(TrialConfig(10, 1, prefetch_factor=2)))
    assert trial.ok, trial.error
    assert per_batch(trial) == pytest.approx(10)


@pytest.mark.slow
def test_prebatched_webdataset_counts_samples_from_its_batches():
    pytest.importorskip("webdataset")
    plan = prepare(str(SPECS / "prebatched.py"), workers=[0, 2], **FAST)
    assert plan.options.batch_size == [4]
    trial = run_trial(plan.source, quick_request(TrialConfig(4, 2, prefetch_factor=2)))
    assert trial.ok, trial.error
    assert per_batch(trial) == pytest.approx(20 / 6)  # each worker's shard: batches of 4, 4 and 2


@pytest.mark.slow
def test_torchvision_imagefolder_example():
    """Skipped where torchvision does not import beside this torch (PyPI had none for torch 2.13.0)."""
    pytest.importorskip("torchvision")
    examples = SPECS.parent.parent / "examples"
    trial = run_trial(SpecRef(str(examples / "imagefolder.py")), quick_request(TrialConfig(16, 1, prefetch_factor=2)))
    assert trial.ok, trial.error
    assert trial.batch.tensors[0][1] == [16, 3, 64, 64]


@pytest.mark.slow
def test_token_budget_example_scans_end_to_end(tmp_path):
    """examples/bucketed.py:token_budget, batches cut to a token budget: no batch size given, the configs
    labelled by the mean of the batches timed, the range saved, no mismatch warned of."""
    examples = SPECS.parent.parent / "examples"
    out = tmp_path / "scan.json"
    proc = run_cli("scan", f"{examples / 'bucketed.py'}:token_budget", "--workers", "0,1", "--prefetch", "2",
                   "--no-persistent", "--no-diagnose", "--json", out, *QUICK)
    assert proc.returncode == 0, proc.stderr
    saved = json.loads(out.read_text())
    sizes = saved["batch_sizes"]
    assert sizes["varying"] and sizes["smallest"] < sizes["mean"] < sizes["largest"]
    ok = [t for t in saved["trials"] if t["status"] == "ok"]
    assert any(t["raced"] for t in ok)  # a race's legs record how their batches varied too
    for t in ok:
        assert t["batch_sizes"]["varying"] and t["config"]["batch_size"] == 31  # the sampler's mean, read before the scan
        if not t["raced"]:  # a leg's tally also holds the batches taken untimed between its turns
            assert sum(b["samples"] for b in t["blocks"]) / sum(b["batches"] for b in t["blocks"]) == pytest.approx(t["batch_sizes"]["mean"])
    label = f"bs~{sizes['mean']:.0f}"
    text = flat(proc.stdout)
    assert f"w0 {label}" in text and f"{label}: the loader's own batches, of varying size" in text
    assert "set batch_size" not in text and "batches by itself" not in text
