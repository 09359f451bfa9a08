"""``loadtune check``: the CI gate's flags, handed to ``engine.check`` (against a baseline scan, or
``--record`` its reference) or ``engine.against`` (``--against`` another revision); the verdict printed,
written where CI reads it, and returned as the exit code."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from loadtune.cli.common import (EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_NOTHING_MEASURED, EXIT_REGRESSION, PROJECT_KEYS,
                                 USER_ERRORS, checked_outputs, fail, load_project, missing, save_html, write_json)
from loadtune.engine.against import Base, check_against
from loadtune.engine.check import (DEFAULT_BUDGET_S, REFERENCE_ROUNDS, ReferenceIncomplete, explicit_config, parse_tolerance,
                                   record_baseline, run_check)
from loadtune.engine.options import OptionsError
from loadtune.model.check import INCONCLUSIVE, NOTHING, REGRESSION, CheckResult
from loadtune.model.config import TrialConfig, parse_knobs
from loadtune.model.results import ScanResult
from loadtune.model.scanfile import check_writable, write_atomic
from loadtune.report import ci
from loadtune.report.check import print_check, print_recorded
from loadtune.report.page import check_page
from loadtune.report.progress import CheckProgress

CHECK_EXIT_CODES = {NOTHING: EXIT_NOTHING_MEASURED, REGRESSION: EXIT_REGRESSION, INCONCLUSIVE: EXIT_INCONCLUSIVE}  # NO_BASE: 0


def check(
    spec: Optional[str] = typer.Argument(None, help="the spec file of the baseline's dataset (default: \\[tool.loadtune] spec)"),
    baseline: Optional[Path] = typer.Option(None, help="a saved scan to compare with (default: \\[tool.loadtune] baseline, else loadtune.json)"),
    tolerance: Optional[str] = typer.Option(None, help="slowdown allowed, beyond the noise, e.g. 10% (default: 10%)"),
    min_throughput: Optional[float] = typer.Option(None, "--min-throughput", help="absolute floor in samples/s"),
    workers: Optional[int] = typer.Option(None, help="check this num_workers instead of the baseline's pick"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="check this batch size instead of the baseline's pick"),
    prefetch: Optional[int] = typer.Option(None, help="check this prefetch_factor instead of the baseline's pick"),
    pin: Optional[bool] = typer.Option(None, "--pin/--no-pin", help="check this pin_memory instead of the baseline's pick"),
    persistent: Optional[bool] = typer.Option(None, "--persistent/--no-persistent", help="check this persistent_workers instead"),
    rounds: Optional[int] = typer.Option(None, help="paired rounds of the config and its shaped calibration, at least (2 to 60; "
                                         "default 3); with --record, the reference's rounds (default 8)"),
    record_: bool = typer.Option(False, "--record", help="record the reference later checks compare with, on this machine, into "
                                 "the baseline file: run it from the code they compare against (no verdict)"),
    budget: float = typer.Option(DEFAULT_BUDGET_S, help="seconds for the check, at most: more rounds are measured while "
                                 "the verdict is inconclusive, another fits, and they could still decide it"),
    junit_xml: Optional[Path] = typer.Option(None, "--junit-xml", help="write a JUnit XML report here"),
    markdown_path: Optional[Path] = typer.Option(None, "--markdown", help="write a Markdown summary here; appended when it is "
                                                 "$GITHUB_STEP_SUMMARY (GitHub's job summary), else replaced"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="write the full check result here"),
    html: Optional[Path] = typer.Option(None, "--html", help="write the check as one self-contained HTML page here: both sides, "
                                        "the verdict, the ratio and its interval"),
    format_: str = typer.Option("table", "--format", help="table, or json: the check result on stdout (for a pipe), nothing else there"),
    against: Optional[str] = typer.Option(None, "--against", help="a git revision (origin/main, a SHA): time the work tree's data code "
                                          "in turns with that revision's, here and now; no baseline needed"),
    against_dir: Optional[Path] = typer.Option(None, "--against-dir", help="an existing checkout of the base: time the work tree's "
                                               "data code in turns with the code there"),
    config_knobs: Optional[str] = typer.Option(None, "--config", help="with --against: the loader both sides run, e.g. num_workers=4,"
                                               "batch_size=64 (default: --baseline's pick, else [tool.loadtune] current, else PyTorch's defaults)"),
) -> None:
    """Re-measure the baseline's recommended config (or time the work tree against another revision: --against);
    exit 1 when loading got slower beyond tolerance and noise."""
    as_json = checked_outputs(format_, None, html)
    console = Console(stderr=as_json)  # under --format json, stdout holds the JSON alone
    progress = CheckProgress(console)
    try:
        project = load_project()
        spec = spec or project.get("spec") or missing("spec file", "spec")
        baseline_path = baseline or Path(project.get("baseline", "loadtune.json"))
        tol = tolerance_value(tolerance if tolerance is not None else project.get("tolerance", 0.10))
        floor = min_throughput if min_throughput is not None else project.get("min_throughput")
        for path in (junit_xml, markdown_path, json_path):
            if path is not None:
                check_writable(path)
        if budget <= 0:
            raise OptionsError(f"--budget must be a positive number of seconds, got {budget:g}")
        if against is not None or against_dir is not None or config_knobs is not None:
            knobs = knob_flags(config_knobs, num_workers=workers, batch_size=batch_size, prefetch_factor=prefetch, pin_memory=pin,
                               persistent_workers=persistent)
            outcome = run_against(progress, spec, project, record_, Base(against, against_dir), baseline, knobs, tol, floor,
                                  rounds or 3, budget)
        else:
            saved = ScanResult.load(baseline_path)
            config = explicit_config(saved, workers=workers, batch_size=batch_size, prefetch=prefetch, pin=pin, persistent=persistent)
            if record_:
                refuse_reports_when_recording(as_json, junit_xml, markdown_path, json_path, html)
                print_recorded(console, record_baseline(spec, baseline_path, config, rounds or REFERENCE_ROUNDS, saved,
                                                        on_start=progress.recording, on_round=progress.round_finished))
                return
            outcome = run_baseline(progress, spec, saved, config, tol, floor, rounds or 3, budget)
    except ReferenceIncomplete as exc:  # too few rounds to decide anything: the baseline is left as it was
        raise fail(str(exc), EXIT_NOTHING_MEASURED) from None
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    print_check(console, outcome, rounds=False)
    write_check_reports(outcome, as_json, junit_xml, markdown_path, json_path)
    if html is not None:
        save_html(html, check_page(outcome, spec, datetime.now(timezone.utc).isoformat(timespec="seconds")), console)
    raise typer.Exit(CHECK_EXIT_CODES.get(outcome.status, 0))


def tolerance_value(text) -> float:
    """``--tolerance`` (or ``[tool.loadtune] tolerance``) as a fraction; a bad one is a usage error."""
    try:
        return parse_tolerance(text)
    except ValueError as exc:
        raise OptionsError(f"--tolerance: {exc}") from None


def knob_flags(config: Optional[str], **flags) -> dict:
    """``--config`` knobs with the knob flags over them (``model.config.parse_knobs``' names)."""
    knobs = parse_knobs(config, "--config") if config is not None else {}
    return knobs | {name: value for name, value in flags.items() if value is not None}


def run_baseline(progress: CheckProgress, spec: str, saved: ScanResult, config: Optional[TrialConfig], tolerance: float, floor: Optional[float],
                 rounds: int, budget: float) -> CheckResult:
    """``check`` against the baseline scan ``saved``: its pick (or ``config``) re-measured beside its reference."""
    if saved.reference is not None:
        progress.starting(config or saved.reference.config, rounds, budget, saved.reference.defaults is not None)
    return run_check(spec, saved, config, tolerance, floor, rounds, budget, on_round=progress.round_finished)


def run_against(progress: CheckProgress, spec: str, project: dict, record_: bool, base: Base, baseline: Optional[Path],
                knobs: dict, tolerance: float, floor: Optional[float], rounds: int, budget: float) -> CheckResult:
    """``check --against``: the work tree and the base timed in turns, round by round; the baseline scan only
    for its pick (when --baseline is given), the scan options of ``[tool.loadtune]`` for the timing."""
    if record_:
        raise OptionsError("--record stores a reference for checks against a baseline; --against needs none")
    saved = ScanResult.load(baseline) if baseline is not None else None
    options = {k: v for k, v in project.items() if k not in PROJECT_KEYS}
    return check_against(spec, base, saved, knobs, options, tolerance, floor, rounds, budget,
                         on_start=lambda config, against: progress.against_starting(config, against, rounds, budget),
                         on_round=progress.duet_finished)


def refuse_reports_when_recording(as_json: bool, *paths: Optional[Path]) -> None:
    """``--record`` reaches no verdict: the reports that would carry one are refused, not left unwritten."""
    if as_json or any(paths):
        raise OptionsError("--record measures the reference and reaches no verdict: drop --format json, --junit-xml, "
                           "--markdown, --json and --html (run loadtune check after it for those)")


def write_check_reports(outcome, as_json: bool, junit_xml: Optional[Path], markdown_path: Optional[Path],
                        json_path: Optional[Path]) -> None:
    """The check's result on stdout (``--format json``) and in the files CI systems read."""
    if as_json:
        write_json(outcome.to_dict())
    if junit_xml:
        write_atomic(junit_xml, ci.junit_xml(outcome))
    if markdown_path:
        ci.write_markdown(markdown_path, ci.markdown(outcome))
    if json_path:
        write_atomic(json_path, json.dumps(outcome.to_dict(), indent=1) + "\n")
