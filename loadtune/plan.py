"""The search space and the trials it expands to (SPEC §4).

A ``TrialConfig`` is one DataLoader configuration plus how its batches reach the device. The grid
never contains a combination PyTorch rejects (``prefetch_factor`` or ``persistent_workers`` without
workers), and knobs that cannot matter on this machine are left out with a note saying why.
"""

from __future__ import annotations

import inspect
import multiprocessing
from dataclasses import asdict, dataclass, field, replace

from torch.utils.data import DataLoader

# How a batch reaches the device: "none" keeps it on the CPU (no accelerator), "sync" is
# `.to(device)`, "non_blocking" is `.to(device, non_blocking=True)` (only useful from pinned memory),
# "stream" copies batch n+1 on a side CUDA stream while batch n is consumed (``loadtune.CUDAPrefetcher``).
TRANSFERS = ("none", "sync", "non_blocking", "stream")
DEVICE_TRANSFERS = ("sync", "non_blocking", "stream")  # searched when batches go to a CUDA device
DEFAULT_PREFETCH = 2  # PyTorch's default prefetch_factor when num_workers > 0


def transfer_for(pin: bool, accelerator: bool) -> str:
    """Nothing to move without an accelerator; ``non_blocking`` only overlaps from pinned memory."""
    return ("non_blocking" if pin else "sync") if accelerator else "none"


def transfers_for(pin: bool, accelerator: bool, allowed: list[str] | None = None) -> list[str]:
    """The transfer strategies worth measuring at this pinning: none without an accelerator;
    ``non_blocking`` only from pinned memory (from pageable memory it is ``sync`` under another
    name). ``allowed`` (None: all) narrows them, the default strategy first."""
    if not accelerator:
        return ["none"]
    valid = [t for t in DEVICE_TRANSFERS if pin or t != "non_blocking"]
    if allowed is not None:
        valid = [t for t in valid if t in allowed]
    first = transfer_for(pin, accelerator)
    return sorted(valid, key=lambda t: t != first)


def transfer_cost(transfer: str) -> int:
    """Changes to the training loop a strategy asks for: none, one flag, a prefetcher."""
    return {"none": 0, "sync": 0, "non_blocking": 1, "stream": 2}.get(transfer, 2)


class PlanError(ValueError):
    """An invalid knob value: refused before any work, exit code 2."""


@dataclass(frozen=True)
class TrialConfig:
    """One point of the search space."""

    batch_size: int
    num_workers: int
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    transfer: str = "none"
    in_order: bool = True  # False lets batches arrive as workers finish them (torch >= 2.6)
    start_method: str | None = None  # DataLoader's multiprocessing_context; None: the platform's default

    @property
    def key(self) -> str:
        """Stable identity, used to match trials across saved results."""
        key = (
            f"bs={self.batch_size},w={self.num_workers},pin={int(self.pin_memory)},"
            f"pf={self.prefetch_factor or 0},pw={int(self.persistent_workers)},tx={self.transfer}"
        )
        if not self.in_order:
            key += ",io=0"
        if self.start_method:
            key += f",mp={self.start_method}"
        return key

    @property
    def is_pytorch_default(self) -> bool:
        """PyTorch's defaults apart from batch size: no workers, no pinning, plain transfer."""
        return self.num_workers == 0 and not self.pin_memory and self.transfer in ("none", "sync")

    def loader_kwargs(self) -> dict:
        """The DataLoader arguments this config sets (only valid combinations)."""
        kwargs = {
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
        }
        if self.num_workers > 0:
            kwargs["prefetch_factor"] = self.prefetch_factor or DEFAULT_PREFETCH
            kwargs["persistent_workers"] = self.persistent_workers
            if not self.in_order:
                kwargs["in_order"] = False
            if self.start_method:
                kwargs["multiprocessing_context"] = self.start_method
        return kwargs

    def label(self) -> str:
        """Short human form for tables: ``w4 pf2 pin persist bs64``."""
        parts = [f"w{self.num_workers}"]
        if self.num_workers:
            parts.append(f"pf{self.prefetch_factor or DEFAULT_PREFETCH}")
        if self.pin_memory:
            parts.append("pin")
        if self.persistent_workers:
            parts.append("persist")
        if self.transfer not in ("none", "sync"):
            parts.append(self.transfer.replace("_", "-"))
        if not self.in_order:
            parts.append("unordered")
        if self.start_method:
            parts.append(self.start_method)
        parts.append(f"bs{self.batch_size}")
        return " ".join(parts)

    def with_knobs(self, **changes) -> "TrialConfig":
        """A copy with knobs changed, kept valid: transfer follows pinning, and the worker-only knobs
        are cleared without workers (PyTorch rejects them)."""
        config = replace(self, **changes)
        if "pin_memory" in changes and "transfer" not in changes and config.transfer in ("sync", "non_blocking"):
            config = replace(config, transfer=transfer_for(config.pin_memory, True))
        if config.transfer == "non_blocking" and not config.pin_memory:
            config = replace(config, transfer="sync")  # from pageable memory the flag does nothing
        if config.num_workers == 0:
            config = replace(config, prefetch_factor=None, persistent_workers=False, in_order=True, start_method=None)
        elif config.prefetch_factor is None:
            config = replace(config, prefetch_factor=DEFAULT_PREFETCH)
        return config

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrialConfig":
        return cls(**data)


@dataclass(frozen=True)
class Skip:
    """A knob value that was not searched, and why (shown as a 'skipped' row)."""

    what: str
    why: str
    key: str | None = None  # the TrialConfig.key, when a single config was skipped


@dataclass
class SearchSpace:
    """The values of each knob; ``None`` for pin/persistent means "search both where it can matter"."""

    batch_sizes: list[int]
    workers: list[int]
    prefetch: list[int] = field(default_factory=lambda: [2, 4])
    pin: bool | None = None
    persistent: bool | None = None
    in_order: list[bool] = field(default_factory=lambda: [True])  # [True, False] when order may vary
    start_methods: list[str | None] = field(default_factory=lambda: [None])
    transfers: list[str] | None = None  # transfer strategies to search on a CUDA device; None: all valid

    def validate(self) -> None:
        for t in self.transfers or []:
            if t not in DEVICE_TRANSFERS:
                raise PlanError(f"transfer {t!r} is not a strategy; choose from {', '.join(DEVICE_TRANSFERS)}")
        if self.transfers == ["non_blocking"] and self.pin is False:
            raise PlanError("transfer non_blocking needs pin_memory (from pageable memory the copy is synchronous); "
                            "drop --no-pin or add another transfer")
        if False in self.in_order and "in_order" not in inspect.signature(DataLoader).parameters:
            raise PlanError("in_order=False needs torch >= 2.6; this torch has no DataLoader(in_order=...)")
        allowed = multiprocessing.get_all_start_methods()
        for method in self.start_methods:
            if method is not None and method not in allowed:
                raise PlanError(f"start method {method!r} is not available here; choose from {', '.join(allowed)}")
        checks = [
            ("batch size", self.batch_sizes, 1),
            ("num_workers", self.workers, 0),
            ("prefetch_factor", self.prefetch, 1),
        ]
        for name, values, low in checks:
            if not values:
                raise PlanError(f"{name}: no values given")
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int) or v < low:
                    raise PlanError(f"{name} must be whole numbers >= {low}, got {v!r}")


def default_workers(cores: int) -> list[int]:
    """0, 1, 2, 4, … up to twice the usable cores (plus the core count itself)."""
    values = {0, cores, 2 * cores}
    w = 1
    while w <= 2 * cores:
        values.add(w)
        w *= 2
    return sorted(values)


def parse_int_list(text: str, name: str) -> list[int]:
    """``"0,2,4"`` -> [0, 2, 4], with a message naming the flag on bad input."""
    try:
        values = [int(part) for part in str(text).replace(" ", "").split(",") if part != ""]
    except ValueError:
        raise PlanError(f"{name}: expected comma-separated whole numbers like 0,2,4, got {text!r}") from None
    if not values:
        raise PlanError(f"{name}: no values given")
    return values


def build_grid(space: SearchSpace, accelerator: bool) -> tuple[list[TrialConfig], list[Skip]]:
    """Every valid combination of the space, and notes for what was left out."""
    space.validate()
    skips: list[Skip] = []
    if accelerator:
        pins = [space.pin] if space.pin is not None else [False, True]
    else:
        pins = [False]
        skips.append(Skip("pin_memory=True", "batches stay on the CPU (no CUDA device, or --device cpu): pinning only "
                          "speeds host-to-device copies"))
    if not accelerator and space.transfers:
        skips.append(Skip(f"transfer {','.join(space.transfers)}", "no CUDA device: batches stay on the CPU"))
    elif accelerator and "non_blocking" in (space.transfers or DEVICE_TRANSFERS):
        if False in pins:
            skips.append(Skip("non_blocking without pin_memory", "from pageable memory the copy is synchronous: "
                              "non_blocking=True only overlaps from pinned memory"))
        pins = [p for p in pins if transfers_for(p, accelerator, space.transfers)]
    persists = [space.persistent] if space.persistent is not None else [False, True]
    configs: list[TrialConfig] = []
    for bs in sorted(set(space.batch_sizes)):
        for w in sorted(set(space.workers)):
            for pin in pins:
                for transfer in transfers_for(pin, accelerator, space.transfers):
                    if w == 0:
                        configs.append(TrialConfig(bs, 0, pin, None, False, transfer))
                        continue
                    for pf in sorted(set(space.prefetch)):
                        for pw in persists:
                            for order in dict.fromkeys(space.in_order):
                                for method in dict.fromkeys(space.start_methods):
                                    configs.append(TrialConfig(bs, w, pin, pf, pw, transfer, order, method))
    return configs, skips


def reference_configs(configs: list[TrialConfig], accelerator: bool) -> list[TrialConfig]:
    """PyTorch's default config at each batch size, when the grid lacks it: the gain is measured, not assumed."""
    present = {c.batch_size for c in configs if c.is_pytorch_default}
    transfer = transfer_for(False, accelerator)
    return [TrialConfig(bs, 0, False, None, False, transfer) for bs in sorted({c.batch_size for c in configs} - present)]
