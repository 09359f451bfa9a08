"""loadtune: measure, don't guess, the DataLoader settings that keep a GPU fed."""

import warnings

__version__ = "0.1.0"

# torch warns at import when numpy is absent; loadtune never needs numpy, so the warning is noise.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

from loadtune.model.config import TrialConfig  # noqa: E402
from loadtune.engine.trial.prefetch import CUDAPrefetcher  # noqa: E402
from loadtune.model.results import ScanResult, Trial  # noqa: E402
from loadtune.engine.scan import ScanOptions, scan  # noqa: E402
from loadtune.engine.spec import SpecError, load_spec  # noqa: E402

__all__ = ["CUDAPrefetcher", "ScanOptions", "ScanResult", "SpecError", "Trial", "TrialConfig", "load_spec", "scan", "__version__"]
