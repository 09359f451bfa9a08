"""Two versions of the user's data code timed in turns: ``check --against`` (docs/ci.md).

Two versions of one module cannot share an interpreter, so each side (the head: the work tree; the
base: a checkout of the revision compared against) is a live trial process of its own, with its own
folder as working directory and on ``sys.path`` (``Checkout``, run before its spec loads). After
both have warmed up, the parent tells them in turn to time one short block (``Kind.TURN``), each turn
the reverse order of the one before, so that another process's load, a pace that changes every few
seconds or drift hit both sides alike. After its block a side's workers finish what they were asked
for before the other side's block starts, and before its own next block the batches they finished
ahead are consumed untimed (``paired.settle`` and ``paired.timed_turn``): every block times steady-state
work, not the other side's backlog.

Each side reports where the spec's own modules were loaded from (``Kind.ORIGINS``) before it is
timed, so that the caller can refuse a base that imported the head's code (an editable install's
import hook ignores ``sys.path``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadtune.engine.spec import SpecRef
from loadtune.engine.trial.harness import Ending, TrialProcess, settle
from loadtune.engine.trial.measure import build_meter, open_device, warm_up
from loadtune.engine.trial.paired import timed_turn
from loadtune.engine.trial.paired import settle as settle_workers
from loadtune.engine.trial.protocol import Kind, Message, TrialRequest, TrialRun
from loadtune.engine.trial.transfer import batch_info
from loadtune.model.results import Trial

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
    """The child's entry: say where the spec's modules came from, build and warm up the loader, then time
    one block per ``Kind.TURN`` from the parent until it says stop (a TURN of None)."""

    roots: tuple[str, str]  # both trees: the modules loaded from either are reported

    def __call__(self, run: TrialRun) -> None:
        import torch

        run.emit(Kind.ORIGINS, module_origins(self.roots))
        request = run.request
        device, timing, config = torch.device(request.device), request.timing, request.config
        deadline = time.perf_counter() + timing.max_s
        if device.type == "cuda":
            open_device(device)
        meter = build_meter(run.spec, config, device, timing, request.options, request.workload, None)
        run.emit(Kind.STARTUP, meter.startup())
        run.emit(Kind.BATCH, batch_info(meter.pending))
        warm_up(meter, run.spec, config, timing, deadline, run.emit)  # its WARMUP says: ready for turns
        settle_workers(meter, min(deadline, time.perf_counter() + timing.block_s))
        while (block_s := run.conn.recv().payload) is not None:
            block = timed_turn(meter, config, block_s, deadline)
            settle_workers(meter, min(deadline, time.perf_counter() + block_s))  # idle before the other side's block
            run.emit(Kind.BLOCK, block)
        run.measured()
        del meter  # with it the loader: workers shut down inside the trial


def turns(first: str, pairs: int) -> list[tuple[str, str]]:
    """The order of the sides in each turn: ``first`` first, then the reverse, and so on."""
    order = (first, BASE if first == HEAD else HEAD)
    return [order if i % 2 == 0 else order[::-1] for i in range(pairs)]


Origins = dict[str, dict[str, str]]  # side -> module -> file


def run_duet(sides: dict[str, tuple[SpecRef, TrialRequest]], first: str, pairs: int, block_s: float,
             vet: Callable[[Origins], None] = lambda origins: None) -> dict[str, Trial]:
    """One round: a process per side, warmed up, then ``pairs`` turns of one block each (``turns``), then
    both stopped. ``vet`` sees where each side's modules came from before any block is timed, and may
    raise to stop the round. Every process of the round is gone when this returns or raises."""
    procs = {side: TrialProcess(source, request) for side, (source, request) in sides.items()}
    trials = {side: Trial(config=request.config, status="failed") for side, (_, request) in sides.items()}
    endings: dict[str, Ending] = {}
    origins: Origins = {}
    logs: dict[str, str] = {}
    try:
        for proc in procs.values():
            proc.start(None)
        for side, proc in procs.items():
            endings[side] = proc.receive(trials[side], origins_to(origins, side), until=lambda m: m.kind is Kind.WARMUP)
        if all(e is Ending.PAUSED for e in endings.values()):
            vet(origins)
            take_turns(procs, trials, endings, turns(first, pairs), block_s)
        for side, proc in procs.items():
            endings[side] = tell(proc, trials[side], endings[side], None)
    finally:
        for side, proc in procs.items():
            logs[side] = proc.close(trials[side])
    for side, proc in procs.items():
        settle(trials[side], proc.request, endings.get(side, Ending.SILENT), proc.proc.exitcode, logs[side])
    return trials


def origins_to(origins: Origins, side: str) -> Callable[[Kind, object], None]:
    """``receive``'s listener keeping what ``side`` reports of its modules' origins."""
    def hear(kind: Kind, payload: object) -> None:
        if kind is Kind.ORIGINS:
            origins[side] = payload
    return hear


def take_turns(procs: dict[str, TrialProcess], trials: dict[str, Trial], endings: dict[str, Ending],
               orders: list[tuple[str, str]], block_s: float) -> None:
    """Each turn, each side times one block in the turn's order; a side that ended stops the turns."""
    for order in orders:
        for side in order:
            endings[side] = tell(procs[side], trials[side], endings[side], block_s)
            if endings[side] is not Ending.PAUSED:
                return


def tell(proc: TrialProcess, trial: Trial, ending: Ending, block_s: float | None) -> Ending:
    """One word to a side that awaits it: time a block of ``block_s`` and report it, or (None) finish.
    A side that already ended hears nothing; one whose pipe is gone has died."""
    if ending is not Ending.PAUSED:
        return ending
    try:
        proc.conn.send(Message(Kind.TURN, block_s))
    except OSError:
        return Ending.SILENT
    if block_s is None:
        ending = proc.receive(trial, None)
        if ending is not Ending.TIMEOUT:
            proc.proc.join(10)
        return ending
    return proc.receive(trial, None, until=lambda m: m.kind is Kind.BLOCK)
