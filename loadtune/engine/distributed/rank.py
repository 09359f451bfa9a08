"""One rank of a trial of several, started by the agent: its shard, its loader, the shared window.

Each rank does what a rank of the user's DDP training would: it makes ``cuda:LOCAL_RANK`` its current
device before anything else (on a GPU node), joins the process group, builds its loader over its
shard (``DistributedSampler`` for map-style datasets; an ``IterableDataset`` shards itself by
``RANK``/``WORLD_SIZE``, set to the job's global values) and runs ``measure`` with a ``Shard``:
barriers before start-up, after warm-up and after a window of fixed length, never inside a timed
block, so that every rank times the same window. Its messages go to the agent through a pipe
of its own. A barrier that fails is told apart (``PeerLost``) from the rank's own failure: losing a
peer is usually a consequence, and the agent names the rank that caused it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from loadtune.engine.spec import LoadedSpec, SpecRef, load_spec
from loadtune.engine.trial.child import die_with_parent, error_for
from loadtune.engine.trial.measure import measure
from loadtune.engine.trial.setup import Shard
from loadtune.engine.trial.memory import tree_memory
from loadtune.engine.trial.protocol import (
    Kind,
    Message,
    RankFailure,
    RankSetup,
    TrialRequest,
    await_sample,
)
from loadtune.model.trial import TrialError

ACK_WAIT_S = 30.0  # how long ranks hold their loaders alive for the runner's memory sample


class PeerLost(Exception):
    """A barrier failed: another rank died, hung or left. Usually a consequence, not the cause."""

    def __init__(self, name: str, cause: BaseException):
        super().__init__(f"{name} barrier: {first_line(cause)}")
        self.name = name


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def own_pipe(conns: list, local_rank: int) -> Any:
    """This rank's pipe to the agent; the other ranks' ends, inherited by fork, closed."""
    for i, other in enumerate(conns):
        if i != local_rank:
            other.close()
    return conns[local_rank]


def rank_device(device: str, local_rank: int) -> Any:
    """This rank's device, made current before anything else runs here: ``cuda:LOCAL_RANK`` as under
    DDP (so whatever CUDA the spec, its dataset or its workers touch lands on this rank's own GPU, not
    on GPU 0), or the CPU."""
    import torch

    if not device.startswith("cuda"):
        return torch.device("cpu")
    mine = torch.device("cuda", local_rank)
    torch.cuda.set_device(mine)
    return mine


def join_group(setup: RankSetup, rank: int, request: TrialRequest, launched: float) -> None:
    """Join the job's process group, the one the barriers run on: the ranks' only collectives. It is
    gloo on a GPU node too: a gloo barrier that times out raises here, so the verdict names the rank
    that never came, where NCCL's watchdog would abort this waiting rank; and no NCCL communicator
    takes GPU memory the loader's figures would then include."""
    import torch.distributed as dist

    # a barrier gives up on a rank that hangs well before the runner's hard limit, so the message names it
    timeout = timedelta(seconds=max(10.0, 0.5 * (request.timing.max_s - (time.time() - launched))))
    dist.init_process_group(setup.backend, timeout=timeout)
    # what the user's dataset (an IterableDataset sharding itself) sees: the job's global layout
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(setup.world_size), GROUP_RANK=str(setup.node_rank),
                      GROUP_WORLD_SIZE=str(setup.nnodes))


def barrier_on(emit: Callable[[Kind, Any], None]) -> Callable[[str], None]:
    """The shard's barrier: the agent hears which barrier this rank reached, a failed one is PeerLost."""
    import torch.distributed as dist

    def barrier(name: str) -> None:
        emit(Kind.BARRIER, name)
        try:
            dist.barrier()
        except Exception as exc:
            raise PeerLost(name, exc) from exc

    return barrier


def failure_for(exc: BaseException, spec: LoadedSpec | None, batch_size: int) -> RankFailure:
    """What the agent is told of this rank's end: stopped by it, a lost peer, or a failure of its own."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    if isinstance(exc, SignalException):  # the agent ends this rank because another one failed
        return RankFailure(TrialError(kind="stopped", message=f"stopped by the agent: {exc}"))
    if isinstance(exc, PeerLost):
        return RankFailure(TrialError(kind="peer", message=str(exc), exception_type=type(exc.__cause__).__name__),
                           exc.name)
    return RankFailure(error_for(exc, spec, batch_size))


def rank_main(source: SpecRef | LoadedSpec, request: TrialRequest, conns: list, launched: float) -> None:
    """One rank, started by the elastic agent: its shard, its loader, the shared window, figures to the agent."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    conn = own_pipe(conns, local_rank)
    die_with_parent()  # the agent gone (killed with its trial) takes the ranks with it
    setup: RankSetup = request.ranks
    rank = setup.global_rank(local_rank)
    emit = lambda kind, payload=None: conn.send(Message(Kind(kind), payload))
    spec = None
    try:
        device = rank_device(request.device, local_rank)  # first: nothing may reach another rank's GPU
        torch.set_num_threads(setup.threads)
        join_group(setup, rank, request, launched)
        spec = load_spec(source, prepare_data=False) if isinstance(source, SpecRef) else source  # prepared by the scan
        # the soft limit counts from the launch, as the runner's hard one does: rendezvous and start-up use it up too
        timing = replace(request.timing, max_s=request.timing.max_s - (time.time() - launched))

        def measured() -> None:
            emit(Kind.MEMORY, tree_memory(os.getpid(), include_parent=False)[0])  # untimed: the window is over
            await_sample(conn, ACK_WAIT_S)

        shard = Shard(rank, setup.world_size, barrier_on(emit), setup.window_s)
        measure(spec, request.config, device, timing, request.options, emit, measured, workload=request.workload, shard=shard)
        emit(Kind.DONE)
    except BaseException as exc:
        try:
            emit(Kind.ERROR, failure_for(exc, spec, request.config.batch_size))
        except (OSError, ValueError):
            pass
        raise  # a non-zero exit: the agent ends the other ranks at once
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
