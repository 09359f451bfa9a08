"""The layout of a trial's ranks: how many per node, on how many nodes, launched how, and torchrun's.

A node training on 8 GPUs runs 8 loaders that share its cores, memory and /dev/shm; one loader tuned
alone and copied to every rank oversubscribes the node. So each trial runs as many loaders as the
training runs ranks on this node (``agent`` launches them, ``rank`` is what each runs), and this
module decides the launch: ``setup_for`` turns the options into a ``RankSetup`` (forked ranks on the
CPU, fresh interpreters with one GPU each on CUDA), ``validate`` refuses impossible layouts before any
work, and ``adopt_launcher`` takes the layout from torchrun when loadtune runs under it. Multi-node:
each node tunes its own ranks (its shards sized for the whole job); ``gather_summaries`` brings the
nodes' picks to node 0 for one per-node summary.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from loadtune.analysis.nodes import node_summary
from loadtune.engine.trial.protocol import RankSetup
from loadtune.model.results import ScanResult
from loadtune.model.settings import ScanOptions

LAUNCHER_VARS = (
    "LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)


class DistributedError(ValueError):
    """A launcher environment or distributed option that cannot work: refused before any work, exit code 2."""


def cores_per_rank(usable_cores: int, ranks: int) -> int:
    """The node's usable cores shared out between its ranks (at least one each)."""
    return max(1, usable_cores // max(1, ranks))


def rank_threads(environ=os.environ) -> int:
    """torchrun sets OMP_NUM_THREADS=1 for every rank when it starts several, unless the user set it:
    training will run under that, so the ranks are measured under it too."""
    try:
        return max(1, int(environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def setup_for(nproc_per_node: int, nnodes: int, node_rank: int, device: str, window_s: float,
              source: object = None) -> RankSetup | None:
    """The launch of each trial's ranks, or None for a single loader (one rank on one node). ``source``
    decides nothing (the device alone decides how ranks start); it is accepted for older callers."""
    if nproc_per_node == 1 and nnodes == 1:
        return None
    return RankSetup(nproc_per_node, nnodes, node_rank, BARRIER_BACKEND, window_s, rank_start_method(device),
                     rank_threads())


BARRIER_BACKEND = "gloo"  # the ranks' only collectives are the barriers (``rank.join_group`` says why gloo)


def rank_start_method(device: str) -> str:
    """How the agent starts ranks. On CUDA never fork: CUDA fails in a child forked from a process that
    initialised it, and the agent has, whatever the trial did: torch's ``LaunchConfig`` calls
    ``torch.cuda.is_available()`` while it is built. So fresh interpreters, as torchrun starts; an
    in-memory spec reaches them pickled (``plan.prepare`` checks it pickles). On the CPU, fork: fast,
    and objects that do not pickle are inherited."""
    return "spawn" if device.startswith("cuda") else "fork"


def validate(nproc_per_node: Any, nnodes: Any, node_rank: Any, gpus: int, device: str | None,
             rdzv_endpoint: Any = None) -> None:
    """Refuse impossible layouts before any work, naming the flag."""
    for name, value, low in (("nproc_per_node", nproc_per_node, 1), ("nnodes", nnodes, 1), ("node_rank", node_rank, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise DistributedError(f"{name} must be a whole number >= {low}, got {value!r}")
    if node_rank >= nnodes:
        raise DistributedError(f"node_rank {node_rank} is not below nnodes {nnodes}: node ranks are 0..{nnodes - 1}")
    if rdzv_endpoint is not None:
        parse_endpoint(rdzv_endpoint)  # refused now, not after the scan
    if nproc_per_node > 1 and device is not None and device.startswith("cuda:"):
        raise DistributedError(f"device {device!r} with {nproc_per_node} ranks: each rank uses the GPU of its local rank; "
                               "pass --device cuda (or cpu)")
    if gpus and (device is None or device.startswith("cuda")) and nproc_per_node > gpus:
        raise DistributedError(f"{nproc_per_node} ranks per node need one GPU each; this node has {gpus}: "
                               "lower --nproc-per-node, or measure on the CPU with --device cpu")


# ---- under torchrun, and across nodes -------------------------------------------------------------


@dataclass(frozen=True)
class LauncherEnv:
    """What torchrun (or any torchelastic launcher) told this process about the job."""

    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    store: str | None  # MASTER_ADDR:MASTER_PORT: the agent's store when TORCHELASTIC_USE_AGENT_STORE


def launcher_env(environ=os.environ) -> LauncherEnv | None:
    """The launcher's environment, or None when loadtune was not started by one."""
    if "TORCHELASTIC_RUN_ID" not in environ and "LOCAL_WORLD_SIZE" not in environ:
        return None
    try:
        local_rank = int(environ.get("LOCAL_RANK", "0"))
        local_world = int(environ["LOCAL_WORLD_SIZE"])
        world = int(environ.get("WORLD_SIZE", local_world))
        nnodes = int(environ.get("GROUP_WORLD_SIZE") or max(1, world // max(1, local_world)))
        node_rank = int(environ.get("GROUP_RANK") or int(environ.get("RANK", "0")) // max(1, local_world))
    except (KeyError, ValueError) as exc:
        raise DistributedError(f"started by a launcher (TORCHELASTIC_RUN_ID is set) but its environment is incomplete "
                               f"or malformed ({exc}); run under torchrun, or unset TORCHELASTIC_RUN_ID") from None
    # MASTER_ADDR:MASTER_PORT is a store someone hosts only when the agent says it shares its own
    hosted = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and "MASTER_ADDR" in environ and "MASTER_PORT" in environ
    store = f"{environ['MASTER_ADDR']}:{environ['MASTER_PORT']}" if hosted else None
    return LauncherEnv(local_rank, local_world, node_rank, nnodes, store)


@dataclass(frozen=True)
class Adopted:
    """What ``adopt_launcher`` decided for this process."""

    launched: bool = False  # started by a launcher at all
    stand_aside: str | None = None  # a local rank other than 0: this message, exit 0
    store_hosted: bool = False  # the launcher's agent holds the store at rdzv_endpoint: node 0 is a client too


def adopt_launcher(overrides: dict, environ=os.environ) -> Adopted:
    """Under torchrun: local rank 0 scans with the launcher's ranks per node (and nodes), launching
    each trial's ranks itself; the other ranks stand aside. Local rank 0 gets ``overrides`` filled and
    the launcher's variables cleared (they would leak into the trials' own launches)."""
    env = launcher_env(environ)
    if env is None:
        return Adopted()
    given = {"nproc_per_node": env.local_world_size, "nnodes": env.nnodes, "node_rank": env.node_rank}
    for key, value in given.items():
        if overrides.get(key) not in (None, value):
            raise DistributedError(f"--{key.replace('_', '-')} {overrides[key]} contradicts the launcher's {value}: "
                                   "under torchrun, leave it out (loadtune takes it from the launcher)")
    if env.local_rank != 0:
        return Adopted(True, f"loadtune: local rank {env.local_rank} stands aside: local rank 0 runs the scan, "
                             f"launching {env.local_world_size} ranks per trial itself")
    overrides.update(given)
    hosted = False
    if env.nnodes > 1 and overrides.get("rdzv_endpoint") is None and env.store:
        overrides["rdzv_endpoint"], hosted = env.store, True
    for name in LAUNCHER_VARS:
        environ.pop(name, None)
    return Adopted(True, None, hosted)


def node_path(path: Path, nnodes: int, node_rank: int) -> Path:
    """Each node writes its own files (nodes often share a file system): loadtune.node1.json, report.node1.html."""
    return path if nnodes <= 1 else path.with_name(f"{path.stem}.node{node_rank}{path.suffix}")


def parse_endpoint(endpoint: Any) -> tuple[str, int]:
    """``HOST:PORT`` → (host, port), or a DistributedError naming the flag."""
    host, _, port = str(endpoint).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DistributedError(f"rdzv_endpoint (--rdzv-endpoint) must be HOST:PORT with a port in 1..65535, got {endpoint!r}")
    return host, int(port)


def gather_nodes(endpoint: str, nnodes: int, node_rank: int, summary: dict, hosted: bool = False,
                 timeout_s: float = 600.0) -> list[dict] | None:
    """Bring every node's summary to node 0 through a torch.distributed TCPStore at ``endpoint``
    (node 0 hosts it unless a launcher already does). Node 0 gets the summaries by node rank; the
    other nodes get None once theirs is stored."""
    from torch.distributed import TCPStore

    host, port = parse_endpoint(endpoint)
    is_master = node_rank == 0 and not hosted
    store = TCPStore(host, int(port), None, is_master, timedelta(seconds=timeout_s), wait_for_workers=False)
    store.set(f"loadtune/node{node_rank}", json.dumps(summary))
    if node_rank != 0:
        store.wait(["loadtune/all-read"])  # node 0 may host the store: it stays up until every node is told
        store.set(f"loadtune/bye{node_rank}", "1")
        return None
    keys = [f"loadtune/node{r}" for r in range(nnodes)]
    store.wait(keys)
    out = [json.loads(store.get(k)) for k in keys]
    store.set("loadtune/all-read", "1")
    store.wait([f"loadtune/bye{r}" for r in range(1, nnodes)])
    return out


def gather_summaries(result: ScanResult, options: ScanOptions, hosted: bool = False) -> list[dict] | None:
    """Multi-node: this node's pick (``analysis.nodes.node_summary``, named by this host) sent to node 0
    at ``options.rdzv_endpoint``; node 0 gets every node's by node rank, the others None."""
    summary = node_summary(result, options.node_rank, socket.gethostname())
    return gather_nodes(options.rdzv_endpoint, options.nnodes, options.node_rank, summary, hosted)
