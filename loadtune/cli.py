"""The command line: a thin typer layer over ``loadtune.scan``.

Exit codes: 0 done (check: passed), 1 check found a regression, 2 usage, spec or baseline error,
3 nothing could be measured, 130 interrupted.
"""

from __future__ import annotations

import json
import signal
from dataclasses import fields
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.text import Text

from . import check as check_mod
from .check import BaselineError, explicit_config, parse_tolerance, run_check
from .plan import PlanError, parse_int_list
from .project import ProjectError, project_defaults
from .report import ProgressDisplay, print_check, print_report
from .results import ResultError, ScanResult, check_writable, write_atomic
from .scan import OptionsError, ScanOptions, execute, prepare, resume_from
from .spec import SpecError

EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_NOTHING_MEASURED = 3
EXIT_INTERRUPTED = 130

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure, don't guess: tune a PyTorch DataLoader.")


@app.callback()
def _root() -> None:
    """loadtune: a throughput tuner for PyTorch DataLoaders."""


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    Console(stderr=True).print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
    return typer.Exit(code)


def int_list(text: Optional[str], name: str) -> Optional[list[int]]:
    return None if text is None else parse_int_list(text, name)


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
    raise OptionsError(f"no {what} given: pass it, or set {key} = ... under [tool.loadtune] in pyproject.toml")


USER_ERRORS = (SpecError, OptionsError, PlanError, ResultError, ProjectError, BaselineError)


def tolerance_value(text) -> float:
    try:
        return parse_tolerance(text)
    except ValueError as exc:
        raise OptionsError(f"--tolerance: {exc}") from None


@app.command()
def scan(
    spec: Optional[str] = typer.Argument(None, help="Spec file that builds the dataset: dataset.py or dataset.py:factory (default: [tool.loadtune] spec)"),
    workers: Optional[str] = typer.Option(None, help="num_workers values, e.g. 0,2,4 (default: 0,1,2,4,… up to 2× usable cores)"),
    batch_size: Optional[str] = typer.Option(None, "--batch-size", help="batch sizes, e.g. 32,64 (default: the spec's, else 64)"),
    prefetch: Optional[str] = typer.Option(None, help="prefetch_factor values (only with workers) (default: 2,4)"),
    pin: Optional[bool] = typer.Option(None, "--pin/--no-pin", help="fix pin_memory (default: search both with an accelerator)"),
    persistent: Optional[bool] = typer.Option(None, "--persistent/--no-persistent", help="fix persistent_workers (default: search both)"),
    device: Optional[str] = typer.Option(None, help="cpu or cuda[:N] (default: cuda when available)"),
    shuffle: Optional[bool] = typer.Option(None, "--shuffle/--no-shuffle", help="shuffle map-style datasets as training does (default: shuffle)"),
    drop_last: Optional[bool] = typer.Option(None, "--drop-last/--no-drop-last", help="drop the short last batch (default: keep)"),
    warmup: Optional[float] = typer.Option(None, help="seconds of warm-up per trial, discarded (default: 1.0)"),
    block_time: Optional[float] = typer.Option(None, "--block-time", help="seconds per timed block, at least (default: 0.5)"),
    blocks: Optional[int] = typer.Option(None, help="timed blocks per trial, at most (default: 10)"),
    min_blocks: Optional[int] = typer.Option(None, "--min-blocks", help="timed blocks per trial, at least (default: 3)"),
    target_spread: Optional[float] = typer.Option(None, "--target-spread", help="stop a trial once its median is known to this relative precision (default: 0.03)"),
    allow_reorder: bool = typer.Option(False, "--allow-reorder", help="also try in_order=False (only if training tolerates batches out of order)"),
    start_method: Optional[str] = typer.Option(None, "--start-method", help="worker start methods to compare, e.g. fork,spawn (default: the platform's)"),
    grid: bool = typer.Option(False, "--grid", help="measure every combination instead of the adaptive search"),
    budget: Optional[float] = typer.Option(None, help="seconds for the whole scan; no trial starts past it (default: none)"),
    confirm: Optional[int] = typer.Option(None, help="rounds re-measuring the contenders side by side (default: 1)"),
    timeout: Optional[float] = typer.Option(None, help="hard limit per trial in seconds (default: 120)"),
    seed: Optional[int] = typer.Option(None, help="seed of the trial order and of shuffling (default: 0)"),
    max_memory: Optional[str] = typer.Option(None, "--max-memory", help="do not recommend configs whose measured peak host memory exceeds this, e.g. 8G or 512M (default: no limit)"),
    diagnose: Optional[bool] = typer.Option(None, "--diagnose/--no-diagnose", help="profile the stages once: where the time goes and the bound (default: on)"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="where to save the full result, rewritten after every trial (default: loadtune.json)"),
    resume: bool = typer.Option(False, "--resume", help="continue the interrupted scan saved at --json, without re-running its finished trials"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress display"),
) -> None:
    """Search DataLoader settings for a dataset, print a ranked table and a recommendation."""
    console = Console()
    try:
        overrides = dict(
            workers=int_list(workers, "--workers"),
            batch_size=int_list(batch_size, "--batch-size"),
            prefetch=int_list(prefetch, "--prefetch"),
            pin=pin,
            persistent=persistent,
            device=device,
            shuffle=shuffle,
            drop_last=drop_last,
            warmup=warmup,
            block_time=block_time,
            blocks=blocks,
            min_blocks=min_blocks,
            target_spread=target_spread,
            allow_reorder=allow_reorder or None,
            start_method=start_method.split(",") if start_method else None,
            search="grid" if grid else None,
            budget=budget,
            confirm=confirm,
            timeout=timeout,
            seed=seed,
            max_memory=max_memory,
            diagnose=diagnose,
        )
        project = load_project()
        overrides = {k: v if v is not None else project.get(k) for k, v in overrides.items()}  # flags > pyproject
        overrides.update({k: v for k, v in project.items() if k not in overrides and k not in PROJECT_KEYS})
        spec = spec or project.get("spec") or missing("a spec file", "spec")
        json_path = json_path or Path(project.get("json", "loadtune.json"))
        check_writable(json_path)
        plan = prepare(spec, **overrides)
        if resume:
            resume_from(plan, json_path)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None  # nothing measured yet: nothing to save
    result = plan.result
    try:
        if quiet:
            result = execute(plan, json_path)
        else:
            with ProgressDisplay(Console(stderr=True)) as display:
                result = execute(plan, json_path, display)
    except KeyboardInterrupt:
        print_report(console, result)
        console.print(f"Interrupted: {len(result.trials)} finished trials saved to {json_path}")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    print_report(console, result)
    console.print(f"Saved to {json_path}", style="dim")
    if not result.ok_trials:
        raise fail("no trial could be measured; see the failures above", EXIT_NOTHING_MEASURED)


@app.command()
def check(
    spec: Optional[str] = typer.Argument(None, help="the spec file of the baseline's dataset (default: [tool.loadtune] spec)"),
    baseline: Optional[Path] = typer.Option(None, help="a saved scan to compare with (default: [tool.loadtune] baseline, else loadtune.json)"),
    tolerance: Optional[str] = typer.Option(None, help="slowdown allowed, beyond the noise, e.g. 10% (default: 10%)"),
    min_throughput: Optional[float] = typer.Option(None, "--min-throughput", help="absolute floor in samples/s"),
    workers: Optional[int] = typer.Option(None, help="check this num_workers instead of the baseline's pick"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="check this batch size instead of the baseline's pick"),
    prefetch: Optional[int] = typer.Option(None, help="check this prefetch_factor instead of the baseline's pick"),
    pin: Optional[bool] = typer.Option(None, "--pin/--no-pin", help="check this pin_memory instead of the baseline's pick"),
    persistent: Optional[bool] = typer.Option(None, "--persistent/--no-persistent", help="check this persistent_workers instead"),
    rounds: int = typer.Option(3, min=1, help="interleaved rounds of (calibration, config, PyTorch's defaults)"),
    junit_xml: Optional[Path] = typer.Option(None, "--junit-xml", help="write a JUnit XML report here"),
    markdown_path: Optional[Path] = typer.Option(None, "--markdown", help="write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="write the full check result here"),
) -> None:
    """Re-measure the baseline's recommended config; exit 1 when loading got slower beyond tolerance and noise."""
    console = Console()
    try:
        project = load_project()
        spec = spec or project.get("spec") or missing("spec file", "spec")
        baseline_path = baseline or Path(project.get("baseline", "loadtune.json"))
        tol = tolerance_value(tolerance if tolerance is not None else project.get("tolerance", 0.10))
        floor = min_throughput if min_throughput is not None else project.get("min_throughput")
        for path in (junit_xml, markdown_path, json_path):
            if path is not None:
                check_writable(path)
        saved = ScanResult.load(baseline_path)
        config = explicit_config(saved, workers=workers, batch_size=batch_size, prefetch=prefetch, pin=pin, persistent=persistent)
        outcome = run_check(spec, saved, config, tol, floor, rounds)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    print_check(console, outcome)
    if junit_xml:
        write_atomic(junit_xml, check_mod.junit_xml(outcome))
    if markdown_path:
        write_atomic(markdown_path, check_mod.markdown(outcome))
    if json_path:
        write_atomic(json_path, json.dumps(outcome.to_dict(), indent=1) + "\n")
    if outcome.status == check_mod.NOTHING:
        raise typer.Exit(EXIT_NOTHING_MEASURED)
    if outcome.status == check_mod.REGRESSION:
        raise typer.Exit(EXIT_REGRESSION)


@app.command()
def show(result_path: Path = typer.Argument(..., metavar="RESULT", help="a saved scan, e.g. loadtune.json")) -> None:
    """Render a saved scan again (table and recommendation) without measuring anything."""
    try:
        result = ScanResult.load(result_path)
    except ResultError as exc:
        raise fail(str(exc)) from None
    print_report(Console(), result)


def main() -> None:
    signal.signal(signal.SIGTERM, interrupt)  # a cancelled CI job: clean up and save, as on Ctrl-C
    app(prog_name="loadtune")


def interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
