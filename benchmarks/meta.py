"""Where a benchmark's figures come from: the commit, the machine, the date and the command line.

Every script that writes a JSON file puts ``run_meta()`` under its ``"meta"`` key, so that figures
from two checkouts or two machines are never compared unknowingly. Call it once, when the run starts:
a run that rewrites its file as it goes keeps describing the checkout it was started from.
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def git_state(repo: Path = REPO) -> dict:
    """The checkout's commit, and whether tracked files differ from it (the figures then come from
    code no commit holds). Both None where git or the repository is missing."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              check=True, timeout=60).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def run_meta(argv: list[str] | None = None) -> dict:
    """The ``"meta"`` block of a benchmark's JSON. ``argv``: the arguments given to the script's
    ``main`` when they are not the process's own (``sys.argv[1:]`` otherwise). Imports torch: call
    it once the arguments are parsed, so that ``--help`` stays quick."""
    from loadtune.engine.machine import collect
    from loadtune.version import __version__

    args = sys.argv[1:] if argv is None else argv
    return {
        **git_state(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", sys.argv[0], *args]),
        "loadtune": __version__,
        "machine": {"hostname": socket.gethostname(), **collect().to_dict()},
    }
