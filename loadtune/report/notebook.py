"""loadtune from Python, as a person runs it: in a notebook or a session, with progress as trials finish
and a result that shows as the report.

``loadtune.scan`` is ``engine.scan.scan`` with a progress display chosen for where it runs (the engine
prints nothing: it may not import this layer); the result it returns shows in Jupyter as the CLI's
table, diagnosis and recommendation (``report.html``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from loadtune.engine.scan import ScanObserver
from loadtune.engine.scan import scan as engine_scan
from loadtune.model.results import ScanResult
from loadtune.report import html  # noqa: F401 - registers the result's HTML rendering
from loadtune.report.progress import LineProgress, in_jupyter, scan_progress


def watching() -> bool:
    """Someone sees the output as it comes: a notebook, or stderr on a terminal."""
    try:
        return in_jupyter() or sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def scan(
    dataset_or_spec: Any,
    *,
    json_path: str | Path | None = None,
    observer: ScanObserver | None = None,
    resume: bool = False,
    progress: bool | None = None,
    **options: Any,
) -> ScanResult:
    """Measure the DataLoader configs of a dataset and recommend one (``loadtune.engine.scan.scan``).

    ``progress``: None (the default) shows it where someone watches (a notebook: a line per trial in
    the cell's output; a terminal: the live bar) and stays silent in scripts whose stderr goes to a
    file; True shows it anywhere (a line per trial off a terminal); False never. An ``observer``
    given replaces it."""
    if observer is not None or progress is False or (progress is None and not watching()):
        return engine_scan(dataset_or_spec, json_path=json_path, observer=observer, resume=resume, **options)
    display = LineProgress(sys.stdout) if in_jupyter() else scan_progress()
    with display:
        return engine_scan(dataset_or_spec, json_path=json_path, observer=display, resume=resume, **options)
