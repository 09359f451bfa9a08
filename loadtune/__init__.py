"""loadtune: measure, don't guess, the DataLoader settings that keep a GPU fed.

The public API, imported on first use: ``import loadtune`` itself loads neither torch nor any
layer, and changes no global state (warning filters, start methods, signal handlers).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from loadtune.version import __version__

_EXPORTS = {
    "scan": "loadtune.engine.scan",
    "ScanOptions": "loadtune.model.settings",
    "SpecError": "loadtune.engine.spec",
    "load_spec": "loadtune.engine.spec",
    "ScanResult": "loadtune.model.results",
    "Trial": "loadtune.model.results",
    "TrialConfig": "loadtune.model.config",
    "CUDAPrefetcher": "loadtune.engine.trial.prefetch",
}

__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:
    from loadtune.engine.scan import scan
    from loadtune.engine.spec import SpecError, load_spec
    from loadtune.engine.trial.prefetch import CUDAPrefetcher
    from loadtune.model.config import TrialConfig
    from loadtune.model.results import ScanResult, Trial
    from loadtune.model.settings import ScanOptions


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'loadtune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
