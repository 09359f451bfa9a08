"""loadtune: measure, don't guess, the DataLoader settings that keep a GPU fed.

The public API, imported on first use: ``import loadtune`` itself loads neither torch nor any
layer, and changes no global state (warning filters, start methods, signal handlers).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from loadtune.version import __version__

_EXPORTS = {
    "scan": "loadtune.report.notebook",  # engine.scan.scan with progress where someone watches
    "ScanOptions": "loadtune.model.settings",
    "SpecError": "loadtune.engine.spec",
    "load_spec": "loadtune.engine.spec",
    "ScanResult": "loadtune.model.results",
    "Trial": "loadtune.model.trial",
    "TrialConfig": "loadtune.model.config",
    "CUDAPrefetcher": "loadtune.engine.trial.prefetch",
    "autotune": "loadtune.live.loader",
}

__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:
    from loadtune.report.notebook import scan
    from loadtune.engine.spec import SpecError, load_spec
    from loadtune.engine.trial.prefetch import CUDAPrefetcher
    from loadtune.live.loader import autotune
    from loadtune.model.config import TrialConfig
    from loadtune.model.results import ScanResult
    from loadtune.model.settings import ScanOptions
    from loadtune.model.trial import Trial


# Imported with a name: the result's HTML rendering in Jupyter (light: neither torch nor the engine).
_ALSO = {"ScanResult": "loadtune.report.html", "scan": "loadtune.report.html"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        if name in _ALSO:
            importlib.import_module(_ALSO[name])
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'loadtune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
