"""The scan's options, checked: defaults < the spec file's ``loadtune_options = {...}`` dict < explicit
arguments (CLI flags), later winning. Every option is checked here, before any work; ``plan.py`` turns
the checked options into a plan."""

from __future__ import annotations

import math
import os
from dataclasses import fields
from typing import Any

from loadtune.analysis.footprint import parse_size
from loadtune.engine.trial.workload import WorkloadError, check_step_ms
from loadtune.model.config import PlanError, parse_knobs
from loadtune.model.machine import MachineInfo
from loadtune.model.settings import ScanOptions
from loadtune.model.storage import ASKED


class OptionsError(ValueError):
    """An invalid option value or an unknown option name: refused before any work, exit code 2."""


def is_seconds(value: object) -> bool:
    """A positive, finite number (NaN compares false with everything and would pass a plain ``<= 0``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def validate_options(opts: ScanOptions) -> None:
    """Refuse an invalid value before any work; normalise ``min_blocks`` and ``max_memory`` (to bytes)."""
    if opts.step_ms is not None:
        try:
            check_step_ms(opts.step_ms)
        except WorkloadError as exc:
            raise OptionsError(str(exc)) from None
    check_flags(opts)
    check_counts(opts)
    check_fractions(opts)
    if opts.device is not None and not isinstance(opts.device, str):
        raise OptionsError(f"device must be 'cpu' or 'cuda[:N]', got {opts.device!r}")
    if opts.search not in ("adaptive", "grid"):
        raise OptionsError(f"search must be 'adaptive' or 'grid', got {opts.search!r}")
    for name in ("warmup", "block_time", "timeout"):
        if not is_seconds(getattr(opts, name)):
            raise OptionsError(f"{name} must be a positive number of seconds, got {getattr(opts, name)!r}")
    if opts.budget is not None and not is_seconds(opts.budget):
        raise OptionsError(f"budget must be a positive number of seconds, got {opts.budget!r}")
    if opts.max_memory is not None:
        try:
            opts.max_memory = parse_size(opts.max_memory)
        except ValueError as exc:
            raise OptionsError(f"max_memory (--max-memory): {exc}") from None
    check_current(opts)
    check_storage(opts)
    if opts.timeout <= opts.warmup + opts.block_time:
        raise OptionsError(f"timeout ({opts.timeout:g} s) leaves no time to measure; raise it")


def check_current(opts: ScanOptions) -> None:
    """``current`` ("num_workers=8,pin_memory=True" or a dict) normalised to a dict of checked knobs."""
    if opts.current is not None:
        try:
            opts.current = parse_knobs(opts.current, "current")
        except PlanError as exc:
            raise OptionsError(str(exc)) from None


def check_storage(opts: ScanOptions) -> None:
    """``storage`` one of the states a scan can set; ``data`` paths that exist, normalised to a list of
    absolute paths (a trial's process may run elsewhere)."""
    if opts.storage not in ASKED:
        raise OptionsError(f"storage (--storage) must be one of {', '.join(ASKED)}, got {opts.storage!r}")
    if opts.data is None:
        return
    paths = [opts.data] if isinstance(opts.data, str) else opts.data
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
        raise OptionsError(f"data (--data) must name the dataset's files or folders, got {opts.data!r}")
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise OptionsError(f"data (--data): {', '.join(missing)} does not exist; name the folder or files the dataset reads")
    opts.data = [os.path.abspath(p) for p in paths]


def check_flags(opts: ScanOptions) -> None:
    for name in ("pin", "persistent", "shuffle", "drop_last", "allow_reorder", "diagnose"):
        value = getattr(opts, name)
        if not isinstance(value, bool) and not (value is None and name in ("pin", "persistent")):
            raise OptionsError(f"{name} must be true or false, got {value!r}")


def check_counts(opts: ScanOptions) -> None:
    for name, low in (("seed", None), ("blocks", 1), ("min_blocks", 1), ("confirm", 0), ("reference_rounds", 0), ("race_legs", 0)):
        value = getattr(opts, name)
        if not isinstance(value, int) or isinstance(value, bool) or (low is not None and value < low):
            raise OptionsError(f"{name} must be a whole number{f' >= {low}' if low is not None else ''}, got {value!r}")
    if opts.reference_rounds == 1:
        raise OptionsError("reference_rounds must be 0 (no reference for check) or at least 2: one paired round "
                           "shows no spread, and check could never decide against it")
    opts.min_blocks = min(opts.min_blocks, opts.blocks)


def check_fractions(opts: ScanOptions) -> None:
    for name in ("target_spread", "noise_floor"):
        value = getattr(opts, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
            raise OptionsError(f"{name} must be a fraction in [0, 1), got {value!r}")


def as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def resolve_options(spec_defaults: dict, overrides: dict) -> ScanOptions:
    """Merge defaults < spec dict < overrides (``None`` in overrides means "not given")."""
    known = {f.name for f in fields(ScanOptions)}
    merged: dict[str, Any] = {}
    for origin, layer in (("the spec's loadtune_options", spec_defaults), ("options", overrides)):
        for key, value in layer.items():
            if key not in known:
                raise OptionsError(f"unknown option {key!r} in {origin}; known: {', '.join(sorted(known))}")
            if value is not None:
                merged[key] = value
    for key in ("batch_size", "workers", "prefetch", "start_method", "transfer", "data"):
        if key in merged:
            merged[key] = as_list(merged[key])
            if not merged[key]:
                raise OptionsError(f"{key} is an empty list: give at least one value, or leave it out for the default")
    opts = ScanOptions(**merged)
    validate_options(opts)
    return opts


def pick_device(requested: str | None, info: MachineInfo) -> str:
    """"cpu" or "cuda:N" (always with an index: torch.cuda.set_device refuses a bare "cuda")."""
    if requested is None:
        return "cuda:0" if info.has_accelerator else "cpu"
    if requested == "cpu":
        return requested
    if not requested.startswith("cuda"):
        raise OptionsError(f"device must be 'cpu' or 'cuda[:N]', got {requested!r}")
    if not info.has_accelerator:
        raise OptionsError(f"device {requested!r} requested but torch sees no CUDA device; use --device cpu")
    index = requested.partition(":")[2] or "0"
    if not index.isdigit() or int(index) >= len(info.gpus):
        raise OptionsError(f"device {requested!r}: this machine has CUDA devices 0..{len(info.gpus) - 1}")
    return f"cuda:{index}"
