"""Live trial processes timed in turns: ``check --against``'s two versions of the user's data code
(docs/ci.md) and a scan's race of contenders (``engine/race.py``).

Each side is a live trial process of its own. Two versions of one module cannot share an interpreter,
so for ``check --against`` each side (the head: the work tree; the base: a checkout of the revision
compared against) runs with its own folder as working directory and on ``sys.path`` (``Checkout``, run
before its spec loads). The race's contenders could share one, but must not: a loader that forks its
workers makes every page of its process copy-on-write, and a neighbour loading in that process (one
without workers, above all) paid for those copies in its own blocks and read up to 3x slow
(benchmarks/HISTORY.md; docs/measuring.md, "The race").

After every side has warmed up, the parent tells them in turn to time one short block
(``Kind.TURN``), in the order the caller gives (each turn the reverse of the one before, or
shuffled), so that another process's load, a pace that changes every few seconds or drift hit every
side alike. In a race a side's workers are stopped after its block and go on at its next one
(``paired.frozen_turn``); for ``check --against`` (whose error rates were measured so) they finish
what they were asked for before the next side's block starts, and before the side's own next block
the batches they finished ahead are consumed untimed (``paired.settle`` and ``paired.timed_turn``).
Either way every block times steady-state work, not another side's backlog.

Each side of a check reports where the spec's own modules were loaded from (``Kind.ORIGINS``) before
it is timed, so that the caller can refuse a base that imported the head's code (an editable
install's import hook ignores ``sys.path``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path

from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.harness import Ending, OnEvent, TrialProcess, settle
from loadtune.engine.trial.measure import batch_sizes, finish_trial
from loadtune.engine.trial.meter import SizeTally
from loadtune.engine.trial.setup import TrialFailure
from loadtune.engine.trial.paired import SETTLE_BLOCKS, freezable, freeze, frozen_turn, open_meters, timed_turn
from loadtune.engine.trial.paired import settle as settle_workers
from loadtune.engine.trial.protocol import Kind, Message, TrialRequest, TrialRun
from loadtune.model.paired import alternating
from loadtune.model.trial import Block, Trial, TrialError

HEAD, BASE = "head", "base"
VENDORED = ("site-packages", "dist-packages")  # installed packages: never the user's tree, wherever the environment lives


def moved(path: str, source: str, target: str, exists: Callable[[str], bool] = os.path.isdir) -> str:
    """``path`` under ``source`` as the same place under ``target``, where that exists (a folder only the
    other tree has, or an environment inside it, stays as it is); other paths unchanged."""
    if not Path(path).is_absolute() or any(part in VENDORED for part in Path(path).parts):
        return path  # "" (the working directory, moved on its own) and import hooks' markers stay
    try:
        rest = Path(path).resolve().relative_to(Path(source).resolve())
    except ValueError:
        return path
    there = str(Path(target) / rest)
    return there if exists(there) else path


@dataclass(frozen=True)
class Checkout:
    """Run in a side's process before its spec loads: the working directory and the ``sys.path`` entries
    that point into the other side's tree are pointed at this side's own (a ``PYTHONPATH=src`` or a
    ``.pth`` entry then imports this revision's package). Picklable by value, for the fork server."""

    root: str  # this side's tree
    other: str  # the other side's tree

    def __call__(self) -> None:
        os.chdir(moved(os.getcwd(), self.other, self.root))
        sys.path[:] = [moved(entry, self.other, self.root) for entry in sys.path]


def module_origins(roots: tuple[str, ...]) -> dict[str, str]:
    """The loaded modules whose files lie in one of the trees (installed packages and loadtune's own left
    out): module name -> file."""
    found = {}
    resolved = [Path(r).resolve() for r in roots]
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or name.split(".")[0] == "loadtune" or any(p in VENDORED for p in Path(file).parts):
            continue
        where = Path(file).resolve()
        if any(where.is_relative_to(root) for root in resolved):
            found[name] = str(where)
    return found


@dataclass(frozen=True)
class SideEntry:
    """The child's entry: say where the spec's modules came from (``roots``: the trees whose modules are
    reported; none for a race), build and warm up the loader, then time one block per ``Kind.TURN``
    from the parent until it says stop (a TURN of None). ``whole_epochs``: as ``meter.build_meter``
    (a race cuts its blocks by time, so that neighbouring blocks stay neighbours)."""

    roots: tuple[str, ...] = ()
    whole_epochs: bool = True
    frozen: bool = False  # rest with its workers stopped (``paired.frozen_turn``) where they can be found

    def __call__(self, run: TrialRun) -> None:
        import torch

        if self.roots:
            run.emit(Kind.ORIGINS, module_origins(self.roots))
        request = run.request
        device, timing, config = torch.device(request.device), request.timing, request.config
        deadline = time.perf_counter() + timing.max_s
        meters, firsts = open_meters({SIDE: (run.spec, config)}, device, timing, request.options, request.workload,
                                     deadline, lambda role, kind, payload: run.emit(kind, payload), self.whole_epochs)
        meter = meters[SIDE]
        if meter.count.sizes is not None:
            meter.count.sizes = SizeTally()  # the turns' batches, not the warm-up's
        frozen = self.frozen and freezable(meter, config)
        if not frozen:
            settle_workers(meter, min(deadline, time.perf_counter() + timing.block_s))  # then: ready for turns
        meter.release()  # a cold state: the warm-up's pages, which every side read alike, must go with the first drop
        if frozen:
            freeze(meter)

        def turn(block_s: float) -> Block:
            if frozen:
                return frozen_turn(meter, config, block_s, deadline)
            block = timed_turn(meter, config, block_s, deadline)
            cap = SETTLE_BLOCKS * max(block_s, block.seconds)
            settle_workers(meter, min(deadline, time.perf_counter() + cap))  # before the next side's block
            meter.release()  # after the settle's reads, untimed: the parent drops the files before the next turn
            return block

        def turns() -> None:
            run.emit(Kind.READY)
            try:
                while (block_s := run.conn.recv().payload) is not None and time.perf_counter() < deadline:
                    block = turn(block_s)
                    if time.perf_counter() >= deadline:
                        break  # cut by the deadline: no block, and the side ends, which ends the turns
                    run.emit(Kind.BLOCK, block)
                # how its batches vary, as a trial alone records it; its screening trial already warned
                batch_sizes(meter.count, config.batch_size, run.emit, warn=False)
            finally:
                if frozen:
                    freeze(meter, stop=False)  # its workers must hear the loader's shutdown

        # no load reading: the other sides' blocks, timed meanwhile, would read as outside load
        finish_trial(turns, device, config, firsts[SIDE], run.emit, run.measured, load=False)
        del meters  # with them the loader: workers shut down inside the trial


SIDE = "side"  # the one loader of a side's process


def turns(first: str, pairs: int) -> list[tuple[str, str]]:
    """The order of a check's two sides in each turn: ``first`` first, then the reverse, and so on."""
    return alternating((first, BASE if first == HEAD else HEAD), pairs)


Origins = dict[Hashable, dict[str, str]]  # side -> module -> file
Sides = dict[Hashable, tuple[SpecRef | LoadedSpec, TrialRequest]]  # each side's spec and request (its entry a SideEntry)


def run_in_turns(sides: Sides, orders: Iterable[tuple[Hashable, ...]], block_s: float,
                 vet: Callable[[Origins], None] = lambda origins: None,
                 on_event: OnEvent | None = None) -> dict[Hashable, Trial]:
    """A process per side, warmed up together, then one block each per turn in ``orders``' turns, then
    all stopped. ``vet`` sees where each side's modules came from before any block is timed, and may
    raise to stop. Every process is gone when this returns or raises; a side that fails or ends early
    stops the turns, and each side's trial says how it ended."""
    trials = {side: Trial(config=request.config, status="failed") for side, (_, request) in sides.items()}
    procs: dict[Hashable, TrialProcess] = {}
    endings: dict[Hashable, Ending] = {}
    origins: Origins = {}
    logs: dict[Hashable, str] = {}
    try:
        for side, (source, request) in sides.items():
            try:
                procs[side] = TrialProcess(source, request)
            except TrialFailure as exc:
                trials[side].error = TrialError(kind="failure", message=str(exc))
                return trials
            procs[side].start(on_event)
        for side, proc in procs.items():
            endings[side] = proc.receive(trials[side], origins_to(origins, side, on_event), until=lambda m: m.kind is Kind.READY)
        if all(e is Ending.PAUSED for e in endings.values()):
            vet(origins)
            take_turns(procs, trials, endings, orders, block_s, on_event)
        for side, proc in procs.items():
            endings[side] = tell(proc, trials[side], endings[side], None, on_event)
    finally:
        for side, proc in procs.items():
            logs[side] = proc.close(trials[side])
    for side, proc in procs.items():
        settle(trials[side], proc.request, endings.get(side, Ending.SILENT), proc.proc.exitcode, logs[side])
    return trials


def origins_to(origins: Origins, side: Hashable, on_event: OnEvent | None) -> OnEvent:
    """``receive``'s listener keeping what ``side`` reports of its modules' origins (and passing every
    message on to ``on_event``)."""
    def hear(kind: Kind, payload: object) -> None:
        if kind is Kind.ORIGINS:
            origins[side] = payload
        if on_event is not None:
            on_event(kind, payload)
    return hear


def take_turns(procs: dict[Hashable, TrialProcess], trials: dict[Hashable, Trial], endings: dict[Hashable, Ending],
               orders: Iterable[tuple[Hashable, ...]], block_s: float, on_event: OnEvent | None) -> None:
    """Each turn, each side times one block in the turn's order; a side that ended stops the turns."""
    for order in orders:
        for side in order:
            endings[side] = tell(procs[side], trials[side], endings[side], block_s, on_event)
            if endings[side] is not Ending.PAUSED:
                return


def tell(proc: TrialProcess, trial: Trial, ending: Ending, block_s: float | None, on_event: OnEvent | None) -> Ending:
    """One word to a side that awaits it: time a block of ``block_s`` and report it, or (None) finish.
    A side that already ended hears nothing; one whose pipe is gone has died.

    The parent samples the side's memory after its block, not during it. Reading PSS walks the page
    tables of every process in the tree; a trial alone spreads that thinly over its blocks, but a
    side's short block took a sample whole, and only a side that keeps every core busy paid for it: on
    the CPU-bound archetype a leg read one worker against two at 0.524 (eight legs) where trials alone
    read 0.51, and 0.514 with the samples between blocks (benchmarks/HISTORY.md)."""
    if ending is not Ending.PAUSED:
        return ending
    cache = proc.request.timing.cache
    if block_s is not None and cache is not None:  # a cold state is set again before every turn: the other
        cache.before_run()  # sides read the same files in their turns, and would leave them cached for this one
    try:
        proc.conn.send(Message(Kind.TURN, block_s))
    except OSError:
        return Ending.SILENT
    if block_s is None:
        ending = proc.receive(trial, on_event)
        if ending is not Ending.TIMEOUT:
            proc.proc.join(10)
        return ending
    ending = proc.receive(trial, on_event, until=lambda m: m.kind is Kind.BLOCK, watch=False)
    if ending is Ending.PAUSED:
        proc.watch.tick()  # the tree's memory read between blocks, where it delays the next turn and times nothing
    return ending
