"""Project-wide defaults from ``[tool.loadtune]`` in the nearest ``pyproject.toml``.

So a CI line can be just ``loadtune check``: the spec, the baseline, the tolerance and scan options
live with the project. Flags override this table; this table overrides the spec's ``loadtune_options``.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli, a dependency there (pyproject.toml)
    try:
        import tomli as tomllib
    except ModuleNotFoundError:  # removed by hand: said when a [tool.loadtune] table would be ignored
        tomllib = None


class ProjectError(ValueError):
    """A pyproject.toml that does not parse, or a [tool.loadtune] of the wrong shape (exit 2)."""


def find_pyproject(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def project_defaults(start: Path | None = None) -> tuple[dict, Path | None]:
    """The ``[tool.loadtune]`` table (paths in it made absolute) and the file it came from."""
    path = find_pyproject(start)
    if path is None:
        return {}, None
    if tomllib is None:
        if "[tool.loadtune" in path.read_text(errors="replace"):
            raise ProjectError(f"{path} has a [tool.loadtune] table, and this Python ({sys.version.split()[0]}) cannot read TOML "
                               "without tomli: pip install tomli (a dependency of loadtune on Python < 3.11)")
        return {}, None
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProjectError(f"{path}: cannot read it as TOML: {exc}") from None
    table = data.get("tool", {}).get("loadtune", {})
    if not isinstance(table, dict):
        raise ProjectError(f"{path}: [tool.loadtune] must be a table")
    table = {key.replace("-", "_"): value for key, value in table.items()}
    for key in ("spec", "baseline", "json"):
        if isinstance(table.get(key), str):
            table[key] = str((path.parent / table[key]).resolve())
    return table, path
