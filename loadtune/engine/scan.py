"""The scan: spec -> plan -> trials -> results -> recommendation. The Python API behind the CLI.

Options come in three layers, later winning: loadtune's defaults, the spec file's ``loadtune_options = {...}``
dict, then explicit arguments (CLI flags). Every option is checked before any trial runs.
"""

from __future__ import annotations

import hashlib
import math
import pickle
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol

from loadtune.engine import calibration
from loadtune.engine.reference import record_reference
from loadtune.engine.distributed import layout as distributed
from loadtune.engine.distributed.agent import with_ranks
from loadtune.engine import machine as machine_mod
from loadtune.model.machine import MachineInfo
from loadtune.engine import probe as probe_mod
from loadtune.engine import stages as stages_mod
from loadtune.analysis.footprint import parse_size
from loadtune.analysis.load import disturbed, quieter
from loadtune.engine.trial.measure import LoaderOptions, scan_timing
from loadtune.model.config import PlanError, Skip, TrialConfig, current_config, parse_knobs, transfer_for
from loadtune.search.space import SearchSpace, build_grid, default_workers, reference_configs
from loadtune.analysis.recommend import recommend
from loadtune.model.results import ScanResult, SpecInfo, Trial, check_writable
from loadtune.model.settings import ScanOptions, ScanSettings
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.nvml import utilisation_notes
from loadtune.engine.trial.protocol import RankSetup, TrialRequest
from loadtune.search.adaptive import AdaptiveSearch
from loadtune.search.grid import GridSearch
from loadtune.search.strategy import Strategy
from loadtune.engine.spec import LoadedSpec, SpecRef, check_knobs, from_objects, load_spec
from loadtune.engine.interactive import check_main_objects
from loadtune.engine.trial.workload import StepWorkload, WorkloadError, check_step_ms
from loadtune.engine.trial.workload import calibrate as calibrate_step

DEFAULT_BATCH_SIZE = 64
MAX_WORKERS_FLOOR = 64  # the adaptive search may extend num_workers up to max(this, 8 x usable cores), memory allowing
NO_PROFILE_WITH_RANKS = ("no stage profile or bound with several ranks: the profile models one loader, and ranks share "
                         "the node's cores in ways it does not (the table's slowest rank is the figure)")


class OptionsError(ValueError):
    """An invalid option value or an unknown option name: refused before any work, exit code 2."""


def is_seconds(value: object) -> bool:
    """A positive, finite number (NaN compares false with everything and would pass a plain ``<= 0``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def validate_options(opts: ScanOptions) -> None:
    """Refuse an invalid value before any work; normalise ``min_blocks`` and ``max_memory`` (to bytes)."""
    if opts.step_ms is not None:
        try:
            check_step_ms(opts.step_ms)
        except WorkloadError as exc:
            raise OptionsError(str(exc)) from None
    check_flags(opts)
    check_counts(opts)
    check_fractions(opts)
    if opts.device is not None and not isinstance(opts.device, str):
        raise OptionsError(f"device must be 'cpu' or 'cuda[:N]', got {opts.device!r}")
    if opts.search not in ("adaptive", "grid"):
        raise OptionsError(f"search must be 'adaptive' or 'grid', got {opts.search!r}")
    for name in ("warmup", "block_time", "timeout"):
        if not is_seconds(getattr(opts, name)):
            raise OptionsError(f"{name} must be a positive number of seconds, got {getattr(opts, name)!r}")
    if opts.budget is not None and not is_seconds(opts.budget):
        raise OptionsError(f"budget must be a positive number of seconds, got {opts.budget!r}")
    if opts.max_memory is not None:
        try:
            opts.max_memory = parse_size(opts.max_memory)
        except ValueError as exc:
            raise OptionsError(f"max_memory (--max-memory): {exc}") from None
    check_current(opts)
    if opts.timeout <= opts.warmup + opts.block_time:
        raise OptionsError(f"timeout ({opts.timeout:g} s) leaves no time to measure; raise it")


def check_current(opts: ScanOptions) -> None:
    """``current`` ("num_workers=8,pin_memory=True" or a dict) normalised to a dict of checked knobs."""
    if opts.current is not None:
        try:
            opts.current = parse_knobs(opts.current, "current")
        except PlanError as exc:
            raise OptionsError(str(exc)) from None


def check_flags(opts: ScanOptions) -> None:
    for name in ("pin", "persistent", "shuffle", "drop_last", "allow_reorder", "diagnose"):
        value = getattr(opts, name)
        if not isinstance(value, bool) and not (value is None and name in ("pin", "persistent")):
            raise OptionsError(f"{name} must be true or false, got {value!r}")


def check_counts(opts: ScanOptions) -> None:
    for name, low in (("seed", None), ("blocks", 1), ("min_blocks", 1), ("confirm", 0), ("reference_rounds", 0)):
        value = getattr(opts, name)
        if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low):
            raise OptionsError(f"{name} must be a whole number{f' >= {low}' if low is not None else ''}, got {value!r}")
    if opts.reference_rounds == 1:
        raise OptionsError("reference_rounds must be 0 (no reference for check) or at least 2: one paired round "
                           "shows no spread, and check could never decide against it")
    opts.min_blocks = min(opts.min_blocks, opts.blocks)


def check_fractions(opts: ScanOptions) -> None:
    for name in ("target_spread", "noise_floor"):
        value = getattr(opts, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
            raise OptionsError(f"{name} must be a fraction in [0, 1), got {value!r}")


def as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def resolve_options(spec_defaults: dict, overrides: dict) -> ScanOptions:
    """Merge defaults < spec dict < overrides (``None`` in overrides means "not given")."""
    known = {f.name for f in fields(ScanOptions)}
    merged: dict[str, Any] = {}
    for origin, layer in (("the spec's loadtune_options", spec_defaults), ("options", overrides)):
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
    validate_options(opts)
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
        loader=None if spec.form == "dataset" else spec.form,
        loader_name=None if spec.form == "dataset" else spec.owner,
        loader_args=list(spec.loader_args),
    )


class ScanObserver(Protocol):
    """What a progress display hears about. Implement every method, or subclass this class: the
    methods a subclass leaves out do nothing."""

    def scan_started(self, result: ScanResult, planned: int | None, budget: float | None) -> None: ...
    def trial_started(self, index: int, config: TrialConfig, round_: int) -> None: ...
    def trial_event(self, kind: str, payload: Any) -> None: ...
    def trial_finished(self, index: int, trial: Trial, result: ScanResult) -> None: ...
    def profile_started(self) -> None: ...
    def reference_started(self, rounds: int) -> None: ...


@dataclass
class Plan:
    """The checked inputs of a scan, ready to run."""

    source: SpecRef | LoadedSpec
    spec: LoadedSpec
    options: ScanOptions
    machine: MachineInfo
    device: str
    strategy: Strategy
    result: ScanResult


def prepare(dataset_or_spec: Any, **overrides: Any) -> Plan:
    """Load the spec, resolve and check options, build the trial list. No trial runs here."""
    spec, source = load_source(dataset_or_spec, overrides)
    opts = resolve_options(spec.defaults, overrides)
    loader_skips = fit_to_loader(spec, opts, set(spec.defaults) | {k for k, v in overrides.items() if v is not None})
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
    space = search_space(opts, distributed.cores_per_rank(info.usable_cores, opts.nproc_per_node))
    try:
        configs, skips = build_grid(space, accelerator)
    except PlanError as exc:
        raise OptionsError(str(exc)) from None
    references = reference_configs(configs, accelerator)
    current = current_of(opts, accelerator)
    if current is not None and current not in configs + references:
        references.append(current)  # measured like PyTorch's defaults: the gain is stated against it
    strategy = make_strategy(opts, space, configs, references + [c for c in [current] if c in configs], accelerator, info)
    settings = ScanSettings(options=opts, device=device, grid_size=len(configs), references=[c.key for c in references],
                            planned=[c.key for c in configs], max_workers=reachable_workers(opts, space, info.usable_cores),
                            current=current.key if current else None)
    if isinstance(source, LoadedSpec) and accelerator:
        check_picklable(source)
    if isinstance(source, LoadedSpec):  # a class from a notebook cell: refused where a new process must import it
        check_main_objects(source, device, {c.start_method or info.start_method for c in configs + references if c.num_workers})
    if opts.step_ms is not None and spec.step is not None:
        raise OptionsError("the spec defines step(batch) and step_ms is given: the synthetic step would replace yours; "
                           "drop one of them")
    ranks = distributed.setup_for(opts.nproc_per_node, opts.nnodes, opts.node_rank, device,
                                  opts.blocks * opts.block_time)
    if ranks is not None:
        settings.ranks = asdict(ranks)
    checks = check_knobs(spec, [c.loader_kwargs() for c in dict.fromkeys([configs[0], configs[-1], *references])])
    result = ScanResult(spec=spec_info(spec), machine=info, settings=settings, skipped=loader_skips + skips)
    result.notes += spec.notes + checks + rank_notes(ranks)
    measure_device(result, device, opts.step_ms, ranks, source)
    result.notes += busy_notes(info)
    return Plan(source, spec, opts, info, device, strategy, result)


def load_source(dataset_or_spec: Any, overrides: dict) -> tuple[LoadedSpec, SpecRef | LoadedSpec]:
    """The loaded spec, and what trials load it from: the file's reference, or the objects themselves
    (then ``collate_fn`` and ``step`` come out of ``overrides``)."""
    if isinstance(dataset_or_spec, (str, Path, SpecRef)):
        spec = load_spec(dataset_or_spec)
        return spec, spec.ref
    if isinstance(dataset_or_spec, LoadedSpec):
        return dataset_or_spec, dataset_or_spec
    spec = from_objects(dataset_or_spec, overrides.pop("collate_fn", None), overrides.pop("step", None),
                        overrides.pop("loader_kwargs", None))
    return spec, spec


def loader_owner(spec: LoadedSpec) -> str:
    """Who orders and batches the samples, in the user's words."""
    if spec.form == "factory":
        return f"{spec.owner}(**knobs)"
    if spec.form == "datamodule":
        return f"{spec.owner}.train_dataloader()"
    if spec.form == "dataloader":
        return f"the DataLoader {spec.owner}"
    return "the spec's batch_sampler" if "batch_sampler" in spec.loader_args else "the spec's sampler"


def fit_to_loader(spec: LoadedSpec, opts: ScanOptions, given: set[str]) -> list[Skip]:
    """The options against a loader that orders samples itself (the user's sampler, batch_sampler or
    whole loader): loadtune's shuffle, drop_last and rank shards do not apply, and setting them is a
    conflict. A finished loader's own settings become ``current`` unless given. Returns the row
    saying the batch size is not searched, where the loader sets it."""
    who = loader_owner(spec)
    if spec.own_order:
        if opts.nproc_per_node > 1 or opts.nnodes > 1:
            raise OptionsError(f"{who} orders the samples itself, while several ranks need loadtune's DistributedSampler: "
                               "scan a single rank (drop --nproc-per-node and --nnodes)")
        batches = spec.form != "dataset" or "batch_sampler" in spec.loader_args  # it decides drop_last too
        for name in ("shuffle", "drop_last") if batches else ("shuffle",):
            if name in given and getattr(opts, name):
                raise OptionsError(f"{name} is set (--{name.replace('_', '-')} or the options), but {who} decides it: "
                                   f"drop {name}, or change it in your loader")
        opts.shuffle = False
        opts.drop_last = opts.drop_last and not batches
    if "multiprocessing_context" in spec.loader_args and opts.start_method:
        raise OptionsError("--start-method searches multiprocessing_context, which the spec's loader_kwargs sets: drop one of them")
    if opts.current is None and spec.current is not None:
        opts.current = dict(spec.current)
    return batch_size_plan(spec, opts, who)


def batch_size_plan(spec: LoadedSpec, opts: ScanOptions, who: str) -> list[Skip]:
    """The batch sizes to scan: by default the loader's own (or ``current``'s); exactly the loader's
    where it sets it, which a pre-batched stream cannot show and the options must then declare."""
    current_bs = (opts.current or {}).get("batch_size")
    if spec.batch_knob:
        if opts.batch_size is None and (current_bs or spec.batch_size):
            opts.batch_size = [current_bs or spec.batch_size]
        return []
    own = spec.batch_size
    declared = opts.batch_size or ([current_bs] if current_bs else None)
    if own is None and (not declared or len(declared) != 1):
        given = f"batch_size {','.join(map(str, declared))}: " if declared else ""
        raise OptionsError(f"{given}{who} batches by itself (batch_size=None) and how many samples its batches hold cannot "
                           "be read from it: set batch_size to that one number, e.g. in loadtune_options (it is not "
                           "searched: it labels the results and sizes check's calibration; samples are counted from the batches)")
    if own is not None and opts.batch_size and opts.batch_size != [own]:
        raise OptionsError(f"batch_size {','.join(map(str, opts.batch_size))}: {who} sets its own batch size ({own}), which "
                           "loadtune cannot change; drop batch_size")
    size = own if own is not None else declared[0]
    if current_bs is not None and current_bs != size:
        raise OptionsError(f"current: batch_size={current_bs}, but {who} batches {size} samples")
    opts.batch_size = [size]
    how = "as declared" if own is None else "its own"
    return [Skip("batch_size", f"set by {who} ({size} per batch, {how}): not searched")]


def current_of(opts: ScanOptions, accelerator: bool) -> TrialConfig | None:
    """The config of ``current`` (the user's own settings), at the scan's first batch size unless it gives one."""
    if opts.current is None:
        return None
    try:
        return current_config(opts.current, (opts.batch_size or [DEFAULT_BATCH_SIZE])[0], accelerator)
    except PlanError as exc:
        raise OptionsError(f"current: {exc}") from None


def search_space(opts: ScanOptions, rank_cores: int) -> SearchSpace:
    """The knobs' values from the options; workers by default from the cores each rank gets."""
    return SearchSpace(
        batch_sizes=opts.batch_size or [DEFAULT_BATCH_SIZE],
        workers=opts.workers if opts.workers is not None else default_workers(rank_cores),
        prefetch=opts.prefetch,
        pin=opts.pin,
        persistent=opts.persistent,
        in_order=[True, False] if opts.allow_reorder else [True],
        start_methods=list(opts.start_method) if opts.start_method else [None],
        transfers=list(opts.transfer) if opts.transfer else None,
    )


def rank_notes(ranks: RankSetup | None) -> list[str]:
    """How the ranks of each trial are laid out, before any figure."""
    if ranks is None:
        return []
    return [f"{ranks.nproc_per_node} ranks per trial ({ranks.backend}, {ranks.threads} torch thread(s) each, rank "
            f"{ranks.global_rank(0)}..{ranks.global_rank(ranks.nproc_per_node - 1)} of {ranks.world_size}): num_workers "
            f"is per rank, so the node runs {ranks.nproc_per_node}× as many; samples/s is the node in step "
            "(ranks × the slowest rank, the pace of synchronous training)"]


def busy_notes(info: MachineInfo) -> list[str]:
    """A machine already busy before the scan: its figures will be noisier and lower."""
    if not info.busy:
        return []
    return [f"the machine was busy before the scan (load average {info.load_average:.1f} on {info.logical_cores} "
            "cores): other work competes with the trials, so figures are noisier and lower; re-run on a quiet machine"]


def check_picklable(spec: LoadedSpec) -> None:
    """On a CUDA device trials of in-memory objects are not forked (see ``runner.context_for``): they must pickle."""
    try:
        pickle.dumps(spec)
    except Exception as exc:  # PicklingError, AttributeError (local class), TypeError (lambda, open file)
        raise OptionsError(
            f"on a CUDA device the dataset, collate_fn and step must pickle (a trial cannot be forked from a process "
            f"that has used CUDA), and these do not ({type(exc).__name__}: {exc}); put them in a spec file and run "
            "`loadtune scan dataset.py`, or pass device='cpu'") from None


def measure_device(result: ScanResult, device: str, step_ms: float | None, ranks: RankSetup | None = None,
                   source: SpecRef | LoadedSpec | None = None) -> None:
    """Once per scan, before the trials: on a CUDA device, the pinned copy peak that achieved rates are
    set beside (in a child process, see ``probe.py``; with ranks, each rank's own GPU); with ``step_ms``,
    the synthetic step's calibration, under the spec's settings."""
    if device.startswith("cuda"):
        devices = [f"cuda:{i}" for i in range(ranks.nproc_per_node)] if ranks is not None else [device]
        got = probe_mod.run(device, step_ms, devices=devices, source=source)
        result.h2d_peak_gbps = got.h2d_peak_gbps
        if ranks is not None and len(got.h2d_peaks_gbps) == len(devices):
            result.h2d_peaks_gbps = got.h2d_peaks_gbps
        result.notes += utilisation_notes(got.devices)
        if got.error:
            result.notes.append(f"measuring {device} before the scan failed ({got.error}): no copy peak to compare with")
        if step_ms is not None and got.workload is None:
            raise OptionsError(f"step_ms: the synthetic step could not be calibrated on {device}: {got.error}")
        work = got.workload
    else:
        work = calibrate_step(step_ms, "cpu") if step_ms is not None else None
    if work is not None:
        result.settings.step = work.to_dict()


def workload_of(result: ScanResult) -> StepWorkload | None:
    """The synthetic step the scan's trials run (a resumed scan keeps the one it was calibrated with)."""
    data = result.settings.step
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
) -> Strategy:
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
    mine, theirs = asdict(new.settings.options), asdict(old.settings.options)
    changed = sorted(k for k in mine if k not in free and mine[k] != theirs[k])
    if changed or old.settings.planned != new.settings.planned or old.settings.device != new.settings.device:
        what = f"options {', '.join(changed)} differ" if changed else "the grid differs"
        raise OptionsError(f"cannot resume: {what} from the saved scan; use the same flags, or start a new scan")
    old.state = "running"
    old.settings.options = replace(old.settings.options, **{k: mine[k] for k in free})  # this run's limits apply
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


@dataclass
class Run:
    """What the phases of one scan share: the plan, how to build a trial's request, saving, the clock."""

    plan: Plan
    request_for: Callable[[TrialConfig], TrialRequest]
    save: Callable[[], None]
    observer: ScanObserver | None
    started: float = field(default_factory=time.monotonic)

    def fits(self, trials: float) -> bool:
        """``trials`` more trials of the usual length fit in the budget (always, without one)."""
        opts = self.plan.options
        return not opts.budget or time.monotonic() - self.started + trials * expected_trial_s(self.plan.result, opts) <= opts.budget


def execute(plan: Plan, json_path: str | Path | None = None, observer: ScanObserver | None = None) -> ScanResult:
    """Run what the strategy proposes, one trial at a time, saving after each, until it proposes
    nothing or the budget is spent; then profile the stages and record the reference for ``check``.
    On Ctrl-C the partial result is saved (state "interrupted") and KeyboardInterrupt propagates."""
    result, opts, strategy = plan.result, plan.options, plan.strategy
    save = (lambda: result.save(json_path)) if json_path else (lambda: None)
    run = Run(plan, requests_of(plan), save, observer)
    if observer:
        observer.scan_started(result, strategy.planned, opts.budget)
    save()
    try:
        if not result.calibration:
            calibrate(run)  # the machine's speed now, for ``show`` to compare scans across machines
        search(run)
        diagnose(run)
        reference(run)
        calibrate(run)  # again at the end: drift during the scan shows as a difference
    except KeyboardInterrupt:
        result.state = "interrupted"
        result.recommendation = recommend(result.trials, opts.noise_floor, opts.max_memory, result.settings.current)
        save()
        raise
    known = {(s.what, s.why) for s in result.skipped}
    result.skipped += [s for s in strategy.notes(result) if (s.what, s.why) not in known]
    result.notes += [n for n in strategy.remarks(result) if n not in result.notes]
    result.state = "complete"
    save()
    return result


def requests_of(plan: Plan) -> Callable[[TrialConfig], TrialRequest]:
    """How every trial of this scan is asked for: the scan's timing, loader options, step and ranks."""
    opts = plan.options
    timing = scan_timing(opts)
    loader_options = LoaderOptions(shuffle=opts.shuffle, drop_last=opts.drop_last, seed=opts.seed)
    workload = workload_of(plan.result)
    ranks = distributed.setup_for(opts.nproc_per_node, opts.nnodes, opts.node_rank, plan.device,
                                  opts.blocks * opts.block_time)
    return lambda config: with_ranks(TrialRequest(config, plan.device, timing, loader_options, opts.timeout,
                                                  plan.machine.start_method, workload=workload), ranks)


def calibrate(run: Run) -> None:
    """loadtune's fixed yardstick workload, one trial on the CPU."""
    request = replace(run.request_for(calibration.CONFIG), device="cpu", workload=None, ranks=None, entry=None)
    run.plan.result.calibration.append(run_trial(calibration.REF, request))
    run.save()


def search(run: Run) -> None:
    """The strategy's trials, one at a time, the recommendation updated and saved after each."""
    result, opts, observer = run.plan.result, run.plan.options, run.observer
    references = set(result.settings.references)
    while proposals := run.plan.strategy.propose(result):
        config, round_ = proposals[0].config, proposals[0].round
        oom = oom_batch_size(result)
        if oom is not None and config.batch_size >= oom and round_ == 0:  # contenders fitted once: confirm them
            result.skipped.append(Skip(config.label(), f"CUDA out of memory at batch size {oom}", config.key))
            run.save()
            continue
        if not run.fits(2):  # the next trial and the closing calibration must both fit
            result.skipped.append(Skip(f"{len(proposals)}+ more trials", f"the {opts.budget:g} s budget would be exceeded"))
            return
        if observer:
            observer.trial_started(len(result.trials), config, round_)
        trial = run_quietly(run, config, round_)
        trial.reference, trial.round = config.key in references, round_
        result.trials.append(trial)
        result.recommendation = recommend(result.trials, opts.noise_floor, opts.max_memory, result.settings.current)
        run.save()
        if observer:
            observer.trial_finished(len(result.trials) - 1, trial, result)


def run_quietly(run: Run, config: TrialConfig, round_: int) -> Trial:
    """One trial of ``config``. One that outside load disturbed (``analysis.load``) is measured once
    more where the budget allows; the quieter run is kept, the other set aside in ``result.remeasured``,
    out of every estimate. The strategy sees one trial either way."""
    result, observer = run.plan.result, run.observer
    on_event = observer.trial_event if observer else None
    trial = run_trial(run.plan.source, run.request_for(config), on_event)
    if not (trial.ok and disturbed(trial.load, run.plan.options.noise_floor)) or not run.fits(2):
        return trial
    if observer:
        observer.trial_started(len(result.trials), config, round_)
    kept, aside = quieter(trial, run_trial(run.plan.source, run.request_for(config), on_event))
    aside.reference, aside.round = config.key in result.settings.references, round_
    result.remeasured.append(aside)
    return kept


def diagnose(run: Run) -> None:
    """The stage profile at the pick's batch size, where the budget allows (not with several ranks)."""
    result, opts = run.plan.result, run.plan.options
    if not opts.diagnose:
        return
    if result.settings.distributed:
        if NO_PROFILE_WITH_RANKS not in result.notes:  # a resumed scan may have said it already
            result.notes.append(NO_PROFILE_WITH_RANKS)
    elif result.stages is None and result.recommendation is not None:
        if not run.plan.spec.profilable:
            note = ("no stage profile or bound: the loader batches by itself (a pre-batched stream), while the profile "
                    "times samples one by one")
            result.notes += [note] if note not in result.notes else []
        elif not run.fits(2):
            result.notes.append(f"stage profile skipped: the {opts.budget:g} s budget would be exceeded")
        else:
            profile_stages(run.plan, run.request_for(result.recommendation.config), run.observer)
            run.save()


def reference(run: Run) -> None:
    """The pick in paired rounds with a calibration shaped like the dataset: what ``check`` compares
    with. Skipped (with a note) where the budget or the measurements do not allow it."""
    result, opts = run.plan.result, run.plan.options
    rounds = opts.reference_rounds
    if not rounds or result.recommendation is None or result.reference is not None:
        return
    if not run.fits(2 * rounds + 1):
        result.notes.append(f"no reference for check: its {rounds} paired rounds would exceed the {opts.budget:g} s budget")
        return
    if run.observer:
        run.observer.reference_started(rounds)
    pick = result.recommendation.config
    got = record_reference(result, run.plan.source, run.request_for(pick), rounds)
    if got is None:
        result.notes.append("no reference for check: the pick's per-sample costs were not measured (no stage profile "
                            "at its batch size, no CPU reading)")
        return
    result.reference = got
    run.save()


def profile_stages(plan: Plan, request: TrialRequest, observer: ScanObserver | None = None) -> None:
    """Where the time goes: one profiling run (``stages.py``) at the recommended config's batch size,
    in its own process. A failure leaves the scan's figures standing and says why in a note."""
    config = TrialConfig(request.config.batch_size, 0, transfer=transfer_for(False, plan.device.startswith("cuda")),
                         start_method=request.config.start_method)
    if observer:
        observer.profile_started()
    costs, why = stages_mod.run_profile(plan.source, replace(request, config=config, ranks=None))
    if costs is None:
        plan.result.notes.append(f"stage profile failed, so there is no diagnosis: {why}")
        return
    costs.max_workers = plan.result.settings.max_workers
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
