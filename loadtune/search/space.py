"""The search space and the grid it expands to. The grid never contains a combination PyTorch rejects
(``prefetch_factor`` or ``persistent_workers`` without workers), and knobs that cannot matter on this
machine are left out with a note saying why."""

from __future__ import annotations

import inspect
import multiprocessing
from dataclasses import dataclass, field

from torch.utils.data import DataLoader
from loadtune.model.config import DEVICE_TRANSFERS, PlanError, Skip, TrialConfig, pytorch_default, transfers_for


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


def pins_and_skips(space: SearchSpace, accelerator: bool) -> tuple[list[bool], list[Skip]]:
    """The ``pin_memory`` values worth measuring here, and notes for the ones (and transfers) left out."""
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
    return pins, skips


def worker_variants(space: SearchSpace, persists: list[bool]) -> list[tuple]:
    """(prefetch_factor, persistent_workers, in_order, start method) combinations for a config with workers."""
    return [(pf, pw, order, method)
            for pf in sorted(set(space.prefetch))
            for pw in persists
            for order in dict.fromkeys(space.in_order)
            for method in dict.fromkeys(space.start_methods)]


def build_grid(space: SearchSpace, accelerator: bool) -> tuple[list[TrialConfig], list[Skip]]:
    """Every valid combination of the space, and notes for what was left out."""
    space.validate()
    pins, skips = pins_and_skips(space, accelerator)
    persists = [space.persistent] if space.persistent is not None else [False, True]
    variants = worker_variants(space, persists)
    configs: list[TrialConfig] = []
    for bs in sorted(set(space.batch_sizes)):
        for w in sorted(set(space.workers)):
            for pin in pins:
                for transfer in transfers_for(pin, accelerator, space.transfers):
                    if w == 0:
                        configs.append(TrialConfig(bs, 0, pin, None, False, transfer))
                    else:
                        configs += [TrialConfig(bs, w, pin, pf, pw, transfer, order, method)
                                    for pf, pw, order, method in variants]
    return configs, skips


def reference_configs(configs: list[TrialConfig], accelerator: bool) -> list[TrialConfig]:
    """PyTorch's default config at each batch size, when the grid lacks it: the gain is measured, not assumed."""
    present = {c.batch_size for c in configs if c.is_pytorch_default}
    return [pytorch_default(bs, accelerator) for bs in sorted({c.batch_size for c in configs} - present)]


