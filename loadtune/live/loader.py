"""``loadtune.autotune``: a loader used like a DataLoader that tunes itself on the live training loop.

While it tunes, each config gets a window of the loop (``meter.Window``); a switch closes the running
loader's ``Handout`` (it delivers what its workers hold, then ends) and starts the next config's
loader, which goes on with the same epoch's order. Then the contenders race: their loaders alive
together, the loop's batches taken from them in turns (``live/race.py``). Tuning goes on into the
next epochs until the search and the race end, ``TUNE_EPOCHS`` epochs at most unless told otherwise.
Once tuned, the settled config's loader is the DataLoader the loop iterates, directly: nothing of
loadtune stays between the loop and its batches but the batch sampler that hands out the shared order.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data import IterableDataset, RandomSampler

from loadtune.engine.distributed.layout import cores_per_rank
from loadtune.engine.loaders import start
from loadtune.engine.trial.meter import ready_batches
from loadtune.engine.trial.paired import in_flight
from loadtune.engine.trial.transfer import batch_size_of
from loadtune.live.forms import Source, make_source, split_fixed
from loadtune.live.meter import MAX_BLOCK_BATCHES, MIN_BLOCK_BATCHES, Pending, Window, block_batches, warmup_batches, whole_bursts
from loadtune.live.order import EpochOrder, Handout
from loadtune.live.race import Leg, LiveLeg
from loadtune.live.ranks import Ranks
from loadtune.live.report import LiveReport
from loadtune.live.tuner import AutotuneError, Budget, LiveOptions, Tuner, make_search, search_space
from loadtune.model.config import TrialConfig
from loadtune.model.results import Recommendation
from loadtune.search.strategy import Proposal

CLOCK = time.perf_counter
STEP_MEMORY = 256  # per-batch step times kept for sizing blocks
PLANNED_WINDOWS = 8  # windows a budget is sized for: the worker sweep, a refinement or two, the side-by-side round
# epochs tuning may take at most (configs switching inside an epoch), unless tune_epochs says otherwise: an
# epoch of a long run ends tuning early anyway, and a short one (seconds) costs little each
TUNE_EPOCHS = 20
log_ = logging.getLogger("loadtune.autotune")


@contextlib.contextmanager
def no_worker_warning() -> Iterator[None]:
    """Without PyTorch's warning that the workers outnumber the cores: autotune tries such counts on
    purpose, and settles on one only where it measured faster (workers that wait on storage need no
    core each)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        yield


def quiet_iter(loader: Any) -> Iterator[Any]:
    with no_worker_warning():
        return start(loader)


@dataclass
class Run:
    """One config's loader and its iterator (None between epochs)."""

    config: TrialConfig
    loader: Any
    handout: Handout | None
    iterator: Iterator[Any] | None = None
    iter_s: float = 0.0  # ``iter(loader)``: starting the workers, in the loop's own thread
    first: bool = True  # its first batch is still to come: the wait for it is start-up

    def start(self) -> None:
        t0 = CLOCK()
        self.iterator = quiet_iter(self.loader)
        self.iter_s = CLOCK() - t0

    def shutdown(self) -> None:
        """Stop its workers now (a discarded loader's, persistent or not), not when it is collected."""
        it, self.iterator = self.iterator, None
        for each in (it, getattr(self.loader, "_iterator", None)):  # a persistent loader keeps its own
            stop = getattr(each, "_shutdown_workers", None)
            if stop is not None:
                stop()


class AutoLoader:
    """Iterate it as a DataLoader, epoch after epoch. ``report()`` says what it decided."""

    def __init__(self, source: Source, options: LiveOptions, fixed: dict, ranks: Ranks,
                 save: str | Path | None, log: Callable[[str], None] | None):
        from loadtune.engine.machine import collect

        self.source, self.options, self.ranks, self.save_path, self.log = source, options, ranks, save, log
        self.fixed = fixed
        info = collect()
        local = local_ranks(ranks)
        accelerator = info.has_accelerator
        space = search_space(source.batch_size, fixed, options, cores_per_rank(info.usable_cores, local))
        self.order = EpochOrder(source.template.batch_sampler) if source.in_epoch else None
        races = options.race_legs > 0 and options.confirm > 0 and races_here(source, ranks)
        search = make_search(space, options, accelerator, info.usable_cores, local, info.memory_available_bytes, races)
        self.tuner = Tuner(empty_result(source, info, options, space, accelerator), search, options, races)
        self.report_ = LiveReport(self.tuner.result, "in-epoch" if self.order is not None else "across epochs",
                                  source.form, ranks.world)
        self.epochs_allowed = options.tune_epochs or (TUNE_EPOCHS if self.order is not None else 10**9)
        self.budget: Budget | None = None
        self.active: Run | None = None
        self.live: dict[TrialConfig, Run] = {}  # the racers' loaders, while the race runs
        self.leg: LiveLeg | None = None
        self.before: Run | None = None  # the racer whose turn came before the current one
        self.final: Run | None = None
        self.window: Window | None = None
        self.draining: list[Run] = []
        self.steps: list[float] = []
        self.last_block = MIN_BLOCK_BATCHES
        self.last_interval = 0.0  # seconds per batch of the last block timed (as the ranks agree)
        self.epoch = 0
        self.delivered = 0  # batches delivered this epoch
        self.epoch_batches = 0  # the fewest any rank has this epoch: no exchange past it
        self.t0: float | None = None  # the first tuned batch requested
        self.elapsed = 0.0  # tuning's time as the ranks agree on it (the longest any rank took)

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
        run = self.final or self.active
        return run.config if run else None

    def report(self) -> LiveReport:
        return self.report_

    def __iter__(self) -> Iterator[Any]:
        self.epoch += 1
        if self.final is not None and self.window is None and not self.draining:
            if self.order is not None:
                self.order.new_epoch()
            return quiet_iter(self.final.loader)
        return self.epoch_of_tuning()

    # -- one epoch while tuning -----------------------------------------------------------------
    def epoch_of_tuning(self) -> Iterator[Any]:
        if self.order is not None:
            self.order.new_epoch()
            self.epoch_batches = self.ranks.least(self.order.length())
        self.delivered = 0
        if self.t0 is None:
            self.t0 = CLOCK()
            self.budget = Budget(self.fraction_batches(), self.options.tune_seconds, self.epochs_allowed)
        if self.leg is not None:  # a leg goes on across the epoch's end: every racer starts its epoch
            for run in self.live.values():
                run.start()
            self.next_turn(CLOCK())
        elif self.window is None and self.final is None:
            self.next_window(CLOCK())
        for run in filter(None, (self.active,)):
            if run.iterator is None:
                run.start()
        previous = None
        try:
            while True:
                now = CLOCK()
                if previous is not None:
                    self.account(previous, now)
                got = self.fetch()
                if got is None:
                    break
                batch, previous = got
                self.delivered += 1
                yield batch
        finally:
            self.epoch_over(CLOCK())

    def fraction_batches(self) -> int | None:
        if self.options.tune_fraction is None or self.order is None:
            return None
        return max(1, int(self.options.tune_fraction * self.epoch_batches))

    def fetch(self) -> tuple[Any, tuple] | None:
        """The next batch: what discarded loaders still hold first, in order, then the running one's."""
        while self.draining:
            old = self.draining[0]
            t_req = CLOCK()
            try:
                batch = next(old.iterator)
            except StopIteration:
                old.shutdown()
                self.draining.pop(0)
                self.report_.cost.switch_s += CLOCK() - t_req
                continue
            return batch, (old, t_req, CLOCK(), self.samples_of(old, batch))
        run = self.active
        got = self.take(run) if run is not None and run.iterator is not None else None
        return got or self.leftover()

    def leftover(self) -> tuple[Any, tuple] | None:
        """At the epoch's end of a race, what the resting racers still hold (their order is exhausted)."""
        for run in self.live.values():
            while run.iterator is not None:
                got = self.take(run)
                if got is not None:
                    return got
        return None

    def take(self, run: Run) -> tuple[Any, tuple] | None:
        """``run``'s next batch with its timing; None once its epoch has ended (its iterator is dropped)."""
        t_req = CLOCK()
        try:
            batch = next(run.iterator)
        except StopIteration:
            run.iterator = None
            return None
        return batch, (run, t_req, CLOCK(), self.samples_of(run, batch))

    def samples_of(self, run: Run, batch: Any) -> int:
        if run.handout is not None:
            return run.handout.delivered()
        return batch_size_of(batch) or run.config.batch_size

    def account(self, previous: tuple, now: float) -> None:
        """The previous batch's interval is over (the loop asks again): count it, time it in the
        running config's window, and act on a finished warm-up or block."""
        run, t_req, t_got, samples = previous
        if self.final is not None and self.window is None:
            return  # settled: nothing to time
        cost = self.report_.cost
        cost.batches += 1
        cost.samples += samples
        if self.leg is not None:
            self.race_batch(run, now - t_req, t_got - t_req, samples, now)
            return
        window = self.window
        if window is None or run is not self.active:
            return  # a discarded loader's batch: trained on, timed in no window
        wait = t_got - t_req
        if run.first:
            run.first = False
            window.startup_s = run.iter_s + wait
            cost.startup_s += window.startup_s
        self.steps = (self.steps + [max(0.0, now - t_got)])[-STEP_MEMORY:]
        if self.order is not None and self.delivered >= self.epoch_batches:
            return  # past the batches every rank has: no exchange here
        event = window.add(now - t_req, wait, samples)
        if event == "warmup":
            self.warmed(window)
        elif event == "block":
            self.blocked(window, now)

    def warmed(self, window: Window) -> None:
        if window.block_batches:  # warmed up again after an epoch's start: discarded, its blocks go on
            window.take()
            return
        window.warmup = window.take()
        size = self.block_size(window.config, window.typical_interval)
        if self.order is not None:  # every rank times blocks of the same batches
            size = int(self.ranks.most(size))
            window.startup_s = self.ranks.most(window.startup_s or 0.0)
        window.block_batches = self.last_block = size

    def block_size(self, config: TrialConfig, interval: float) -> int:
        """A block's batches for ``config`` at ``interval`` seconds a batch: by time and the step's noise,
        within the budget's room, in whole bursts of its workers (those three always: a block of part
        of a burst times a burst or a gap)."""
        if self.options.block_batches:
            return self.options.block_batches
        return whole_bursts(min(block_batches(self.steps, interval, self.options.block_s), self.block_room()), config.num_workers)

    def block_room(self) -> int:
        """The most batches a block may take so that about ``PLANNED_WINDOWS`` windows fit the budget in
        batches (the first epoch, or its ``tune_fraction``): a noisy step gets fewer, longer blocks only
        where the budget has room, and otherwise a wider interval, which the decision weighs."""
        if self.order is None:
            return MAX_BLOCK_BATCHES
        batches = self.budget.batches if self.budget.batches is not None else self.epoch_batches * self.epochs_allowed
        return max(MIN_BLOCK_BATCHES, batches // (PLANNED_WINDOWS * self.options.max_blocks))

    def blocked(self, window: Window, now: float) -> None:
        block = window.take()
        if self.order is None:  # one config per epoch: ranks compare their windows at its end
            window.blocks.append(block)
            return
        block, self.elapsed = self.ranks.slowest(block, now - self.t0)
        window.blocks.append(block)
        self.last_interval = block.seconds / max(1, block.batches)
        over = self.budget.over(self.report_.cost.batches, self.elapsed)
        if over is None and not self.options.timing().enough([b.rate for b in window.blocks]):
            return
        self.close_window(now)
        if over is not None:
            self.tuner.end(over)
        self.next_window(now)

    def close_window(self, now: float) -> None:
        """Record the running window if it holds enough blocks to judge (a cut-short one is dropped)."""
        window, self.window = self.window, None
        if window is not None and len(window.blocks) >= self.options.min_blocks:
            self.tuner.record(window.trial(now))

    # -- switching ------------------------------------------------------------------------------
    def next_window(self, now: float) -> None:
        proposal = self.tuner.next()
        if isinstance(proposal, Leg):
            self.start_leg(proposal, now)
            return
        if proposal is not None and self.order is not None:
            why = self.window_misfit(proposal.config)
            if why is not None:
                self.tuner.end(why)
                proposal = None
        if proposal is None:
            self.settle(now)
        else:
            self.switch(proposal, now)

    def window_misfit(self, config: TrialConfig) -> str | None:
        """Why a window of ``config`` cannot end before tuning must: the budget, or the epoch's end."""
        same = self.active is not None and self.active.config == config
        backlog = 0 if self.active is None or same else warmup_batches(self.active.config)
        block = self.options.block_batches or whole_bursts(self.last_block, config.num_workers)
        need = backlog + (0 if same else warmup_batches(config)) + self.options.min_blocks * block
        left = self.epoch_batches - self.delivered
        if need > left:  # the window runs on into the next epochs, warming up again at each one's start
            need += math.ceil((need - left) / self.epoch_batches) * warmup_batches(config)
        if need > left + (self.epochs_allowed - self.epoch) * self.epoch_batches:
            last = "the first epoch" if self.epochs_allowed == 1 else f"the {self.epochs_allowed} epochs tuning may take"
            return f"{last} end before another window could"
        if self.budget.batches is not None and self.report_.cost.batches + need > self.budget.batches:
            return f"the tuning budget ({self.budget.batches} batches of the first epoch) ends before another window could"
        if self.budget.seconds is not None and self.elapsed + need * self.last_interval > self.budget.seconds:
            return f"the tuning budget ({self.budget.seconds:g} s) ends before another window could"
        return None

    def switch(self, proposal: Proposal, now: float) -> None:
        """Start ``proposal``'s window: on the running loader if it has this config (no start-up to wait
        for, no backlog to drain), else on a new loader, the running one left to deliver what it holds."""
        config, run = proposal.config, self.active
        if run is not None and run.config == config and run.iterator is not None:
            self.window = Window(config, proposal.round, 0, now, block_batches=self.last_block)
            return
        if run is not None and run.config == config:  # between epochs: the same loader, iterated again
            run.first = True
        else:
            self.retire(run)
            run = self.active = self.launch(config)
        self.window = Window(config, proposal.round, warmup_batches(config), now)

    # -- the race ---------------------------------------------------------------------------------
    def start_leg(self, leg: Leg, now: float) -> None:
        """The racers' loaders alive together (the running one kept where it races), then the first turn."""
        runs = [r for r in (*self.live.values(), self.active) if r is not None]
        for config in leg.configs:
            if config not in self.live:
                self.live[config] = next((r for r in runs if r.config == config), None) or self.launch(config)
        for run in {id(r): r for r in runs}.values():
            if run.config not in leg.configs:
                self.live.pop(run.config, None)
                self.retire(run)
        for run in self.live.values():
            if run.iterator is None and not self.order.exhausted:
                run.start()
        sizes = {c: self.block_size(c, self.interval_of(c)) for c in leg.configs}
        self.leg = LiveLeg.begin(leg, sizes, self.options.seed + leg.number)
        self.active, self.before = None, None
        self.next_turn(now)

    def interval_of(self, config: TrialConfig) -> float:
        """Seconds a batch of ``config`` in its windows so far (0 when it has none)."""
        pooled = self.tuner.result.config_result(config)
        rate = pooled.estimate.median if pooled is not None and pooled.estimate is not None else 0.0
        return config.batch_size / rate if rate > 0 else 0.0

    def next_turn(self, now: float) -> None:
        """The next racer's turn: the leg's next config, or the end of the leg and the tuner's next step."""
        self.before = self.active
        config = self.leg.next_turn()
        if config is None:
            self.end_leg()
            self.next_window(now)
            return
        run = self.active = self.live[config]
        ready = ready_batches(run.iterator) if run.iterator is not None else None
        self.leg.resume(ready or 0, self.settled())

    def settled(self) -> bool:
        """The racer before has no batch in flight: its workers have stopped using the cores."""
        before = self.before
        return before is None or before is self.active or before.iterator is None or in_flight(before.iterator) == 0

    def race_batch(self, run: Run, interval: float, wait: float, samples: int, now: float) -> None:
        """A batch of the race: untimed at a turn's start, then timed into the turn's block; a full
        block ends the turn (and tuning, when the budget is spent)."""
        leg = self.leg
        if run is not self.active or leg.current is None:
            return  # what a resting racer held at the epoch's end: trained on, timed in no block
        if leg.pending is None:
            leg.untimed_batch(self.settled())
            return
        if not leg.timed_batch(interval, wait, samples):
            return
        self.elapsed = now - self.t0
        over = self.budget.over(self.report_.cost.batches, self.elapsed)
        if over is not None:
            self.end_leg()
            self.tuner.end(over)
            self.settle(now)
            return
        self.next_turn(now)

    def end_leg(self) -> None:
        """The leg's whole turns, kept as each racer's trial of it (a leg without one keeps nothing)."""
        leg, self.leg = self.leg, None
        if leg is None:
            return
        for trial in leg.trials():
            if trial.ok:
                self.tuner.record(trial)

    def launch(self, config: TrialConfig, start: bool = True) -> Run:
        handout = Handout(self.order) if self.order is not None else None
        try:
            with no_worker_warning():
                run = Run(config, self.source.build(config, handout), handout)
        except (TypeError, ValueError) as exc:
            raise AutotuneError(f"autotune could not build the loader of {config.label()}: {exc}") from None
        if start and (self.order is None or not self.order.exhausted):
            run.start()
        self.report_.cost.loaders += 1
        return run

    def retire(self, run: Run | None) -> None:
        """A loader left behind: it hands out nothing more and delivers what it holds before the next one."""
        if run is None:
            return
        if run.handout is not None and run.iterator is not None:
            run.handout.close()
            self.draining.append(run)
        else:
            run.shutdown()

    def settle(self, now: float) -> None:
        """Tuning is over: run the pick from here on (a running loader, if one has the pick's config;
        the others deliver what they hold first)."""
        rec = self.tuner.decide()
        config = rec.config if rec is not None else self.active.config if self.active is not None else self.fallback()
        self.window = None
        runs = {id(r): r for r in (*self.live.values(), self.active) if r is not None}.values()
        keep = next((r for r in runs if r.config == config), None)
        if keep is None:
            keep = self.launch(config, start=any(r.iterator is not None for r in runs))
        for run in runs:
            if run is not keep:
                self.retire(run)
        self.active, self.live = keep, {}
        self.final = self.active
        self.finish(rec, now)

    def fallback(self) -> TrialConfig:
        """Nothing measured: PyTorch's defaults where the user left them possible, else the search's first config."""
        search = self.tuner.search
        return search.references[0] if search.references else search.base(self.source.batch_size, min(search.space.workers))

    def finish(self, rec: Recommendation | None, now: float) -> None:
        report = self.report_
        report.settled, report.config, report.stop = True, self.final.config, self.tuner.stop
        report.untried = list(self.tuner.untried)
        report.cost.seconds = now - (self.t0 or now)
        result = report.result
        result.recommendation, result.state = rec, "complete"
        result.notes += self.notes()
        if self.ranks.rank == 0:
            if self.save_path is not None:
                report.save(self.save_path)
            if self.log is not None:
                self.log(report.text())

    def notes(self) -> list[str]:
        cost = self.report_.cost
        notes = [f"tuned by loadtune.autotune on the live training loop ({self.report_.mode}): the real step, "
                 f"{cost.seconds:.1f} s of tuning, {cost.batches} batches trained on meanwhile; tuning ended: {self.tuner.stop}"]
        if self.tuner.untried:
            notes.append("the search was cut short: it had yet to try "
                         + ", ".join(c.label() for c in self.tuner.untried) + " (a longer tuning budget would try them)")
        config = self.final.config
        if config.num_workers and config.persistent_workers and "persistent_workers" not in self.fixed:
            pick = self.tuner.result.config_result(config)
            startup = pick.startup_s if pick is not None else None
            notes.append("persistent_workers=True keeps the tuned workers across epochs (it changes nothing inside one, "
                         "so it was not measured)" + (f"; a restart costs about {startup:.2f} s here" if startup else ""))
        return notes

    # -- epoch boundaries -----------------------------------------------------------------------
    def epoch_over(self, now: float) -> None:
        """The epoch ended (or the loop left it): loaders left behind are stopped; with one config per
        epoch its window is judged; the budget of epochs and seconds is checked."""
        for run in self.draining:
            run.shutdown()
        self.draining = []
        if self.final is not None:
            self.final.iterator = None  # the next epoch iterates the settled DataLoader itself
            return
        if self.order is None:
            self.judge_epoch(now)
        elif any(r.iterator is not None for r in (*self.live.values(), self.active) if r is not None):  # the loop left mid-epoch
            self.window = self.leg = None  # the window (or the leg) is lost; its configs are tried again
            for run in (*self.live.values(), self.active):
                if run is not None:
                    run.shutdown()
            self.active, self.live = None, {}
        else:  # the epoch's end: a window or a leg goes on in the next, after its start-up
            self.rewarm(now)
        over = self.epochs_over(now)
        if over is not None and self.leg is not None:
            self.end_leg()
        if over is not None:
            self.close_window(now)
            self.tuner.end(over)
        if self.tuner.stop is not None:
            self.settle(now)

    def rewarm(self, now: float) -> None:
        """At the epoch's end, the open window or leg waits for the next epoch: there the window warms
        up again (its loader's start-up backlog, then a burst, untimed), and the leg's cut turn is run
        again from its start. A window's block cut by the end is dropped; its whole blocks stay."""
        if self.leg is not None:
            self.leg.turns.appendleft(self.leg.current)
            self.leg.current, self.leg.pending, self.active = None, None, None
        elif self.window is not None:
            window = self.window
            window.pending, window.warmup_left = Pending(), warmup_batches(window.config)

    def epochs_over(self, now: float) -> str | None:
        if self.epoch >= self.epochs_allowed:
            return ("the first epoch ended" if self.epochs_allowed == 1
                    else f"the tuning budget ({self.epochs_allowed} epochs) is spent")
        seconds = self.options.tune_seconds
        if seconds is not None and self.ranks.most(now - self.t0) >= seconds:
            return f"the tuning budget ({seconds:g} s) is spent"
        return None

    def judge_epoch(self, now: float) -> None:
        """One config per epoch: the ranks compare their windows, and the slowest rank's is kept."""
        window, self.window = self.window, None
        if self.active is not None and self.active.iterator is not None:
            self.active.shutdown()  # the loop left mid-epoch
        if window is None:
            return
        mine = window.trial(now) if len(window.blocks) >= self.options.min_blocks else None
        trials = self.ranks.gather(mine)
        if any(t is None for t in trials):
            self.tuner.end(f"an epoch is too short to time {self.options.min_blocks} blocks of {window.config.label()}")
            return
        self.tuner.record(min(trials, key=lambda t: t.estimate.median))


def races_here(source: Source, ranks: Ranks) -> bool:
    """Whether the contenders may race on this loop: loaders that switch inside an epoch, one rank (the
    ranks' blocks would have to agree turn by turn), and a shuffled order, since racing interleaves the
    racers' batches (a sampler of the user's own keeps its order: closing rounds instead)."""
    return source.in_epoch and ranks.world == 1 and isinstance(getattr(source.template, "sampler", None), RandomSampler)


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
