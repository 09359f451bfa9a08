"""The scan: spec -> plan -> trials -> results -> recommendation. The Python API behind the CLI.

The options are checked in ``options.py`` and the plan is prepared in ``plan.py``, before any trial
runs; this module executes the plan: the trials the strategy proposes, the stage profile, the
reference for ``check``, saving the result after every trial.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from loadtune.analysis.load import disturbed, quieter
from loadtune.analysis.recommend import recommend
from loadtune.analysis.storage import contrast_configs
from loadtune.engine import calibration
from loadtune.engine import stages as stages_mod
from loadtune.engine import storage as storage_mod
from loadtune.engine.distributed import layout as distributed
from loadtune.engine.distributed.agent import with_ranks
from loadtune.analysis.budget import STARTUP_S, WARMUP_SHARE, RaceClock, mean_leg_s, measured_leg_s, screening_blocks
from loadtune.analysis.bound import bound_by_storage
from loadtune.analysis.pace import pace_wanted
from loadtune.analysis.race import (GAIN_WIDE, joined_note, precision_note, referee_note, state_processes_wanted, states_note,
                                    unsettled_configs, unsettled_note)
from loadtune.analysis.race import verdict as race_verdict
from loadtune.engine.pace import SECONDS as PACE_S
from loadtune.engine.pace import measure_pace
from loadtune.engine.plan import DEFAULT_BATCH_SIZE, Plan, prepare, race_policy, races, resume_from
from loadtune.engine.race import RaceRun, ending_note, race, run_leg
from loadtune.engine.reference import record_reference
from loadtune.engine.referee import referee
from loadtune.engine.trial.harness import run_trial
from loadtune.engine.trial.setup import LoaderOptions, scan_timing
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.engine.trial.workload import StepWorkload
from loadtune.model.config import Skip, TrialConfig, pytorch_default
from loadtune.model.results import ConfigResult, ScanResult
from loadtune.model.scanfile import check_writable
from loadtune.model.trial import Trial
from loadtune.model.settings import ScanOptions
from loadtune.model.storage import COLD
from loadtune.search.race import challenger, entrants, memory_need, race_memory_limit

OTHER_LEGS = 2  # legs raced in the other page-cache state: two processes each, so the ratio shows their spread
NO_REFERENCE = "no reference for check"  # how the notes that say why none was recorded begin
NO_PROFILE_WITH_RANKS = ("no stage profile or bound with several ranks: the profile models one loader, and ranks share "
                         "the node's cores in ways it does not (the table's slowest rank is the figure)")


class ScanObserver(Protocol):
    """What a progress display hears about. Implement every method, or subclass this class: the
    methods a subclass leaves out do nothing."""

    def scan_started(self, result: ScanResult, planned: int | None, budget: float | None) -> None: ...
    def trial_started(self, index: int, config: TrialConfig, round_: int) -> None: ...
    def trial_event(self, kind: str, payload: Any) -> None: ...
    def trial_finished(self, index: int, trial: Trial, result: ScanResult) -> None: ...
    def profile_started(self) -> None: ...
    def answer_ready(self, result: ScanResult) -> None: ...
    def reference_started(self, rounds: int) -> None: ...
    def race_started(self, leg: int, configs: list[TrialConfig]) -> None: ...
    def race_finished(self, trials: list[Trial], result: ScanResult) -> None: ...


def workload_of(result: ScanResult) -> StepWorkload | None:
    """The synthetic step the scan's trials run (a resumed scan keeps the one it was calibrated with)."""
    data = result.settings.step
    return StepWorkload.from_dict(data) if data else None


def expected_trial_s(result: ScanResult, opts: ScanOptions) -> float:
    """How long the next trial will likely take: the median so far, else a guess from the options."""
    walls = [t.wall_s for t in result.trials]
    return statistics.median_high(walls) if walls else STARTUP_S + opts.warmup + opts.block_time * opts.min_blocks


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

    def fits(self, trials: float, keep_s: float = 0.0) -> bool:
        """``trials`` more trials of the usual length fit in the budget (always, without one), ``keep_s``
        seconds kept besides (the race's first legs: ``race_reserve``)."""
        opts = self.plan.options
        return not opts.budget or self.spent_s + trials * expected_trial_s(self.plan.result, opts) + keep_s <= opts.budget

    @property
    def spent_s(self) -> float:
        return time.monotonic() - self.started


def race_reserve(run: Run) -> float:
    """The seconds the screening keeps for the race's first legs (those a verdict needs) once a race is
    possible, at the length the screening's trials measured (``budget.measured_leg_s``); none without a
    budget or a race. A budget the screening filled would leave no race (``analysis/budget.py``)."""
    result, opts = run.plan.result, run.plan.options
    if not opts.budget or not races(opts):
        return 0.0
    policy = race_policy(opts)
    racers = len(entrants(result, opts.noise_floor, race_memory_limit(opts.max_memory, run.plan.machine.memory_available_bytes),
                          policy.racers).configs)
    if racers < 2:
        return 0.0
    return policy.first_legs * measured_leg_s(opts, result.trials, racers, policy.pairs_per_leg)


def execute(plan: Plan, json_path: str | Path | None = None, observer: ScanObserver | None = None) -> ScanResult:
    """Run what the strategy proposes, one trial at a time, saving after each, until it proposes
    nothing or the budget is spent; then race the contenders and profile the stages. The answer is
    final then, and the observer hears so (``answer_ready``: a user reads the recommendation while the
    rest runs); last the yardstick, before and after the reference for ``check``: neither changes the
    pick or a figure, so neither delays the answer.
    On Ctrl-C the result is saved (``interrupted``) and KeyboardInterrupt propagates."""
    result, opts = plan.result, plan.options
    save = (lambda: result.save(json_path)) if json_path else (lambda: None)
    storage_set(plan)
    run = Run(plan, requests_of(plan), save, observer)
    if observer:
        observer.scan_started(result, plan.strategy.planned, opts.budget)
    save()
    try:
        search(run)
        race_contenders(run)
        allocator_states(run)
        other_state(run)
        diagnose(run)
        pace_beside_gain(run)
        conclude(plan)
        result.state = "complete"  # the search is: what follows adds to the result and changes none of it
        save()
        if observer:
            observer.answer_ready(result)
        if not result.calibration:  # a resumed scan may have run it
            calibrate(run)  # the machine's speed, for ``show`` to compare scans across machines
        reference(run)
        calibrate(run)  # again at the end: drift shows as a difference
    except KeyboardInterrupt:
        interrupted(plan)
        save()
        raise
    save()
    return result


def interrupted(plan: Plan) -> None:
    """Ctrl-C: a search cut short is a partial scan, recommended from what it measured; one cut while
    the reference for ``check`` was recorded stays complete, with a note."""
    result, opts = plan.result, plan.options
    if result.state == "complete":
        if result.reference is None and opts.reference_rounds:
            result.notes.append(f"{NO_REFERENCE}: the scan was interrupted while recording it (--resume records it)")
        return
    result.state = "interrupted"
    result.recommendation = recommend(result.trials, opts.noise_floor, opts.max_memory, result.settings.current)


def conclude(plan: Plan) -> None:
    """The strategy's notes on what it skipped and its remarks, once (a resumed scan has some)."""
    result, strategy = plan.result, plan.strategy
    known = {(s.what, s.why) for s in result.skipped}
    result.skipped += [s for s in strategy.notes(result) if (s.what, s.why) not in known]
    result.notes += [n for n in strategy.remarks(result) if n not in result.notes]


def storage_set(plan: Plan) -> None:
    """The page cache's state every trial reads the dataset in, decided once (a resumed scan keeps its
    own) and set before the first trial (``engine/storage.py``); a scan resumed from a file written
    before states were set sets none."""
    result, opts = plan.result, plan.options
    if opts.storage == "none":
        return
    if result.storage is not None:  # resumed: its own state, set again
        storage_mod.set_up(result.storage)
        return
    batch_size = (opts.batch_size or [plan.spec.batch_size or DEFAULT_BATCH_SIZE])[0]
    request = requests_of(plan)(pytorch_default(batch_size, False))
    result.storage = storage_mod.found_and_set(opts.storage, opts.data, plan.source, request, result.spec.path,
                                               plan.machine.memory_available_bytes)


def other_state(run: Run) -> None:
    """The pick, PyTorch's defaults and the fastest config with the most workers in the other page-cache
    state, where the budget allows: raced side by side (two legs), or timed alone once each where the
    scan runs no race. What training's other state gives (the first epoch of a cached dataset reads
    cold) and would pick. The scan's own state is set again afterwards."""
    result, opts = run.plan.result, run.plan.options
    storage = result.storage
    if storage is None or storage.state is None or storage.other or result.recommendation is None:
        return
    if storage.other_state == COLD and storage.droppable is False:
        return
    configs = contrast_configs(result)
    policy, need = race_policy(opts), memory_need(result.configs)
    fits_memory = sum(need(c) for c in result.configs if c.config in configs) <= race_memory_limit(
        opts.max_memory, run.plan.machine.memory_available_bytes)
    raced = races(opts) and len(configs) > 1 and fits_memory
    seconds = (OTHER_LEGS * measured_leg_s(opts, result.trials, len(configs), policy.pairs_per_leg) if raced
               else len(configs) * expected_trial_s(result, opts))
    if not run.fits(1, seconds):
        result.notes.append(f"no figure in the {storage.other_state} page-cache state: the {opts.budget:g} s budget would be exceeded")
        return
    setting = storage_mod.setting_of(storage, storage.other_state)
    storage_mod.enter(setting)  # warm: the scan's cold trials left nothing cached
    request = screening(run.request_for(configs[0]), opts)
    request = replace(request, timing=replace(request.timing, cache=setting))
    on_event = run.observer.trial_event if run.observer else None
    if raced:
        for number in range(1, OTHER_LEGS + 1):
            if run.observer:
                run.observer.race_started(number, configs)
            storage.other += run_leg(run.plan.source, request, configs, number, opts.seed + number, on_event, policy.pairs_per_leg)
    else:
        for config in configs:
            if run.observer:
                run.observer.trial_started(len(result.trials), config, 0)
            storage.other.append(run_trial(run.plan.source, replace(request, config=config), on_event))
    storage_mod.enter(storage_mod.setting_of(storage))
    run.save()


def requests_of(plan: Plan) -> Callable[[TrialConfig], TrialRequest]:
    """How every trial of this scan is asked for: the scan's timing (with the page cache's state),
    loader options, step and ranks."""
    opts = plan.options
    timing = replace(scan_timing(opts), cache=storage_mod.setting_of(plan.result.storage))
    loader_options = LoaderOptions(shuffle=opts.shuffle, drop_last=opts.drop_last, seed=opts.seed)
    workload = workload_of(plan.result)
    ranks = distributed.setup_for(opts.nproc_per_node, opts.nnodes, opts.node_rank, plan.device,
                                  opts.blocks * opts.block_time)
    return lambda config: with_ranks(TrialRequest(config, plan.device, timing, loader_options, opts.timeout,
                                                  plan.machine.start_method, workload=workload), ranks)


def calibrate(run: Run) -> None:
    """loadtune's fixed yardstick workload, one trial on the CPU."""
    request = replace(run.request_for(calibration.CONFIG), device="cpu", workload=None, ranks=None, entry=None)
    request = replace(request, timing=replace(request.timing, cache=None))  # loadtune's workload reads no file
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
        keep = race_reserve(run)
        if not run.fits(2, keep):  # the next trial and the closing calibration must both fit, and the race's first legs
            why = (f"the {opts.budget:g} s budget would be exceeded" if not keep or not run.fits(2) else
                   f"the {opts.budget:g} s budget keeps about {keep:.0f} s for the race's first legs")
            result.skipped.append(Skip(f"{len(proposals)}+ more trials", why))
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


def race_contenders(run: Run) -> None:
    """The screening's contenders raced side by side (``engine/race.py``) until the race decides, the
    recommendation updated after every leg; what was left out for memory, and a race that ended
    undecided, are said in the notes."""
    result, opts, observer = run.plan.result, run.plan.options, run.observer
    if not races(opts):
        return
    policy = race_policy(opts)
    limit = race_memory_limit(opts.max_memory, run.plan.machine.memory_available_bytes)
    chosen = entrants(result, opts.noise_floor, limit, policy.racers)
    if chosen.left_out:
        result.notes.append("left out of the race for memory (its loaders all live at once): "
                            + ", ".join(c.label() for c in chosen.left_out))

    def leg(configs: list[TrialConfig], number: int) -> list[Trial]:
        if observer:
            observer.race_started(number, configs)
        return run_leg(run.plan.source, run.request_for(configs[0]), configs, number, opts.seed + number,
                       observer.trial_event if observer else None, policy.pairs_per_leg)

    def recorded(trials: list[Trial]) -> None:
        result.trials.extend(trials)
        result.recommendation = recommend(result.trials, opts.noise_floor, opts.max_memory, result.settings.current)
        run.save()
        if observer:
            observer.race_finished(trials, result)

    fits = lambda seconds: not opts.budget or run.spent_s + seconds + expected_trial_s(result, opts) <= opts.budget
    pick = lambda: result.recommendation.config if result.recommendation else None
    share = measured_leg_s(opts, result.trials, len(chosen.configs), policy.pairs_per_leg) / max(1, len(chosen.configs))
    joins = lambda racing: challenger(result, racing, pick(), opts.noise_floor, limit)
    baseline = lambda: result.recommendation.baseline if result.recommendation else None
    how = race(result.trials, chosen.configs, policy, RaceRun(leg, fits, recorded, share, pick, joins, baseline))
    if how == "budget" and not any(t.raced for t in result.trials):
        result.notes.append(f"no race: its first leg would exceed the {opts.budget:g} s budget; the pick comes from "
                            "the screening's trials, each timed alone")
    referee_disputes(run)
    final = race_verdict(result.trials, opts.noise_floor)
    notes = [ending_note(how, final, opts.race_legs), unsettled_note(result.trials, final),
             joined_note(result.trials, chosen.configs), referee_note(result.trials)]
    if pick() is not None and any(t.raced for t in result.trials):
        clock = RaceClock(mean_leg_s(result.trials), run.spent_s, opts.budget, opts.race_legs, expected_trial_s(result, opts))
        notes.append(precision_note(result.trials, pick(), policy.wide, policy.pairs_per_leg, policy.legs_run(result.trials),
                                    unsettled_configs(final), clock))
    result.notes += [n for n in notes if n and n not in result.notes]


def referee_disputes(run: Run) -> int:
    """Pairs whose race ratio and runs alone disagree, timed again alone in fresh processes, back to
    back (``engine/referee.py``), within the budget. Returns the rounds run."""
    return referee(run.plan.result.trials, run.plan.options.noise_floor, partial(timed_alone, run),
                   lambda trials: run.fits(trials + 1), partial(keep_trials, run))  # + the closing calibration


def allocator_states(run: Run) -> None:
    """The baseline and the pick timed alone in more fresh processes, within the budget, where one's
    speed follows its allocator's state and its runs so far showed one state
    (``analysis.race.state_processes_wanted``): the range stated for it then spans the states a training
    job's process can land in, and a note says what the processes found."""
    result = run.plan.result
    rec = result.recommendation
    for config in dict.fromkeys(c for c in (rec.baseline, rec.config) if c is not None) if rec else ():
        ran = 0
        while run.fits(2) and state_processes_wanted(result.trials, by_result(result), config):  # + the calibration
            trial = timed_alone(run, config)
            keep_trials(run, [trial])
            ran += 1
            if not trial.ok:
                break
        note = states_note(by_result(result)[config]) if ran else None
        if note and note not in result.notes:
            result.notes.append(note)
            run.save()


def by_result(result: ScanResult) -> dict[TrialConfig, ConfigResult]:
    return {c.config: c for c in result.configs}


def timed_alone(run: Run, config: TrialConfig) -> Trial:
    """One run of ``config`` alone in a fresh process, as the screening times one."""
    if run.observer:
        run.observer.trial_started(len(run.plan.result.trials), config, 1)
    return run_trial(run.plan.source, screening(run.request_for(config), run.plan.options),
                     run.observer.trial_event if run.observer else None)


def keep_trials(run: Run, trials: list[Trial]) -> None:
    """``trials`` kept, the recommendation updated after each, the result saved."""
    result, opts = run.plan.result, run.plan.options
    for trial in trials:
        result.trials.append(trial)
        result.recommendation = recommend(result.trials, opts.noise_floor, opts.max_memory, result.settings.current)
        if run.observer:
            run.observer.trial_finished(len(result.trials) - 1, trial, result)
    run.save()


def run_quietly(run: Run, config: TrialConfig, round_: int) -> Trial:
    """One trial of ``config``. One that outside load disturbed (``analysis.load``) is measured once
    more where the budget allows; the quieter run is kept, the other set aside in ``result.remeasured``,
    out of every estimate. The strategy sees one trial either way."""
    result, observer = run.plan.result, run.observer
    on_event = observer.trial_event if observer else None
    request = screening(run.request_for(config), run.plan.options)
    trial = run_trial(run.plan.source, request, on_event)
    if not (trial.ok and disturbed(trial.load, run.plan.options.noise_floor)) or not run.fits(2, race_reserve(run)):
        return trial
    if observer:
        observer.trial_started(len(result.trials), config, round_)
    kept, aside = quieter(trial, run_trial(run.plan.source, request, on_event))
    aside.reference, aside.round = config.key in result.settings.references, round_
    result.remeasured.append(aside)
    return kept


def screening(request: TrialRequest, opts: ScanOptions) -> TrialRequest:
    """A trial of the search: at most ``budget.SCREEN_BLOCKS`` blocks, after half the warm-up, where the race
    follows it. Its figure places the config on the curve and chooses who races; a config that races
    is ranked by the race, and its absolute figure and interval (from its runs alone) carry the
    between-run spread, which more blocks of one run do not narrow."""
    if not races(opts):
        return request
    timing = request.timing
    blocks = screening_blocks(timing.blocks, timing.min_blocks)
    return replace(request, timing=replace(timing, blocks=blocks, warmup_s=timing.warmup_s * WARMUP_SHARE))


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


def pace_beside_gain(run: Run) -> None:
    """Where the headline gain, raced side by side, stayed wider than ``GAIN_WIDE``: how steady this
    machine's CPU pace is, measured as ``loadtune doctor`` measures it (``engine.pace``), for the report
    to say beside the gain whether the machine or the dataset kept it wide. About six seconds, only then
    and only within the budget; never where a resumed scan measured it already."""
    result = run.plan.result
    if (result.machine.pace_spread is not None or not pace_wanted(result.recommendation, GAIN_WIDE)
            or bound_by_storage(result)):  # (the reads, not the CPU, spread a storage-bound loader's turns)
        return
    if not run.fits(1, keep_s=PACE_S + STARTUP_S):  # and the closing calibration after it
        return
    pace = measure_pace(PACE_S)
    result.machine.pace_spread = pace.spread if pace is not None else None
    run.save()


def reference(run: Run) -> None:
    """The pick in paired rounds with a calibration shaped like the dataset: what ``check`` compares
    with. Skipped (with a note) where the budget or the measurements do not allow it."""
    result, opts = run.plan.result, run.plan.options
    rounds = opts.reference_rounds
    if not rounds or result.recommendation is None or result.reference is not None:
        return
    if not run.fits(2 * rounds + 1):
        result.notes.append(f"{NO_REFERENCE}: its {rounds} paired rounds would exceed the {opts.budget:g} s budget")
        return
    if run.observer:
        run.observer.reference_started(rounds)
    pick = result.recommendation.config
    got = record_reference(result, run.plan.source, run.request_for(pick), rounds, result.machine)
    if got is None:
        result.notes.append(f"{NO_REFERENCE}: the pick's per-sample costs were not measured (no stage profile "
                            "at its batch size, no CPU reading)")
        return
    result.reference = got
    result.notes = [n for n in result.notes if not n.startswith(NO_REFERENCE)]  # a resumed scan's "interrupted"
    run.save()


def profile_stages(plan: Plan, request: TrialRequest, observer: ScanObserver | None = None) -> None:
    """Where the time goes: one profiling run (``stages.py``) at the recommended config's batch size,
    in its own process. A failure leaves the scan's figures standing and says why in a note."""
    config = profile_config(request.config, plan.device)
    if observer:
        observer.profile_started()
    costs, why = stages_mod.run_profile(plan.source, replace(request, config=config, ranks=None))
    if costs is None:
        plan.result.notes.append(f"stage profile failed, so there is no diagnosis: {why}")
        return
    costs.max_workers = plan.result.settings.max_workers
    plan.result.stages = costs
    if request.timing.cache is not None:  # its storage read dropped the files: the scan's state again
        storage_mod.enter(request.timing.cache)


def profile_config(pick: TrialConfig, device: str) -> TrialConfig:
    """The config the stage profile runs as: PyTorch's defaults at the pick's batch size (it times each
    stage in one process), started as the pick's process starts and with its environment: a pick that
    keeps its batches in the heap collates in the heap, where glibc's defaults would time its
    collation with each batch's pages faulted in anew (on 96 MiB batches a bound of 414 samples/s
    beside the pick's 1,500)."""
    return replace(pytorch_default(pick.batch_size, device.startswith("cuda")), start_method=pick.start_method,
                   heap=pick.heap)


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
