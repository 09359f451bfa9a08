"""The live progress display of a scan or check: trial n of N, elapsed and ETA, current best."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from loadtune.model.config import TrialConfig
from loadtune.model.results import ScanResult, Trial
from loadtune.report.text import rate


class ProgressDisplay:
    """A ScanObserver that shows trial n of N, elapsed, ETA and the current best."""

    def __init__(self, console: Console):
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

    def trial_event(self, kind: str, payload: Any) -> None:
        pass

    def profile_started(self) -> None:
        self.progress.update(self.task, description="profiling the stages")

    def reference_started(self, rounds: int) -> None:
        self.progress.update(self.task, description=f"reference for check: {rounds} paired rounds")

    def trial_finished(self, index: int, trial: Trial, result: ScanResult) -> None:
        rec = result.recommendation
        best = ""
        if rec is not None:
            best = f"best so far: {rec.best.label()} {rate(result.config_result(rec.best).estimate.median)}/s"
        if self.budget is not None and self.progress.tasks[0].total == self.budget:
            self.progress.update(self.task, completed=min(self.budget, time.monotonic() - self.started), best=best)
        else:
            self.progress.update(self.task, advance=1, best=best)


