"""The command line: a thin typer layer over ``loadtune.scan``; this module holds the app and its
``scan``, ``show`` and ``doctor`` commands, ``cli.check`` the ``check`` command, ``cli.common`` what they share.

Exit codes: 0 done (check: passed), 1 check found a regression (doctor --verify: a check failed), 2 usage,
spec or baseline error, 3 nothing could be measured (doctor --verify: no CUDA device), 4 check could not
decide (inconclusive), 130 interrupted.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from loadtune.analysis.compare import compare, select_diffs
from loadtune.analysis.view import filters_from, select
from loadtune.cli.check import check
from loadtune.cli.common import (EXIT_INTERRUPTED, EXIT_NOTHING_MEASURED, EXIT_REGRESSION, PROJECT_KEYS, USER_ERRORS,
                                 check_html, checked_outputs, fail, load_project, missing, output_format, save_html, write_json)
from loadtune.engine.distributed import layout as distributed
from loadtune.engine.options import OptionsError
from loadtune.engine.plan import prepare, resume_from
from loadtune.engine.scan import execute
from loadtune.model.config import parse_int_list
from loadtune.model.results import ScanResult
from loadtune.model.scanfile import check_writable, write_atomic
from loadtune.model.settings import ScanOptions
from loadtune.report import plot as plot_mod
from loadtune.report.compare import print_comparison
from loadtune.report.page import scan_page
from loadtune.report.progress import AnswerOnly, scan_progress
from loadtune.report.scan import print_recommendation, print_report, reference_line
from loadtune.report.table import print_nodes
from loadtune.version import __version__

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Measure, don't guess: tune a PyTorch DataLoader.")


def print_version(value: bool) -> None:
    """``--version``, answered before any command runs."""
    if value:
        typer.echo(f"loadtune {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=print_version, is_eager=True, help="print the version and exit"),
) -> None:
    """loadtune: a throughput tuner for PyTorch DataLoaders."""


def int_list(text: Optional[str], name: str) -> Optional[list[int]]:
    """A list flag such as ``--workers 0,2,4``; None when not given (``[tool.loadtune]`` may set it)."""
    return None if text is None else parse_int_list(text, name)


def save_plot(result: ScanResult, path: Path, console: Console) -> None:
    """Write the plot after a scan or a show; a failure is an error (exit 2), the result stays saved."""
    try:
        plot_mod.write_plot(result, path)
    except (plot_mod.PlotError, OSError) as exc:
        raise fail(f"{exc}" if isinstance(exc, plot_mod.PlotError) else f"--plot {path}: {exc.strerror or exc}") from None
    console.print(f"Plot written to {path}", style="dim")


@app.command()
def scan(
    spec: Optional[str] = typer.Argument(None, help="Spec file that builds the dataset: dataset.py or dataset.py:factory (default: "
                                                    "\\[tool.loadtune] spec)"),
    workers: Optional[str] = typer.Option(None, help="num_workers values, e.g. 0,2,4 (default: 0,1,2,4,… up to 2× usable cores)"),
    batch_size: Optional[str] = typer.Option(None, "--batch-size", help="batch sizes, e.g. 32,64 (default: the spec's, else 64)"),
    prefetch: Optional[str] = typer.Option(None, help="prefetch_factor values (only with workers) (default: 2,4)"),
    pin: Optional[bool] = typer.Option(None, "--pin/--no-pin", help="fix pin_memory (default: search both with an accelerator)"),
    persistent: Optional[bool] = typer.Option(None, "--persistent/--no-persistent", help="fix persistent_workers (default: search both)"),
    device: Optional[str] = typer.Option(None, help="cpu or cuda[:N] (default: cuda when available)"),
    transfer: Optional[str] = typer.Option(None, help="how batches reach a CUDA device: sync,non_blocking,stream (default: all; non_blocking only "
                                                      "pinned)"),
    step_ms: Optional[float] = typer.Option(None, "--step-ms", help="consume each batch with a synthetic step of about X ms (when the spec has no "
                                                                    "step)"),
    shuffle: Optional[bool] = typer.Option(None, "--shuffle/--no-shuffle", help="shuffle map-style datasets as training does (default: shuffle)"),
    drop_last: Optional[bool] = typer.Option(None, "--drop-last/--no-drop-last", help="drop the short last batch (default: keep)"),
    warmup: Optional[float] = typer.Option(None, help="seconds of warm-up per trial, discarded (default: 1.0)"),
    block_time: Optional[float] = typer.Option(None, "--block-time", help="seconds per timed block, at least (default: 0.5)"),
    blocks: Optional[int] = typer.Option(None, help="timed blocks per trial, at most (default: 10)"),
    min_blocks: Optional[int] = typer.Option(None, "--min-blocks", help="timed blocks per trial, at least (default: 3)"),
    target_spread: Optional[float] = typer.Option(None, "--target-spread", help="stop a trial once its median is known to this relative precision "
                                                                                "(default: 0.03)"),
    allow_reorder: bool = typer.Option(False, "--allow-reorder", help="also try in_order=False (only if training tolerates batches out of order)"),
    start_method: Optional[str] = typer.Option(None, "--start-method", help="worker start methods to compare, e.g. fork,spawn (default: the "
                                                                            "platform's)"),
    grid: bool = typer.Option(False, "--grid", help="measure every combination instead of the adaptive search"),
    budget: Optional[float] = typer.Option(None, help="seconds for the whole scan (refused if too short for a race); no trial starts past it"),
    confirm: Optional[int] = typer.Option(
        None, help="rounds re-measuring the contenders side by side with several ranks; 0: none, and no race (default: 1)"),
    race_legs: Optional[int] = typer.Option(
        None, "--race-legs", help="race the contenders side by side until their ratios to the pick are within about ±5%, "
                                  "up to N legs, fresh processes each (default: 6); 0: no race, closing rounds of separate trials instead"),
    timeout: Optional[float] = typer.Option(None, help="hard limit per trial in seconds (default: 120)"),
    seed: Optional[int] = typer.Option(None, help="seed of the trial order and of shuffling (default: 0)"),
    max_memory: Optional[str] = typer.Option(None, "--max-memory", help="do not recommend configs whose measured peak host memory exceeds this, "
                                                                        "e.g. 8G or 512M (default: no limit)"),
    diagnose: Optional[bool] = typer.Option(None, "--diagnose/--no-diagnose", help="profile the stages once: where the time goes and the bound "
                                                                                   "(default: on)"),
    reference_rounds: Optional[int] = typer.Option(None, "--reference-rounds",
                                                   help="also record the reference `loadtune check` compares with: N paired "
                                                   "rounds of the pick and its shaped calibration, after the answer (default: 0, "
                                                   "none; `loadtune check --record` records it where the checks run)"),
    current: Optional[str] = typer.Option(None, "--current", help="your own settings, e.g. \"num_workers=8,pin_memory=True,batch_size=256\": "
                                                                  "always measured, marked in the table; the gain is stated over them, "
                                                                  "and keeping them is a possible verdict"),
    storage: Optional[str] = typer.Option(None, "--storage", help="the page cache's state every config is timed in: warm (the dataset's files "
                                                                  "read through once first), cold (dropped before every trial), auto: the "
                                                                  "state training will be in (default: auto)"),
    data: Optional[list[str]] = typer.Option(None, "--data", help="the folder or files the dataset reads (repeatable; default: those it "
                                                                  "opens or maps while samples are read)"),
    json_path: Optional[Path] = typer.Option(None, "--json", help="where to save the full result, rewritten after every trial (default: "
                                                                  "loadtune.json)"),
    resume: bool = typer.Option(False, "--resume", help="continue the interrupted scan saved at --json, without re-running its finished trials"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="print only the recommendation (with its notes and snippet); no table, no progress"),
    details: bool = typer.Option(False, "--details", help="the whole report: every config, the stage profile and its caps, every note, the "
                                                          "race's details (default: the answer in a screen)"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="also write throughput against num_workers to this .png or .svg (needs matplotlib)"),
    html: Optional[Path] = typer.Option(None, "--html", help="also write the report as one self-contained HTML page (at the end, or on Ctrl-C)"),
    format_: str = typer.Option("table", "--format", help="table, or json: the whole result on stdout (for a pipe), nothing else there"),
    nproc_per_node: Optional[int] = typer.Option(None, "--nproc-per-node", help="ranks per trial, each with its own loader over its shard, "
                                                                                "launched as torchrun does (default: 1)"),
    nnodes: Optional[int] = typer.Option(None, "--nnodes", help="nodes of the training job: shards are sized for all of them (default: 1)"),
    node_rank: Optional[int] = typer.Option(None, "--node-rank", help="this node's rank in the job (default: 0)"),
    rdzv_endpoint: Optional[str] = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT where the nodes meet so node 0 prints a per-node summary "
                                                                              "(node 0 hosts it)"),
) -> None:
    """Search DataLoader settings for a dataset, print a ranked table and a recommendation."""
    # long only by its typer signature (one line per flag); the body hands off to planned_scan, run_scan, finish_scan
    as_json = checked_outputs(format_, plot, html)
    console = Console(stderr=as_json)  # under --format json, stdout holds the JSON alone
    overrides = dict(
        workers=workers, batch_size=batch_size, prefetch=prefetch, pin=pin, persistent=persistent, device=device,
        transfer=transfer.split(",") if transfer else None, step_ms=step_ms, shuffle=shuffle, drop_last=drop_last,
        warmup=warmup, block_time=block_time, blocks=blocks, min_blocks=min_blocks, target_spread=target_spread,
        allow_reorder=allow_reorder or None, start_method=start_method.split(",") if start_method else None,
        search="grid" if grid else None, budget=budget, confirm=confirm, race_legs=race_legs, timeout=timeout, seed=seed,
        nproc_per_node=nproc_per_node, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
        max_memory=max_memory, diagnose=diagnose, reference_rounds=reference_rounds, current=current,
        storage=storage, data=data or None,
    )
    plan, json_path, adopted = planned_scan(spec, overrides, json_path, resume)
    html, plot = (distributed.node_path(p, plan.options.nnodes, plan.options.node_rank) if p else None for p in (html, plot))
    result = run_scan(plan, json_path, console, quiet, as_json, html, details)
    finish_scan(console, plan.options, result, json_path, adopted.store_hosted, plot, html)


def finish_scan(console: Console, opts: ScanOptions, result: ScanResult, json_path: Path, store_hosted: bool,
                plot: Optional[Path], html: Optional[Path] = None) -> None:
    """After the report: where it was saved, the per-node summary, the page (its failures too), the exit code, the plot."""
    console.print(f"Saved to {json_path}", style="dim")
    if opts.nnodes > 1 and opts.rdzv_endpoint:
        print_node_summary(console, result, opts, store_hosted)
    if html is not None:
        save_html(html, scan_page(result), console)
    if not result.ok_trials:
        raise fail("no trial could be measured; see the failures above", EXIT_NOTHING_MEASURED)
    if plot is not None:
        save_plot(result, plot, console)


def planned_scan(spec: Optional[str], flags: dict, json_path: Optional[Path], resume: bool):
    """The scan's plan from flags > ``[tool.loadtune]`` > the spec's defaults, and where it is saved.
    Under torchrun only local rank 0 scans: the others exit here."""
    try:
        for name in ("workers", "batch_size", "prefetch"):
            flags[name] = int_list(flags[name], "--" + name.replace("_", "-"))
        adopted = distributed.adopt_launcher(flags)  # under torchrun: its layout
        if adopted.stand_aside:
            Console(stderr=True).print(adopted.stand_aside, style="dim")
            raise typer.Exit(0)
        project = load_project()
        overrides = {k: v if v is not None else project.get(k) for k, v in flags.items()}  # flags > pyproject
        overrides.update({k: v for k, v in project.items() if k not in overrides and k not in PROJECT_KEYS})
        spec = spec or project.get("spec") or missing("a spec file", "spec")
        json_path = json_path or Path(project.get("json", "loadtune.json"))
        plan = prepare(spec, **overrides)
        json_path = distributed.node_path(json_path, plan.options.nnodes, plan.options.node_rank)
        check_writable(json_path)
        if resume:
            resume_from(plan, json_path)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None  # nothing measured yet: nothing to save
    return plan, json_path, adopted


def run_scan(plan, json_path: Path, console: Console, quiet: bool, as_json: bool, html: Optional[Path] = None,
             details: bool = False) -> ScanResult:
    """Measure, with progress unless quiet, and print (or write the JSON): the short report, or the whole
    with ``details``. The report is printed as
    soon as the answer is final, while the calibration workload (and a reference for ``check``, when
    asked: a line then says how that went) runs; the JSON holds all of it, so it comes at the end.
    On Ctrl-C print and save what was measured (and write the ``html`` page of it), then exit 130."""
    result = plan.result
    printed = False

    def render(_: ScanResult | None = None) -> None:
        nonlocal printed
        if as_json:
            write_json(result.to_dict())
        else:
            (print_recommendation if quiet else print_report)(console, result, details=details)
        printed = True

    early = None if as_json else render
    try:
        if quiet:
            result = execute(plan, json_path, AnswerOnly(early) if early else None)
        else:
            with scan_progress(on_answer=early) as display:  # a live bar in a terminal, a line per trial in a log
                result = execute(plan, json_path, display)
    except KeyboardInterrupt:
        if printed and result.reference is None and plan.options.reference_rounds:
            console.print("Interrupted while recording the reference for check; `loadtune scan --resume` records it")
        elif not printed:
            render()
        console.print(f"Interrupted: {len(result.trials)} finished trials saved to {json_path}")
        if html is not None:
            save_html(html, scan_page(result), console)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    line = reference_line(result) if printed else None
    if not printed:
        render()
    elif line:
        console.print(line, style="dim", highlight=False)
    return result


def print_node_summary(console: Console, result: ScanResult, opts: ScanOptions, store_hosted: bool) -> None:
    """Multi-node: every node sends its pick; node 0 prints one row per node."""
    try:
        nodes = distributed.gather_summaries(result, opts, store_hosted)
    except (RuntimeError, distributed.DistributedError) as exc:  # the store's timeout, or a bad endpoint
        raise fail(f"the per-node summary could not be gathered at {opts.rdzv_endpoint}: {exc}") from None
    if nodes is not None:
        print_nodes(console, nodes)


app.command()(check)  # registered after scan, before show: --help lists the commands in this order


@app.command()
def show(
    result_paths: list[Path] = typer.Argument(..., metavar="RESULT [OTHER]", help="a saved scan (e.g. loadtune.json); two: compare them config by "
                                                                                  "config"),
    top: Optional[int] = typer.Option(None, "--top", help="show the first N rows only"),
    sort: str = typer.Option("rate", "--sort", help="order rows by rate, workers, memory or startup (two scans: rate, workers or ratio)"),
    batch_size: Optional[str] = typer.Option(None, "--batch-size", help="only these batch sizes, e.g. 64 or 32,64"),
    workers: Optional[str] = typer.Option(None, help="only these num_workers values, e.g. 2,4"),
    pin: Optional[bool] = typer.Option(None, "--pin/--no-pin", help="only configs with (without) pin_memory"),
    status: Optional[str] = typer.Option(None, help="only rows of these statuses: ok, failed, skipped, excluded (comma-separated)"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="also write throughput against num_workers to this .png or .svg (needs matplotlib)"),
    html: Optional[Path] = typer.Option(None, "--html", help="also write the report (the rows shown) as one self-contained HTML page"),
    format_: str = typer.Option("table", "--format", help="table, or json: the saved result (two scans: the comparison) on stdout"),
    details: bool = typer.Option(False, "--details", help="the whole report: every config, the stage profile and its caps, every note, the "
                                                          "race's details (default: the answer in a screen)"),
) -> None:
    """Render a saved scan again (table and recommendation) without measuring anything; given two, compare them."""
    try:
        as_json = output_format(format_) == "json"
        if len(result_paths) > 2:
            raise OptionsError(f"show takes one result, or two to compare; got {len(result_paths)}")
        check_drawings(len(result_paths), plot, html)
        filters = filters_from(batch_size, workers, pin, status)
        if as_json and len(result_paths) == 1 and (filters.any or top is not None or sort != "rate"):
            raise OptionsError("--format json writes the whole saved result; --top, --sort and the filters shape the table only")
        results = [ScanResult.load(path) for path in result_paths]
        if len(results) == 2:
            cmp = compare(*results, a_name=str(result_paths[0]), b_name=str(result_paths[1]))
            diffs = select_diffs(cmp.diffs, filters, sort, top)
        else:
            rows = select(results[0], filters, sort, top)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    console = Console()
    if len(results) == 2:
        if as_json:
            write_json(cmp.to_dict(diffs))
        else:
            print_comparison(console, cmp, diffs)
        return
    if as_json:
        write_json(results[0].to_dict())
    else:
        print_report(console, results[0], rows, details=details or filters.any or top is not None or sort != "rate")
    if html is not None:
        save_html(html, scan_page(results[0], rows), Console(stderr=as_json))
    if plot is not None:
        save_plot(results[0], plot, Console(stderr=as_json))


def check_drawings(scans: int, plot: Optional[Path], html: Optional[Path]) -> None:
    """``show``'s ``--plot`` and ``--html`` draw one scan: a bad file name, or two scans, refused before any is read."""
    if plot is not None:
        plot_mod.plot_format(plot)
    for flag, path in (("--plot", plot), ("--html", html)):
        if path is not None and scans == 2:
            raise OptionsError(f"{flag} draws one scan; run show {flag} on each of the two")
    check_html(html)


@app.command()
def doctor(
    json_path: Optional[Path] = typer.Option(None, "--json", help="also save the findings here as JSON"),
    bandwidth: bool = typer.Option(True, "--bandwidth/--no-bandwidth", help="measure host<->device copy rates (a few seconds per GPU)"),
    pace: bool = typer.Option(True, "--pace/--no-pace", help="measure how steady the CPU's pace is (5 s of every usable core, 8 at most)"),
    verify: bool = typer.Option(False, "--verify", help="self-test the GPU path loadtune's figures depend on: PASS/FAIL per "
                                "check (--json saves them); exit 1 when one fails, 3 without a CUDA device"),
    format_: str = typer.Option("table", "--format", help="table, or json: the findings on stdout (for a pipe), nothing else there"),
    storage: Optional[Path] = typer.Option(None, "--storage", help="a dataset's folder: measure the storage it is on, read-only (its "
                                           "filesystem, whether the page cache can be dropped there, cold random reads at 1-64 in flight)"),
) -> None:
    """What this machine offers: cores, RAM, /dev/shm, versions, how steady the CPU's pace is, GPUs, PCIe links
    and measured copy rates; with --storage, the storage a dataset is on."""
    from loadtune.engine import doctor as doctor_mod
    from loadtune.report.doctor import print_doctor

    as_json = checked_outputs(format_, None)
    try:
        if as_json and verify:
            raise OptionsError("--format json writes the machine's findings; --verify prints its checks (--json PATH saves them)")
        if verify and storage:
            raise OptionsError("--storage measures beside the machine's findings; --verify runs only the GPU path's checks: run them apart")
        if json_path:
            check_writable(json_path)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    if verify:
        raise typer.Exit(verify_gpu(json_path))
    try:
        report = doctor_mod.collect(measure=bandwidth, pace=pace, storage=str(storage) if storage else None)
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    if as_json:
        write_json(report.to_dict())
    else:
        print_doctor(Console(), report)
    if json_path:
        write_atomic(json_path, json.dumps(report.to_dict(), indent=1) + "\n")


def verify_gpu(json_path: Optional[Path]) -> int:
    """``doctor --verify``: the checks printed as they come, the verdict, the JSON; the exit code
    (0 all passed, 1 one failed, 3 no CUDA device). This process never initialises CUDA."""
    from loadtune.engine.verify.runner import verify as run_verify
    from loadtune.report.verify import print_line, print_verdict

    console = Console()
    try:
        with console.status("verifying the GPU path: each check prints PASS or FAIL as it ends (under two minutes)"):
            result = run_verify(on_check=lambda check: print_line(console, check))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    if json_path:
        write_atomic(json_path, json.dumps(result.to_dict(), indent=1) + "\n")
    if result.refused:
        raise fail(result.refused, EXIT_NOTHING_MEASURED)
    print_verdict(console, result)
    return 0 if result.passed else EXIT_REGRESSION


def main() -> None:
    signal.signal(signal.SIGTERM, interrupt)  # a cancelled CI job: clean up and save, as on Ctrl-C
    app(prog_name="loadtune")


def interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
