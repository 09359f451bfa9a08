"""Regenerate the example output in the docs by running the real CLI.

The output shown in docs/example-run.md (and in README.md) is never pasted by hand: this
script runs each command, captures its stdout at a fixed terminal width, and writes it between
markers of the form

    <!-- generated: NAME -->
    ...replaced...
    <!-- end generated: NAME -->

with the machine and the date it ran on. Run it from anywhere, with the interpreter loadtune is
installed in:

    python docs/generate_examples.py              # everything (the scan takes a few minutes)
    python docs/generate_examples.py --only show  # just the comparison of two saved scans
    python docs/generate_examples.py --only report  # just docs/images/report.png (needs Chromium)

The scan runs in a temporary folder (``examples/`` linked into it), so the ``loadtune.json`` it
saves lands there and not in the checkout, apart from a copy in ``tests/fixtures/readme_scan.json``
(the test that its report fits a screen reads it); ``show`` only reads files. The picture of the HTML page
(``docs/images/report.png``) is ``show --html`` of a saved scan as headless Chromium draws it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_RUN = ROOT / "docs" / "example-run.md"
README = ROOT / "README.md"
COLUMNS = 80  # the terminal width every command is rendered at: rich fits its tables to it
SCAN = "loadtune scan examples/images.py --workers 0,1,2,4 --prefetch 2 --no-persistent"
SHOW = "loadtune show tests/fixtures/slowable_before.json tests/fixtures/slowable_after.json"
REPORT = "loadtune show benchmarks/results/gpu_race_images.json --html {page}"  # a scan on one H100, with a race
REPORT_IMAGE = ROOT / "docs" / "images" / "report.png"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DETAILS = "loadtune show loadtune.json --details"  # the same scan's whole report
FIXTURE = ROOT / "tests" / "fixtures" / "readme_scan.json"  # the scan saved, for the test that its report fits a screen


@dataclass
class Run:
    """One command's captured stdout, and where it ran."""

    command: str
    output: str
    machine: str
    date: str
    note: str = ""  # a sentence more for the heading
    details: str = ""  # the same result's whole report (``DETAILS``), for a scan


def machine_line(info: dict, with_load: bool = True, load_after: float | None = None) -> str:
    """The machine in a few words, from a scan's saved ``machine``; the load average at the start
    (and at the end, when given): on a shared machine it says how far to trust the figures."""
    gpus = ", ".join(g["name"] for g in info.get("gpus", [])) or "no GPU"
    load = info.get("load_average")
    busy = f", load average {load:.1f} at the start" if load is not None and with_load else ""
    busy += f", {load_after:.1f} at the end" if busy and load_after is not None else ""
    return (f"{info['usable_cores']} usable cores ({info['cpu_model']}), {gpus}, "
            f"{info['memory_total_bytes'] / 2**30:.0f} GiB RAM; torch {info['torch']}, Python {info['python']}{busy}")


def run(command: str, cwd: Path) -> str:
    """The command's stdout as a terminal of ``COLUMNS`` columns would show it, without colour. Run as
    ``python -m loadtune`` with this interpreter, so no activated virtual environment is needed."""
    env = {**os.environ, "COLUMNS": str(COLUMNS), "LINES": "50", "NO_COLOR": "1", "TERM": "dumb"}
    argv = [sys.executable, "-m", *command.split()]
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"`{command}` exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return "\n".join(line.rstrip() for line in proc.stdout.splitlines())


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def incomplete(saved: dict) -> str | None:
    """Why a scan is not fit to show as the example (a failed trial, no stage profile), or None."""
    failed = [t["config"] for t in saved["trials"] if t["status"] != "ok"]
    if failed:
        return f"{len(failed)} trial(s) failed"
    if saved.get("stages") is None:
        return "it has no stage profile: " + "; ".join(n for n in saved["notes"] if "profile" in n)
    return None


def run_scan(force: bool) -> Run:
    """The quick-start scan, in a scratch folder that holds ``examples/`` and receives ``loadtune.json``."""
    with tempfile.TemporaryDirectory(prefix="loadtune-docs-") as tmp:
        (Path(tmp) / "examples").symlink_to(ROOT / "examples")
        output = run(SCAN, Path(tmp))
        details = run(DETAILS, Path(tmp))
        text = (Path(tmp) / "loadtune.json").read_text()
        saved = json.loads(text)
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    why = incomplete(saved)
    if why and not force:
        sys.exit(f"the scan is not fit for the docs ({why}); nothing written. Output:\n{output}")
    FIXTURE.write_text(text)
    return Run(SCAN, output, machine_line(saved["machine"], load_after=load_after), now(), details=details)


def run_show() -> Run:
    """Two saved scans compared; the fixtures were measured earlier, so this measures nothing."""
    scans = [json.loads((ROOT / path).read_text()) for path in SHOW.split()[2:]]
    when = " and ".join(dict.fromkeys(s["created"][:10] for s in scans))
    note = f" The scans themselves were measured on {when}, on that machine; only the rendering is new."
    return Run(SHOW, run(SHOW, ROOT), machine_line(scans[0]["machine"], with_load=False), now(), note)


def browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def report_image(chromium: str) -> None:
    """The HTML page of a saved scan, its top 1100 x 1800 pixels, in a palette of 256 colours to stay small
    (Pillow comes with matplotlib)."""
    from PIL import Image

    with tempfile.TemporaryDirectory(prefix="loadtune-docs-") as tmp:
        page, shot = Path(tmp) / "report.html", Path(tmp) / "report.png"
        run(REPORT.format(page=page), ROOT)
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                        f"--user-data-dir={tmp}/profile", f"--screenshot={shot}", "--window-size=1100,1800", page.as_uri()],
                       check=True, capture_output=True, timeout=120)
        Image.open(shot).convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(REPORT_IMAGE, optimize=True)


def block(run_: Run, output: str | None = None, note: str = "") -> str:
    """A console block of the command and its output, headed by where and when it ran."""
    return (f"Generated by `python docs/generate_examples.py` on {run_.date}; machine: {run_.machine}."
            f"{run_.note}{note}\n\n"
            f"```console\n$ {run_.command}\n{output if output is not None else run_.output}\n```")


def replace_between(path: Path, name: str, text: str) -> None:
    """Put ``text`` between the markers named ``name`` in ``path``; both markers must be there."""
    begin, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
    content = path.read_text()
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(content):
        sys.exit(f"{path}: no markers {begin} ... {end}")
    path.write_text(pattern.sub(lambda _: f"{begin}\n{text}\n{end}", content, count=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("scan", "show", "report"), help="regenerate one example only")
    parser.add_argument("--force", action="store_true", help="write a scan even with failed trials or no profile")
    args = parser.parse_args()
    if args.only in (None, "scan"):
        scan = run_scan(args.force)
        replace_between(EXAMPLE_RUN, "scan", block(scan))
        replace_between(EXAMPLE_RUN, "scan-details", block(replace(scan, command=DETAILS), scan.details))
        note = " How to read it, and the whole report (`--details`), are in [docs/example-run.md](docs/example-run.md)."
        replace_between(README, "scan-excerpt", block(scan, scan.output, note))
    if args.only in (None, "show"):
        replace_between(EXAMPLE_RUN, "show", block(run_show()))
    if args.only != "report":
        print(f"updated {EXAMPLE_RUN.relative_to(ROOT)}" + ("" if args.only == "show" else " and README.md"))
    if args.only in (None, "report"):
        chromium = browser()
        if chromium is None:
            sys.exit(f"no Chromium on PATH ({', '.join(BROWSERS)}): {REPORT_IMAGE.relative_to(ROOT)} not drawn")
        report_image(chromium)
        print(f"updated {REPORT_IMAGE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
