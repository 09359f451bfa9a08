"""What every command shares: the exit codes, the errors a user can mend (exit 2), the defaults of
``[tool.loadtune]``, and the output formats."""

from __future__ import annotations

import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.text import Text

from loadtune.analysis.view import ViewError
from loadtune.cli.project import ProjectError, project_defaults
from loadtune.engine.check import BaselineError
from loadtune.engine.diskread import StorageError
from loadtune.engine.distributed import layout as distributed
from loadtune.engine.options import OptionsError
from loadtune.engine.revision import RevisionError
from loadtune.engine.spec import SpecError
from loadtune.model.config import PlanError
from loadtune.model.scanfile import ResultError, check_writable, write_atomic
from loadtune.model.settings import ScanOptions
from loadtune.report import plot as plot_mod

EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_NOTHING_MEASURED = 3
EXIT_INCONCLUSIVE = 4  # check: the interval straddles the tolerance, and the budget's rounds would not decide it
EXIT_INTERRUPTED = 130


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Say what went wrong on stderr; the caller raises the exit returned (so the code reads as a raise)."""
    Console(stderr=True).print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
    return typer.Exit(code)


PROJECT_KEYS = {"spec", "baseline", "json", "tolerance", "min_throughput"}


def load_project() -> dict:
    """``[tool.loadtune]`` of the nearest pyproject.toml (empty when there is none); unknown keys refused."""
    table, path = project_defaults()
    known = PROJECT_KEYS | {f.name for f in fields(ScanOptions)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ProjectError(f"{path}: unknown key {unknown[0]!r} in [tool.loadtune]; known: {', '.join(sorted(known))}")
    return table


def missing(what: str, key: str):
    """Refuse a command whose ``what`` came neither from its flags nor from ``[tool.loadtune]``."""
    raise OptionsError(f"no {what} given: pass it, or set {key} = ... under [tool.loadtune] in pyproject.toml")


USER_ERRORS = (SpecError, OptionsError, PlanError, ResultError, ProjectError, BaselineError, ViewError, plot_mod.PlotError,
               distributed.DistributedError, RevisionError, StorageError)
FORMATS = ("table", "json")


def output_format(text: str) -> str:
    """``--format``'s value, once it is one the commands write."""
    if text not in FORMATS:
        raise OptionsError(f"--format: expected table or json, got {text!r}")
    return text


def write_json(data: dict) -> None:
    """The whole of stdout under ``--format json``: one JSON document, for a pipe."""
    sys.stdout.write(json.dumps(data, indent=1) + "\n")
    sys.stdout.flush()


def checked_outputs(format_: str, plot: Optional[Path], html: Optional[Path] = None) -> bool:
    """Refuse a bad ``--format``, ``--plot`` or ``--html`` before any work (no matplotlib costs no scan); True for JSON."""
    try:
        as_json = output_format(format_) == "json"
        if plot is not None:
            plot_mod.check_plot(plot)
        check_html(html)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    return as_json


def check_html(path: Optional[Path]) -> None:
    """``--html PATH``: a place the page can be written, known before any work."""
    if path is None:
        return
    try:
        check_writable(path, example="report.html")
    except ResultError as exc:
        raise ResultError(f"--html {exc}") from None


def save_html(path: Path, page: str, console: Console) -> None:
    """Write the ``--html`` page atomically (a reader never sees half of it); a failure is an error (exit 2)."""
    try:
        write_atomic(path, page)
    except OSError as exc:
        raise fail(f"--html {path}: {exc.strerror or exc}") from None
    console.print(f"Report page written to {path}", style="dim")
