"""Rendering ``loadtune doctor --verify``: one PASS/FAIL line per check as it is decided, then the
verdict and the machine it holds for."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from loadtune.model.verify import Check, Verification

NAME_WIDTH = 20


def check_lines(check: Check) -> list[Text]:
    """``PASS  name  figures``, and the check's note (what limits it, what a failure means) below."""
    word, style = ("PASS", "bold green") if check.passed else ("FAIL", "bold red")
    lines = [Text.assemble((word, style), "  ", (check.name.ljust(NAME_WIDTH), "bold"), check.summary)]
    if check.note:
        lines.append(Text(" " * 6 + check.note, style="yellow" if check.passed else "red"))
    return lines


def print_line(console: Console, check: Check) -> None:
    for line in check_lines(check):
        console.print(line, soft_wrap=True)


def machine_line(facts: dict) -> str | None:
    """GPU 0's name, the torch and CUDA versions and the driver, from the facts the checks' process read."""
    gpus, machine = facts.get("gpus") or [], facts.get("machine") or {}
    if not gpus:
        return None
    first = gpus[0]
    more = f" (+{len(gpus) - 1} more)" if len(gpus) > 1 else ""
    driver = f", driver {first['driver']}" if first.get("driver") else ""
    return f"on GPU 0: {first.get('name')}{more}, torch {machine.get('torch')} (CUDA {machine.get('cuda')}){driver}"


def verdict_lines(result: Verification) -> list[Text]:
    """After the checks: how many passed, on what, and the exit status's meaning."""
    where = machine_line(result.facts)
    tail = f" {where}" if where else ""
    if result.passed:
        return [Text.assemble(("All ", "bold green"), (f"{len(result.checks)} checks passed", "bold green"),
                              f"{tail}, in {result.wall_s:.0f} s: the GPU figures loadtune reports hold on this machine.")]
    failed = len(result.failed)
    lines = [Text.assemble((f"{failed} of {len(result.checks)} checks failed", "bold red"), f"{tail}, in {result.wall_s:.0f} s.")]
    if result.error:
        lines.append(Text(f"The GPU checks stopped early: {result.error}", style="red"))
    lines.append(Text("Save the results with --json PATH and attach them to a bug report.", style="dim"))
    return lines


def print_verdict(console: Console, result: Verification) -> None:
    console.print()
    for line in verdict_lines(result):
        console.print(line, soft_wrap=True)
