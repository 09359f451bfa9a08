"""The command line: a thin typer layer over the Python API (``app``), its defaults from
``[tool.loadtune]`` in ``pyproject.toml`` (``project``)."""

import warnings

# torch warns at import when numpy is absent; loadtune never needs numpy. Silenced for this import
# only (the filter is restored after), so the CLI's output stays clean without a global side effect.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch  # noqa: F401

from loadtune.cli.app import main  # noqa: E402  (the typer app itself: loadtune.cli.app.app)

__all__ = ["main"]
