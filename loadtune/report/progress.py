"""Progress of a scan or check while it runs.

In a terminal: a live rich bar (trial n of N, elapsed and ETA, current best), gone when the scan ends.
Anywhere else (a CI log, a pipe, a file, a notebook) a live bar prints nothing until the end, so there
it is one plain line per trial instead (``LineProgress``): a five-minute scan in a CI job shows each
trial as it finishes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from loadtune.engine.scan import ScanObserver
from loadtune.analysis.comparison import UNDECIDED
from loadtune.analysis.race import Standing
from loadtune.analysis.race import verdict as race_verdict
from loadtune.model.config import TrialConfig
from loadtune.model.against import Against, DuetRound
from loadtune.model.paired import PairedRound
from loadtune.model.results import ScanResult
from loadtune.model.trial import Trial
from loadtune.report.check import duet_line, round_line
from loadtune.report.text import rate, spread_text


class ProgressDisplay:
    """A ScanObserver that shows trial n of N, elapsed, ETA and the current best."""

    def __init__(self, console: Console, on_answer: Callable[[ScanResult], None] | None = None):
        self.on_answer = on_answer
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[best]}"),
            console=console,
            transient=True,
        )
        self.task = None

    def __enter__(self) -> "ProgressDisplay":
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def scan_started(self, result: ScanResult, planned: int | None, budget: float | None) -> None:
        """Grid: trial n of N. Adaptive: the number of trials is not known ahead, the budget is."""
        self.budget = budget
        total = planned if planned is not None else budget
        self.task = self.progress.add_task("scan", total=total, best="", completed=len(result.trials) if planned else 0)
        self.started = time.monotonic()

    def trial_started(self, index: int, config: TrialConfig, round_: int) -> None:
        what = "confirming" if round_ else "trial"
        self.progress.update(self.task, description=f"{what} {index + 1}: {config.label()}")

    def race_started(self, leg: int, configs: list[TrialConfig]) -> None:
        self.progress.update(self.task, description=f"race, leg {leg}: {len(configs)} configs side by side")

    def race_finished(self, trials: list[Trial], result: ScanResult) -> None:
        self.progress.update(self.task, best=best_text(result))

    def trial_event(self, kind: str, payload: Any) -> None:
        pass

    def profile_started(self) -> None:
        self.progress.update(self.task, description="profiling the stages")

    def answer_ready(self, result: ScanResult) -> None:
        """The bar steps aside while the report is printed, then shows the rest of the scan."""
        if self.on_answer is not None:
            self.progress.stop()
            self.on_answer(result)
            self.progress.start()

    def reference_started(self, rounds: int) -> None:
        self.progress.update(self.task, description=f"reference for check: {rounds} paired rounds")

    def trial_finished(self, index: int, trial: Trial, result: ScanResult) -> None:
        if self.budget is not None and self.progress.tasks[0].total == self.budget:
            self.progress.update(self.task, completed=min(self.budget, time.monotonic() - self.started), best=best_text(result))
        else:
            self.progress.update(self.task, advance=1, best=best_text(result))


def best_text(result: ScanResult) -> str:
    """The current pick and its samples/s, or nothing before one exists."""
    rec = result.recommendation
    picked = result.config_result(rec.best) if rec is not None else None
    if picked is None or picked.estimate is None:
        return ""
    return f"best so far: {rec.best.label()} {rate(picked.estimate.median)}/s"


def clock(seconds: float) -> str:
    """``1:05`` or ``1:02:05``: elapsed time as a log reader scans it."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def trial_figure(trial: Trial) -> str:
    """What a trial measured, or why it measured nothing (the first line of its error)."""
    if trial.ok and trial.estimate is not None:
        return f"samples/s {spread_text(trial.estimate)}"
    why = trial.error.message.splitlines()[0] if trial.error and trial.error.message else trial.status
    return f"failed: {why[:160]}"


class LineProgress:
    """A ScanObserver for logs: one plain line per finished trial (trial n of N, config, samples/s or
    why it failed, elapsed), and one as each later phase starts. Written and flushed at once, so a CI
    log shows a scan as it goes; no colour, no cursor movement."""

    def __init__(self, stream: TextIO, now: Callable[[], float] = time.monotonic,
                 on_answer: Callable[[ScanResult], None] | None = None):
        self.stream, self.now, self.on_answer = stream, now, on_answer
        self.started = now()
        self.planned: int | None = None
        self.budget: float | None = None
        self.done = 0

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def line(self, text: str) -> None:
        self.stream.write(f"loadtune: {text} ({clock(self.now() - self.started)} elapsed)\n")
        self.stream.flush()

    def scan_started(self, result: ScanResult, planned: int | None, budget: float | None) -> None:
        self.started, self.planned, self.budget = self.now(), planned, budget
        self.done = len([t for t in result.trials if not t.round and not t.raced])  # a resumed scan's finished trials
        plan = f"{planned} configs planned" if planned is not None else "adaptive search"
        within = f", within a {budget:g} s budget" if budget else ""
        resumed = f", {len(result.trials)} trials already measured" if result.trials else ""
        self.line(f"scan of {result.spec.dataset_type} started: {plan}{within}{resumed}")

    def trial_started(self, index: int, config: TrialConfig, round_: int) -> None:
        pass

    def trial_event(self, kind: str, payload: Any) -> None:
        pass

    def trial_finished(self, index: int, trial: Trial, result: ScanResult) -> None:
        if trial.referee:
            what = f"measured again alone (round {trial.referee})"
        elif trial.round:
            what = f"confirming (round {trial.round})"
        else:
            self.done += 1
            what = f"trial {self.done}/{self.planned}" if self.planned is not None else f"trial {self.done}"
        self.line(f"{what}: {trial.config.label()}: {trial_figure(trial)}")

    def race_started(self, leg: int, configs: list[TrialConfig]) -> None:
        pass

    def race_finished(self, trials: list[Trial], result: ScanResult) -> None:
        """One line per leg: who raced, and where each stands against the leader so far."""
        v = race_verdict(result.trials, result.settings.options.noise_floor)
        if v is None:
            return
        parts = [standing_text(s) for s in v.standings if s.ratio is not None]
        self.line(f"race, leg {trials[0].leg if trials else '?'}: leader {v.leader.label()}"
                  + (f"; {'; '.join(parts)}" if parts else ""))

    def profile_started(self) -> None:
        self.line("profiling the stages: where the time goes")

    def answer_ready(self, result: ScanResult) -> None:
        if self.on_answer is not None:
            self.on_answer(result)

    def reference_started(self, rounds: int) -> None:
        self.line(f"reference for check: {rounds} paired rounds of the pick and its shaped calibration")


LOOSE = 0.5  # an undecided ratio known no better than this (relative half-width) is shown without its interval


def standing_text(s: Standing) -> str:
    """A raced config against the leader, as a progress line shows it: the ratio, its 95% interval and
    the verdict; an undecided one whose legs still disagree (a t(1) interval such as 0.04–12.18 tells a
    reader nothing) says so instead of printing the interval."""
    r = s.ratio
    if s.status == UNDECIDED and r.halfwidth > LOOSE:
        return f"{s.config.label()} {r.value:.2f}×, undecided (its legs disagree so far; another leg will tell)"
    return f"{s.config.label()} {r.text()} {s.status}"


class AnswerOnly(ScanObserver):
    """``--quiet``'s observer: silent while trials run; ``on_answer`` once the answer is final."""

    def __init__(self, on_answer: Callable[[ScanResult], None]):
        self.on_answer = on_answer

    def answer_ready(self, result: ScanResult) -> None:
        self.on_answer(result)


def in_jupyter() -> bool:
    return Console().is_jupyter


def scan_progress(stream: TextIO | None = None,
                  on_answer: Callable[[ScanResult], None] | None = None) -> ProgressDisplay | LineProgress:
    """The live bar where ``stream`` (stderr by default) is a terminal; plain lines elsewhere. The
    stream's own ``isatty`` decides, not rich's guess: FORCE_COLOR, often set in CI, would make rich
    draw a live bar into a log file. ``on_answer``: called once the recommendation is final, before
    the reference for ``check`` is recorded (the report, printed while the rest runs)."""
    stream = stream or sys.stderr
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if terminal and not in_jupyter():
        return ProgressDisplay(Console(file=stream), on_answer)
    return LineProgress(stream, on_answer=on_answer)


def loaders(defaults: bool) -> str:
    """What a paired round holds."""
    return "the config, its shaped calibration and PyTorch's defaults" if defaults else "the config and its shaped calibration"


class CheckProgress:
    """``check`` round by round: each paired round as it ends, with the elapsed time; a first line
    says what will be measured, so a log is not silent while round 1 runs."""

    def __init__(self, console: Console, now: Callable[[], float] = time.monotonic):
        self.console, self.now = console, now
        self.started = now()

    def starting(self, config: TrialConfig, rounds: int, budget_s: float, defaults: bool) -> None:
        self.started = self.now()
        self.console.print(f"checking {config.label()}: at least {rounds} paired rounds of {loaders(defaults)} (more while "
                           f"undecided, up to {budget_s:g} s)", style="dim", highlight=False, soft_wrap=True)

    def recording(self, config: TrialConfig | None, rounds: int) -> None:
        self.started = self.now()
        what = config.label() if config else "the baseline's pick"
        self.console.print(f"recording the reference for check of {what}: {rounds} paired rounds of "
                           f"{loaders(config is None or not config.is_pytorch_default)}", style="dim", highlight=False, soft_wrap=True)

    def round_finished(self, index: int, paired: PairedRound) -> None:
        self.console.print(f"{round_line(index, paired)}; {clock(self.now() - self.started)} elapsed", style="dim", highlight=False,
                           soft_wrap=True)

    def against_starting(self, config: TrialConfig, against: Against, rounds: int, budget_s: float) -> None:
        """``check --against``: what is compared, before the first round's processes start."""
        self.console.print(f"checking {config.label()}: {against.title()}, at least {rounds} rounds of the two timed in "
                           f"turns (more while undecided, up to {budget_s:g} s)", style="dim", highlight=False, soft_wrap=True)

    def duet_finished(self, index: int, paired: DuetRound) -> None:
        self.console.print(f"{duet_line(index, paired)}; {clock(self.now() - self.started)} elapsed", style="dim", highlight=False,
                           soft_wrap=True)
