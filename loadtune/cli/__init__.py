"""The command line: a thin typer layer over the Python API (``app``) and where its defaults come from
(``project``: ``[tool.loadtune]`` in ``pyproject.toml``)."""

from loadtune.cli.app import app, main

__all__ = ["app", "main"]
