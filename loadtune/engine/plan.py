"""The scan's plan: the spec loaded, the options resolved against it and the machine, the search space
and strategy built, the device measured once. No trial runs here; ``scan.py`` executes the plan."""

from __future__ import annotations

import hashlib
import pickle
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from loadtune.analysis.budget import RaceNeeds, race_needs, too_short
from loadtune.analysis.race import RacePolicy, can_race
from loadtune.engine.distributed import layout as distributed
from loadtune.engine import machine as machine_mod
from loadtune.engine import probe as probe_mod
from loadtune.engine.interactive import check_main_objects
from loadtune.engine.options import OptionsError, pick_device, resolve_options
from loadtune.engine.spec import LoadedSpec, SpecRef, check_knobs, from_objects, load_spec
from loadtune.engine.trial.load import outside_now
from loadtune.engine.trial.nvml import utilisation_notes
from loadtune.engine.trial.protocol import RankSetup
from loadtune.engine.trial.workload import calibrate as calibrate_step
from loadtune.model.config import PlanError, Skip, TrialConfig, current_config
from loadtune.model.machine import MachineInfo
from loadtune.model.results import ScanResult, SpecInfo
from loadtune.model.settings import ScanOptions, ScanSettings
from loadtune.search.adaptive import AdaptiveSearch
from loadtune.search.grid import GridSearch
from loadtune.search.space import SearchSpace, build_grid, default_workers, reference_configs
from loadtune.search.strategy import Strategy

DEFAULT_BATCH_SIZE = 64
MAX_WORKERS_FLOOR = 64  # the adaptive search may extend num_workers up to max(this, 8 x usable cores), memory allowing


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
    info.outside_cores, info.outside_who = outside_now()
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
    # the options' own conflicts first: a user mistake is named before anything about the device
    if opts.step_ms is not None and spec.step is not None:
        raise OptionsError("the spec defines step(batch) and step_ms is given: the synthetic step would replace yours; "
                           "drop one of them")
    if isinstance(source, LoadedSpec) and accelerator:
        check_picklable(source)
    if isinstance(source, LoadedSpec):  # a class from a notebook cell: refused where a new process must import it
        check_main_objects(source, device, {c.start_method or info.start_method for c in configs + references if c.num_workers})
    ranks = distributed.setup_for(opts.nproc_per_node, opts.nnodes, opts.node_rank, device,
                                  opts.blocks * opts.block_time)
    if ranks is not None:
        settings.ranks = asdict(ranks)
    checks = check_knobs(spec, [c.loader_kwargs() for c in dict.fromkeys([configs[0], configs[-1], *references])])
    result = ScanResult(spec=spec_info(spec), machine=info, settings=settings, skipped=loader_skips + skips)
    result.notes += spec.notes + checks + rank_notes(ranks)
    plan = Plan(source, spec, opts, info, device, strategy, result)
    check_budget(plan)  # before the device is measured: a refusal costs nothing
    measure_device(result, device, opts.step_ms, ranks, source)
    result.notes += busy_notes(info)
    return plan


def check_budget(plan: Plan) -> None:
    """Refuse a ``--budget`` that cannot hold the screening's trials before a race is possible and the
    race's first legs (``analysis.budget``): within it the scan would answer from trials timed alone."""
    opts = plan.options
    if not opts.budget or not races(opts):
        return
    needs = race_needs_of(plan)
    if needs is not None and not needs.allows(opts.budget):
        raise OptionsError(too_short(opts.budget, needs))


def race_needs_of(plan: Plan) -> RaceNeeds | None:
    """What the plan's budget must hold for a race right after the fewest screening trials (those
    configs racing), from its options; None where the plan has one config, and no race to run."""
    opts, settings = plan.options, plan.result.settings
    if len(set(settings.planned or []) | set(settings.references)) < 2:
        return None
    policy = race_policy(opts)
    first = max(2, len(plan.strategy.first_trials()))
    return race_needs(opts, first, min(policy.racers, first), policy.first_legs, policy.pairs_per_leg)


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
    where it sets it. A batch_sampler without a ``batch_size`` (batches cut to a token budget) is read
    for its mean; a pre-batched stream cannot show one, and the options must then declare it. The
    number only names the config: samples are counted from the batches, and batches of varying size
    are labelled by their measured mean (``ScanResult.label``)."""
    current_bs = (opts.current or {}).get("batch_size")
    if spec.batch_knob:
        if opts.batch_size is None and (current_bs or spec.batch_size):
            opts.batch_size = [current_bs or spec.batch_size]
        return []
    own = spec.batch_size
    declared = opts.batch_size or ([current_bs] if current_bs else None)
    sampled = spec.sampled_batch_mean() if own is None and not declared else None
    if own is None and sampled is None and (not declared or len(declared) != 1):
        given = f"batch_size {','.join(map(str, declared))}: " if declared else ""
        raise OptionsError(f"{given}{who} batches by itself (batch_size=None) and how many samples its batches hold cannot "
                           "be read from it before a trial: set batch_size to that one number, e.g. in loadtune_options, "
                           "or any typical one where its batches vary in size (it is not searched: samples are counted "
                           "from the batches, and batches of varying size are shown by their measured mean)")
    if own is not None and opts.batch_size and opts.batch_size != [own]:
        raise OptionsError(f"batch_size {','.join(map(str, opts.batch_size))}: {who} sets its own batch size ({own}), which "
                           "loadtune cannot change; drop batch_size")
    size = own if own is not None else max(1, round(sampled)) if sampled is not None else declared[0]
    if current_bs is not None and current_bs != size:
        raise OptionsError(f"current: batch_size={current_bs}, but {who} batches {size} samples")
    opts.batch_size = [size]
    how = "its own" if own is not None else "on average, read off its batch_sampler" if sampled is not None else "as declared"
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
    """A machine already busy as the scan starts (measured: ``trial.load.outside_now``): its figures
    will be noisier and lower."""
    if not info.busy:
        return []
    return [f"the machine was busy as the scan started ({info.busy_text()}): other work competes with the trials, "
            "so figures are noisier and lower; re-run on a quiet machine"]


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
        return GridSearch(order, opts.noise_floor, confirm_rounds(opts), opts.seed)
    return AdaptiveSearch(
        space, accelerator, [c for c in configs if c.is_pytorch_default] + references, opts.noise_floor,
        max_workers=worker_cap(info.usable_cores, opts.nproc_per_node),
        memory_available=info.memory_available_bytes,
        confirm_rounds=confirm_rounds(opts), seed=opts.seed, extend=opts.workers is None,
    )


def races(opts: ScanOptions) -> bool:
    """The contenders are raced side by side (``engine/race.py``) where the race can run (``can_race``)."""
    return can_race(opts.race_legs, opts.confirm, opts.nproc_per_node * opts.nnodes)


def race_policy(opts: ScanOptions) -> RacePolicy:
    """How the scan's race is run: the noise floor its verdicts test against, ``--race-legs`` legs at most."""
    return RacePolicy(opts.noise_floor, opts.race_legs)


def confirm_rounds(opts: ScanOptions) -> int:
    """The strategy's closing rounds of separate trials: none where the race replaces them."""
    return 0 if races(opts) else opts.confirm


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
