"""The page cache as a state the scan sets: where a dataset's files lie, which state training reads
them in, which state a run read in (pure); dropping and reading through real files; trials that read
cold fetch their bytes from storage, warm ones next to none; a cold scan end to end."""

import json
import sys

import pytest

from conftest import QUICK, SPECS, run_cli
from loadtune.analysis.state import COLD_SHARE, ReadFigures, RunState, cache_state, comparable, off_state
from loadtune.analysis.storage import data_file, dataset_roots, readahead_note, training_state, tuned_cold
from loadtune.model.batch import BatchInfo
from loadtune.engine.trial import pagecache
from loadtune.model.storage import COLD, WARM
from loadtune.model.trial import Block, Trial
from loadtune.model.config import TrialConfig

sys.path.insert(0, str(SPECS))
import files as files_spec  # noqa: E402

GiB = 1024**3
W0 = TrialConfig(32, 0, False, None, False)


# ---- pure ---------------------------------------------------------------------------------------------


def test_a_dataset_that_fits_in_the_page_cache_is_read_warm_one_larger_cold():
    assert training_state("auto", 5 * GiB, 20 * GiB)[0] == WARM
    state, why = training_state("auto", 30 * GiB, 20 * GiB)
    assert state == COLD and "exceed" in why and "67% of them" in why  # the share the cache can hold
    assert training_state("cold", 1 * GiB, 20 * GiB)[0] == COLD  # as asked, whatever the sizes
    assert training_state("warm", 30 * GiB, 20 * GiB)[0] == WARM


def test_the_files_of_a_folder_stand_for_its_other_files_of_the_same_kind():
    roots = dataset_roots(["/data/set/00001.jpg", "/data/set/00007.jpg"])
    assert roots.roots == ("/data/set",) and roots.suffixes == (".jpg",) and not roots.recursive
    classes = [f"/data/imagenet/train/n{c:04d}/x.JPEG" for c in range(40)]
    many = dataset_roots(classes)
    assert many.roots == ("/data/imagenet/train",) and many.recursive
    spread = dataset_roots([f"/d{i}/x.bin" for i in range(20)])
    assert not spread.roots and "--data" in spread.why
    assert not dataset_roots([]).roots


def test_code_and_the_system_files_a_dataset_opens_are_not_its_data():
    assert data_file("/data/set/a.jpg", ["/usr/local/python"])
    assert not data_file("/usr/local/python/lib/python3.11/json/__init__.py", ["/usr/local/python"])
    assert not data_file("/usr/local/python/share/zoneinfo/UTC", ["/usr/local/python"])
    assert not data_file("/proc/self/maps", [])
    assert not data_file("/home/u/spec.py", [])


def test_a_mapped_file_whose_reads_fetch_many_times_a_sample_is_told_to_stop_the_readahead():
    batch = BatchInfo(32 * 48 * 1024, samples=32)  # 48 KiB a sample
    note = readahead_note(ReadFigures(storage=7 * 1024**2, read=0), batch, 32)  # 7 MiB fetched a sample, no read()
    assert note and "149×" in note and "MADV_RANDOM" in note and "7.0 MiB" in note
    assert readahead_note(ReadFigures(storage=7 * 1024**2, read=7 * 1024**2), batch, 32) is None  # read(): a file read whole
    assert readahead_note(ReadFigures(storage=60 * 1024, read=0), batch, 32) is None  # about what a sample holds
    assert readahead_note(ReadFigures(storage=7 * 1024**2, read=0), None, 32) is None  # no batch seen: nothing to weigh


def test_where_readahead_rules_a_cold_scan_the_bound_says_what_it_leaves_out():
    """The pick fetched 7 MiB from storage for each 48 KiB sample through a mapping: the note and the
    bound's caveat say so (the bound's stages count no cap for storage's bandwidth); the same run
    reading through ``read()`` gets neither."""
    from dataclasses import replace

    from conftest import empty_result, fake_trial
    from loadtune.analysis.storage import bound_caveat, pick_readahead
    from loadtune.model.results import Recommendation
    from loadtune.model.storage import StorageState

    def scan(read_bytes: int) -> object:
        result = empty_result()
        trial = fake_trial(W0, 150.0)
        trial.blocks = [replace(b, storage_bytes=7 * 2**20 * b.samples, read_bytes=read_bytes * b.samples) for b in trial.blocks]
        trial.batch = BatchInfo(32 * 48 * 1024, samples=32)
        result.trials = [trial]
        result.storage = StorageState("cold", COLD, "as asked")
        result.recommendation = Recommendation(W0, W0, [], W0, None, None, None, "")
        return result

    mapped = scan(0)
    assert "MADV_RANDOM" in pick_readahead(mapped, short=True)
    caveat = bound_caveat(mapped)
    assert caveat and "no cap for storage's bandwidth" in caveat and "MB/s" in caveat
    read = scan(7 * 2**20)
    assert pick_readahead(read) is None and bound_caveat(read) is None


def trial_reading(storage_per_sample: int, samples: int = 100) -> Trial:
    block = Block(samples, 4, 0.1, storage_bytes=storage_per_sample * samples, read_bytes=48 * 1024 * samples)
    return Trial(TrialConfig(batch_size=25, num_workers=0), "ok", blocks=[block, block, block])


def test_a_run_read_cold_where_it_fetched_most_of_a_sample_from_storage():
    sample = 48 * 1024
    assert cache_state(trial_reading(sample), sample) == COLD
    assert cache_state(trial_reading(0), sample) == WARM
    assert cache_state(trial_reading(int(sample * (COLD_SHARE - 0.1))), sample) == "mixed"
    assert cache_state(Trial(TrialConfig(batch_size=25, num_workers=0), "ok", blocks=[Block(100, 4, 0.1)]), sample) is None  # not counted
    assert off_state(trial_reading(sample), WARM, sample)  # a cold run in a warm scan is never compared with the rest
    assert not off_state(trial_reading(0), WARM, sample)
    assert not off_state(trial_reading(sample // 3), COLD, sample)  # mixed: kept, not a state of its own


def test_runs_in_two_page_cache_or_allocator_states_are_not_compared():
    warm, cold, unknown = RunState(None, WARM, None), RunState(None, COLD, None), RunState(None, None, None)
    assert comparable(warm, warm) and not comparable(warm, cold)
    assert comparable(warm, unknown) and comparable(RunState(None, "mixed", None), cold)
    assert not comparable(RunState(0.02, WARM, None), RunState(0.9, WARM, None))  # heap kept in one, batches fresh in the other
    assert comparable(RunState(0.95, WARM, None), RunState(1.0, WARM, None))


# ---- real files ---------------------------------------------------------------------------------------


@pytest.fixture
def folder(tmp_path, monkeypatch):
    path = tmp_path / "data"
    files_spec.write(str(path))
    monkeypatch.setenv("LOADTUNE_TEST_FILES", str(path))
    return path


def droppable_here(files) -> bool:
    pagecache.read_through(files)
    pagecache.drop(files)
    return (pagecache.resident_share(files) or 0) < 0.05


def test_dropped_files_leave_the_page_cache_and_a_read_through_brings_them_back(folder):
    files = pagecache.files_under([str(folder)])
    assert len(files) == 400 and pagecache.total_bytes(files) == 400 * files_spec.FILE_BYTES
    if not droppable_here(files):
        pytest.skip("dropping pages has no effect on this filesystem")
    before = pagecache.io_of()
    pagecache.read_through(files)
    read = pagecache.io_of() - before
    assert read.storage >= 0.9 * 400 * files_spec.FILE_BYTES  # fetched from storage: they were dropped
    assert pagecache.resident_share(files) > 0.95
    before = pagecache.io_of()
    pagecache.read_through(files)
    assert (pagecache.io_of() - before).storage < 0.05 * 400 * files_spec.FILE_BYTES  # from the cache


def test_a_file_this_process_maps_is_dropped_only_once_its_mapping_is_released(folder):
    """The kernel keeps a mapped page through DONTNEED: a memory-mapped dataset stays cached until the
    process that reads it forgets its page-table entries, and the mapping still reads the same bytes."""
    import mmap

    files = pagecache.files_under([str(folder)])
    if not droppable_here(files):
        pytest.skip("dropping pages has no effect on this filesystem")
    path = files[0]
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        first = mapped[:]  # every page faulted in: mapped by this process
        pagecache.drop([path])
        assert pagecache.resident_share([path]) > 0.9  # kept: a live mapping holds it
        assert pagecache.release_mappings((path,)) >= files_spec.FILE_BYTES
        pagecache.drop([path])
        assert pagecache.resident_share([path]) < 0.1
        assert mapped[:] == first  # still valid: read again from the file
    finally:
        mapped.close()
    assert pagecache.release_mappings((path,)) == 0  # nothing maps it now


def test_a_loaders_workers_forget_their_mappings_when_a_cold_state_asks(folder):
    """A worker that persists across epochs (or rests between a race's turns) keeps every file it mapped
    cached through a drop; asked (``WorkerRelease``), each forgets its mappings, and the drop evicts them."""
    from torch.utils.data import DataLoader

    from loadtune.engine.trial.cpu import worker_pids
    import mapped as mapped_spec

    files = pagecache.files_under([str(folder)])
    if not droppable_here(files):
        pytest.skip("dropping pages has no effect on this filesystem")
    answers = pagecache.answer_file()
    release = pagecache.WorkerRelease(pagecache.CacheSetting(COLD, (str(folder),)), answers)
    loader = DataLoader(mapped_spec.Mapped(str(folder)), batch_size=50, num_workers=2, persistent_workers=True,
                        worker_init_fn=release)
    assert sum(len(x) for x, _ in loader) == 400  # one epoch: each worker mapped the files it read
    workers = worker_pids(loader._iterator)
    assert len(workers) == 2
    pagecache.drop(files)
    assert pagecache.resident_share(files) > 0.9  # kept: the workers map them
    assert pagecache.release_workers(workers, answers) == 2
    pagecache.drop(files)
    assert pagecache.resident_share(files) < 0.1
    assert sum(len(x) for x, _ in loader) == 400  # the same workers read on, from storage


@pytest.mark.slow
def test_a_cold_scan_reads_every_epoch_of_persistent_workers_from_storage(folder, tmp_path):
    """Workers that persist map the files of a memory-mapped dataset for good; in a cold scan every block
    (each epoch after the first included) still fetches a sample's bytes from storage."""
    if not droppable_here(pagecache.files_under([str(folder)])):
        pytest.skip("dropping pages has no effect on this filesystem")
    out = tmp_path / "scan.json"
    proc = run_cli("scan", SPECS / "mapped.py", "--workers", "2", "--prefetch", "2", "--persistent", "--race-legs", "0",
                   "--confirm", "0", "--no-diagnose", "--storage", COLD, "--data", folder, "--json", out, *QUICK,
                   env={"LOADTUNE_TEST_FILES": str(folder)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = [t for t in json.loads(out.read_text())["trials"] if t["status"] == "ok" and t["config"]["num_workers"] == 2]
    assert trials
    for trial in trials:
        for block in trial["blocks"]:
            assert block["storage_bytes"] >= 0.8 * files_spec.FILE_BYTES * block["samples"], (trial["config"], block)


def named_spec(tmp_path, folder, module: str, cls: str):
    """A spec that names the folder itself: a trial process forked from a server started before the
    fixture set LOADTUNE_TEST_FILES lacks it."""
    spec = tmp_path / "named.py"
    spec.write_text(f"import sys\nsys.path.insert(0, {str(SPECS)!r})\nfrom {module} import {cls}\n\n\n"
                    f"def dataset():\n    return {cls}({str(folder)!r})\n")
    return spec


def test_a_cold_race_reads_every_turn_from_storage_the_first_included(folder, tmp_path):
    """The sides of a leg warm up together and read the same order, so one side's warm-up maps the
    samples the other's first turn reads; unless each forgets its mappings before it rests, the drop
    before that turn keeps them cached. On a 22.9 GiB array a loader without workers read its first
    turn at 1,153 samples/s beside its others' 66-145."""
    from dataclasses import replace

    from conftest import QUICK_TIMING, quick_request
    from loadtune.engine.race import run_leg
    from loadtune.engine.spec import SpecRef
    from loadtune.engine.trial.pagecache import CacheSetting

    if not droppable_here(pagecache.files_under([str(folder)])):
        pytest.skip("dropping pages has no effect on this filesystem")
    spec = named_spec(tmp_path, folder, "mapped", "Mapped")
    timing = replace(QUICK_TIMING, warmup_s=0.3, cache=CacheSetting(COLD, (str(folder),)))
    w0, w2 = TrialConfig(16, 0), TrialConfig(16, 2, False, 2, True)
    leg = run_leg(SpecRef.parse(spec), quick_request(w0, timing), [w0, w2], 1, seed=0)
    assert all(t.ok for t in leg), [t.error for t in leg]
    for t in leg:
        for block in t.blocks:
            assert block.storage_bytes >= 0.8 * files_spec.FILE_BYTES * block.samples, (t.config.label(), block)


@pytest.mark.slow
def test_the_profile_measures_what_a_sample_fetches_and_the_storages_bandwidth_on_the_datasets_files(folder, tmp_path):
    """The cold fetch of files read whole fetched about a sample's bytes each from storage; the
    bandwidth was read from the same files, cold, and a cold scan's bound gets a cap from the two."""
    from dataclasses import replace

    from conftest import QUICK_TIMING, quick_request
    from loadtune.analysis.bound import STORAGE, BatchCosts, ceilings_of
    from loadtune.engine.spec import SpecRef
    from loadtune.engine.stages import run_profile
    from loadtune.engine.trial.pagecache import CacheSetting

    if not droppable_here(pagecache.files_under([str(folder)])):
        pytest.skip("dropping pages has no effect on this filesystem")
    spec = named_spec(tmp_path, folder, "files", "Files")
    timing = replace(QUICK_TIMING, cache=CacheSetting(COLD, (str(folder),)))
    costs, why = run_profile(SpecRef.parse(spec), quick_request(TrialConfig(16, 0), timing))
    assert costs is not None and costs.error is None, why
    assert 0.8 * files_spec.FILE_BYTES <= costs.storage_bytes <= 4 * files_spec.FILE_BYTES
    assert costs.storage_mb_s is not None and costs.storage_mb_s.median > 0 and costs.storage_in_flight
    assert any(c.name == STORAGE for c in ceilings_of(BatchCosts.of(costs, cold=True), 2, 4))
    assert not any(c.name == STORAGE for c in ceilings_of(BatchCosts.of(costs), 2, 4))


@pytest.mark.slow
@pytest.mark.parametrize("state", [COLD, WARM])
def test_a_scan_reads_every_trial_in_the_state_it_set(folder, tmp_path, state):
    """Cold: every trial (workers or none) fetched about a sample's bytes from storage per sample; warm:
    next to none. The files were found by what the dataset opened."""
    if not droppable_here(pagecache.files_under([str(folder)])):
        pytest.skip("dropping pages has no effect on this filesystem")
    out = tmp_path / "scan.json"
    proc = run_cli("scan", SPECS / "files.py", "--workers", "0,2", "--prefetch", "2", "--no-persistent", "--race-legs", "0",
                   "--confirm", "0", "--no-diagnose", "--storage", state, "--json", out, *QUICK,
                   env={"LOADTUNE_TEST_FILES": str(folder)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    storage = data["storage"]
    assert storage["state"] == state and storage["files"]["roots"] == [str(folder)]
    assert storage["files"]["files"] == 400 and storage["files"]["found_by"] == "opened"
    trials = [t for t in data["trials"] if t["status"] == "ok"]
    assert {t["config"]["num_workers"] for t in trials} >= {0, 2}
    for trial in trials:
        samples = sum(b["samples"] for b in trial["blocks"])
        fetched = sum(b["storage_bytes"] for b in trial["blocks"]) / samples
        if state == COLD:
            assert fetched >= 0.8 * files_spec.FILE_BYTES, (trial["config"], fetched)
        else:
            assert fetched <= 0.1 * files_spec.FILE_BYTES, (trial["config"], fetched)
    other = storage["other"]
    assert other and other[0]["config"] == data["recommendation"]["config"]  # the pick, timed in the other state
    assert "page cache: measured " + state in proc.stdout



def test_autotune_is_told_when_it_picked_from_storage_for_data_that_fits_in_memory():
    sample = 48 * 1024
    cold = [trial_reading(sample)]
    note = tuned_cold(cold, cold[0].config, 20_000, 20 * GiB)
    assert note is not None and "from storage" in note and "--storage warm" in note
    assert tuned_cold(cold, cold[0].config, 20_000_000, 20 * GiB) is None  # larger than memory: later epochs read cold too
    assert tuned_cold([trial_reading(0)], cold[0].config, 20_000, 20 * GiB) is None  # read from the cache


@pytest.mark.slow
def test_autotune_windows_count_the_bytes_they_read_from_storage(folder):
    """A first epoch over files dropped from the cache: the live loop's blocks fetched about a sample's
    bytes from storage per sample (main process and workers)."""
    import loadtune

    files = pagecache.files_under([str(folder)])
    if not droppable_here(files):
        pytest.skip("dropping pages has no effect on this filesystem")
    loader = loadtune.autotune(files_spec.Files(str(folder)), batch_size=8, workers=[0, 2], block_batches=3, min_blocks=2,
                               max_blocks=2, tune_epochs=1, log=False)
    for _ in loader:
        pass
    blocks = [b for t in loader.report().trials for b in t.blocks]
    assert blocks and all(b.storage_bytes is not None for b in blocks)
    fetched = sum(b.storage_bytes for b in blocks) / sum(b.samples for b in blocks)
    assert fetched >= 0.5 * files_spec.FILE_BYTES


def test_where_dropping_has_no_effect_a_cold_scan_measures_warm_and_says_so(folder, monkeypatch):
    from loadtune.engine import storage as storage_mod
    from loadtune.model.storage import DatasetFiles, StorageState

    files = DatasetFiles([str(folder)], 400, 400 * files_spec.FILE_BYTES, "data")
    monkeypatch.setattr(storage_mod, "droppable", lambda files: False)
    state = storage_mod.set_up(StorageState("cold", "cold", "as asked", files, 20 * GiB))
    assert state.state == WARM and state.droppable is False and "no cold state can be set" in state.why


@pytest.mark.slow
def test_a_check_against_a_revision_without_a_baseline_reads_in_one_state(folder):
    """Both sides' request carries the state a scan would set: here warm (400 small files fit), over the
    folder named (``--data``: a trial process started from a fork server launched earlier in the session
    would not see this test's environment, and finding the files by reading some reads it there)."""
    from loadtune.engine.against import side_request
    from loadtune.engine.spec import load_spec

    request = side_request(None, load_spec(str(SPECS / "files.py")), {"num_workers": 0}, {"data": [str(folder)]})
    cache = request.timing.cache
    assert cache is not None and cache.state == WARM and cache.roots == (str(folder),)
