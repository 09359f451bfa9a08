"""The page cache's state a scan measures in: the dataset's files found (``--data``, or those it opens
or maps while some of its samples are read, in a child process), the state decided
(``analysis.storage.training_state``) and set before the first trial, and whether dropping pages
works on that filesystem at all.

Every trial, race turn and profile then carries the state in its ``Timing.cache``: the harness sets a
cold state again before each trial's process starts and before each turn, and the trial's meter at
every epoch boundary (``trial/pagecache.py``).
"""

from __future__ import annotations

import os
import site
import sys
import time
from dataclasses import replace

from loadtune.analysis.diskread import droppable as judged_droppable
from loadtune.analysis.storage import Roots, cache_capacity, data_file, dataset_roots, training_state
from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.pagecache import CacheSetting, cached_files, drop, read_through, resident_share, total_bytes
from loadtune.engine.trial.protocol import Kind, TrialRequest, TrialRun
from loadtune.engine.trial.setup import make_loader
from loadtune.engine.trial.transfer import batch_size_of
from loadtune.model.config import pytorch_default
from loadtune.model.storage import COLD, WARM, DatasetFiles, StorageState

DISCOVER_S = 0.5  # samples are read for this long at most to see which files the dataset reads...
DISCOVER_BATCHES = 4  # ...or this many batches (a hundred samples or more: enough to see where its files lie)
TRIAL_FILES = "loadtune-trial-"  # the trial's own log and scratch files (``trial.harness``), never the dataset's
DROP_CHECK_FILES = 64  # files read and dropped to see whether dropping works where the dataset lies


def mapped_files() -> set[str]:
    """Files this process maps (``/proc/self/maps``): a memory-mapped array, an LMDB or Arrow file."""
    try:
        with open("/proc/self/maps") as f:
            return {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6 and "/" in line}
    except OSError:
        return set()


def open_files() -> set[str]:
    """Files this process holds open now (``/proc/self/fd``): opened from C, where no audit event tells."""
    found = set()
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                found.add(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                continue
    except OSError:
        pass
    return found


def discover_trial(run: TrialRun) -> None:
    """The child's entry: read a few batches in this process (no workers) and report every file the
    dataset opened (an audit hook on ``open``), mapped or holds open meanwhile."""
    opened: set[str] = set()

    def hook(event: str, args: tuple) -> None:
        if event == "open" and args and isinstance(args[0], (str, bytes)):
            opened.add(os.path.abspath(os.fsdecode(args[0])))

    mapped = mapped_files()
    sys.addaudithook(hook)  # this process only reads: it ends with the list
    loader = make_loader(run.spec, run.request.config, run.request.options)
    until, batches = time.perf_counter() + DISCOVER_S, 0
    for batch in loader:
        batches += 1
        batch_size_of(batch)
        if batches >= DISCOVER_BATCHES or time.perf_counter() > until:
            break
    seen = opened | (mapped_files() - mapped) | open_files()
    run.emit(Kind.FILES, sorted(p for p in seen if os.path.isfile(p)))


def excluded_paths(spec_path: str | None) -> list[str]:
    """What a dataset may open that is not its data: the Python installation, loadtune, the spec file."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(__file__)),
             *site.getsitepackages(), site.getusersitepackages()}
    if spec_path:
        paths.add(os.path.abspath(spec_path))
    return sorted(p for p in paths if p)


def seen_files(source: SpecRef | LoadedSpec, request: TrialRequest, spec_path: str | None) -> tuple[list[str], str | None]:
    """The data files a dataset reads, as ``discover_trial`` saw them in a child of its own; and why
    none could be seen, where reading its batches failed (the trials then fail with the dataset's own
    error)."""
    got: dict[str, list[str]] = {}
    config = replace(pytorch_default(request.config.batch_size, False), start_method=request.config.start_method)
    trial = run_trial(source, replace(request, config=config, entry=discover_trial, needs_blocks=False, ranks=None),
                      lambda kind, payload: got.__setitem__("files", payload) if kind is Kind.FILES else None)
    if "files" not in got:
        why = trial.error.message if trial.error else "the reading process reported nothing"
        return [], f"the files it reads could not be seen: reading a few of its batches failed ({why})"
    excluded = excluded_paths(spec_path)
    return [p for p in got["files"] if data_file(p, excluded) and not os.path.basename(p).startswith(TRIAL_FILES)], None


def dataset_files(data: list[str] | None, source: SpecRef | LoadedSpec, request: TrialRequest,
                  spec_path: str | None) -> tuple[DatasetFiles | None, str | None]:
    """The dataset's files: under ``data`` where named, else as the dataset was seen to read them; or
    None and why none could be told."""
    if data:
        roots = Roots(tuple(data), (), True)
    else:
        seen, failed = seen_files(source, request, spec_path)
        if failed:
            return None, failed
        roots = dataset_roots(seen)
    if not roots.roots:
        return None, roots.why
    files = cached_files(roots.roots, roots.suffixes, roots.recursive)
    return DatasetFiles(list(roots.roots), len(files), total_bytes(files), "data" if data else "opened",
                        list(roots.suffixes), roots.recursive), None


def setting_of(storage: StorageState | None, state: str | None = None) -> CacheSetting | None:
    """What the trials carry: the state (``state``: another than the scan's) over the dataset's files."""
    if storage is None or storage.state is None or storage.files is None:
        return None
    files = storage.files
    return CacheSetting(state or storage.state, tuple(files.roots), tuple(files.suffixes), files.recursive)


def droppable(files: tuple[str, ...]) -> bool | None:
    """Whether dropping a file's pages empties the cache of it where these files lie: a few files read
    through, dropped, and looked at with ``mincore`` (``analysis.diskread.droppable`` judges, as for
    ``doctor --storage``). Some network filesystems ignore the advice."""
    sample = files[:: max(1, len(files) // DROP_CHECK_FILES)][:DROP_CHECK_FILES]
    read_through(sample)
    asked = drop(sample)
    return judged_droppable(resident_share(sample), asked)


def decide(asked: str, files: DatasetFiles, available: int | None) -> StorageState:
    """The state to measure in (as asked, or the one training will be in) before any trial: the loader's
    own peak is not known yet (``analysis.storage.storage_notes`` checks the decision against it after)."""
    capacity = cache_capacity(available, None)
    state, why = training_state(asked, files.bytes, capacity)
    return StorageState(asked, state, why, files, capacity)


def found_and_set(asked: str, data: list[str] | None, source: SpecRef | LoadedSpec, request: TrialRequest,
                  spec_path: str | None, available: int | None) -> StorageState:
    """The dataset's files found (``dataset_files``), the state decided (``decide``) and set (``set_up``):
    what a scan, and a check against a revision without a baseline, do before their first trial."""
    files, why = dataset_files(data, source, request, spec_path)
    return set_up(StorageState(asked, None, why) if files is None else decide(asked, files, available))


def set_up(storage: StorageState) -> StorageState:
    """Put the files in the state decided, before the first trial: warm, read through once (where they
    fit: a dataset larger than the cache cannot be held warm, and is measured as it comes, with a note);
    cold, dropped (where dropping works: else measured warm, and said so)."""
    setting = setting_of(storage)
    if setting is None:
        return storage
    storage.droppable = droppable(setting.files)
    if storage.state == COLD and storage.droppable is False:
        storage.state = WARM
        storage.why += ("; dropping pages had no effect on this filesystem, so no cold state can be set here: measured "
                        "warm, and no figure from storage is given")
    if storage.state == WARM:
        fits = storage.cache_bytes is None or storage.files.bytes <= storage.cache_bytes
        if fits:
            read_through(setting.files)
        else:
            storage.why += "; they cannot all be cached, so the warm state holds only what the cache keeps"
    else:
        drop(setting.files)
    return storage


def enter(setting: CacheSetting) -> None:
    """Put the files in ``setting``'s state now: warm, read through; cold, dropped (written back first:
    pages dirty since the last drop are never dropped)."""
    (read_through if setting.state == WARM else drop)(setting.files)


def readied(storage: StorageState | None) -> CacheSetting | None:
    """A saved scan's state set again where its files are (``check`` measures as its baseline did);
    None where the scan set none."""
    setting = setting_of(storage)
    if setting is not None:
        enter(setting)
    return setting
