"""Rendering a ``loadtune check`` outcome for a terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from loadtune.analysis.footprint import fresh_pages
from loadtune.analysis.load import load_summary
from loadtune.model.against import DuetRound
from loadtune.model.check import NO_BASE, PASS, REGRESSION, CheckResult
from loadtune.model.settings import NOISE_FLOOR
from loadtune.model.paired import PairedRound
from loadtune.model.results import by_config
from loadtune.report.ci import defaults_line, summary_line
from loadtune.report.scan import reference_line
from loadtune.report.text import load_sentence

if TYPE_CHECKING:
    from loadtune.engine.check import Recorded

STYLES = {PASS: "bold green", REGRESSION: "bold red", NO_BASE: "bold"}


def round_line(index: int, paired: PairedRound) -> str:
    """One paired round as it is measured: the rates, the ratio the verdict uses (the median of its
    turns) and the gain over PyTorch's defaults where they were in the round."""
    first = "config first" if paired.config_first else "calibration first"
    ratio = f"{paired.ratio:.3f}" if paired.ratio else "-"
    how = f"median of {paired.pairs} turns, {first}" if paired.pairs else first
    defaults = (f"; PyTorch's defaults {paired.default_rate or 0:,.0f} samples/s, the config "
                + (f"{paired.gain:.2f}×" if paired.gain else "-")) if paired.default_rate is not None else ""
    return (f"  round {index}: config {paired.config_rate or 0:,.0f} samples/s, shaped calibration "
            f"{paired.calibration_rate or 0:,.0f} samples/s, ratio {ratio} ({how}){defaults}")


def duet_line(index: int, paired: DuetRound) -> str:
    """One round of ``check --against`` as it is measured: each side's rate and the ratio the verdict uses."""
    first = "head first" if paired.head_first else "base first"
    ratio = f"{paired.ratio:.3f}" if paired.ratio else "-"
    return (f"  round {index}: head {paired.head_rate or 0:,.0f} samples/s, base {paired.base_rate or 0:,.0f} samples/s, "
            f"head / base {ratio} (median of {paired.pairs} turns, {first})")


def print_against(console: Console, outcome: CheckResult, rounds: bool = True) -> None:
    """A check against another revision: the verdict line, the rounds, the notes, the verdict."""
    console.print(summary_line(outcome), highlight=False, soft_wrap=True)
    for i, paired in enumerate(outcome.against.rounds if rounds else [], 1):
        console.print(duet_line(i, paired), style="dim", highlight=False)
    for note in outcome.against.notes:
        console.print(f"  note: {note}", style="yellow", highlight=False)
    style = STYLES.get(outcome.status, "bold yellow")
    console.print(Text(outcome.status.upper() + (": " + "; ".join(outcome.reasons) if outcome.reasons else ""), style=style))


def print_check(console: Console, outcome: CheckResult, rounds: bool = True) -> None:
    """The check's verdict with its figures (round by round unless they were printed as they came)."""
    if outcome.against is not None:
        print_against(console, outcome, rounds)
        return
    console.print(summary_line(outcome), highlight=False)
    if rounds:
        for i, paired in enumerate(outcome.rounds, 1):
            console.print(round_line(i, paired), style="dim", highlight=False)
    base = [r.ratio for r in outcome.baseline_rounds if r.ratio]
    if base:
        when = f" recorded {outcome.reference_recorded_at}" if outcome.reference_recorded_at else ""
        console.print(f"  baseline: {len(base)} paired rounds{when}, ratio {min(base):.3f}–{max(base):.3f}", style="dim")
    defaults = defaults_line(outcome)
    if defaults:
        console.print(f"  {defaults}", style="dim", highlight=False)
    for note in check_notes(outcome):
        console.print(f"  {note}", style="yellow", highlight=False)
    style = STYLES.get(outcome.status, "bold yellow")
    console.print(Text(outcome.status.upper() + (": " + "; ".join(outcome.reasons) if outcome.reasons else ""), style=style))


def check_notes(outcome: CheckResult) -> list[str]:
    """What weighs on a check against a baseline beside its figures: the environment that changed, a speed
    that rests on the allocator's state (it flips a check between runs), outside load."""
    out = [f"environment changed: {line}" for line in outcome.environment]
    fresh = fresh_pages(by_config([t for t in outcome.trials if t.config == outcome.config]))
    if fresh:
        out.append(f"note: {fresh}")
    load = load_summary(outcome.trials, NOISE_FLOOR)
    if load is not None and load.disturbed:
        out.append(f"measured under load: {load_sentence(load)}; a round's ratio discounts it where it hit both "
                   "loaders of a block pair alike")
    return out


def print_recorded(console: Console, recorded: Recorded) -> None:
    """``check --record``'s last line: the reference saved, in which file, and the one it replaced."""
    before = recorded.replaced
    replaced = f"; it replaces the one recorded {before.recorded_at or 'by the scan'}" if before else ""
    console.print(f"{reference_line(recorded.baseline)}, saved in {recorded.path}{replaced}", highlight=False, soft_wrap=True)
