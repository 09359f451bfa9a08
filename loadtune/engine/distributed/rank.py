"""TODO docstring."""

from __future__ import annotations




import inspect
import os
import time
from dataclasses import replace
from datetime import timedelta

from loadtune.engine.trial.measure import Shard, measure
from loadtune.engine.trial.memory import tree_memory
from loadtune.model.results import TrialError
from loadtune.engine.spec import LoadedSpec, SpecRef, load_spec
from loadtune.engine.distributed.layout import RankSetup


ACK_WAIT_S = 30.0  # how long ranks hold their loaders alive for the runner's memory sample


class PeerLost(Exception):
    """A barrier failed: another rank died, hung or left. Usually a consequence, not the cause."""

    def __init__(self, name: str, cause: BaseException):
        super().__init__(f"{name} barrier: {first_line(cause)}")
        self.name = name


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def rank_main(source: SpecRef | LoadedSpec, request, conns: list, launched: float) -> None:
    """One rank, started by the elastic agent: its shard, its loader, the shared window, figures to the agent."""
    import torch
    import torch.distributed as dist

    from loadtune.engine.trial.child import die_with_parent, error_for

    local_rank = int(os.environ["LOCAL_RANK"])
    conn = conns[local_rank]
    for i, other in enumerate(conns):
        if i != local_rank:
            other.close()
    die_with_parent()  # the agent gone (killed with its trial) takes the ranks with it
    setup: RankSetup = request.ranks
    rank = setup.global_rank(local_rank)
    emit = lambda kind, payload: conn.send((kind, payload))  # noqa: E731
    spec = None
    try:
        torch.set_num_threads(setup.threads)
        device = torch.device(f"cuda:{local_rank}") if request.device.startswith("cuda") else torch.device("cpu")
        # a barrier gives up on a rank that hangs well before the runner's hard limit, so the message names it
        timeout = timedelta(seconds=max(10.0, 0.5 * (request.timing.max_s - (time.time() - launched))))
        bind = device.type == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters
        dist.init_process_group(setup.backend, timeout=timeout, **({"device_id": device} if bind else {}))
        # what the user's dataset (an IterableDataset sharding itself) sees: the job's global layout
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(setup.world_size), GROUP_RANK=str(setup.node_rank),
                          GROUP_WORLD_SIZE=str(setup.nnodes))
        spec = load_spec(source) if isinstance(source, SpecRef) else source
        # the soft limit counts from the launch, as the runner's hard one does: rendezvous and start-up use it up too
        timing = replace(request.timing, max_s=request.timing.max_s - (time.time() - launched))

        # The barriers run on gloo even under NCCL: a gloo barrier that times out raises here, so the
        # verdict names the rank that never came, where NCCL's watchdog would abort this waiting rank.
        group = dist.new_group(backend="gloo", timeout=timeout) if setup.backend == "nccl" else None

        def barrier(name: str) -> None:
            emit("barrier", name)
            try:
                dist.barrier(group=group)
            except Exception as exc:  # noqa: BLE001 - a lost peer, whatever the backend calls it
                raise PeerLost(name, exc) from exc

        def measured() -> None:
            emit("memory", tree_memory(os.getpid(), include_parent=False)[0])  # untimed: the window is over
            emit("measured", None)
            if conn.poll(ACK_WAIT_S):
                conn.recv()

        shard = Shard(rank, setup.world_size, barrier, setup.window_s)
        measure(spec, request.config, device, timing, request.options, emit, measured, workload=request.workload, shard=shard)
        emit("done", None)
    except BaseException as exc:
        from torch.distributed.elastic.multiprocessing.api import SignalException

        if isinstance(exc, SignalException):  # the agent ends this rank because another one failed
            error = TrialError(kind="stopped", message=f"stopped by the agent: {exc}")
            barrier_name = None
        elif isinstance(exc, PeerLost):
            error = TrialError(kind="peer", message=str(exc), exception_type=type(exc.__cause__).__name__)
            barrier_name = exc.name
        else:
            error, barrier_name = error_for(exc, spec, request.config.batch_size), None
        try:
            emit("error", (error, barrier_name))
        except (OSError, ValueError):
            pass
        raise  # a non-zero exit: the agent ends the other ranks at once
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


