"""Project-wide defaults from ``[tool.loadtune]`` in the nearest ``pyproject.toml``.

So a CI line can be just ``loadtune check``: the spec, the baseline, the tolerance and scan options
live with the project. Flags override this table; this table overrides the spec's ``loadtune`` dict.
"""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli if present, else no project defaults
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
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
    if path is None or tomllib is None:
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
