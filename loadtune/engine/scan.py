"""The scan: spec -> plan -> trials -> results -> recommendation. The Python API behind the CLI.

Options come in three layers, later winning: loadtune's defaults, the spec file's ``loadtune = {...}``
dict, then explicit arguments (CLI flags). Every option is checked before any trial runs.
"""

from __future__ import annotations

import hashlib
import math
import pickle
import random
import statistics
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol

from loadtune.engine import calibration
from loadtune.engine.distributed import layout as distributed
from loadtune.engine import machine as machine_mod
from loadtune.model.machine import MachineInfo
from loadtune.engine import probe as probe_mod
from loadtune.engine import stages as stages_mod
from loadtune.analysis.footprint import parse_size
from loadtune.engine.trial.measure import LoaderOptions, Timing
from loadtune.model.config import PlanError, Skip, TrialConfig, transfer_for
from loadtune.search.space import SearchSpace, build_grid, default_workers, reference_configs
from loadtune.analysis.recommend import NOISE_FLOOR, recommend
from loadtune.model.results import ScanResult, SpecInfo, Trial, check_writable
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.search.adaptive import AdaptiveSearch
from loadtune.search.grid import GridSearch
from loadtune.engine.spec import LoadedSpec, SpecRef, from_objects, load_spec
from loadtune.engine.trial.workload import StepWorkload, WorkloadError, check_step_ms
from loadtune.engine.trial.workload import calibrate as calibrate_step

DEFAULT_BATCH_SIZE = 64
MAX_WORKERS_FLOOR = 64  # the adaptive search may extend num_workers up to max(this, 8 x usable cores), memory allowing


class OptionsError(ValueError):
    """An invalid option value or an unknown option name: refused before any work, exit code 2."""


def is_seconds(value: object) -> bool:
    """A positive, finite number (NaN compares false with everything and would pass a plain ``<= 0``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@dataclass
class ScanOptions:
    """Every knob of a scan. Field names are also the keys of a spec's ``loadtune = {...}`` dict."""

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
    confirm: int = 1  # rounds in which the contenders are re-measured side by side
    seed: int = 0  # trial order and shuffling
    step_ms: float | None = None  # a synthetic consumer step of about this many ms per batch (no spec step needed)
    transfer: list[str] | None = None  # transfer strategies to search on a CUDA device; None: sync, non_blocking, stream
    nproc_per_node: int = 1  # ranks per trial, each with its own DataLoader, as under torchrun
    nnodes: int = 1  # nodes of the training job: each rank's shard is 1/(nnodes x nproc_per_node) of the dataset
    node_rank: int = 0  # which node this is (its ranks' shards)
    rdzv_endpoint: str | None = None  # HOST:PORT where the nodes' picks meet for node 0's per-node summary
    max_memory: int | str | None = None  # configs whose peak host memory exceeds this are not recommended ("8G")
    diagnose: bool = True  # profile the stages once (where the time goes, the bound)

    def timing(self) -> Timing:
        """How each trial measures; the soft cap leaves the hard per-trial timeout a margin."""
        return Timing(warmup_s=self.warmup, block_s=self.block_time, blocks=self.blocks, max_s=self.timeout * 0.8,
                      min_blocks=self.min_blocks, target_spread=self.target_spread)

    def validate(self) -> None:
        if self.step_ms is not None:
            try:
                check_step_ms(self.step_ms)
            except WorkloadError as exc:
                raise OptionsError(str(exc)) from None
        for name in ("pin", "persistent", "shuffle", "drop_last", "allow_reorder", "diagnose"):
            value = getattr(self, name)
            if not isinstance(value, bool) and not (value is None and name in ("pin", "persistent")):
                raise OptionsError(f"{name} must be true or false, got {value!r}")
        if self.device is not None and not isinstance(self.device, str):
            raise OptionsError(f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}")
        for name in ("warmup", "block_time", "timeout"):
            value = getattr(self, name)
            if not is_seconds(value):
                raise OptionsError(f"{name} must be a positive number of seconds, got {value!r}")
        for name, low in (("seed", None), ("blocks", 1), ("min_blocks", 1), ("confirm", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low):
                raise OptionsError(f"{name} must be a whole number{f' >= {low}' if low is not None else ''}, got {value!r}")
        if self.min_blocks > self.blocks:
            self.min_blocks = self.blocks
        if self.search not in ("adaptive", "grid"):
            raise OptionsError(f"search must be 'adaptive' or 'grid', got {self.search!r}")
        if self.budget is not None and not is_seconds(self.budget):
            raise OptionsError(f"budget must be a positive number of seconds, got {self.budget!r}")
        if not isinstance(self.target_spread, (int, float)) or isinstance(self.target_spread, bool) or not 0 <= self.target_spread < 1:
            raise OptionsError(f"target_spread must be a fraction in [0, 1), got {self.target_spread!r}")
        if not isinstance(self.noise_floor, (int, float)) or isinstance(self.noise_floor, bool) or not 0 <= self.noise_floor < 1:
            raise OptionsError(f"noise_floor must be a fraction in [0, 1), got {self.noise_floor!r}")
        if self.max_memory is not None:
            try:
                self.max_memory = parse_size(self.max_memory)
            except ValueError as exc:
                raise OptionsError(f"max_memory (--max-memory): {exc}") from None
        if self.timeout <= self.warmup + self.block_time:
            raise OptionsError(f"timeout ({self.timeout:g} s) leaves no time to measure; raise it")


def as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def resolve_options(spec_defaults: dict, overrides: dict) -> ScanOptions:
    """Merge defaults < spec dict < overrides (``None`` in overrides means "not given")."""
    known = {f.name for f in fields(ScanOptions)}
    merged: dict[str, Any] = {}
    for origin, layer in (("the spec's loadtune dict", spec_defaults), ("options", overrides)):
        for key, value in layer.items():
            if key not in known:
                raise OptionsError(f"unknown option {key!r} in {origin}; known: {', '.join(sorted(known))}")
            if value is not None:
                merged[key] = value
    for key in ("batch_size", "workers", "prefetch", "start_method", "transfer"):
        if key in merged:
            merged[key] = as_list(merged[key])
            if not merged[key]:
                raise OptionsError(f"{key} is an empty list: give at least one value, or leave it out for the default")
    opts = ScanOptions(**merged)
    opts.validate()
    return opts


def pick_device(requested: str | None, info: MachineInfo) -> str:
    """"cpu" or "cuda:N" (always with an index: torch.cuda.set_device refuses a bare "cuda")."""
    if requested is None:
        return "cuda:0" if info.has_accelerator else "cpu"
    if requested == "cpu":
        return requested
    if not requested.startswith("cuda"):
        raise OptionsError(f"device must be 'cpu' or 'cuda[:N]', got {requested!r}")
    if not info.has_accelerator:
        raise OptionsError(f"device {requested!r} requested but torch sees no CUDA device; use --device cpu")
    index = requested.partition(":")[2] or "0"
    if not index.isdigit() or int(index) >= len(info.gpus):
        raise OptionsError(f"device {requested!r}: this machine has CUDA devices 0..{len(info.gpus) - 1}")
    return f"cuda:{index}"


def spec_info(spec: LoadedSpec) -> SpecInfo:
    sha = hashlib.sha256(Path(spec.ref.path).read_bytes()).hexdigest() if spec.ref else None
    return SpecInfo(
        path=spec.ref.path if spec.ref else None,
        factory=spec.ref.factory if spec.ref else None,
        sha256=sha,
        dataset_type=type(spec.dataset).__qualname__,
        length=spec.length,
        iterable=spec.iterable,
        has_step=spec.step is not None,
        has_collate_fn=spec.collate_fn is not None,
    )


class ScanObserver(Protocol):
    """What a progress display hears about. All methods optional in spirit; implement all."""

    def scan_started(self, result: ScanResult, planned: int | None, budget: float | None) -> None: ...
    def trial_started(self, index: int, config: TrialConfig, round_: int) -> None: ...
    def trial_event(self, kind: str, payload: Any) -> None: ...
    def trial_finished(self, index: int, trial: Trial, result: ScanResult) -> None: ...


@dataclass
class Plan:
    """The checked inputs of a scan, ready to run."""

    source: SpecRef | LoadedSpec
    spec: LoadedSpec
    options: ScanOptions
    machine: MachineInfo
    device: str
    strategy: GridSearch | AdaptiveSearch
    result: ScanResult


def prepare(dataset_or_spec: Any, **overrides: Any) -> Plan:
    """Load the spec, resolve and check options, build the trial list. No trial runs here."""
    if isinstance(dataset_or_spec, (str, Path, SpecRef)):
        spec = load_spec(dataset_or_spec)
        source: SpecRef | LoadedSpec = spec.ref
    elif isinstance(dataset_or_spec, LoadedSpec):
        spec = source = dataset_or_spec
    else:
        spec = source = from_objects(dataset_or_spec, overrides.pop("collate_fn", None), overrides.pop("step", None))
    opts = resolve_options(spec.defaults, overrides)
    too_big = [bs for bs in opts.batch_size or [DEFAULT_BATCH_SIZE] if spec.length is not None and bs > spec.length]
    if opts.drop_last and too_big:
        raise OptionsError(f"batch size {too_big[0]} with drop_last: the dataset's {spec.length} samples never fill one batch")
    info = machine_mod.collect()
    try:
        distributed.validate(opts.nproc_per_node, opts.nnodes, opts.node_rank, len(info.gpus), opts.device,
                             opts.rdzv_endpoint)
    except distributed.DistributedError as exc:
        raise OptionsError(str(exc)) from None
    device = pick_device(opts.device, info)
    accelerator = device.startswith("cuda")
    rank_cores = distributed.cores_per_rank(info.usable_cores, opts.nproc_per_node)  # the node's cores, shared
    space = SearchSpace(
        batch_sizes=opts.batch_size or [DEFAULT_BATCH_SIZE],
        workers=opts.workers if opts.workers is not None else default_workers(rank_cores),
        prefetch=opts.prefetch,
        pin=opts.pin,
        persistent=opts.persistent,
        in_order=[True, False] if opts.allow_reorder else [True],
        start_methods=list(opts.start_method) if opts.start_method else [None],
        transfers=list(opts.transfer) if opts.transfer else None,
    )
    try:
        configs, skips = build_grid(space, accelerator)
    except PlanError as exc:
        raise OptionsError(str(exc)) from None
    references = reference_configs(configs, accelerator)
    strategy = make_strategy(opts, space, configs, references, accelerator, info)
    settings = {
        "options": asdict(opts),
        "device": device,
        "grid_size": len(configs),
        "references": [c.key for c in references],
        "planned": [c.key for c in configs],
        "max_workers": reachable_workers(opts, space, info.usable_cores),
    }
    if isinstance(source, LoadedSpec) and accelerator:
        check_picklable(source)
    if opts.step_ms is not None and spec.step is not None:
        raise OptionsError("the spec defines step(batch) and step_ms is given: the synthetic step would replace yours; "
                           "drop one of them")
    ranks = distributed.setup_for(opts.nproc_per_node, opts.nnodes, opts.node_rank, device,
                                  opts.blocks * opts.block_time, source)
    if ranks is not None:
        settings["ranks"] = asdict(ranks)
    result = ScanResult(spec=spec_info(spec), machine=info, settings=settings, skipped=skips)
    if ranks is not None:
        result.notes.append(
            f"{ranks.nproc_per_node} ranks per trial ({ranks.backend}, {ranks.threads} torch thread(s) each, rank "
            f"{ranks.global_rank(0)}..{ranks.global_rank(ranks.nproc_per_node - 1)} of {ranks.world_size}): num_workers "
            f"is per rank, so the node runs {ranks.nproc_per_node}× as many; samples/s is the node in step "
            "(ranks × the slowest rank, the pace of synchronous training)")
    measure_device(result, device, opts.step_ms)
    if info.busy:
        result.notes.append(
            f"the machine was busy before the scan (load average {info.load_average:.1f} on {info.logical_cores} "
            "cores): other work competes with the trials, so figures are noisier and lower; re-run on a quiet machine"
        )
    return Plan(source, spec, opts, info, device, strategy, result)


def check_picklable(spec: LoadedSpec) -> None:
    """On a CUDA device trials of in-memory objects are not forked (see ``runner.context_for``): they must pickle."""
    try:
        pickle.dumps(spec)
    except Exception as exc:  # PicklingError, AttributeError (local class), TypeError (lambda, open file)
        raise OptionsError(
            f"on a CUDA device the dataset, collate_fn and step must pickle (a trial cannot be forked from a process "
            f"that has used CUDA), and these do not ({type(exc).__name__}: {exc}); put them in a spec file and run "
            "`loadtune scan dataset.py`, or pass device='cpu'") from None


def measure_device(result: ScanResult, device: str, step_ms: float | None) -> None:
    """Once per scan, before the trials: on a CUDA device, the pinned copy peak that achieved rates are
    set beside (in a child process, see ``probe.py``); with ``step_ms``, the synthetic step's calibration."""
    if device.startswith("cuda"):
        got = probe_mod.run(device, step_ms)
        result.h2d_peak_gbps = got.h2d_peak_gbps
        if got.error:
            result.notes.append(f"measuring {device} before the scan failed ({got.error}): no copy peak to compare with")
        if step_ms is not None and got.workload is None:
            raise OptionsError(f"step_ms: the synthetic step could not be calibrated on {device}: {got.error}")
        work = got.workload
    else:
        work = calibrate_step(step_ms, "cpu") if step_ms is not None else None
    if work is not None:
        result.settings["step"] = work.to_dict()


def workload_of(result: ScanResult) -> StepWorkload | None:
    """The synthetic step the scan's trials run (a resumed scan keeps the one it was calibrated with)."""
    data = result.settings.get("step")
    return StepWorkload.from_dict(data) if data else None


def worker_cap(usable_cores: int, ranks: int) -> int:
    """The most workers per rank the adaptive search may extend a default range to (memory allowing)."""
    return max(MAX_WORKERS_FLOOR, 8 * usable_cores) // ranks


def reachable_workers(opts: ScanOptions, space: SearchSpace, usable_cores: int) -> int:
    """The most workers (per rank) the scan may try: the adaptive search extends a default range up to its cap."""
    if opts.search == "adaptive" and opts.workers is None:
        return max(max(space.workers), worker_cap(usable_cores, opts.nproc_per_node))
    return max(space.workers)


def make_strategy(
    opts: ScanOptions,
    space: SearchSpace,
    configs: list[TrialConfig],
    references: list[TrialConfig],
    accelerator: bool,
    info: MachineInfo,
) -> GridSearch | AdaptiveSearch:
    """The exhaustive grid in a shuffled order, or the adaptive search over the same space."""
    if opts.search == "grid":
        order = configs + references
        random.Random(opts.seed).shuffle(order)  # machine drift must not favour whichever ran first
        return GridSearch(order, opts.noise_floor, opts.confirm, opts.seed)
    return AdaptiveSearch(
        space, accelerator, [c for c in configs if c.is_pytorch_default] + references, opts.noise_floor,
        max_workers=worker_cap(info.usable_cores, opts.nproc_per_node),
        memory_available=info.memory_available_bytes,
        confirm_rounds=opts.confirm, seed=opts.seed, extend=opts.workers is None,
    )


def resume_from(plan: Plan, json_path: str | Path | None) -> None:
    """Continue the scan saved at ``json_path`` instead of starting afresh: its finished trials are
    kept and not re-run. Refused when the spec file or the planned grid differ: trials would not compare."""
    if not json_path or not Path(json_path).exists():
        raise OptionsError(f"nothing to resume: {json_path} does not exist")
    old, new = ScanResult.load(json_path), plan.result
    if (old.spec.sha256, old.spec.factory, old.spec.dataset_type) != (new.spec.sha256, new.spec.factory, new.spec.dataset_type):
        raise OptionsError("cannot resume: the saved scan is of a different spec (the file or factory changed); start a new scan")
    free = ("timeout", "budget", "rdzv_endpoint", "max_memory", "diagnose")  # limits, meeting points and reports, not what is measured
    mine = {k: v for k, v in new.settings["options"].items() if k not in free}
    theirs = {k: v for k, v in {**asdict(ScanOptions()), **old.settings.get("options", {})}.items() if k not in free}
    changed = sorted(k for k in mine if mine[k] != theirs.get(k))
    if changed or old.settings.get("planned") != new.settings["planned"] or old.settings.get("device") != new.settings["device"]:
        what = f"options {', '.join(changed)} differ" if changed else "the grid differs"
        raise OptionsError(f"cannot resume: {what} from the saved scan; use the same flags, or start a new scan")
    old.state = "running"
    old.settings["options"].update({k: new.settings["options"][k] for k in free})  # this run's limits apply
    # rows that said where the last run stopped (budget, search notes) are said afresh at this run's end
    old.skipped = new.skipped + [s for s in old.skipped if s.key and s not in new.skipped]
    plan.result = old


def expected_trial_s(result: ScanResult, opts: ScanOptions) -> float:
    """How long the next trial will likely take: the median so far, else a guess from the options."""
    walls = [t.wall_s for t in result.trials]
    return statistics.median_high(walls) if walls else 2.0 + opts.warmup + opts.block_time * opts.min_blocks


def oom_batch_size(result: ScanResult) -> int | None:
    """The smallest batch size at which CUDA ran out of memory: larger ones cannot fit either."""
    sizes = [t.config.batch_size for t in result.trials if t.error is not None and t.error.kind == "cuda_oom"]
    return min(sizes) if sizes else None


def execute(plan: Plan, json_path: str | Path | None = None, observer: ScanObserver | None = None) -> ScanResult:
    """Run what the strategy proposes, one trial at a time, saving after each, until it proposes
    nothing or the budget is spent. On Ctrl-C the partial result is saved (state "interrupted") and
    KeyboardInterrupt propagates."""
    result, opts, strategy = plan.result, plan.options, plan.strategy
    references = set(result.settings["references"])
    timing = opts.timing()
    loader_options = LoaderOptions(shuffle=opts.shuffle, drop_last=opts.drop_last, seed=opts.seed)
    workload = workload_of(result)
    ranks = distributed.setup_for(opts.nproc_per_node, opts.nnodes, opts.node_rank, plan.device,
                                  opts.blocks * opts.block_time, plan.source)
    request_for = lambda config: TrialRequest(config, plan.device, timing, loader_options, opts.timeout,  # noqa: E731
                                              plan.machine.start_method, workload=workload, ranks=ranks)
    save = (lambda: result.save(json_path)) if json_path else (lambda: None)
    planned = len(strategy.configs) if isinstance(strategy, GridSearch) else None
    if observer:
        observer.scan_started(result, planned, opts.budget)
    save()
    started = time.monotonic()
    calibrate = lambda: result.calibration.append(run_trial(calibration.REF, replace(request_for(calibration.CONFIG), device="cpu", workload=None, ranks=None)))  # noqa: E731
    try:
        if not result.calibration:
            calibrate()  # the machine's speed now, for ``check`` to compare ratios across machines
            save()
        while proposals := strategy.propose(result):
            config, round_ = proposals[0].config, proposals[0].round
            oom = oom_batch_size(result)
            if oom is not None and config.batch_size >= oom and round_ == 0:  # contenders fitted once: confirm them
                result.skipped.append(Skip(config.label(), f"CUDA out of memory at batch size {oom}", config.key))
                save()
                continue
            # the next trial and the closing calibration must both fit
            if opts.budget and time.monotonic() - started + 2 * expected_trial_s(result, opts) > opts.budget:
                result.skipped.append(Skip(f"{len(proposals)}+ more trials", f"the {opts.budget:g} s budget would be exceeded"))
                break
            if observer:
                observer.trial_started(len(result.trials), config, round_)
            trial = run_trial(plan.source, request_for(config), observer.trial_event if observer else None)
            trial.reference, trial.round = config.key in references, round_
            result.trials.append(trial)
            result.recommendation = recommend(result.trials, opts.noise_floor, opts.max_memory)
            save()
            if observer:
                observer.trial_finished(len(result.trials) - 1, trial, result)
        if opts.diagnose and "ranks" in result.settings and not any("stage profile" in n for n in result.notes):
            result.notes.append("no stage profile or bound with several ranks: the profile models one loader, and "
                                "ranks share the node's cores in ways it does not (the table's slowest rank is the figure)")
        elif opts.diagnose and result.stages is None and result.recommendation is not None:
            if opts.budget and time.monotonic() - started + 2 * expected_trial_s(result, opts) > opts.budget:
                result.notes.append(f"stage profile skipped: the {opts.budget:g} s budget would be exceeded")
            else:
                profile_stages(plan, request_for(result.recommendation.config), observer)
                save()
        calibrate()  # again at the end: drift during the scan shows as a difference
    except KeyboardInterrupt:
        result.state = "interrupted"
        result.recommendation = recommend(result.trials, opts.noise_floor, opts.max_memory)
        save()
        raise
    if isinstance(strategy, AdaptiveSearch):
        known = {(s.what, s.why) for s in result.skipped}
        result.skipped += [s for s in strategy.notes(result) if (s.what, s.why) not in known]
        result.notes += [n for n in strategy.remarks(result) if n not in result.notes]
    result.state = "complete"
    save()
    return result


def profile_stages(plan: Plan, request: TrialRequest, observer: ScanObserver | None = None) -> None:
    """Where the time goes: one profiling run (``stages.py``) at the recommended config's batch size,
    in its own process. A failure leaves the scan's figures standing and says why in a note."""
    config = TrialConfig(request.config.batch_size, 0, transfer=transfer_for(False, plan.device.startswith("cuda")),
                         start_method=request.config.start_method)
    if observer and hasattr(observer, "profile_started"):  # optional: older observers lack it
        observer.profile_started()
    costs, why = stages_mod.run_profile(plan.source, replace(request, config=config, ranks=None))
    if costs is None:
        plan.result.notes.append(f"stage profile failed, so there is no diagnosis: {why}")
        return
    costs.max_workers = plan.result.settings.get("max_workers")
    plan.result.stages = costs


def scan(
    dataset_or_spec: Any,
    *,
    json_path: str | Path | None = None,
    observer: ScanObserver | None = None,
    resume: bool = False,
    **options: Any,
) -> ScanResult:
    """Measure the DataLoader configs of a dataset and recommend one.

    ``dataset_or_spec`` is a spec file path (``"dataset.py"`` or ``"dataset.py:factory"``) or a
    Dataset object (then ``collate_fn=`` and ``step=`` may be passed too). Options are the fields of
    ``ScanOptions``; the result is saved to ``json_path`` after every trial when one is given.
    With ``resume=True`` an interrupted scan saved at ``json_path`` is continued.
    """
    if json_path:
        check_writable(json_path)
    plan = prepare(dataset_or_spec, **options)
    if resume:
        resume_from(plan, json_path)
    return execute(plan, json_path, observer)
