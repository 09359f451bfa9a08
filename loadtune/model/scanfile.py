"""The scan file on disk: its schema's name and version, the steps that read older versions, and
the writes and reads that keep it whole (docs/api.md).

The file is rewritten atomically after every trial, so an interrupted scan loses no finished trial.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from loadtune.version import __version__

SCHEMA = "loadtune/scan"
SCHEMA_VERSION = 2


class ResultError(ValueError):
    """A results file that is missing, corrupt, or not ours: a clear message and exit code 2."""


# How a file of an older schema version is read: MIGRATIONS[n] turns version n into n + 1. Keys added
# since are read with their defaults where they are parsed (``from_dict``, ``OLDER_FILES`` in
# model/settings.py), so a step is needed only where a key was renamed or changed meaning; a version
# without one is read as it is. A committed CI baseline thus survives a version bump.
MIGRATIONS: dict[int, Callable[[dict], dict]] = {}


def legs_apart(data: dict) -> dict:
    """Version 1 kept a raced trial's leg number in ``round``: it moves to ``leg``, and ``round`` keeps
    closing rounds only."""
    trials = []
    for t in data.get("trials", []):
        if isinstance(t, dict) and t.get("raced"):
            t = {**t, "leg": t.get("round", 0), "round": 0}
        trials.append(t)
    return {**data, "trials": trials, "schema_version": 2}


MIGRATIONS[1] = legs_apart


def migrated(data: dict) -> dict:
    """``data`` brought to SCHEMA_VERSION; a version this loadtune cannot know (newer, or not one) is refused."""
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ResultError(f"schema version {version!r} is not one loadtune writes; re-run the scan")
    if version > SCHEMA_VERSION:
        raise ResultError(f"schema version {version} was written by a newer loadtune ({data.get('loadtune_version', 'unknown')}) "
                          f"than this one ({__version__}, which reads up to {SCHEMA_VERSION}); upgrade loadtune")
    for step in range(version, SCHEMA_VERSION):
        data = MIGRATIONS.get(step, dict)(data)
    return data


def checked(data: object) -> dict:
    """``data`` as a scan file this loadtune reads: ours, brought to SCHEMA_VERSION (``migrated``), with
    the settings every reader needs; ResultError otherwise."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ResultError("not a loadtune scan result (no 'schema': 'loadtune/scan' field)")
    data = migrated(data)
    if not isinstance(data.get("settings"), dict):
        raise ResultError("malformed scan result: 'settings' is missing or not an object")
    missing = [k for k in ("options", "device", "references") if k not in data["settings"]]
    if missing:
        raise ResultError(f"malformed scan result: settings lack {', '.join(missing)}")
    return data


def write_json(path: str | Path, data: dict) -> None:
    """``data`` as the file's JSON, written atomically (``write_atomic``)."""
    write_atomic(Path(path), json.dumps(data, indent=1) + "\n")


def read_json(path: Path) -> object:
    """The JSON in ``path``; ResultError, naming the file, when it cannot be read or is not JSON."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ResultError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ResultError(f"{path}: not a text file, so not a loadtune result") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path}: not valid JSON (line {exc.lineno}): {exc.msg}") from None


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file in the same folder, then rename over the target."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a results file is for others to read too
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_writable(path: str | Path, example: str = "loadtune.json") -> None:
    """Fail before the scan, not after it, when the results cannot be saved (``example``: a file name to suggest)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ResultError(f"{path}: folder {folder} does not exist")
    if path.is_dir():
        raise ResultError(f"{path}: is a folder; give a file name such as {example}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ResultError(f"{path}: cannot write there: {exc.strerror or exc}") from None
