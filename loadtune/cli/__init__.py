"""The command line: a thin typer layer over the Python API (``app``), its defaults from
``[tool.loadtune]`` in ``pyproject.toml`` (``project``)."""

import sys
import warnings

__all__ = ["main"]


def main() -> None:
    """The ``loadtune`` command. ``--version`` alone is answered before torch is imported (2 s)."""
    if sys.argv[1:] == ["--version"]:
        from loadtune.version import __version__

        print(f"loadtune {__version__}")
        return
    if sys.argv[1:2] in (["scan"], ["check"]) and "--help" not in sys.argv:  # commands that run trials
        from loadtune.engine.trial.server import start_fork_server

        start_fork_server()  # it imports torch while this process does, not after
    # torch warns at import when numpy is absent; loadtune never needs numpy. Silenced for this import
    # only (the filter is restored after), so the CLI's output stays clean without a global side effect.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch  # noqa: F401

    from loadtune.cli.app import main as run

    run()
