"""Building the user's own loader with the knobs loadtune searches (docs/spec-file.md#the-whole-loader).

A spec describes its loader in one of three ways beyond a bare dataset: extra ``DataLoader``
arguments (``loader_kwargs``: a sampler, a ``worker_init_fn``...), a factory ``loader(**knobs)``
(a ``StatefulDataLoader``, a pre-batched ``WebLoader``, a subclass), or a finished ``DataLoader``
(a ``LightningDataModule``'s ``train_dataloader()``) that is rebuilt per config, keeping its
dataset, sampler and collate. This module holds what those share: the knobs a factory gets, the
check that the loader it returns carries them, and the rebuild; and how any loader's iterator is
started (``start``: workers forked beside a live CUDA context). It knows nothing of spec files.
"""

from __future__ import annotations

import gc
import inspect
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

# What loadtune varies: never taken from the user's arguments (narrow the search, or give --current)
SEARCHED = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "in_order")
WORKER_KNOBS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")  # a factory always gets these
ORDER_ARGS = ("shuffle", "drop_last")  # scan options (``--shuffle``, ``--drop-last``), not loader arguments
OWN_ORDER = ("sampler", "batch_sampler")  # with these the user's loader orders (and maybe batches) samples itself
WORKERS_ONLY = ("multiprocessing_context", "timeout")  # PyTorch refuses these without workers: left out at num_workers=0


class LoaderError(ValueError):
    """The user's loader description cannot work as given: one sentence naming what and why."""


_forking_beside_cuda = False  # set by start() while its loader forks workers
_collector_was_enabled = True  # and the collector's state before start() paused it


def _freeze_inherited() -> None:
    """In a child forked by start(): everything inherited, garbage included, out of the collector's
    reach, and then the collector as the parent had it."""
    if _forking_beside_cuda:
        gc.freeze()
        if _collector_was_enabled:
            gc.enable()


os.register_at_fork(after_in_child=_freeze_inherited)


def start(loader: Iterable[Any]) -> Iterator[Any]:
    """``iter(loader)``; when this process's CUDA context is live, each worker it forks freezes what it
    inherited the moment it starts. A forked worker that collects garbage it inherited frees the
    CUDA tensors and pinned buffers in it; their allocators then call CUDA, which a forked child
    cannot use, and the worker aborts (SIGABRT, "CUDA error: initialization error"). Frozen objects
    are never collected (the freeze Python's gc docs advise for a fork without exec, done in the
    child); it relinks the collector's lists without touching the objects, and leaves this process's
    own collector as it was."""
    global _forking_beside_cuda, _collector_was_enabled
    if not torch.cuda.is_initialized():
        return iter(loader)
    _forking_beside_cuda, _collector_was_enabled = True, gc.isenabled()
    gc.disable()  # no collection in a child before its at-fork hook ran (the hooks before it allocate)
    try:
        return iter(loader)
    finally:
        _forking_beside_cuda = False
        if _collector_was_enabled:
            gc.enable()


def is_factory(obj: Any) -> bool:
    """A function building a loader from knobs: it names ``num_workers`` or takes ``**knobs``. Classes
    never are (a Dataset or DataModule class is instantiated with no arguments instead)."""
    if isinstance(obj, type) or not callable(obj):
        return False
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False
    return "num_workers" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def takes_batch_size(factory: Callable) -> tuple[bool, int | None]:
    """Whether a factory names ``batch_size`` (only then is it passed, and searched), and its default."""
    param = inspect.signature(factory).parameters.get("batch_size")
    if param is None or param.kind is inspect.Parameter.VAR_KEYWORD:
        return False, None
    default = param.default
    return True, default if isinstance(default, int) and not isinstance(default, bool) and default > 0 else None


def is_datamodule(obj: Any) -> bool:
    """A LightningDataModule (or anything shaped like one), told by its methods: loadtune never imports lightning."""
    return not isinstance(obj, type) and callable(getattr(obj, "train_dataloader", None)) and callable(getattr(obj, "setup", None))


def factory_knobs(knobs: dict, batch_size: bool) -> dict:
    """What a factory is called with: the worker knobs always (``prefetch_factor=None`` and
    ``persistent_workers=False`` without workers, PyTorch's defaults, so ``DataLoader(..., **knobs)``
    works at every config), ``batch_size`` only if it takes one, ``in_order`` and
    ``multiprocessing_context`` only when searched."""
    out = {"num_workers": knobs["num_workers"], "pin_memory": knobs["pin_memory"],
           "prefetch_factor": knobs.get("prefetch_factor"), "persistent_workers": knobs.get("persistent_workers", False)}
    out.update({k: v for k, v in knobs.items() if k in ("in_order", "multiprocessing_context")})
    if batch_size:
        out["batch_size"] = knobs["batch_size"]
    return out


def inner_loader(obj: Any) -> Any:
    """The DataLoader that holds the knobs: the object itself, or the one a wrapper holds (webdataset's
    ``WebLoader`` keeps it as the first stage of its pipeline); None when it cannot be found."""
    if hasattr(obj, "num_workers"):
        return obj
    for candidate in (*(getattr(obj, "pipeline", None) or [])[:1], getattr(obj, "loader", None), getattr(obj, "dataloader", None)):
        if candidate is not None and hasattr(candidate, "num_workers"):
            return candidate
    return None


def own_batch_size(obj: Any) -> int | None:
    """The batch size a loader batches with by itself: ``batch_size``, else its ``batch_sampler``'s;
    None for a loader that does not batch (``batch_size=None``: a pre-batched stream)."""
    inner = inner_loader(obj)
    inner = obj if inner is None else inner  # never ``or``: a loader's truth is its len(), which a stream lacks
    size = getattr(inner, "batch_size", None)
    if size is None:
        size = getattr(getattr(inner, "batch_sampler", None), "batch_size", None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


SAMPLED_BATCHES = 10_000  # batches of indices read off a batch_sampler at most (no sample is loaded)


def sampled_batch_mean(obj: Any) -> float | None:
    """The mean size of the first batches of indices a loader's own ``batch_sampler`` makes: how
    many samples its batches hold when the sampler carries no ``batch_size`` (batches cut to a token
    budget vary by design). None without such a sampler, or when iterating it fails."""
    inner = inner_loader(obj)
    inner = obj if inner is None else inner  # never ``or``: see own_batch_size
    sampler = getattr(inner, "batch_sampler", None)
    if sampler is None:
        return None
    try:
        sizes = [len(indices) for _, indices in zip(range(SAMPLED_BATCHES), sampler)]
    except Exception:  # noqa: BLE001 - the user's sampler: whatever it raises, the scan asks for a number instead
        return None
    return sum(sizes) / len(sizes) if sizes and all(sizes) else None


def ignored_knobs(obj: Any, knobs: dict) -> list[str]:
    """The knobs a built loader does not carry: ``name=given (the loader has value)`` each."""
    inner = inner_loader(obj)
    if inner is None:
        return []
    out = []
    for name, given in knobs.items():
        if name == "multiprocessing_context" or not hasattr(inner, name):
            continue
        have = own_batch_size(inner) if name == "batch_size" else getattr(inner, name)
        if name == "prefetch_factor" and not knobs.get("num_workers"):
            continue  # PyTorch keeps its own value without workers
        if have != given:
            out.append(f"{name}={given!r} (the loader has {have!r})")
    return out


def check_loader_args(kwargs: Any) -> dict:
    """``loader_kwargs`` as a dict of arguments loadtune may pass on: no knob it searches, no scan option."""
    if not isinstance(kwargs, dict):
        raise LoaderError(f"loader_kwargs must give a dict of DataLoader arguments, not {type(kwargs).__name__}")
    accepted = set(inspect.signature(DataLoader.__init__).parameters) - {"self", "dataset"}
    for name in kwargs:
        if name in SEARCHED:
            raise LoaderError(f"loader_kwargs sets {name}, which loadtune searches: leave it out (narrow the search with "
                              "its flag or option, or measure your value with --current)")
        if name in ORDER_ARGS:
            raise LoaderError(f"loader_kwargs sets {name}, a scan option: set it in loadtune_options or with "
                              f"--{name.replace('_', '-')} instead")
        if name not in accepted:
            raise LoaderError(f"loader_kwargs sets {name!r}, which DataLoader does not accept")
    if "sampler" in kwargs and "batch_sampler" in kwargs:
        raise LoaderError("loader_kwargs gives both a sampler and a batch_sampler: DataLoader accepts one of them")
    return dict(kwargs)


def with_extras(dataset: Any, collate_fn: Callable | None, extras: dict, knobs: dict, shuffle: bool, drop_last: bool,
                seed: int) -> DataLoader:
    """loadtune's DataLoader over a dataset with the user's extra arguments: their sampler or
    batch_sampler orders samples (and a batch_sampler batches them: no ``batch_size`` then)."""
    import torch

    args = dict(extras)
    if not knobs.get("num_workers"):
        for name in WORKERS_ONLY:
            args.pop(name, None)
    if "batch_sampler" in args:
        knobs = {k: v for k, v in knobs.items() if k != "batch_size"}
    else:
        args["drop_last"] = drop_last
        if "sampler" not in args and shuffle and not isinstance(dataset, IterableDataset):
            args["shuffle"] = True
            args.setdefault("generator", torch.Generator().manual_seed(seed))
    if collate_fn is not None:
        args["collate_fn"] = collate_fn
    return DataLoader(dataset, **args, **knobs)


def rebuild(template: DataLoader, batch_sampler: Any = None, **knobs: Any) -> DataLoader:
    """``template`` built again with ``knobs``, keeping everything else it was made with: dataset,
    sampler or batch_sampler, collate, worker_init_fn, generator, timeout. Its batch size is kept
    unless ``batch_size`` is given (only for a template that batches with a plain batch size).
    ``batch_sampler``: the batches of indices to load instead of the template's own order (autotune
    hands one epoch's order out to several loaders in turn)."""
    args: dict[str, Any] = {"collate_fn": template.collate_fn, "timeout": template.timeout if knobs.get("num_workers") else 0,
                            "worker_init_fn": template.worker_init_fn, "generator": template.generator,
                            "pin_memory_device": getattr(template, "pin_memory_device", "")}
    if batch_sampler is not None:
        args["batch_sampler"] = batch_sampler
    elif template.batch_size is None and template.batch_sampler is not None:  # the user's own batch_sampler
        args["batch_sampler"] = template.batch_sampler
    else:
        args.update(batch_size=knobs.pop("batch_size", template.batch_size), drop_last=template.drop_last)
        if not isinstance(template.dataset, IterableDataset):
            args["sampler"] = template.sampler
    knobs.pop("batch_size", None)
    if knobs.get("num_workers") and "multiprocessing_context" not in knobs and template.multiprocessing_context is not None:
        args["multiprocessing_context"] = template.multiprocessing_context
    cls = type(template) if "dataset" in inspect.signature(type(template).__init__).parameters else DataLoader
    return cls(template.dataset, **args, **knobs)


def template_knobs(template: Any) -> dict:
    """The knobs a finished loader was built with: the user's current settings."""
    inner = inner_loader(template)
    inner = template if inner is None else inner
    knobs = {"num_workers": int(getattr(inner, "num_workers", 0)), "pin_memory": bool(getattr(inner, "pin_memory", False))}
    if knobs["num_workers"]:
        knobs["prefetch_factor"] = getattr(inner, "prefetch_factor", None) or 2
        knobs["persistent_workers"] = bool(getattr(inner, "persistent_workers", False))
    size = own_batch_size(inner)
    if size is not None:
        knobs["batch_size"] = size
    return knobs
