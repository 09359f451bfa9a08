"""The ranks' elastic agent, inside the trial's process: it launches the ranks, relays their figures
and names the rank that failed a trial.

The trial's child becomes the agent exactly as ``torchrun``'s process is
(``torch.distributed.launcher.api.elastic_launch``, c10d rendezvous on localhost, no restarts): it
starts the ranks, watches them, and ends them all when one fails. It stays inside the trial's own
session, so the runner's timeout and process-group kill take everything down, agent, ranks and
workers alike. Each rank streams its messages through a pipe of its own; the agent keeps what is
its own business (barriers reached, the memory sample at steady state, each rank's end) and passes
every other message on to the runner tagged with the rank, where the trial protocol records it per
rank. Nothing is lost when a rank dies mid-window, as a collective gather at the end would lose it.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from loadtune.engine.distributed.rank import ACK_WAIT_S, rank_main
from loadtune.engine.trial.child import exit_error
from loadtune.engine.trial.load import LoadMeter
from loadtune.engine.trial.protocol import (
    Kind,
    Message,
    RankFailure,
    RankSetup,
    TrialRequest,
    TrialRun,
    await_sample,
)
from loadtune.model.trial import TrialError

SHUTDOWN_S = 5  # the agent's grace between SIGTERM and SIGKILL when it ends the ranks


@dataclass
class Relay:
    """Reads every rank's pipe in a thread of the agent: what decides the trial's end it keeps, every
    figure it passes on to the runner, tagged with the rank."""

    pipes: list  # the agent's ends, by local rank
    conn: Any  # to the runner
    setup: RankSetup
    error: TrialError | None = None  # the first failure that is a rank's own (not a lost peer)
    lost: list = field(default_factory=list)  # (rank, TrialError, barrier) of ranks that lost a peer
    reached: dict = field(default_factory=dict)  # rank -> barriers it arrived at
    done: set = field(default_factory=set)
    measured: set = field(default_factory=set)
    stopped: bool = False
    # who kept the node's cores busy over the ranks' shared window, read here, above every rank: the
    # other ranks and their workers are the scan's own, where a rank reading for itself sees them as outside load
    load: LoadMeter = field(default_factory=LoadMeter)

    def run(self) -> None:
        live = list(self.pipes)
        while live:
            ready = wait(live, timeout=0 if self.stopped else 0.1)
            if not ready and self.stopped:
                break  # the ranks are gone; what they sent has been read
            for pipe in ready:
                try:
                    message = pipe.recv()
                except (EOFError, OSError):
                    live.remove(pipe)
                    continue
                self.handle(self.pipes.index(pipe), message)

    def handle(self, local_rank: int, message: Message) -> None:
        """Keep what is the agent's (barriers, the steady state, each rank's end); pass every other
        message on to the runner, tagged with the rank that sent it."""
        message = replace(message, rank=self.setup.global_rank(local_rank), local_rank=local_rank)
        own = {Kind.BARRIER: self.arrived, Kind.MEASURED: self.steady, Kind.DONE: self.finished, Kind.ERROR: self.failed}
        own.get(message.kind, self.conn.send)(message)

    def arrived(self, message: Message) -> None:
        """A rank at a barrier; once every rank is past warm-up the load is read, until all end the window."""
        self.reached.setdefault(message.rank, set()).add(message.payload)
        everyone = all(message.payload in self.reached.get(self.setup.global_rank(i), set()) for i in range(len(self.pipes)))
        if everyone and message.payload == "warmup":
            self.load.start()
        elif everyone and message.payload == "window":
            reading = self.load.stop()
            if reading is not None:
                self.conn.send(Message(Kind.LOAD, reading))

    def steady(self, message: Message) -> None:
        """Every loader at steady state: the runner samples the tree's memory, then the ranks tear down."""
        self.measured.add(message.local_rank)
        if len(self.measured) == len(self.pipes):
            await_sample(self.conn, ACK_WAIT_S)
            for pipe in self.pipes:
                try:
                    pipe.send(Message(Kind.ACK))
                except OSError:
                    pass

    def finished(self, message: Message) -> None:
        self.done.add(message.rank)

    def failed(self, message: Message) -> None:
        failure: RankFailure = message.payload
        if failure.error.kind == "stopped":
            pass  # the agent ended this rank after another failed: never the cause
        elif failure.error.kind == "peer":
            self.lost.append((message.rank, failure.error, failure.barrier))
        elif self.error is None:
            self.error = named(message.rank, failure.error)

    def verdict(self, failures: dict) -> TrialError | None:
        """Why the trial failed, naming the rank that caused it; None when every rank finished."""
        if self.error is not None:
            return self.error
        killed = sorted((f for f in failures.values() if f.exitcode is not None and f.exitcode < 0 and f.exitcode != -15),
                        key=lambda f: f.local_rank)  # SIGTERM (-15) is the agent ending the others
        if killed:
            f = killed[0]
            rank = self.setup.global_rank(f.local_rank)
            return replace(exit_error(f.exitcode, "", who=f"rank {rank} (pid {f.pid})"), rank=rank)
        if self.lost:
            rank, error, barrier = self.lost[0]
            everyone = [self.setup.global_rank(i) for i in range(len(self.pipes))]
            missing = [r for r in everyone if barrier not in self.reached.get(r, set())]
            if missing:
                who = ", ".join(map(str, missing))
                return TrialError(kind="peer", rank=missing[0], exception_type=error.exception_type, message=(
                    f"rank {who} never reached the {barrier} barrier (it hung or died without a word): rank {rank} "
                    f"gave up waiting there ({error.message})"))
            return named(rank, error)
        if failures:
            f = min(failures.values(), key=lambda f: f.local_rank)
            rank = self.setup.global_rank(f.local_rank)
            return replace(exit_error(f.exitcode, "", who=f"rank {rank} (pid {f.pid})"), rank=rank)
        absent = [self.setup.global_rank(i) for i in range(len(self.pipes)) if self.setup.global_rank(i) not in self.done]
        if absent:
            return TrialError(kind="crashed", rank=absent[0], message=f"rank {', '.join(map(str, absent))} ended without a result")
        return None


def named(rank: int, error: TrialError) -> TrialError:
    return replace(error, message=f"rank {rank}: {error.message}", rank=rank)


def free_port() -> int:
    """A port for the rendezvous store nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_config(setup: RankSetup, files: Path):
    """torchrun's machinery for one node of ranks: c10d rendezvous on localhost, no restarts (a
    failed rank fails the trial), fast monitoring, the agent's files kept with the trial's."""
    from torch.distributed.launcher.api import LaunchConfig

    known = {f.name for f in dataclasses.fields(LaunchConfig)}  # it gained fields over torch releases
    extra: dict = {}
    if "logs_specs" in known:  # torch >= 2.3
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs

        extra["logs_specs"] = DefaultLogsSpecs(log_dir=str(files))
    else:
        extra["log_dir"] = str(files)
    if "shutdown_timeout" in known:
        extra["shutdown_timeout"] = SHUTDOWN_S
    return LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=setup.nproc_per_node, run_id=f"loadtune-{os.getpid()}",
        role="loadtune", rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", rdzv_configs={"timeout": 60},
        max_restarts=0, monitor_interval=0.05, start_method=setup.start_method, **extra,
    )


def with_ranks(request: TrialRequest, setup: RankSetup | None) -> TrialRequest:
    """The request run by ``setup``'s ranks, this module's agent as the child's entry; with no setup,
    one loader, the timed measurement."""
    return replace(request, ranks=setup, entry=run_ranks if setup is not None else None)


def run_ranks(run: TrialRun) -> TrialError | None:
    """The child's entry for a trial of several ranks: launch them through the elastic agent, relay
    their figures, and return the error that names the rank behind a failure (None when all finished)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    setup = run.request.ranks
    if setup is None:
        raise ValueError("run_ranks without ranks: build the request with with_ranks")
    if run.request.device.startswith("cuda") and setup.start_method == "fork":  # see layout.rank_start_method
        raise ValueError("ranks on a CUDA device must not be forked: build the setup with layout.setup_for")
    ctx = multiprocessing.get_context(setup.start_method)
    pairs = [ctx.Pipe() for _ in range(setup.nproc_per_node)]
    relay = Relay([a for a, _ in pairs], run.conn, setup)
    thread = threading.Thread(target=relay.run, name="loadtune-relay", daemon=True)
    thread.start()
    # forked ranks inherit the loaded spec; spawned ones load the file, or unpickle the in-memory objects
    target = run.spec if setup.start_method == "fork" else run.source
    failures: dict = {}
    try:
        elastic_launch(launch_config(setup, run.files), rank_main)(target, run.request, [b for _, b in pairs], time.time())
    except ChildFailedError as exc:
        failures = exc.failures
    finally:
        for _, theirs in pairs:
            theirs.close()
        relay.stopped = True
        thread.join()
    return relay.verdict(failures)
