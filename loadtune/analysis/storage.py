"""Which page-cache state a training job reads its dataset in, which runs were measured in which,
and where the dataset's files lie: pure functions of what the scan found and measured.

Linux keeps file pages cached until memory is needed: a dataset that fits in the page cache beside
the job reads from memory from its second epoch on, one larger than it is read from storage every
epoch (an LRU cache thrashes on a scan of more than it holds). The two states can want different
configs (more workers wait on storage in parallel; none pay for inter-process transfer on cached
data), so a scan measures every config in one state and says which (docs/measuring.md, "Storage").
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass

from loadtune.analysis.bound import scan_bound
from loadtune.analysis.race import race_ratio, raced_configs
from loadtune.analysis.state import COLD_SHARE, MIXED, ReadFigures, cache_state, off_state, read_figures
from loadtune.model.batch import BatchInfo
from loadtune.model.config import TrialConfig
from loadtune.model.results import ConfigResult, ScanResult, by_config
from loadtune.model.storage import COLD, WARM
from loadtune.model.trial import Trial

GiB = 1024**3
OTHER_RACERS = 4  # configs raced in the other page-cache state, at most
UNPRINTED_SPAN = 4.0  # a ratio whose interval spans more than this factor (2x either way) is not printed as a number
FEW_FOLDERS = 8  # files seen in at most this many folders: those folders; more: the folder they share
SYSTEM_PREFIXES = ("/proc/", "/sys/", "/dev/", "/etc/", "/usr/lib/", "/usr/share/", "/usr/local/lib/", "/lib/", "/lib64/")
CODE_SUFFIXES = (".py", ".pyc", ".so", ".pth", ".json.lock")
READ_AHEAD_TIMES = 8  # storage fetched this many times what a sample holds, through a mapping: readahead


def gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB / 10 else f"{n / 1024**2:.0f} MiB"


def training_state(asked: str, dataset_bytes: int, cache_bytes: int | None) -> tuple[str, str]:
    """The state to measure in, and why: as asked, or (``auto``) the one training will be in, from the
    dataset's size on storage against what the page cache can hold beside the job."""
    size = gib(dataset_bytes)
    if asked in (WARM, COLD):
        return asked, f"as asked (--storage {asked}); the dataset's files hold {size}"
    if cache_bytes is None:
        return WARM, f"the memory the page cache can hold is unknown here: measured warm; the dataset's files hold {size}"
    if dataset_bytes <= cache_bytes:
        return WARM, (f"the dataset's {size} fit in the page cache ({gib(cache_bytes)} free beside the job): training "
                      "reads it from memory from its second epoch on")
    return COLD, (f"the dataset's {size} exceed what the page cache can hold beside the job ({gib(cache_bytes)}, "
                  f"{cache_bytes / dataset_bytes:.0%} of them): training reads it from storage every epoch, an LRU cache "
                  "thrashing on a scan of more than it holds")


def cache_capacity(available_bytes: int | None, loader_bytes: int | None) -> int | None:
    """What the page cache can hold beside the job: the memory available less the loader's own peak."""
    if available_bytes is None:
        return None
    return max(0, available_bytes - (loader_bytes or 0))


def sample_bytes(dataset_bytes: int | None, length: int | None) -> float | None:
    """The bytes one sample holds on storage, on average: the dataset's files over its samples."""
    return dataset_bytes / length if dataset_bytes and length else None


# ---- where the dataset's files lie -----------------------------------------------------------------


def data_file(path: str, excluded: Iterable[str]) -> bool:
    """A file the dataset read as data: not code, not the system's, not under ``excluded`` (the Python
    installation, the spec's own file)."""
    if path.endswith(CODE_SUFFIXES) or path.startswith(SYSTEM_PREFIXES) or not os.path.isabs(path):
        return False
    return not any(path == e or path.startswith(e.rstrip("/") + "/") for e in excluded)


@dataclass(frozen=True)
class Roots:
    """Where the dataset's files lie: ``roots`` to list with ``suffixes`` (the names seen), ``recursive``
    or not; ``why`` where no roots could be told (the files read share no folder below the top)."""

    roots: tuple[str, ...]
    suffixes: tuple[str, ...]
    recursive: bool
    why: str | None = None


def suffix_of(path: str) -> str:
    name = os.path.basename(path)
    return name[name.index("."):] if "." in name.lstrip(".") else ""


def dataset_roots(seen: Iterable[str]) -> Roots:
    """From the files a dataset was seen to read: the folders that hold its files (a few: each folder's
    own files; many, as class folders of images: the folder they share, walked whole), counting only
    files named like those seen (shards ``.tar``, images ``.jpg``), so that a sample of reads stands for
    every file of the same kind beside them."""
    files = sorted(set(seen))
    if not files:
        return Roots((), (), False, "the dataset read no file while samples were read: it is held in memory")
    suffixes = tuple(sorted({suffix_of(f) for f in files}))
    suffixes = () if "" in suffixes else suffixes  # a file without a suffix: every file of its folder counts
    folders = sorted({os.path.dirname(f) for f in files})
    if len(folders) <= FEW_FOLDERS:
        return Roots(tuple(folders), suffixes, False)
    common = os.path.commonpath(folders)
    if len([p for p in common.split(os.sep) if p]) < 2:
        return Roots((), suffixes, False, f"the files it read lie in {len(folders)} folders that share only {common}: "
                                          "name the dataset's folder with --data")
    return Roots((common,), suffixes, True)


# ---- what the report says --------------------------------------------------------------------------


def contrast_configs(result: ScanResult) -> list[TrialConfig]:
    """The configs timed in the other state: the pick, PyTorch's defaults, the fastest config with the
    most workers measured (waiting on storage, more workers can win cold), at the pick's batch size,
    and the race's other contenders, ``OTHER_RACERS`` at most (their loaders all live at once)."""
    rec = result.recommendation
    ok = [c for c in result.configs if c.ok and c.config.batch_size == rec.config.batch_size and not c.config.heap]
    most = max((c.config.num_workers for c in ok), default=0)
    widest = max((c for c in ok if c.config.num_workers == most), key=lambda c: c.estimate.median, default=None)
    chosen = [rec.config, rec.baseline, widest.config if widest else None, *raced_configs(result.trials)]
    return list(dict.fromkeys(c for c in chosen if c is not None))[:OTHER_RACERS]


def kib(n: float) -> str:
    return f"{n / 1024:.0f} KiB" if n < 1024**2 else f"{n / 1024**2:.1f} MiB"


def read_text(figures: ReadFigures | None) -> str | None:
    """'48 KiB a sample from storage, 0 KiB from the page cache' for a run's figures."""
    if figures is None:
        return None
    if figures.read < figures.storage / 2:  # reads through a memory mapping: rchar counts none of them
        return f"{kib(figures.storage)} a sample from storage (through a memory mapping: what the page cache served is not counted)"
    cached = max(0.0, figures.read - figures.storage)
    return f"{kib(figures.storage)} a sample from storage and {kib(cached)} from the page cache"


def readahead_note(figures: ReadFigures | None, batch: BatchInfo | None, batch_size: int, short: bool = False) -> str | None:
    """Where a run read through a memory mapping and storage fetched many times the bytes a sample
    holds: the kernel reads ahead around every page fault of a mapped file (up to the disk's
    ``read_ahead_kb``), which for rows read at random is mostly thrown away; ``madvise`` on the mapping
    stops it. A 48 KiB row of a 24 GiB array fetched 7 MiB, and MADV_RANDOM ran 10.6x faster
    (benchmarks/RESULTS.md, "Storage"). None where the reads went through ``read()`` or fetched little."""
    if figures is None or batch is None or batch.nbytes <= 0 or figures.read >= figures.storage / 2:
        return None
    held = batch.nbytes / (batch.samples or batch_size)
    if figures.storage < READ_AHEAD_TIMES * held:
        return None
    if short:
        return (f"storage fetched {kib(figures.storage)} a sample, {figures.storage / held:.0f}× what a sample holds, through a "
                "memory mapping: readahead; madvise(MADV_RANDOM) on the mapping stops it (--details)")
    return (f"storage fetched {kib(figures.storage)} for each sample, {figures.storage / held:.0f}× the {kib(held)} a sample "
            "holds, through a memory mapping: where a sample reads a small part of a mapped file, that is the kernel reading "
            "ahead around each page fault. For reads at random, madvise the mapping: MADV_RANDOM reads only the pages touched, "
            "MADV_WILLNEED over a sample's bytes just before reading them makes one read of them (numpy: "
            "array._mmap.madvise(mmap.MADV_RANDOM)); the loader's knobs move far less than that")


IN_MEMORY = "the dataset read no file while samples were read"


def rate_text(rate: float) -> str:
    return f"{rate:,.0f} samples/s"


def other_state_notes(result: ScanResult, pick: TrialConfig, pick_rate: float) -> list[str]:
    """What the configs timed in the other state gave: the pick's speed there (the first epoch's
    length, or what RAM would give) and which of them ran fastest there, side by side where they raced
    (a ratio with its interval, ``analysis.race.race_ratio``), else alone once each (said so)."""
    storage = result.storage
    timed = by_config([t for t in storage.other if t.ok])
    mine = next((c for c in timed if c.config == pick), None)
    if mine is None:
        return []
    raced = any(t.raced for t in storage.other)
    how = "side by side with the others timed there" if raced else "alone"
    rate, length = mine.estimate.median, result.spec.length
    if storage.state == WARM:
        epoch = f", {length / rate:,.0f} s for an epoch of {length:,} samples" if length else ""
        out = [f"from storage (a first epoch, and every epoch of data larger than the page cache) {result.label(pick)} ran "
               f"{rate_text(rate)} ({how}), {pick_rate / rate:.1f}× slower than from the cache{epoch}"]
    else:
        fits = storage.cache_bytes is not None and storage.files.bytes <= storage.cache_bytes
        ram = (f"a copy in RAM gives that (mount -t tmpfs -o size={math.ceil(storage.files.bytes * 1.1 / GiB)}G tmpfs /mnt/data)"
               if fits else "faster storage moves it toward that")
        out = [f"from the page cache {result.label(pick)} ran {rate_text(rate)} ({how}), {rate / pick_rate:.1f}× its speed "
               f"from storage: {ram}"]
    best = max(timed, key=lambda c: c.estimate.median)
    if best.config == pick:
        return out
    other = storage.other_state
    ratio = race_ratio(storage.other, best.config, pick) if raced else None
    if ratio is not None and ratio.high / ratio.low > UNPRINTED_SPAN:
        out.append(f"from {'storage' if other == COLD else 'the page cache'} the legs could not tell {result.label(best.config)} "
                   f"from the pick (their turns read over {UNPRINTED_SPAN:g}× apart): run the scan with --storage {other} to decide for that state")
    elif ratio is not None:
        floor = result.settings.options.noise_floor
        verdict = "faster there beyond the noise" if ratio.low > 1 + floor else "not told apart from it there in these legs"
        out.append(f"from {'storage' if other == COLD else 'the page cache'} {result.label(best.config)} ran {ratio.text()} "
                   f"the pick's speed side by side: {verdict}; run the scan with --storage {other} to decide for that state")
    else:
        out.append(f"in the {other} state {result.label(best.config)} ran fastest of those timed there "
                   f"({rate_text(best.estimate.median)} alone, one run each): run the scan with --storage {other} to decide for that state")
    return out


def cold_pick_reads(result: ScanResult) -> tuple[ConfigResult, ReadFigures] | None:
    """The pick of a cold scan and what its runs read per sample (a warm one fetches next to nothing)."""
    rec = result.recommendation
    pick = result.config_result(rec.config) if rec and result.storage and result.storage.state == COLD else None
    figures = read_figures(pick.trials) if pick is not None and pick.ok else None
    return (pick, figures) if figures is not None else None


def pick_readahead(result: ScanResult, short: bool = False) -> str | None:
    """``readahead_note`` for the pick's runs in a cold scan."""
    reads = cold_pick_reads(result)
    return readahead_note(reads[1], reads[0].batch, reads[0].config.batch_size, short) if reads else None


def bound_caveat(result: ScanResult) -> str | None:
    """Where readahead fetched many times what a sample holds (``pick_readahead``) and the bound has no
    cap for storage's bandwidth (a profile that did not measure it: out of time, or a file saved before
    it was measured), which such reads spend: the rate the pick made storage fetch at while timed says
    how much."""
    reads = cold_pick_reads(result)
    bound = scan_bound(result)
    if reads is None or (bound is not None and bound.counts_storage):
        return None
    pick, figures = reads
    if readahead_note(figures, pick.batch, pick.config.batch_size) is None:
        return None
    fetched = figures.storage * pick.estimate.median
    return (f"The bound counts no cap for storage's bandwidth: storage fetched {fetched / 1e6:,.0f} MB/s for this config while "
            f"timed ({kib(figures.storage)} a sample: readahead, see the notes); stop the readahead first")


def storage_notes(result: ScanResult) -> list[str]:
    """The report's lines on the page cache: the state measured and why, what the pick read per sample,
    the other state's figures, runs that read in another state, and a state the pick's measured memory
    would overturn."""
    storage, rec = result.storage, result.recommendation
    if storage is None or not result.ok_trials or (storage.state is None and storage.why.startswith(IN_MEMORY)):
        return []  # held in memory, or nothing measured: the failures say what matters
    if storage.state is None:
        return [f"no page-cache state set: {storage.why}"]
    how = ("from the page cache, read through once first" if storage.state == WARM else
           "from storage, dropped from the page cache before each trial, turn and epoch")
    out = [f"measured {storage.state}, every config reading the dataset {how}: {storage.why}"]
    pick = result.config_result(rec.config) if rec else None
    if pick is None or not pick.ok:
        return out
    text = read_text(read_figures(pick.trials))
    out[0] += f"; {result.label(rec.config)} read {text}" if text else ""
    out += [ahead] if (ahead := pick_readahead(result)) else []
    out += other_state_notes(result, rec.config, pick.estimate.median)
    per_sample = sample_bytes(storage.files.bytes, result.spec.length)
    off = [c for c in result.configs if any(off_state(t, storage.state, per_sample) for t in c.trials)]
    if off:
        out.append(f"{', '.join(result.label(c.config) for c in off)} read the dataset in another state than the scan set "
                   "(the cache lost its files, or the drop did not hold): their figures mix the two states")
    mixed = [c for c in result.configs if storage.state == COLD and any(cache_state(t, per_sample) == MIXED for t in c.trials)]
    if mixed:
        out.append(f"{', '.join(result.label(c.config) for c in mixed)} fetched less than half of a sample's bytes from storage "
                   "in a cold scan: pages stayed cached while they ran (a memory-mapped file's pages that a live process maps are "
                   "not dropped, and readahead brings in more than each read asks for): their figures are partly warm")
    peak = pick.memory.peak_bytes if pick.memory else None
    room = cache_capacity(result.machine.memory_available_bytes, peak)
    if storage.asked == "auto" and storage.state == WARM and room is not None and storage.files.bytes > room:
        out.append(f"beside the pick's measured {gib(peak)} the page cache holds {gib(room)}, less than the dataset's "
                   f"{gib(storage.files.bytes)}: training may read it cold; scan with --storage cold to measure that")
    return out


def tuned_cold(trials: list[Trial], config: TrialConfig, length: int | None, available: int | None) -> str | None:
    """autotune's note where the pick was judged on reads from storage (a first epoch) while the
    dataset, at the bytes a sample read, fits in the memory available: later epochs read from the page
    cache, where the best config can differ. None where the windows read from the cache, or the data
    does not fit (later epochs read from storage too)."""
    figures = read_figures([t for t in trials if t.config == config])
    if figures is None or figures.read <= 0 or figures.storage < COLD_SHARE * figures.read or not length or available is None:
        return None
    size = length * figures.read
    if size > available:
        return None
    return (f"its windows read {kib(figures.storage)} a sample from storage (a first epoch's reads), while the dataset's "
            f"{gib(size)} fit in the {gib(available)} of memory available: later epochs read from the page cache, where the "
            "best config can differ, and this pick was made from storage; `loadtune scan --storage warm` measures that state")
