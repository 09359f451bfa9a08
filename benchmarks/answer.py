"""A ``loadtune scan`` through the CLI, timed from outside: to its exit, and to its answer.

With ``--quiet`` a scan prints nothing until its recommendation, which it prints the moment the answer
is final; what follows (the calibration runs that ``show`` and ``check`` use, the reference for
``check``) changes no figure of it. So the time to the answer is the time to the first line on stdout,
and the wall time is longer by that tail. The suites that hold a target on "the time to the answer"
read ``answer_s``; ``wall_s`` is what a script that waits for the exit waits.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TimedScan:
    returncode: int
    wall_s: float
    answer_s: float  # to the first line on stdout (the wall time where the scan printed nothing)
    stderr: str


def timed_scan(args: list[str], cwd: Path, env: dict | None = None) -> TimedScan:
    """``python -m loadtune scan ARGS --quiet`` in ``cwd``: its exit code, wall time, time to the answer
    and its stderr (in a file: a full pipe must not stall the scan while stdout is read)."""
    started, answer = time.monotonic(), None
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "loadtune", "scan", *args, "--quiet"], stdout=subprocess.PIPE,
                                stderr=err, text=True, env=env, cwd=cwd)
        for line in proc.stdout:
            if answer is None and line.strip():
                answer = time.monotonic() - started
        proc.wait()
        wall = time.monotonic() - started
        err.seek(0)
        stderr = err.read()
    return TimedScan(proc.returncode, round(wall, 1), round(answer if answer is not None else wall, 1), stderr)
