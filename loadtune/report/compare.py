"""Rendering two scans side by side (``loadtune show A.json B.json``): config by config, with ratios,
verdicts beyond the noise, and what differs around them."""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from loadtune.analysis.compare import Comparison, ConfigDiff
from loadtune.report.text import ratio_text, spread_text, status_cell


VERDICT_STYLES = {"faster": "bold green", "slower": "bold red", "within noise": "dim", "not measured": "yellow"}


def comparison_table(cmp: Comparison, diffs: list[ConfigDiff], width: int | None = None) -> Table:
    """A's and B's figure per config, the ratio B/A with its interval, and the verdict. Given a
    ``width`` too narrow for one line per row, the interval folds under the ratio, then each
    figure's ``±`` under its median; only then does the config column wrap."""
    table = build_comparison_table(cmp, diffs, fold=0)
    if width is not None:
        console = Console(width=width)
        unbounded = console.options.update_width(10_000)
        for fold in (1, 2):
            if Measurement.get(console, unbounded, table).maximum <= width:
                break
            table = build_comparison_table(cmp, diffs, fold)
    return table


def build_comparison_table(cmp: Comparison, diffs: list[ConfigDiff], fold: int) -> Table:
    table = Table(title="Config by config: B against A", title_justify="left", header_style="bold", pad_edge=False)
    unit = "\nsamples/s" if fold >= 2 else " samples/s"
    table.add_column("config", ratio=1, min_width=12)
    table.add_column("A" + unit, justify="right", no_wrap=True)
    table.add_column("B" + unit, justify="right", no_wrap=True)
    table.add_column("B/A", justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for d in diffs:
        label = Text(d.config.label())
        for pick, mark in ((cmp.a_pick, " ★A"), (cmp.b_pick, " ★B")):
            if pick == d.config:
                label.append(mark, style="bold yellow")
        table.add_row(
            label,
            side_text(d.a, d.a_status, fold >= 2),
            side_text(d.b, d.b_status, fold >= 2),
            ratio_text(d.ratio, fold >= 1) if d.ratio else "-",
            Text(d.verdict, style=VERDICT_STYLES.get(d.verdict, "yellow")),
        )
    table.caption = (f"★A, ★B: each scan's recommendation · ±: {spread_meaning(cmp.spreads)} · B/A: ratio with its interval · "
                     f"within noise: the intervals overlap or the medians are within {cmp.noise_floor:.0%}")
    table.caption_justify = "left"
    return table


def spread_meaning(spreads: tuple[float | None, float | None]) -> str:
    """What each side's ± is: an interval for a long run where its scan repeated a config, else its blocks'."""
    learned = [f"{s:.1%} in {side}" for side, s in zip("AB", spreads) if s is not None]
    if len(learned) == 2:
        return f"95% interval for a long run (run-to-run spread {learned[0]}, {learned[1]})"
    if learned:
        other = "B" if spreads[0] is not None else "A"
        return (f"95% interval for a long run where learned ({learned[0]}); in {other} the median block's own "
                "(no config repeated: run-to-run noise unknown)")
    return "95% interval of the median block (neither scan repeated a config: run-to-run noise unknown)"


def side_text(est, status: str | None, folded: bool = False) -> Text:
    if est is not None:
        return Text(spread_text(est).replace(" ", "\n") if folded else spread_text(est))
    if status is None:
        return Text("-", style="dim")
    return status_cell(status)


def print_comparison(console: Console, cmp: Comparison, diffs: list[ConfigDiff]) -> None:
    """Which files, what differs around the numbers, the table, and the two recommendations."""
    console.print(Text.assemble(("A: ", "bold"), cmp.a_name, "   ", ("B: ", "bold"), cmp.b_name), soft_wrap=True)
    for line in cmp.dataset:
        console.print(Text(f"• dataset: {line}", style="yellow"))
    for line in cmp.settings:
        console.print(Text(f"• {line}", style="yellow"))
    if cmp.calibration is not None:
        console.print(Text(f"• loadtune's calibration workload ran {ratio_text(cmp.calibration)} as fast in B as in A "
                           "(how the machines or their load differ)", style="cyan"))
    if diffs:
        console.print(comparison_table(cmp, diffs, console.width))
    else:
        console.print("No config to show (none in common, or the filters left none).", style="yellow")
    if not any(d.a_status and d.b_status for d in cmp.diffs):
        console.print(Text("• the two scans have no config in common", style="yellow"))
    counts = cmp.counts()
    console.print(", ".join(f"{n} {verdict}" for verdict, n in counts.items()), style="dim")
    for side, pick in (("A", cmp.a_pick), ("B", cmp.b_pick)):
        console.print(Text.assemble((f"{side} recommends ", "bold"), pick.label() if pick else "nothing (no config measured)"))


