"""What a trial's parent and its child say to each other, and what each message does to the ``Trial``.

The parent (``harness.run_trial``) sends one ``TrialRequest``; the child answers with a stream of
``Message``s, each sent as soon as its figure is known so that a crash later loses none of them.
Messages are typed by ``Kind`` and applied to the parent's ``Trial`` by one table, ``RULES``, whether
the child measured one loader or relays the ranks of several (the agent tags a rank's messages with
the rank, and the same rule then writes that rank's figures). What a message does to the samplers
the parent runs from outside the child is the harness's business; the ranks' barriers and end are
the agent's (``engine.distributed.agent``).

The request names the function the child runs (``entry``): the timed measurement unless the layer
above passes its own (the profiling run of ``engine.stages``, the ranks' agent), so this layer never
imports the layers that build on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any

from loadtune.engine.spec import LoadedSpec, SpecRef
from loadtune.engine.trial.setup import LoaderOptions, Timing
from loadtune.engine.trial.workload import StepWorkload
from loadtune.model.config import TrialConfig
from loadtune.model.trial import GPUUsage, RankFigures, Trial, TrialError


class Kind(StrEnum):
    """What a message is about. A ``str``: ``measure`` and ``stages.profile`` emit the plain names."""

    PROCESS = "process"  # the parent's own, to ``on_event`` only: the child's pid (and session id)
    DEVICE = "device"  # the CUDA device's identity, for the parent's NVML sampler
    STARTUP = "startup"  # seconds from iter(loader) to the first batch
    BATCH = "batch"  # the first batch's BatchInfo
    BATCH_SIZES = "batch_sizes"  # the BatchSizes of the batches timed, where the loader batches by itself
    WARMUP = "warmup"  # the warm-up Block: timed blocks follow
    WARNING = "warning"  # a sentence for the report
    BLOCK = "block"  # one timed Block
    CALIBRATION = "calibration"  # one timed Block of the shaped calibration, between the config's (check)
    DEFAULTS = "defaults"  # one timed Block of PyTorch's defaults, beside the config's (check)
    CPU = "cpu"  # CPU seconds of the loader's processes over the timed blocks
    LOAD = "load"  # the LoadReading over the timed blocks: the machine's CPUs against the trial's own
    GPU_MEMORY = "gpu_memory"  # the device's GPUUsage (allocator peaks, pinned memory)
    MEMORY = "memory"  # a rank's own memory (PSS of it and its workers), measured inside it
    STAGES = "stages"  # the profiling run's StageCosts
    FILES = "files"  # the files a dataset opened or mapped while samples were read (``engine.storage``)
    MEASURED = "measured"  # the loaders are at steady state, held alive until the parent's ACK
    ACK = "ack"  # parent to child: the memory sample is taken, tear down
    READY = "ready"  # a side of a run in turns (``trial.duet``) is warmed up and settled: it awaits its turns
    TURN = "turn"  # parent to child (``trial.duet``): time one block of this many seconds now; None: stop
    ORIGINS = "origins"  # where the spec's own modules were loaded from (``trial.duet``: each side imports its own code)
    BARRIER = "barrier"  # rank to agent: it reached the named barrier
    RANK = "rank"  # to ``on_event`` only: a rank's message, as (rank, local rank, kind, payload)
    ERROR = "error"  # the TrialError (from a rank to its agent: a RankFailure); the last message
    DONE = "done"  # finished; the last message

    @property
    def final(self) -> bool:
        """Nothing follows it: the child has ended its trial."""
        return self in (Kind.DONE, Kind.ERROR)


@dataclass(frozen=True)
class Message:
    """One message of the child (or of a rank, through its agent). ``rank`` and ``local_rank`` are set
    by the agent on what it relays from a rank; None from a trial of one loader."""

    kind: Kind
    payload: Any = None
    rank: int | None = None
    local_rank: int | None = None

    def event(self) -> tuple[Kind, Any]:
        """The ``on_event(kind, payload)`` callbacks' view of it (a rank's wrapped as ``Kind.RANK``)."""
        if self.rank is None:
            return self.kind, self.payload
        return Kind.RANK, (self.rank, self.local_rank, self.kind, self.payload)


@dataclass(frozen=True)
class RankFailure:
    """A rank's ERROR to its agent: the error, and the barrier it gave up at when it lost a peer (the
    agent then names the rank that never came)."""

    error: TrialError
    barrier: str | None = None


def await_sample(conn: Any, wait_s: float) -> None:
    """Say the loaders are at steady state and hold them alive until the parent has taken its memory
    sample of the whole tree, untimed, before teardown (at most ``wait_s``)."""
    conn.send(Message(Kind.MEASURED))
    if conn.poll(wait_s):
        conn.recv()


# ---- the request -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankSetup:
    """How the ranks of each trial are launched on this node."""

    nproc_per_node: int
    nnodes: int = 1
    node_rank: int = 0
    backend: str = "gloo"  # the barriers' process group (gloo on GPU nodes too, see distributed.rank)
    window_s: float = 5.0  # the timed window every rank measures, aligned by barriers
    start_method: str = "fork"  # how the agent starts ranks: fork on CPU (fast); spawn for CUDA, never fork
    threads: int = 1  # torch intra-op threads per rank: torchrun's OMP_NUM_THREADS=1 unless the user set it

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank


CHILD_ACK_WAIT_S = 10.0  # how long a trial of one loader holds it alive for the parent's memory sample


@dataclass(frozen=True)
class TrialRun:
    """What an entry gets in the child: the spec loaded, the request (its ``timing.max_s`` what is
    left after loading), and the pipe to the parent."""

    source: SpecRef | LoadedSpec
    spec: LoadedSpec
    request: TrialRequest
    conn: Any  # the child's end of the pipe
    files: Path  # a folder of the trial's own, removed with it (the ranks' agent keeps its files there)

    def emit(self, kind: Kind | str, payload: Any = None) -> None:
        self.conn.send(Message(Kind(kind), payload))

    def measured(self) -> None:
        await_sample(self.conn, CHILD_ACK_WAIT_S)


# What the child runs: a module-level function (pickled by reference to reach a forkserver or spawn
# child). It returns the error that failed the trial, or None; what it raises fails the trial too.
Entry = Callable[[TrialRun], "TrialError | None"]


@dataclass(frozen=True)
class TrialRequest:
    """Everything a child needs to run one trial."""

    config: TrialConfig
    device: str
    timing: Timing
    options: LoaderOptions
    timeout_s: float
    start_method: str  # how DataLoader workers start in the user's training (a forkserver child would inherit forkserver)
    workload: StepWorkload | None = None  # the calibrated synthetic step of --step-ms, in place of the spec's
    ranks: RankSetup | None = None  # several ranks per trial: ``distributed.agent.with_ranks`` sets the agent's entry
    entry: Entry | None = None  # what the child runs; None: the timed measurement (``child.measure_trial``)
    needs_blocks: bool = True  # a trial is ok only with timed blocks; False for an entry that measures none
    prelude: Callable[[], None] | None = None  # run in the child before the spec loads (``trial.duet``: a revision's own folder)

    def __post_init__(self) -> None:
        if self.ranks is not None and self.entry is None:
            raise ValueError("a request with ranks needs the agent's entry: use distributed.agent.with_ranks")


# ---- what each message does to the Trial -------------------------------------------------------------


def add_warning(trial: Trial, message: Message) -> None:
    text = message.payload if message.rank is None else f"rank {message.rank}: {message.payload}"
    if text not in trial.warnings:
        trial.warnings.append(text)


def first_batch(trial: Trial, message: Message) -> None:
    """Every rank loads the same config: the first batch reported describes them all."""
    trial.batch = trial.batch or message.payload


def add_cpu(trial: Trial, message: Message) -> None:
    """One loader's CPU; with several ranks their sum, the node's (as the tree's memory is)."""
    if message.rank is None or trial.cpu_s is None:
        trial.cpu_s = message.payload
    else:
        trial.cpu_s += message.payload


def fullest_gpu(trial: Trial, message: Message) -> None:
    """One loader's GPU; with one GPU per rank, each rank's own, and as the trial's the one whose
    allocator reserved the most (the same object: the parent's utilisation samples of that rank's GPU
    land in both)."""
    usage: GPUUsage = message.payload
    if message.rank is not None:
        trial.rank_figures(message.rank, message.local_rank).gpu = usage
    if message.rank is None or trial.gpu is None or (usage.peak_reserved_bytes or 0) > (trial.gpu.peak_reserved_bytes or 0):
        trial.gpu = usage


class Scope(Enum):
    """Whose figures a message writes."""

    SENDER = "sender"  # the trial's, or the rank's own figures when one rank of several sent it
    TRIAL = "trial"  # the trial's, whoever sent it
    RANK = "rank"  # a rank's only (a trial of one loader has its memory from the parent's samples)


@dataclass(frozen=True)
class Rule:
    scope: Scope
    apply: Callable[[Any, Message], None]  # (the Trial or a rank's RankFigures, the message)


RULES: dict[Kind, Rule] = {
    Kind.STARTUP: Rule(Scope.SENDER, lambda figures, m: setattr(figures, "startup_s", m.payload)),
    Kind.WARMUP: Rule(Scope.SENDER, lambda figures, m: setattr(figures, "warmup", m.payload)),
    Kind.BLOCK: Rule(Scope.SENDER, lambda figures, m: figures.blocks.append(m.payload)),
    Kind.CALIBRATION: Rule(Scope.TRIAL, lambda trial, m: trial.calibration_blocks.append(m.payload)),  # one loader only
    Kind.DEFAULTS: Rule(Scope.TRIAL, lambda trial, m: trial.default_blocks.append(m.payload)),  # one loader only
    Kind.MEMORY: Rule(Scope.RANK, lambda figures, m: setattr(figures, "memory_bytes", m.payload)),
    Kind.WARNING: Rule(Scope.TRIAL, add_warning),
    Kind.BATCH: Rule(Scope.TRIAL, first_batch),
    Kind.BATCH_SIZES: Rule(Scope.TRIAL, lambda trial, m: setattr(trial, "batch_sizes", m.payload)),  # one loader only
    Kind.CPU: Rule(Scope.TRIAL, add_cpu),
    Kind.LOAD: Rule(Scope.TRIAL, lambda trial, m: setattr(trial, "load", m.payload)),  # one loader only
    Kind.GPU_MEMORY: Rule(Scope.TRIAL, fullest_gpu),
    Kind.ERROR: Rule(Scope.TRIAL, lambda trial, m: setattr(trial, "error", m.payload)),
}  # the other kinds carry no figure: they drive the harness's samplers and the agent


def apply(trial: Trial, message: Message) -> None:
    """Write what ``message`` says into ``trial`` (or into the figures of the rank that sent it)."""
    rule = RULES.get(message.kind)
    if rule is None:
        return
    if message.rank is None:
        if rule.scope is not Scope.RANK:
            rule.apply(trial, message)
        return
    target: Trial | RankFigures = trial if rule.scope is Scope.TRIAL else trial.rank_figures(message.rank, message.local_rank)
    rule.apply(target, message)
