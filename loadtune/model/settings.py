"""What a scan ran with: its options, the device, the planned grid. Saved as a result's ``settings``.

Typed here so that every reader gets the same defaults: a file written before an option existed is
read as the scan that wrote it behaved, in one place (``ScanOptions.from_dict``), not at each use.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from loadtune.model.known import from_known

NOISE_FLOOR = 0.02  # medians this close (relative) are treated as equal whatever the intervals say
BURSTS = 4  # rounds of one batch per worker a timed block (a trial's, a race turn's) spans at least

# Options a file may lack, read as what the scans written before them did where that differs from
# today's default: before early stopping a trial measured every block.
OLDER_FILES = {"target_spread": 0.0, "reference_rounds": 0, "race_legs": 0, "storage": "none"}


@dataclass
class ScanOptions:
    """Every knob of a scan. Field names are also the keys of a spec's ``loadtune_options = {...}``.
    Checked by ``engine.options.validate_options``; ``engine.trial.setup.scan_timing`` turns them into
    the timing of each trial."""

    batch_size: list[int] | None = None  # None: DEFAULT_BATCH_SIZE
    workers: list[int] | None = None  # None: 0, 1, 2, 4, ... up to 2x the usable cores
    prefetch: list[int] = field(default_factory=lambda: [2, 4])
    pin: bool | None = None  # None: search both where an accelerator is present
    persistent: bool | None = None  # None: search both
    device: str | None = None  # None: "cuda" when available, else "cpu"
    shuffle: bool = True
    drop_last: bool = False
    warmup: float = 1.0  # seconds of warm-up, discarded
    block_time: float = 0.5  # seconds per timed block, at least
    blocks: int = 10  # timed blocks per trial, at most
    min_blocks: int = 3  # timed blocks per trial, at least
    target_spread: float = 0.03  # stop a trial's blocks once its median is known this well (relative)
    timeout: float = 120.0  # hard limit per trial, seconds
    noise_floor: float = NOISE_FLOOR
    allow_reorder: bool = False  # the training tolerates batches out of order: search in_order=False too
    start_method: list[str] | None = None  # start methods to search, e.g. ["fork", "spawn"]; None: default only
    search: str = "adaptive"  # "adaptive" or "grid" (exhaustive)
    budget: float | None = None  # seconds for the whole scan; no new trial starts past it
    confirm: int = 1  # rounds in which the contenders are re-measured side by side (several ranks per trial; 0: none, and no race)
    # the race's legs at most (each a live process per contender, their blocks timed in turns): it races
    # until every ratio to the pick is within about ±5%, these legs or the budget are spent; 0: no race,
    # the closing rounds of separate trials (docs/measuring.md#the-race)
    race_legs: int = 6
    seed: int = 0  # trial order and shuffling
    step_ms: float | None = None  # a synthetic consumer step of about this many ms per batch (no spec step needed)
    transfer: list[str] | None = None  # transfer strategies to search on a CUDA device; None: sync, non_blocking, stream
    nproc_per_node: int = 1  # ranks per trial, each with its own DataLoader, as under torchrun
    nnodes: int = 1  # nodes of the training job: each rank's shard is 1/(nnodes x nproc_per_node) of the dataset
    node_rank: int = 0  # which node this is (its ranks' shards)
    rdzv_endpoint: str | None = None  # HOST:PORT where the nodes' picks meet for node 0's per-node summary
    max_memory: int | str | None = None  # configs whose peak host memory exceeds this are not recommended ("8G")
    diagnose: bool = True  # profile the stages once (where the time goes, the bound)
    reference_rounds: int = 0  # paired rounds of the pick and its shaped calibration, for check (0: none; check --record)
    current: dict | str | None = None  # the user's own knobs ("num_workers=8,pin_memory=True"): measured, the gain's reference
    # the page cache's state every config is timed in: "warm" (the dataset's files read through once first),
    # "cold" (dropped before every trial and turn), "auto" (the state training will be in: warm where the
    # files fit in the page cache beside the job); files written before it read "none" (nothing was set)
    storage: str = "auto"
    data: list[str] | str | None = None  # the dataset's files or folders; None: those it opens or maps while read

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ScanOptions":
        """Options read back from a result. Keys the file lacks: ``OLDER_FILES``, else the default;
        keys it has that this version does not know (a newer writer's) are left out."""
        return from_known(cls, {**OLDER_FILES, **data})


@dataclass
class ScanSettings:
    """A result's ``settings``. ``ranks`` and ``step`` are the JSON of the engine's ``RankSetup`` and
    ``StepWorkload`` (the model does not import the engine); None where the scan had none. Keys that
    are None are not written, so files keep the keys they were written with."""

    options: ScanOptions = field(default_factory=ScanOptions)
    device: str = "cpu"  # where the batches went: "cpu" or "cuda:N"
    grid_size: int | None = None  # the planned grid's configs, references not counted
    references: list[str] = field(default_factory=list)  # keys of the configs added for PyTorch's defaults
    planned: list[str] | None = None  # keys of the planned grid (a resumed scan must plan the same)
    max_workers: int | None = None  # the most workers per rank the scan could try (the bound's I/O ceiling)
    ranks: dict[str, Any] | None = None  # several ranks per trial: how they were launched
    step: dict[str, Any] | None = None  # the calibrated synthetic step of ``step_ms``
    current: str | None = None  # key of the config of ``options.current``: the gain is stated against it, not PyTorch's defaults

    @property
    def distributed(self) -> bool:
        """Several ranks per trial (or several nodes): the report shows the node in step."""
        return self.ranks is not None

    @property
    def ranks_per_trial(self) -> int:
        """Ranks per trial on this node (1: a single loader)."""
        return int(self.ranks.get("nproc_per_node", 1)) if self.ranks else 1

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ScanSettings":
        """Settings read back from a result; keys of a newer writer are left out."""
        return from_known(cls, data, options=ScanOptions.from_dict(data.get("options", {})))
