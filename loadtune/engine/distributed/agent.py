"""TODO docstring."""

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

from loadtune.model.results import TrialError
from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.distributed.rank import ACK_WAIT_S, rank_main
from loadtune.engine.distributed.layout import RankSetup


SHUTDOWN_S = 5  # the agent's grace between SIGTERM and SIGKILL when it ends the ranks


@dataclass
class Relay:
    """Reads every rank's pipe and passes figures on to the runner, tagged with the rank."""

    pipes: list  # the agent's ends, by local rank
    conn: Any  # to the runner
    setup: RankSetup
    error: TrialError | None = None  # the first failure that is a rank's own (not a lost peer)
    lost: list = field(default_factory=list)  # (rank, TrialError, barrier) of ranks that lost a peer
    reached: dict = field(default_factory=dict)  # rank -> barriers it arrived at
    done: set = field(default_factory=set)
    measured: set = field(default_factory=set)
    stopped: bool = False

    def run(self) -> None:
        live = list(self.pipes)
        while live:
            ready = wait(live, timeout=0 if self.stopped else 0.1)
            if not ready and self.stopped:
                break  # the ranks are gone; what they sent has been read
            for pipe in ready:
                try:
                    kind, payload = pipe.recv()
                except (EOFError, OSError):
                    live.remove(pipe)
                    continue
                self.handle(self.pipes.index(pipe), kind, payload)

    def handle(self, local_rank: int, kind: str, payload: Any) -> None:
        rank = self.setup.global_rank(local_rank)
        if kind in ("startup", "warmup", "block", "memory", "warning"):
            self.conn.send(("rank", (rank, local_rank, kind, payload)))
        elif kind == "barrier":
            self.reached.setdefault(rank, set()).add(payload)
        elif kind == "measured":
            self.measured.add(local_rank)
            if len(self.measured) == len(self.pipes):  # every loader at steady state: the runner samples memory
                self.conn.send(("measured", None))
                if self.conn.poll(ACK_WAIT_S):
                    self.conn.recv()
                for pipe in self.pipes:
                    try:
                        pipe.send("ack")
                    except OSError:
                        pass
        elif kind == "done":
            self.done.add(rank)
        elif kind == "error":
            error, barrier = payload
            if error.kind == "stopped":
                pass  # the agent ended this rank after another failed: never the cause
            elif error.kind == "peer":
                self.lost.append((rank, error, barrier))
            elif self.error is None:
                self.error = named(rank, error)

    def verdict(self, failures: dict) -> TrialError | None:
        """Why the trial failed, naming the rank that caused it; None when every rank finished."""
        if self.error is not None:
            return self.error
        from loadtune.engine.trial.child import exit_error

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


def run_ranks(source: SpecRef | LoadedSpec, spec: LoadedSpec, request, conn, files: Path) -> None:
    """In the trial process: launch the ranks through the elastic agent, relay their figures, and
    report ``done`` or the error that names the rank behind it."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    setup: RankSetup = request.ranks
    ctx = multiprocessing.get_context(setup.start_method)
    pairs = [ctx.Pipe() for _ in range(setup.nproc_per_node)]
    relay = Relay([a for a, _ in pairs], conn, setup)
    thread = threading.Thread(target=relay.run, name="loadtune-relay", daemon=True)
    thread.start()
    target = spec if setup.start_method == "fork" else source  # forked ranks inherit the loaded spec
    failures: dict = {}
    try:
        elastic_launch(launch_config(setup, files), rank_main)(target, request, [b for _, b in pairs], time.time())
    except ChildFailedError as exc:
        failures = exc.failures
    finally:
        for _, theirs in pairs:
            theirs.close()
        relay.stopped = True
        thread.join()
    error = relay.verdict(failures)
    conn.send(("error", error) if error is not None else ("done", None))


