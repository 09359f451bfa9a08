"""A benchmark's results file, plain (``.json``) or gzipped (``.json.gz``, as kept in ``benchmarks/results/``).

Every maintained script writes its figures through ``write_json`` and reads a saved run back (``--show``,
``--replay``, ``--rescore``) through ``read_json``; the name decides whether the file is gzipped. Saved scans
(``"schema": "loadtune/scan"``) stay plain JSON, for ``loadtune show``.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable


def gzipped(path: Path | str) -> bool:
    return Path(path).suffix == ".gz"


def read_json(path: Path | str) -> Any:
    """The JSON document in ``path``, gzipped or not."""
    path = Path(path)
    if gzipped(path):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    return json.loads(path.read_text())


def write_json(path: Path | str, document: Any, indent: int = 1, default: Callable[[Any], Any] | None = None) -> None:
    """Write ``document`` to ``path`` (gzipped where the name ends in ``.gz``) through a temporary file in the
    same folder renamed over it, so that a run cut off while writing leaves the last whole file."""
    path = Path(path)
    text = json.dumps(document, indent=indent, default=default) + "\n"
    data = gzip.compress(text.encode(), compresslevel=9, mtime=0) if gzipped(path) else text.encode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a results file is for others to read too
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def stem(path: Path | str) -> str:
    """The file's name without ``.json`` or ``.json.gz``."""
    name = Path(path).name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return Path(path).stem
