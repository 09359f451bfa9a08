"""The three ways to give autotune a loader, and how each config's loader is built from it.

A dataset with DataLoader arguments, a factory ``loader(**knobs)`` (docs/spec-file.md#the-whole-loader),
or a finished ``DataLoader``. Each config's loader is the user's, rebuilt with the config's knobs
(``engine/loaders.py``), and, where configs switch inside an epoch, with the epoch's shared order
(``order.Handout``) as its ``batch_sampler``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from loadtune.engine.loaders import factory_knobs, ignored_knobs, is_factory, own_batch_size, rebuild, takes_batch_size
from loadtune.live.order import Handout
from loadtune.live.report import LoaderForm
from loadtune.live.tuner import SEARCHED, AutotuneError
from loadtune.model.config import TrialConfig

DEFAULT_KNOBS = {"num_workers": 0, "pin_memory": False, "prefetch_factor": None, "persistent_workers": False}


@dataclass
class Source:
    """Where each config's loader comes from. ``template``: a DataLoader with PyTorch's defaults for
    the knobs (no worker started), whose dataset, sampler and collate every config's loader keeps."""

    template: Any
    form: LoaderForm
    batch_size: int
    factory: Callable[..., Any] | None = None
    mp_context: Any = None  # the user's multiprocessing_context, passed only to configs with workers

    @property
    def dataset(self) -> Any:
        return getattr(self.template, "dataset", None)

    @property
    def in_epoch(self) -> bool:
        """Configs can switch between batches: a DataLoader over map-style data that batches through
        a batch sampler (rebuilt with another). An IterableDataset's order lives in the dataset, and
        another kind of loader cannot be rebuilt: those switch at epoch boundaries only."""
        return (isinstance(self.template, DataLoader) and not isinstance(self.template.dataset, IterableDataset)
                and self.template.batch_sampler is not None)

    def knobs(self, config: TrialConfig) -> dict:
        knobs = config.loader_kwargs()
        if config.num_workers and self.mp_context is not None:
            knobs["multiprocessing_context"] = self.mp_context
        return knobs

    def build(self, config: TrialConfig, handout: Handout | None) -> Any:
        """The loader of ``config``; with ``handout``, loading the epoch's shared order."""
        knobs = self.knobs(config)
        template = self.template if self.factory is None else self.call_factory(knobs)
        if handout is None and (self.factory is not None or not isinstance(template, DataLoader)):
            return template
        return rebuild(template, batch_sampler=handout, **knobs)

    def call_factory(self, knobs: dict) -> Any:
        passed = factory_knobs(knobs, self.form.batch_knob)
        built = self.factory(**passed)
        ignored = ignored_knobs(built, passed)
        if ignored:
            raise AutotuneError(f"{self.form.name}() ignores the knobs it is given: called with {', '.join(ignored)}; pass "
                                "them on to the DataLoader it builds (e.g. DataLoader(dataset, ..., **knobs))")
        return built


def split_fixed(kwargs: dict) -> tuple[dict, dict]:
    """The knobs the user set (kept fixed: autotune tunes the others) and the other DataLoader arguments."""
    fixed = {k: v for k, v in kwargs.items() if k in SEARCHED and v is not None}
    return fixed, {k: v for k, v in kwargs.items() if k not in SEARCHED}


def check_args(args: dict) -> None:
    accepted = set(inspect.signature(DataLoader.__init__).parameters) - {"self", "dataset", "batch_size"}
    unknown = sorted(set(args) - accepted)
    if unknown:
        raise AutotuneError(f"autotune got {', '.join(map(repr, unknown))}: neither a DataLoader argument nor an "
                            "autotune option (tune_fraction, tune_seconds, tune_epochs, workers, prefetch, save, log, ...)")


def make_source(obj: Any, batch_size: int | None, args: dict) -> Source:
    """The source of loaders for a dataset (with ``args``), a factory or a finished DataLoader."""
    if isinstance(obj, DataLoader):
        return loader_source(obj, batch_size, args)
    if is_factory(obj) and not hasattr(obj, "__getitem__") and not isinstance(obj, IterableDataset):
        return factory_source(obj, batch_size, args)
    if not (isinstance(obj, IterableDataset) or (hasattr(obj, "__getitem__") and hasattr(obj, "__len__"))):
        raise AutotuneError(f"autotune needs a Dataset, an IterableDataset, a loader factory loader(**knobs) or a "
                            f"DataLoader; got a {type(obj).__name__}")
    check_args(args)
    args = dict(args)
    mp_context = args.pop("multiprocessing_context", None)  # PyTorch refuses it without workers
    size = 1 if batch_size is None else batch_size
    try:
        template = DataLoader(obj, batch_size=batch_size if batch_size is not None else 1, **args)
    except (TypeError, ValueError) as exc:
        raise AutotuneError(f"the DataLoader arguments given to autotune are refused by DataLoader: {exc}") from None
    form = LoaderForm("dataset", tuple(sorted(args)), shuffle=bool(args.get("shuffle")), drop_last=bool(args.get("drop_last")))
    return Source(template, form, size, mp_context=mp_context)


def loader_source(loader: DataLoader, batch_size: int | None, args: dict) -> Source:
    if args:
        raise AutotuneError(f"autotune was given a DataLoader and DataLoader arguments ({', '.join(sorted(args))}): "
                            "build the DataLoader with them, or give autotune the dataset instead")
    size = batch_size or own_batch_size(loader) or 1
    template = rebuild(loader, **DEFAULT_KNOBS, **({"batch_size": batch_size} if batch_size else {}))
    return Source(template, LoaderForm("dataloader", name="loader"), size, mp_context=loader.multiprocessing_context)


def factory_source(factory: Callable[..., Any], batch_size: int | None, args: dict) -> Source:
    if args:
        raise AutotuneError(f"autotune was given a loader factory and DataLoader arguments ({', '.join(sorted(args))}): "
                            "set them inside the factory; autotune passes it the knobs it tunes")
    batch_knob, default = takes_batch_size(factory)
    if batch_size is not None and not batch_knob:
        raise AutotuneError(f"batch_size={batch_size} given, but {factory.__name__}() takes no batch_size: "
                            "leave it out (the factory's own is used) or add the parameter")
    form = LoaderForm("factory", name=getattr(factory, "__name__", "loader"), batch_knob=batch_knob and batch_size is not None)
    source = Source(None, form, batch_size or default or 1, factory=factory)
    knobs = dict(DEFAULT_KNOBS, **({"batch_size": batch_size} if form.batch_knob else {}))
    source.template = source.call_factory(knobs)
    source.batch_size = batch_size or own_batch_size(source.template) or 1
    return source
