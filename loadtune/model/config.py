"""One DataLoader configuration, ``TrialConfig``, and how its batches reach the device.

A config is a value: it keys results, survives JSON, and renders as the ``DataLoader(...)`` arguments
it stands for. ``Skip`` records a knob value that was not measured, and why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from loadtune.model.known import from_known


# How a batch reaches the device: "none" keeps it on the CPU (no accelerator), "sync" is
# `.to(device)`, "non_blocking" is `.to(device, non_blocking=True)` (only useful from pinned memory),
# "stream" copies batch n+1 on a side CUDA stream while batch n is consumed (``loadtune.CUDAPrefetcher``).
TRANSFERS = ("none", "sync", "non_blocking", "stream")
DEVICE_TRANSFERS = ("sync", "non_blocking", "stream")  # searched when batches go to a CUDA device
DEFAULT_PREFETCH = 2  # PyTorch's default prefetch_factor when num_workers > 0
HEAP_TRIM = 4  # glibc's trim threshold, in mmap thresholds: a few freed batches stay in the heap
# glibc's default mmap threshold: a smaller batch comes from the heap whatever the settings, and the pages
# such a loader faults in are its other allocations', not its batches'
HEAP_MIN_BATCH = 128 * 1024


def heap_for(batch_bytes: int) -> int:
    """The mmap threshold that keeps batches of ``batch_bytes`` in the heap: a power of two, at least
    twice the batch (a batch's size varies a little; the samples are allocated beside it)."""
    return 1 << (2 * max(1, batch_bytes) - 1).bit_length()


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


def pytorch_default(batch_size: int, accelerator: bool) -> "TrialConfig":
    """PyTorch's defaults at ``batch_size``: what a user gets without tuning, and what gains are measured against."""
    return TrialConfig(batch_size, 0, transfer=transfer_for(False, accelerator))


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
    # glibc's thresholds set so that batches stay in the heap (``environment``): the mmap threshold in
    # bytes; None: the allocator's defaults. Only without workers, whose main process collates each batch
    heap: int | None = None

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
        if self.heap:
            key += f",heap={self.heap}"
        return key

    @property
    def is_pytorch_default(self) -> bool:
        """PyTorch's defaults apart from batch size: no workers, no pinning, plain transfer, the C allocator's
        own settings."""
        return self.num_workers == 0 and not self.pin_memory and self.transfer in ("none", "sync") and not self.heap

    @property
    def environment(self) -> dict[str, str]:
        """What the training process's environment must hold before it starts, for this config: with
        ``heap``, glibc's mmap threshold above the batch (so batches come from the heap, not a fresh
        mapping each) and its trim threshold above that (so freed batches stay in the heap). Both, since
        setting one alone fixes the other at its small default."""
        if not self.heap:
            return {}
        return {"MALLOC_MMAP_THRESHOLD_": str(self.heap), "MALLOC_TRIM_THRESHOLD_": str(HEAP_TRIM * self.heap)}

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

    def label(self, batch: str | None = None) -> str:
        """Short human form for tables: ``w4 pf2 pin persist bs64``, ``w0 +MALLOC env bs32``; ``batch`` in place of the batch size
        (``~31``: batches of varying size, ``ScanResult.label``)."""
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
        if self.heap:
            parts.append("+MALLOC env")  # what the user sets: two MALLOC_ variables (``environment``)
        parts.append(f"bs{batch or self.batch_size}")
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
        else:
            config = replace(config, heap=None, prefetch_factor=config.prefetch_factor or DEFAULT_PREFETCH)
        return config

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrialConfig":
        return from_known(cls, data)


@dataclass(frozen=True)
class Skip:
    """A knob value that was not searched, and why (shown as a 'skipped' row)."""

    what: str
    why: str
    key: str | None = None  # the TrialConfig.key, when a single config was skipped


def parse_int_list(text: str, name: str) -> list[int]:
    """``"0,2,4"`` -> [0, 2, 4], with a message naming the flag on bad input."""
    try:
        values = [int(part) for part in str(text).replace(" ", "").split(",") if part != ""]
    except ValueError:
        raise PlanError(f"{name}: expected comma-separated whole numbers like 0,2,4, got {text!r}") from None
    if not values:
        raise PlanError(f"{name}: no values given")
    return values


# The knobs ``--current`` may give: the DataLoader arguments loadtune searches, and how batches reach the device
CURRENT_KNOBS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "in_order",
                 "multiprocessing_context", "transfer")
BOOL_KNOBS = ("pin_memory", "persistent_workers", "in_order")
COUNT_KNOBS = {"batch_size": 1, "num_workers": 0, "prefetch_factor": 1}  # whole numbers, at least this


def knob_value(key: str, raw: object, name: str) -> object:
    """One knob's value from text or TOML/Python: true/false, a whole number, or a name."""
    text = str(raw).strip()
    if key in BOOL_KNOBS:
        if isinstance(raw, bool) or text.lower() in ("true", "false"):
            return raw if isinstance(raw, bool) else text.lower() == "true"
        raise PlanError(f"{name}: {key} must be True or False, got {raw!r}")
    if key in COUNT_KNOBS:
        if isinstance(raw, bool) or not (isinstance(raw, int) or text.isdigit()) or int(text) < COUNT_KNOBS[key]:
            raise PlanError(f"{name}: {key} must be a whole number >= {COUNT_KNOBS[key]}, got {raw!r}")
        return int(text)
    if key == "transfer" and text not in TRANSFERS:
        raise PlanError(f"{name}: transfer must be one of {', '.join(TRANSFERS)}, got {raw!r}")
    return text


def parse_knobs(value: str | dict, name: str = "current") -> dict:
    """``"num_workers=8,pin_memory=True,batch_size=256"`` (or a dict of the same) -> checked knobs.
    ``start_method`` is read as ``multiprocessing_context``."""
    if isinstance(value, str):
        pairs = [part.partition("=") for part in value.split(",") if part.strip()]
        if not pairs or any(not sep for _, sep, _ in pairs):
            raise PlanError(f"{name}: expected knob=value pairs like num_workers=8,pin_memory=True, got {value!r}")
        items = [(key.strip(), raw.strip()) for key, _, raw in pairs]
    elif isinstance(value, dict):
        items = list(value.items())
    else:
        raise PlanError(f"{name}: expected knob=value pairs like num_workers=8,pin_memory=True, got {value!r}")
    out = {}
    for key, raw in items:
        key = "multiprocessing_context" if key == "start_method" else key
        if key not in CURRENT_KNOBS:
            raise PlanError(f"{name}: unknown knob {key!r}; known: {', '.join(CURRENT_KNOBS)}")
        out[key] = knob_value(key, raw, name)
    return out


def current_config(knobs: dict, batch_size: int, accelerator: bool) -> TrialConfig:
    """The config of the user's own settings (``parse_knobs``' output), PyTorch's defaults where a knob
    is not given; ``batch_size`` where it gives none. Refuses what PyTorch refuses without workers."""
    workers = knobs.get("num_workers", 0)
    if not workers:
        given = [k for k in ("prefetch_factor", "multiprocessing_context") if knobs.get(k) is not None]
        given += [k for k, default in (("persistent_workers", False), ("in_order", True)) if knobs.get(k, default) != default]
        if given:
            raise PlanError(f"{given[0]} needs num_workers > 0 (PyTorch refuses it without workers)")
    pin = knobs.get("pin_memory", False)
    transfer = knobs.get("transfer", "none") if accelerator else "none"  # without a device batches stay put
    if transfer == "none" and accelerator:
        transfer = transfer_for(pin, accelerator)
    config = TrialConfig(knobs.get("batch_size", batch_size), workers, pin, knobs.get("prefetch_factor"),
                         knobs.get("persistent_workers", False), transfer, knobs.get("in_order", True),
                         knobs.get("multiprocessing_context"))
    return config.with_knobs()

