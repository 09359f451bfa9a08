"""autotune's state machine: what the loop's batches and epochs do to the tuning, in one place.

``Tuning`` is in one ``Phase`` at a time, with that phase's data: a window (``meter.Window``) while
SEARCHING, a leg (``race.LiveLeg``) while RACING. ``loader.AutoLoader`` tells it three events, and
``enter`` is the one place the phase changes::

    event          phase        -> phase       when, and what else happens
    epoch_begins   IDLE         -> next_step   the first epoch; after one config's epoch, or one the loop left
                   SEARCHING    -> SEARCHING   the window goes on; it warms up again
                   RACING       -> RACING      every racer restarts; the cut turn runs again
    batch_done     SEARCHING    -> SEARCHING   timed; the warm-up's end sizes the blocks (the ranks agree)
                                -> next_step   a full block completes the window (the scan's rule), or the budget is spent
                   RACING       -> RACING      timed in the turn; a full block ends the turn, the next begins
                                -> next_step   the leg's turns are over (its whole turns kept as trials)
                                -> SETTLED     the budget is spent
    epoch_ends     SEARCHING    -> IDLE        one config per epoch: the ranks judge its window
                   any tuning   -> IDLE        the loop left midway: the open window or leg is lost
                   SEARCHING, RACING           else the window (its cut block dropped) or the leg waits for the next epoch
                   any tuning   -> SETTLED     then: the epochs or the seconds are spent (or the search ended)
    next_step      (the tuner's) a config -> SEARCHING, a leg -> RACING, none (or none that fits) -> SETTLED

SETTLED is the end: the pick's loader runs, the others deliver what they hold first, and from the
next epoch on the loop iterates the settled DataLoader itself. Every batch of a tuning epoch is
counted; only those of the running loader are timed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from loadtune.engine.trial.meter import ready_batches
from loadtune.engine.trial.paired import in_flight
from loadtune.live.meter import Pending, Window, warmup_batches
from loadtune.live.order import EpochOrder
from loadtune.live.progress import Progress
from loadtune.live.race import Leg, LiveLeg
from loadtune.live.ranks import Ranks
from loadtune.live.report import LiveReport
from loadtune.live.runs import CLOCK, Delivery, Run, Runs, quiet_iter
from loadtune.live.tuner import LiveOptions, Tuner
from loadtune.model.config import TrialConfig
from loadtune.model.results import Recommendation
from loadtune.search.strategy import Proposal


class Phase(Enum):
    IDLE = "idle"  # nothing measured: before the first step, between epochs of one config each, or between two steps
    SEARCHING = "searching"  # a window times one config on the running loader
    RACING = "racing"  # a leg: the contenders' loaders alive together, taking turns
    SETTLED = "settled"  # tuning is over: the pick's loader runs


@dataclass(eq=False)
class Tuning:
    """The tuning of one AutoLoader: its phase and the phase's data (``window`` only while SEARCHING,
    ``leg`` only while RACING), the loaders alive, the budget used, the tuner's search."""

    tuner: Tuner
    options: LiveOptions
    runs: Runs
    progress: Progress
    report: LiveReport
    ranks: Ranks
    fixed: dict  # the knobs the user set
    save_path: str | Path | None
    log: Callable[[str], None] | None
    phase: Phase = Phase.IDLE
    window: Window | None = None
    leg: LiveLeg | None = None
    before: Run | None = None  # the racer whose turn came before the current one

    @property
    def order(self) -> EpochOrder | None:
        return self.runs.order

    def enter(self, phase: Phase, window: Window | None = None, leg: LiveLeg | None = None) -> None:
        """The one place the phase changes, and its data with it."""
        self.phase, self.window, self.leg = phase, window, leg

    def plain(self) -> bool:
        """Settled, nothing left to drain: the next epoch iterates the settled DataLoader itself."""
        return self.phase is Phase.SETTLED and not self.runs.draining

    def plain_epoch(self) -> Iterator[Any]:
        """A settled epoch: the settled DataLoader's own iterator, drawing the epoch's shared order."""
        if self.order is not None:
            self.order.new_epoch()
        return quiet_iter(self.runs.active.loader)

    # -- the events -------------------------------------------------------------------------------
    def epoch_begins(self) -> None:
        """An epoch of tuning begins: its order, the budget at the first, then the phase goes on."""
        progress = self.progress
        if self.order is not None:
            self.order.new_epoch()
            progress.epoch_batches = self.ranks.least(self.order.length())
        progress.delivered = 0
        if progress.t0 is None:
            progress.begin(CLOCK())
        if self.phase is Phase.RACING:  # a leg goes on across the epoch's end: every racer starts its epoch
            self.runs.start_racers()
            self.next_turn(CLOCK())
        elif self.phase is Phase.IDLE:
            self.next_step(CLOCK())
        self.runs.start_active()

    def batch_done(self, got: Delivery, now: float) -> None:
        """The previous batch's interval is over (the loop asks again): count it, time it in the
        running config's window or the race's turn, and act on a finished warm-up or block."""
        if self.phase is Phase.SETTLED:
            return  # nothing to time
        cost = self.report.cost
        cost.batches += 1
        cost.samples += got.samples
        if self.phase is Phase.RACING:
            self.race_batch(got, now)
        elif self.phase is Phase.SEARCHING and got.run is self.runs.active:
            self.window_batch(got, now)
        # else a discarded loader's batch: trained on, timed in no window

    def epoch_ends(self, now: float) -> None:
        """The epoch ended (or the loop left it): loaders left behind are stopped; with one config per
        epoch its window is judged; the budget of epochs and seconds is checked."""
        self.runs.stop_draining()
        if self.phase is Phase.SETTLED:
            self.runs.active.iterator = None  # the next epoch iterates the settled DataLoader itself
            return
        if self.order is None:
            self.judge_epoch(now)
        elif self.runs.iterating():  # the loop left mid-epoch
            self.enter(Phase.IDLE)  # the window (or the leg) is lost; its configs are tried again
            self.runs.stop_all()
        else:  # the epoch's end: a window or a leg goes on in the next, after its start-up
            self.rewarm()
        over = self.progress.epochs_over(now, self.ranks)
        if over is not None:
            if self.phase is Phase.RACING:
                self.end_leg()
            self.close_window(now)
            self.tuner.end(over)
        if self.tuner.stop is not None:
            self.settle(now)

    # -- the next step ----------------------------------------------------------------------------
    def next_step(self, now: float) -> None:
        """The tuner's next step: a config's window, a leg of the race, or the end of tuning."""
        proposal = self.tuner.next()
        if isinstance(proposal, Leg):
            self.race(proposal, now)
            return
        if proposal is not None and self.order is not None:
            running = self.runs.active.config if self.runs.active is not None else None
            why = self.progress.window_misfit(proposal.config, running, self.report.cost.batches)
            if why is not None:
                self.tuner.end(why)
                proposal = None
        if proposal is None:
            self.settle(now)
        else:
            self.search(proposal, now)

    def search(self, proposal: Proposal, now: float) -> None:
        """Open ``proposal``'s window: on the running loader if it has this config (no start-up to wait
        for, no backlog to drain), else on a new loader, the running one left to deliver what it holds."""
        config, run = proposal.config, self.runs.active
        if run is not None and run.config == config and run.iterator is not None:
            self.enter(Phase.SEARCHING, window=Window(config, proposal.round, 0, now, block_batches=self.progress.last_block))
            return
        if run is not None and run.config == config:  # between epochs: the same loader, iterated again
            run.first = True
        else:
            self.runs.switch_to(config)
        self.enter(Phase.SEARCHING, window=Window(config, proposal.round, warmup_batches(config), now))

    def race(self, leg: Leg, now: float) -> None:
        """The racers' loaders alive together (the running one kept where it races), then the first turn."""
        self.runs.line_up(leg.configs)
        sizes = {c: self.progress.block_size(c, self.interval_of(c)) for c in leg.configs}
        self.enter(Phase.RACING, leg=LiveLeg.begin(leg, sizes, self.options.seed + leg.number))
        self.before = None
        self.next_turn(now)

    def settle(self, now: float) -> None:
        """Tuning is over: run the pick from here on (a running loader, if one has the pick's config;
        the others deliver what they hold first)."""
        rec = self.tuner.decide()
        active = self.runs.active
        config = rec.config if rec is not None else active.config if active is not None else self.fallback()
        self.runs.keep_only(config)
        self.enter(Phase.SETTLED)
        self.finish(rec, now)

    # -- SEARCHING: a window ----------------------------------------------------------------------
    def window_batch(self, got: Delivery, now: float) -> None:
        window, run = self.window, got.run
        wait = got.got - got.requested
        if run.first:
            run.first = False
            window.startup_s = run.iter_s + wait
            self.report.cost.startup_s += window.startup_s
        self.progress.note_step(now - got.got)
        if self.progress.past_shared():
            return  # past the batches every rank has: no exchange here
        event = window.add(now - got.requested, wait, got.samples)
        if event == "warmup":
            self.warmed(window)
        elif event == "block":
            self.blocked(window, now)

    def warmed(self, window: Window) -> None:
        if window.block_batches:  # warmed up again after an epoch's start: discarded, its blocks go on
            window.take()
            return
        window.warmup = window.take()
        size = self.progress.block_size(window.config, window.typical_interval)
        if self.order is not None:  # every rank times blocks of the same batches
            size = int(self.ranks.most(size))
            window.startup_s = self.ranks.most(window.startup_s or 0.0)
        window.block_batches = self.progress.last_block = size

    def blocked(self, window: Window, now: float) -> None:
        block = window.take()
        if self.order is None:  # one config per epoch: ranks compare their windows at its end
            window.blocks.append(block)
            return
        progress = self.progress
        block, progress.elapsed = self.ranks.slowest(block, now - progress.t0)
        window.blocks.append(block)
        progress.last_interval = block.seconds / max(1, block.batches)
        over = progress.budget_over(self.report.cost.batches)
        if over is None and not self.options.timing().enough([b.rate for b in window.blocks]):
            return
        self.close_window(now)
        if over is not None:
            self.tuner.end(over)
        self.next_step(now)

    def close_window(self, now: float) -> None:
        """Record the running window if it holds enough blocks to judge (a cut-short one is dropped)."""
        window = self.window
        self.enter(Phase.IDLE)
        if window is not None and len(window.blocks) >= self.options.min_blocks:
            self.tuner.record(window.trial(now))

    # -- RACING: a leg ----------------------------------------------------------------------------
    def interval_of(self, config: TrialConfig) -> float:
        """Seconds a batch of ``config`` in its windows so far (0 when it has none)."""
        pooled = self.tuner.result.config_result(config)
        rate = pooled.estimate.median if pooled is not None and pooled.estimate is not None else 0.0
        return config.batch_size / rate if rate > 0 else 0.0

    def next_turn(self, now: float) -> None:
        """The next racer's turn: the leg's next config, or the end of the leg and the tuner's next step."""
        self.before = self.runs.active
        config = self.leg.next_turn()
        if config is None:
            self.end_leg()
            self.next_step(now)
            return
        run = self.runs.active = self.runs.racers[config]
        ready = ready_batches(run.iterator) if run.iterator is not None else None
        self.leg.resume(ready or 0, self.before_settled())

    def before_settled(self) -> bool:
        """The racer before has no batch in flight: its workers have stopped using the cores."""
        before = self.before
        return before is None or before is self.runs.active or before.iterator is None or in_flight(before.iterator) == 0

    def race_batch(self, got: Delivery, now: float) -> None:
        """A batch of the race: untimed at a turn's start, then timed into the turn's block; a full
        block ends the turn (and tuning, when the budget is spent)."""
        leg = self.leg
        if got.run is not self.runs.active or leg.current is None:
            return  # what a resting racer held at the epoch's end: trained on, timed in no block
        if leg.pending is None:
            leg.untimed_batch(self.before_settled())
            return
        if not leg.timed_batch(now - got.requested, got.got - got.requested, got.samples):
            return
        self.progress.elapsed = now - self.progress.t0
        over = self.progress.budget_over(self.report.cost.batches)
        if over is not None:
            self.end_leg()
            self.tuner.end(over)
            self.settle(now)
            return
        self.next_turn(now)

    def end_leg(self) -> None:
        """The leg's whole turns, kept as each racer's trial of it (a leg without one keeps nothing)."""
        leg = self.leg
        self.enter(Phase.IDLE)
        for trial in leg.trials():
            if trial.ok:
                self.tuner.record(trial)

    # -- epoch boundaries -------------------------------------------------------------------------
    def rewarm(self) -> None:
        """At the epoch's end, the open window or leg waits for the next epoch: there the window warms
        up again (its loader's start-up backlog, then a burst, untimed), and the leg's cut turn is run
        again from its start. A window's block cut by the end is dropped; its whole blocks stay."""
        if self.phase is Phase.RACING:
            leg = self.leg
            leg.turns.appendleft(leg.current)
            leg.current, leg.pending, self.runs.active = None, None, None
        elif self.phase is Phase.SEARCHING:
            window = self.window
            window.pending, window.warmup_left = Pending(), warmup_batches(window.config)

    def judge_epoch(self, now: float) -> None:
        """One config per epoch: the ranks compare their windows, and the slowest rank's is kept."""
        window = self.window
        self.enter(Phase.IDLE)
        active = self.runs.active
        if active is not None and active.iterator is not None:
            active.shutdown()  # the loop left mid-epoch
        if window is None:
            return
        mine = window.trial(now) if len(window.blocks) >= self.options.min_blocks else None
        trials = self.ranks.gather(mine)
        if any(t is None for t in trials):
            self.tuner.end(f"an epoch is too short to time {self.options.min_blocks} blocks of {window.config.label()}")
            return
        self.tuner.record(min(trials, key=lambda t: t.estimate.median))

    # -- SETTLED ----------------------------------------------------------------------------------
    def fallback(self) -> TrialConfig:
        """Nothing measured: PyTorch's defaults where the user left them possible, else the search's first config."""
        search = self.tuner.search
        return search.references[0] if search.references else search.base(self.runs.source.batch_size, min(search.space.workers))

    def finish(self, rec: Recommendation | None, now: float) -> None:
        report = self.report
        report.settled, report.config, report.stop = True, self.runs.active.config, self.tuner.stop
        report.untried = list(self.tuner.untried)
        report.cost.seconds = now - (self.progress.t0 or now)
        result = report.result
        result.recommendation, result.state = rec, "complete"
        result.notes += self.notes()
        if self.ranks.rank == 0:
            if self.save_path is not None:
                report.save(self.save_path)
            if self.log is not None:
                self.log(report.text())

    def notes(self) -> list[str]:
        cost = self.report.cost
        notes = [f"tuned by loadtune.autotune on the live training loop ({self.report.mode}): the real step, "
                 f"{cost.seconds:.1f} s of tuning, {cost.batches} batches trained on meanwhile; tuning ended: {self.tuner.stop}"]
        if self.tuner.untried:
            notes.append("the search was cut short: it had yet to try "
                         + ", ".join(c.label() for c in self.tuner.untried) + " (a longer tuning budget would try them)")
        config = self.runs.active.config
        if config.num_workers and config.persistent_workers and "persistent_workers" not in self.fixed:
            pick = self.tuner.result.config_result(config)
            startup = pick.startup_s if pick is not None else None
            notes.append("persistent_workers=True keeps the tuned workers across epochs (it changes nothing inside one, "
                         "so it was not measured)" + (f"; a restart costs about {startup:.2f} s here" if startup else ""))
        return notes
