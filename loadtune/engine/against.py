"""``loadtune check --against REF``: the work tree's data code timed in turns with another revision's,
on this machine, in this job (docs/ci.md).

A stored reference compares today's run with one recorded hours earlier or on another VM, and the
shift between the two sessions is in no interval. Here both versions are measured in the same
seconds: the base revision is checked out outside the work tree (``engine.revision``), each side
runs in a trial process of its own and the two take turns block by block (``engine.trial.duet``),
over several rounds of fresh processes. The verdict is the paired ratio head / base with its interval
over rounds (``analysis.against``); no calibration workload and no reference are needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from loadtune.analysis.against import duet_round, foreign_message, foreign_modules, judge_against, next_against_step
from loadtune.analysis.verdict import MIN_ROUNDS
from loadtune.engine.check import (
    DEFAULT_BUDGET_S,
    MAX_ROUNDS,
    BaselineError,
    calibrated_step,
    check_request,
    check_scan,
    rounds_at_end,
)
from loadtune.engine.machine import collect
from loadtune.engine.options import pick_device, resolve_options
from loadtune.engine.plan import DEFAULT_BATCH_SIZE
from loadtune.engine.revision import Tree, checked_out, given_tree, head_tree, relative_spec, resolve_ref, spec_at
from loadtune.engine.spec import LoadedSpec, SpecRef, load_spec
from loadtune.engine.storage import found_and_set, setting_of
from loadtune.engine.trial.duet import BASE, HEAD, Checkout, Origins, SideEntry, run_in_turns, turns
from loadtune.engine.trial.setup import LoaderOptions, scan_timing
from loadtune.engine.trial.paired import pairs_for
from loadtune.engine.trial.protocol import TrialRequest
from loadtune.model.against import Against, DuetRound, Revision
from loadtune.model.check import INCONCLUSIVE, NO_BASE, CheckResult
from loadtune.model.config import TrialConfig, current_config
from loadtune.model.results import ScanResult
from loadtune.model.trial import Trial
from loadtune.model.settings import ScanOptions

KNOB_FIELDS = {"multiprocessing_context": "start_method"}  # parse_knobs' names that TrialConfig spells otherwise


class AgainstError(BaselineError):
    """The comparison cannot be made as asked (exit 2): the base imports the head's code, several ranks."""


@dataclass(frozen=True)
class Base:
    """What the head is compared with: a git revision (``ref``) or a checkout the user made (``folder``)."""

    ref: str | None = None
    folder: Path | None = None

    def __post_init__(self) -> None:
        if (self.ref is None) == (self.folder is None):
            raise AgainstError("give the base as one of --against REF or --against-dir PATH")


def knob_config(spec: LoadedSpec, opts: ScanOptions, knobs: dict, accelerator: bool) -> TrialConfig:
    """Without a baseline scan: the knobs given (``--config``, knob flags) over the options' ``current``
    (``[tool.loadtune]`` or the spec's ``loadtune_options``), PyTorch's defaults for the rest; the batch
    size from them, else the first the options name, else the loader's own, else 64."""
    given = {**(opts.current or {}), **knobs}
    batch = given.get("batch_size") or (opts.batch_size or [None])[0] or spec.batch_size or DEFAULT_BATCH_SIZE
    return current_config(given, batch, accelerator)


def side_request(baseline: ScanResult | None, spec: LoadedSpec, knobs: dict, options: dict) -> TrialRequest:
    """The one request both sides run: the baseline's pick and settings when given (the knobs replacing
    some of the pick's), else the knobs and the options (``[tool.loadtune]`` over the spec's)."""
    if baseline is not None:
        check_scan(baseline, spec)
        config = baseline.recommendation.config
        if knobs:
            config = config.with_knobs(**{KNOB_FIELDS.get(k, k): v for k, v in knobs.items()})
        request = check_request(baseline, spec, config)
        if request.ranks is not None:
            raise AgainstError("check --against measures one loader per side: a baseline of several ranks per trial "
                               "cannot be checked this way (use --baseline alone)")
        return request
    opts = resolve_options(spec.defaults, options)
    if opts.nproc_per_node > 1 or opts.nnodes > 1:
        raise AgainstError("check --against measures one loader per side: several ranks per trial are not supported")
    machine = collect()
    device = pick_device(opts.device, machine)
    config = knob_config(spec, opts, knobs, device.startswith("cuda"))
    work = calibrated_step(opts.step_ms, device, spec.ref) if opts.step_ms is not None else None
    loader = LoaderOptions(shuffle=opts.shuffle, drop_last=opts.drop_last, seed=opts.seed)
    request = TrialRequest(config, device, scan_timing(opts), loader, opts.timeout, machine.start_method, workload=work)
    # both sides read the dataset in one page-cache state, as a scan's configs do (the head's spec finds its files)
    storage = found_and_set(opts.storage, opts.data, spec.ref or spec, request, spec.ref.path if spec.ref else None,
                            machine.memory_available_bytes)
    return replace(request, timing=replace(request.timing, cache=setting_of(storage)))


def sides(spec: SpecRef, relative: Path, head: Tree, base: Tree, request: TrialRequest) -> dict[str, tuple[SpecRef, TrialRequest]]:
    """Each side's spec file and request: the same knobs, each run in its own tree."""
    roots = {HEAD: str(head.root), BASE: str(base.root)}
    out = {}
    for side, other in ((HEAD, BASE), (BASE, HEAD)):
        source = replace(spec, path=str(Path(roots[side]) / relative))
        out[side] = (source, replace(request, entry=SideEntry((roots[side], roots[other])),
                                     prelude=Checkout(roots[side], roots[other])))
    return out


def refuse_foreign(roots: dict[str, str]) -> Callable[[Origins], None]:
    """``run_in_turns``' vet: stop when a side imported the other's code."""
    def vet(origins: Origins) -> None:
        found = foreign_modules(origins, roots)
        if found:
            raise AgainstError(foreign_message(found, roots))
    return vet


@dataclass
class Comparison:
    """A check against another revision once its inputs are settled: the head's spec and tree, the request
    both sides run, the verdict's settings, and where rounds are reported."""

    spec: SpecRef  # the head's spec file
    relative: Path  # its path inside both trees
    head: Tree
    request: TrialRequest
    tolerance: float
    min_throughput: float | None
    rounds: int
    budget_s: float
    started: float  # the check's start (monotonic): the budget counts from it
    baseline_rate: float | None = None  # the baseline scan's samples/s for the config, when one was given
    on_start: Callable[[TrialConfig, Against], None] | None = None
    on_round: Callable[[int, DuetRound], None] | None = None

    def against(self, base: Tree) -> Against:
        notes = []
        if self.head.revision.dirty:
            notes.append(f"the work tree at {self.head.root} has uncommitted changes: they are part of the head (commit or "
                         "stash them to compare the commit alone)")
        return Against(self.head.revision, base.revision, self.relative.as_posix(), notes=notes)

    def measure(self, base: Tree) -> CheckResult:
        """The rounds, until the verdict is decided or the budget would not decide it, and the result."""
        against = self.against(base)
        if self.on_start:
            self.on_start(self.request.config, against)
        both = sides(self.spec, self.relative, self.head, base, self.request)
        vet = refuse_foreign({HEAD: str(self.head.root), BASE: str(base.root)})
        pairs, block_s = pairs_for(self.request.timing), self.request.timing.block_s / 2
        trials: list[Trial] = []
        first_round = time.monotonic()
        stop, early = False, None
        while not stop:
            first = HEAD if len(against.rounds) % 2 == 0 else BASE
            got = run_in_turns(both, turns(first, pairs), block_s, vet)
            trials += [got[HEAD], got[BASE]]
            against.rounds.append(duet_round([b.rate for b in got[HEAD].blocks], [b.rate for b in got[BASE].blocks], first == HEAD))
            if self.on_round:
                self.on_round(len(against.rounds), against.rounds[-1])
            at_end = rounds_at_end(len(against.rounds), first_round, self.started, self.budget_s)
            _, stop, early = next_against_step(against.rounds, self.tolerance, self.rounds, at_end, self.min_throughput)
        return self.outcome(against, trials, early)

    def outcome(self, against: Against, trials: list[Trial], early: str | None) -> CheckResult:
        """The verdict and its figures; a side's own error where rounds went unmeasured."""
        status, reasons, change = judge_against(against.rounds, self.tolerance, self.min_throughput)
        reasons += [early] if early and status == INCONCLUSIVE else []
        reasons += failures(trials) if any(r.ratio is None for r in against.rounds) else []
        return CheckResult(
            config=self.request.config, tolerance=self.tolerance, baseline_rate=self.baseline_rate, rounds=[],
            baseline_rounds=[], shape=None, min_throughput=self.min_throughput, status=status, reasons=reasons,
            change=change.value if change else None, change_low=change.low if change else None,
            change_high=change.high if change else None, wall_s=time.monotonic() - self.started, trials=trials,
            against=against, machine=collect(),
        )

    def no_base(self, base: Tree) -> CheckResult:
        """The spec is new in this change: nothing to compare with. Not a failure (exit 0), with a note, so
        a change that adds the spec can merge; the next change is checked against it."""
        note = (f"{self.relative.as_posix()} does not exist in the base {base.revision.label()}: the spec is new in this "
                "change, nothing to compare with")
        return CheckResult(config=self.request.config, tolerance=self.tolerance, baseline_rate=None, rounds=[],
                           baseline_rounds=[], shape=None, min_throughput=None, status=NO_BASE, reasons=[note],
                           wall_s=time.monotonic() - self.started, against=self.against(base))


def check_against(
    spec_target: str | Path,
    base: Base,
    baseline: ScanResult | None = None,
    knobs: dict | None = None,
    options: dict | None = None,
    tolerance: float = 0.10,
    min_throughput: float | None = None,
    rounds: int = 3,
    budget_s: float = DEFAULT_BUDGET_S,
    on_start: Callable[[TrialConfig, Against], None] | None = None,
    on_round: Callable[[int, DuetRound], None] | None = None,
) -> CheckResult:
    """Time the work tree's loader (the head) in turns with the same loader of ``base``, in rounds of a
    fresh process per side: at least ``rounds``, then more while the verdict is undecided and another
    round fits in ``budget_s``. ``knobs``: DataLoader knobs as ``model.config.parse_knobs`` gives them;
    ``options``: scan options (``[tool.loadtune]``) for the timing and loader settings."""
    started = time.monotonic()
    if not MIN_ROUNDS <= rounds <= MAX_ROUNDS:
        raise AgainstError(f"--rounds {rounds}: a check measures {MIN_ROUNDS} to {MAX_ROUNDS} rounds")
    ref = SpecRef.parse(spec_target)
    head = head_tree(Path(ref.path))
    relative = relative_spec(Path(ref.path), head)
    commit = resolve_ref(base.ref, head) if base.ref is not None else None  # an unknown revision is refused before any work
    tree = given_tree(base.folder) if base.folder is not None else None
    spec = load_spec(ref)
    request = side_request(baseline, spec, knobs or {}, options or {})
    run = Comparison(ref, relative, head, request, tolerance, min_throughput, rounds, budget_s, started,
                     baseline_rate(baseline, request.config), on_start, on_round)
    if tree is not None:
        return run.measure(tree) if (tree.root / relative).is_file() else run.no_base(tree)
    if not spec_at(commit, relative, head):
        return run.no_base(Tree(head.root, Revision(base.ref, commit[:7])))
    with checked_out(base.ref, commit, head) as tree:
        return run.measure(tree)


def baseline_rate(baseline: ScanResult | None, config: TrialConfig) -> float | None:
    picked = baseline.config_result(config) if baseline is not None else None
    return picked.estimate.median if picked and picked.ok else None


def failures(trials: list[Trial]) -> list[str]:
    """What failed a side's trial, once per side and message: why some rounds measured nothing."""
    seen: dict[str, None] = {}
    for i, trial in enumerate(trials):
        if trial.error is not None:
            seen[f"the {(HEAD, BASE)[i % 2]} failed in a round: {trial.error.message.splitlines()[0]}"] = None
    return list(seen)
