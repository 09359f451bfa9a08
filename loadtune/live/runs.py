"""The live loaders while autotune tunes: the one running, the racers alive together, and those left
behind that still deliver what their workers hold.

A switch never drops a batch: the loader left behind has its ``Handout`` closed and goes on the
``draining`` list, and ``Runs.fetch`` hands the loop what the draining loaders still hold, oldest
first, before the running loader's next batch. So the epoch's batches keep the order they were
handed out in, and each is delivered once (docs/autotune.md#nothing-lost-nothing-repeated).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from loadtune.engine.loaders import start
from loadtune.engine.trial.transfer import batch_size_of
from loadtune.live.forms import Source
from loadtune.live.order import EpochOrder, Handout
from loadtune.live.report import Cost
from loadtune.live.tuner import AutotuneError
from loadtune.model.config import TrialConfig

CLOCK = time.perf_counter


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


@dataclass(frozen=True)
class Delivery:
    """A batch handed to the loop: the loader it came from, when the loop asked for it and when it came
    (the clock's readings), and its samples. Its interval ends when the loop asks for the next one."""

    run: Run
    requested: float
    got: float
    samples: int


def distinct(runs: Iterable[Run | None]) -> list[Run]:
    """``runs`` without None and without repeats, in order (the running loader is often a racer too)."""
    return list({id(r): r for r in runs if r is not None}.values())


@dataclass
class Runs:
    """The loaders alive now. ``active``: the one the loop draws from (the settled one once tuned);
    ``racers``: the contenders' loaders while a leg runs; ``draining``: loaders left behind, delivering
    what they hold before anything newer."""

    source: Source
    order: EpochOrder | None  # the epoch's shared order; None: one config per epoch
    cost: Cost
    active: Run | None = None
    racers: dict[TrialConfig, Run] = field(default_factory=dict)
    draining: list[Run] = field(default_factory=list)

    def alive(self) -> list[Run]:
        """The racers and the running loader, each once."""
        return distinct((*self.racers.values(), self.active))

    def iterating(self) -> bool:
        """Some loader is still inside its epoch (the loop left before the epoch's end)."""
        return any(r.iterator is not None for r in self.alive())

    # -- starting and leaving loaders ---------------------------------------------------------------
    def launch(self, config: TrialConfig, start: bool = True) -> Run:
        handout = Handout(self.order) if self.order is not None else None
        try:
            with no_worker_warning():
                run = Run(config, self.source.build(config, handout), handout)
        except (TypeError, ValueError) as exc:
            raise AutotuneError(f"autotune could not build the loader of {config.label()}: {exc}") from None
        if start and (self.order is None or not self.order.exhausted):
            run.start()
        self.cost.loaders += 1
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

    def switch_to(self, config: TrialConfig) -> Run:
        """``config``'s new loader runs from here; the running one is left behind."""
        self.retire(self.active)
        self.active = self.launch(config)
        return self.active

    def line_up(self, configs: tuple[TrialConfig, ...]) -> None:
        """The racers of a leg alive together: a running loader kept where it races, the others left
        behind, the missing ones started."""
        runs = [r for r in (*self.racers.values(), self.active) if r is not None]
        for config in configs:
            if config not in self.racers:
                self.racers[config] = next((r for r in runs if r.config == config), None) or self.launch(config)
        for run in distinct(runs):
            if run.config not in configs:
                self.racers.pop(run.config, None)
                self.retire(run)
        for run in self.racers.values():
            if run.iterator is None and not self.order.exhausted:
                run.start()
        self.active = None

    def keep_only(self, config: TrialConfig) -> Run:
        """``config``'s loader runs from here on, alone (a running loader, if one has that config); the
        others deliver what they hold first."""
        runs = self.alive()
        keep = next((r for r in runs if r.config == config), None)
        if keep is None:
            keep = self.launch(config, start=any(r.iterator is not None for r in runs))
        for run in runs:
            if run is not keep:
                self.retire(run)
        self.active, self.racers = keep, {}
        return keep

    def start_racers(self) -> None:
        """Every racer starts its epoch (a leg goes on across the epoch's end)."""
        for run in self.racers.values():
            run.start()

    def start_active(self) -> None:
        if self.active is not None and self.active.iterator is None:
            self.active.start()

    def stop_draining(self) -> None:
        for run in self.draining:
            run.shutdown()
        self.draining = []

    def stop_all(self) -> None:
        """The loop left the epoch: every loader stops, nothing runs."""
        for run in (*self.racers.values(), self.active):
            if run is not None:
                run.shutdown()
        self.active, self.racers = None, {}

    # -- the loop's next batch ------------------------------------------------------------------
    def fetch(self) -> tuple[Any, Delivery] | None:
        """The next batch: what discarded loaders still hold first, in order, then the running one's."""
        while self.draining:
            old = self.draining[0]
            t_req = CLOCK()
            try:
                batch = next(old.iterator)
            except StopIteration:
                old.shutdown()
                self.draining.pop(0)
                self.cost.switch_s += CLOCK() - t_req
                continue
            return batch, Delivery(old, t_req, CLOCK(), self.samples_of(old, batch))
        run = self.active
        got = self.take(run) if run is not None and run.iterator is not None else None
        return got or self.leftover()

    def leftover(self) -> tuple[Any, Delivery] | None:
        """At the epoch's end of a race, what the resting racers still hold (their order is exhausted)."""
        for run in self.racers.values():
            while run.iterator is not None:
                got = self.take(run)
                if got is not None:
                    return got
        return None

    def take(self, run: Run) -> tuple[Any, Delivery] | None:
        """``run``'s next batch with its timing; None once its epoch has ended (its iterator is dropped)."""
        t_req = CLOCK()
        try:
            batch = next(run.iterator)
        except StopIteration:
            run.iterator = None
            return None
        return batch, Delivery(run, t_req, CLOCK(), self.samples_of(run, batch))

    def samples_of(self, run: Run, batch: Any) -> int:
        if run.handout is not None:
            return run.handout.delivered()
        return batch_size_of(batch) or run.config.batch_size
