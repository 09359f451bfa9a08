"""TODO docstring."""

from __future__ import annotations





from rich.console import Console
from rich.text import Text

from loadtune.model.check import PASS, REGRESSION, CheckResult
from loadtune.report.ci import summary_line


def print_check(console: Console, outcome: CheckResult) -> None:
    """The check's verdict with its figures, round by round."""
    console.print(summary_line(outcome), highlight=False)
    for i, (rate_, cal) in enumerate(outcome.rounds, 1):
        console.print(f"  round {i}: config {rate_ or 0:,.0f} samples/s, calibration {cal or 0:,.0f} samples/s", style="dim")
    if outcome.default_rate:
        console.print(f"  PyTorch's defaults now: {outcome.default_rate:,.0f} samples/s", style="dim")
    for line in outcome.environment:
        console.print(f"  environment changed: {line}", style="yellow")
    style = {PASS: "bold green", REGRESSION: "bold red"}.get(outcome.status, "bold yellow")
    console.print(Text(outcome.status.upper() + (": " + "; ".join(outcome.reasons) if outcome.reasons else ""), style=style))


