"""``loadtune.autotune``: a loader used like a DataLoader that tunes itself on the live training loop.

While it tunes, each config gets a window of the loop (``meter.Window``); a switch closes the running
loader's ``Handout`` (it delivers what its workers hold, then ends) and starts the next config's
loader, which goes on with the same epoch's order. Then the contenders race: their loaders alive
together, the loop's batches taken from them in turns (``live/race.py``). Tuning goes on into the
next epochs until the search and the race end, ``TUNE_EPOCHS`` epochs at most unless told otherwise.
Once tuned, the settled config's loader is the DataLoader the loop iterates, directly: nothing of
loadtune stays between the loop and its batches but the batch sampler that hands out the shared order.

This module is the face the loop sees: ``autotune()`` and ``AutoLoader``'s iteration. What a batch
or an epoch does to the tuning is the state machine in ``phases.py``; the loaders alive meanwhile
are ``runs.py``'s; the budget used, ``progress.py``'s.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torch.utils.data import IterableDataset, RandomSampler

from loadtune.analysis.race import can_race
from loadtune.engine.distributed.layout import cores_per_rank
from loadtune.live.forms import Source, make_source, split_fixed
from loadtune.live.order import EpochOrder
from loadtune.live.phases import Tuning
from loadtune.live.progress import TUNE_EPOCHS, Progress
from loadtune.live.ranks import Ranks
from loadtune.live.report import LiveReport
from loadtune.live.runs import CLOCK, Runs
from loadtune.live.tuner import AutotuneError, LiveOptions, Tuner, make_search, search_space
from loadtune.model.config import TrialConfig

log_ = logging.getLogger("loadtune.autotune")


class AutoLoader:
    """Iterate it as a DataLoader, epoch after epoch. ``report()`` says what it decided."""

    def __init__(self, source: Source, options: LiveOptions, fixed: dict, ranks: Ranks,
                 save: str | Path | None, log: Callable[[str], None] | None):
        self.source = source
        self.tuning = start_tuning(source, options, fixed, ranks, save, log)

    # -- what a DataLoader offers -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.source.template)

    @property
    def dataset(self) -> Any:
        return self.source.dataset

    @property
    def sampler(self) -> Any:
        """The sampler every config's loader draws from (``loader.sampler.set_epoch(e)`` works)."""
        return getattr(self.source.template, "sampler", None)

    @property
    def batch_size(self) -> int:
        return self.source.batch_size

    @property
    def config(self) -> TrialConfig | None:
        """The config running now (the settled one once tuning is over)."""
        run = self.tuning.runs.active
        return run.config if run else None

    def report(self) -> LiveReport:
        return self.tuning.report

    def __iter__(self) -> Iterator[Any]:
        tuning = self.tuning
        tuning.progress.epoch += 1
        if tuning.plain():
            return tuning.plain_epoch()
        return self.epoch_of_tuning()

    def epoch_of_tuning(self) -> Iterator[Any]:
        """One epoch while tuning: each batch from the loaders alive, each interval told to the tuning."""
        tuning = self.tuning
        tuning.epoch_begins()
        previous = None
        try:
            while True:
                now = CLOCK()
                if previous is not None:
                    tuning.batch_done(previous, now)
                got = tuning.runs.fetch()
                if got is None:
                    break
                batch, previous = got
                tuning.progress.delivered += 1
                yield batch
        finally:
            tuning.epoch_ends(CLOCK())


def start_tuning(source: Source, options: LiveOptions, fixed: dict, ranks: Ranks,
                 save: str | Path | None, log: Callable[[str], None] | None) -> Tuning:
    """The tuning of ``source`` on this machine: the search space its cores allow, the search, and
    whether the contenders will race."""
    from loadtune.engine.machine import collect

    info = collect()
    local = local_ranks(ranks)
    accelerator = info.has_accelerator
    space = search_space(source.batch_size, fixed, options, cores_per_rank(info.usable_cores, local))
    order = EpochOrder(source.template.batch_sampler) if source.in_epoch else None
    races = can_race(options.race_legs, options.confirm, ranks.world) and interleaves(source)
    search = make_search(space, options, accelerator, info.usable_cores, local, info.memory_available_bytes, races)
    tuner = Tuner(empty_result(source, info, options, space, accelerator), search, options, races)
    report = LiveReport(tuner.result, "in-epoch" if order is not None else "across epochs", source.form, ranks.world)
    epochs_allowed = options.tune_epochs or (TUNE_EPOCHS if order is not None else 10**9)
    return Tuning(tuner, options, Runs(source, order, report.cost), Progress(options, order is not None, epochs_allowed),
                  report, ranks, fixed, save, log)


def interleaves(source: Source) -> bool:
    """Whether racers' batches may interleave on this loop (where the race can run at all,
    ``analysis.race.can_race``): loaders that switch inside an epoch, and a shuffled order (a sampler of
    the user's own keeps its order: closing rounds instead)."""
    return source.in_epoch and isinstance(getattr(source.template, "sampler", None), RandomSampler)


def local_ranks(ranks: Ranks) -> int:
    """Ranks on this node (torchrun's LOCAL_WORLD_SIZE): they share its cores."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", ranks.world)))
    except ValueError:
        return ranks.world


def empty_result(source: Source, info, options: LiveOptions, space, accelerator: bool):
    """The ScanResult the windows are recorded in, as a scan's trials."""
    from loadtune.model.results import ScanResult, SpecInfo
    from loadtune.model.settings import ScanSettings

    dataset = source.dataset
    try:
        length = len(dataset) if dataset is not None else None
    except TypeError:
        length = None
    form = source.form
    spec = SpecInfo(None, None, None, type(dataset).__qualname__ if dataset is not None else "unknown", length,
                    isinstance(dataset, IterableDataset), True, "collate_fn" in form.args,
                    loader=None if form.form == "dataset" else form.form, loader_name=form.name, loader_args=list(form.own_args))
    device = "cuda:0" if accelerator else "cpu"
    default = TrialConfig(source.batch_size, 0, False, None, False, "sync" if accelerator else "none")
    opts = options.scan_options(source.batch_size, space, device, form.shuffle, form.drop_last)
    settings = ScanSettings(options=opts, device=device, references=[default.key])
    return ScanResult(spec=spec, machine=info, settings=settings)


def default_log(text: str) -> None:
    """Logged at INFO on ``loadtune.autotune``; written to stderr when logging is not set up to show it."""
    if log_.isEnabledFor(logging.INFO) and log_.hasHandlers():
        log_.info(text)
    else:
        print(text, file=sys.stderr, flush=True)


def autotune(dataset: Any, batch_size: int | None = None, *, save: str | Path | None = None,
             log: bool | Callable[[str], None] = True, distributed: bool | None = None, **kwargs: Any) -> AutoLoader:
    """A loader to iterate like ``DataLoader(dataset, batch_size, **kwargs)`` that tunes num_workers,
    prefetch_factor and pin_memory on the live loop, then runs as a plain DataLoader with the best.

    ``dataset``: a Dataset or IterableDataset (``kwargs`` are then DataLoader arguments: shuffle,
    sampler, collate_fn, drop_last...; a knob given there is kept fixed), a factory ``loader(**knobs)``
    or a DataLoader. Options (docs/autotune.md): ``tune_fraction``, ``tune_seconds``, ``tune_epochs``,
    ``workers``, ``prefetch``, ``block_s``, ``min_blocks``, ``max_blocks``, ``target_spread``,
    ``noise_floor``, ``confirm``, ``seed``. ``save``: write the result as loadtune's JSON (``loadtune show``).
    ``log``: the summary once settled (True: logging or stderr; a callable; False: none)."""
    names = LiveOptions.names()
    options = LiveOptions(**{k: v for k, v in kwargs.items() if k in names})
    options.validate()
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise AutotuneError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    fixed, args = split_fixed({k: v for k, v in kwargs.items() if k not in names})
    source = make_source(dataset, batch_size, args)
    sink = default_log if log is True else (log or None)
    return AutoLoader(source, options, fixed, Ranks(distributed), save, sink)
