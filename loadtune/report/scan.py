"""A scan's report for people: its table, the diagnosis of where the time goes, the notes and the
recommendation, put together (the pieces live in ``table``, ``diagnosis``, ``notes``, ``recommendation``)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from loadtune.analysis.view import Row, essential, rows as view_rows
from loadtune.engine.scan import NO_REFERENCE
from loadtune.model.results import ScanResult
from loadtune.report.diagnosis import diagnosis_table
from loadtune.report.notes import notes, short_notes
from loadtune.report.recommendation import recommendation_panel
from loadtune.report.table import rank_table, trial_table


def print_report(console: Console, result: ScanResult, rows: list[Row] | None = None, details: bool = False) -> None:
    """The table (``rows``: a selection from ``view.select``; default all), notes, recommendation;
    without ``details``, the short report (``print_short``)."""
    if not details:
        print_short(console, result, rows)
        return
    every = view_rows(result)
    console.print(scan_table(result, every if rows is None else rows, console.width))
    shown = shown_line(result, rows, len(every))
    if shown:
        console.print(shown, style="dim")
    diagnosis = diagnosis_table(result)
    if diagnosis is not None:
        console.print(diagnosis)
    print_recommendation(console, result, details=True)


def print_short(console: Console, result: ScanResult, rows: list[Row] | None = None) -> None:
    """The answer first, in a screen: the configs that matter (``view.essential``) with a two-line legend,
    the notes that change what the user does, the recommendation and its snippet, and a line on what
    ``--details`` adds."""
    every = view_rows(result)
    chosen = essential(result, every if rows is None else rows)
    console.print(scan_table(result, chosen, console.width, short=True))
    hidden = len([r for r in every if r.rank is not None]) - len(chosen)
    said, others = short_notes(result, chosen, console.width)
    for note in said:
        console.print(note)
    console.print(recommendation_panel(result, short=True))
    more = [f"{hidden} more config{'s' if hidden != 1 else ''}"] if hidden > 0 else []
    more += ["the stage profile"] if result.stages is not None else []
    more += [f"{others} more note{'s' if others != 1 else ''}"] if others else []
    more += ["the race's figures"] if any(t.raced for t in result.trials) else []
    if more:
        console.print(f"--details: {', '.join(more)}", style="dim", highlight=False)


def scan_table(result: ScanResult, rows: list[Row] | None = None, width: int | None = None, short: bool = False) -> Table:
    """The scan's ranked table: one row per config, or per config on several ranks; ``width`` and
    ``short`` as for ``trial_table``."""
    return rank_table(result, rows) if result.settings.distributed else trial_table(result, rows, width, short)


def shown_line(result: ScanResult, rows: list[Row] | None, total: int | None = None) -> str | None:
    """Under a filtered table: how many rows it shows (of ``total``, where the caller counted them), and
    that the ranks and the pick are the whole scan's."""
    total = len(view_rows(result)) if total is None else total
    if rows is None or len(rows) >= total:
        return None
    return f"showing {len(rows)} of {total} rows; ranks (#) and the recommendation are the whole scan's"


def print_recommendation(console: Console, result: ScanResult, details: bool = False) -> None:
    """The notes (failures, warnings, what was skipped) and the recommendation with its snippet:
    all that ``--quiet`` prints; short unless ``details``."""
    said = notes(result) if details else short_notes(result, view_rows(result), console.width)[0]
    for note in said:
        console.print(note)
    console.print(recommendation_panel(result, short=not details))


def reference_line(result: ScanResult) -> str | None:
    """Whether the reference ``check`` compares with was recorded (None without a recommendation, or
    when none was asked for: nothing to say)."""
    ref = result.reference
    if result.recommendation is None or (ref is None and not result.settings.options.reference_rounds):
        return None
    if ref is not None:
        return f"Reference for check: {ref.measured} paired rounds of {ref.config.label()} and its shaped calibration"
    why = [n for n in result.notes if n.startswith(NO_REFERENCE)]
    return f"{why[-1][0].upper()}{why[-1][1:]}" if why else None
