"""The fork server that trial processes come from, and starting it before a command needs it.

A fork server that has imported torch forks each trial in milliseconds, but starting it costs an
import of torch (about a second). Started at the first trial, that second is spent while the scan
waits; started by the CLI before the CLI imports torch itself, the two imports run side by side on
two cores. This module imports nothing heavy, so that the CLI can call it first.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys

PRELOAD = ["loadtune.engine.trial.child"]  # imported once by the server, for every trial it forks


@contextlib.contextmanager
def main_module_hidden():
    """Start children without making them re-import the caller's ``__main__``.

    forkserver (like spawn) re-runs the parent's main script in each child; a trial needs nothing
    from it, and a user's notebook-style script without an ``if __name__ == "__main__"`` guard would
    run again inside every trial. Hiding the attributes it keys on, for the instant of ``start()``,
    leaves the child's ``__main__`` empty."""
    main = sys.modules.get("__main__")
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if main and name in main.__dict__}
    if "__file__" in saved:
        del main.__file__
    if "__spec__" in saved:
        main.__spec__ = None
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(main, name, value)


def fork_server_context():
    """multiprocessing's forkserver context, its server preloading the trial child (and so torch);
    None where this platform has no fork server."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_fork_server() -> None:
    """Start the fork server now rather than at the first trial (a no-op where there is none, or where
    it runs already). It inherits this process's environment and ``sys.path`` as they are now; a
    trial loads its spec, and puts the spec's folder on its path, itself."""
    if fork_server_context() is None:
        return
    from multiprocessing import forkserver

    with main_module_hidden():
        forkserver.ensure_running()
