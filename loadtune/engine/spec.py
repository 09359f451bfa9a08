"""Loading the user's dataset spec file (docs/spec-file.md).

The file is imported as a real module, registered in ``sys.modules`` under its file name and with
its folder on ``sys.path``: DataLoader workers started with ``spawn`` or ``forkserver`` unpickle the
dataset by importing the module that defines its class, and multiprocessing hands ``sys.path`` to
them, so classes defined in the spec file load there as they would from any package.

A spec describes either a dataset (loadtune builds the DataLoader, with the spec's extra arguments)
or the user's whole loader: a factory ``loader(**knobs)``, a finished ``DataLoader`` or a
``LightningDataModule`` (rebuilt per config, ``loaders.py``).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
import types
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

from torch.utils.data import DataLoader, Dataset, IterableDataset

from loadtune.engine.loaders import (
    OWN_ORDER,
    LoaderError,
    check_loader_args,
    factory_knobs,
    ignored_knobs,
    inner_loader,
    is_datamodule,
    is_factory,
    own_batch_size,
    rebuild,
    sampled_batch_mean,
    takes_batch_size,
    template_knobs,
    with_extras,
)

DEFAULT_FACTORY = "dataset"
LOADER_FACTORY = "loader"  # read when the spec defines no ``dataset``
OPTIONS = "loadtune_options"  # the spec's scan defaults
OLD_OPTIONS = "loadtune"  # their former name, which a spec's own ``import loadtune`` overwrote
DEPRECATED_OPTIONS = ("the spec's `loadtune = {...}` dict is deprecated: rename it `loadtune_options` (the old name "
                      "clashes with `import loadtune`)")
PROBE_BATCH = 64  # the batch size a factory that takes one without a default is first built with


class SpecError(Exception):
    """A user mistake in the spec file: reported as one message naming file and line, exit code 2."""

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None):
        self.path = str(path) if path is not None else None
        self.line = line
        where = f"{self.path}:{line}" if path is not None and line else (self.path or "")
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(frozen=True)
class SpecRef:
    """Where a dataset comes from: a spec file and the factory in it. Picklable, so trials can load it."""

    path: str
    factory: str = DEFAULT_FACTORY
    module: str | None = None  # an importable module instead of a file (loadtune's own calibration)

    @classmethod
    def parse(cls, target: str | Path) -> "SpecRef":
        """``"dataset.py"`` or ``"dataset.py:make_train_set"``."""
        text = str(target)
        path, sep, factory = text.rpartition(":")
        if not sep or not factory.isidentifier() or not path:
            path, factory = text, DEFAULT_FACTORY
        return cls(str(Path(path).expanduser().resolve()), factory)

    def __str__(self) -> str:
        return self.path if self.factory == DEFAULT_FACTORY else f"{self.path}:{self.factory}"


@dataclass
class LoadedSpec:
    """What a spec file provides, loaded and checked."""

    dataset: Any  # with a loader of the user's own: its dataset, where it shows one (else None)
    collate_fn: Callable | None = None
    step: Callable | None = None
    defaults: dict = field(default_factory=dict)
    ref: SpecRef | None = None
    module_name: str | None = None
    picklable: bool = False  # made of loadtune's own classes: start trials from the fork server, never by fork
    loader_kwargs: dict | Callable[[], dict] | None = None  # extra DataLoader arguments, made afresh per loader
    loader_args: tuple[str, ...] = ()  # their names
    loader: Callable[..., Any] | None = None  # the user's loader from the knobs: a factory, or a finished one rebuilt
    form: str = "dataset"  # "dataset", "factory" (loader(**knobs)), "dataloader" or "datamodule" (rebuilt)
    name: str = DEFAULT_FACTORY  # the spec's name it was read from
    owner: str = ""  # what builds the user's loader, in their words: the factory, the DataLoader or the DataModule's class
    batch_knob: bool = True  # the batch size is passed to the loader (so it can be searched); False: the loader's own
    batch_size: int | None = None  # the loader's own batch size where known: the search's default
    current: dict | None = None  # a finished loader's knobs: the settings the user runs today
    profilable: bool = True  # samples can be fetched one by one through its sampler (not a pre-batched stream)
    notes: list[str] = field(default_factory=list)  # for the report (a deprecated name)

    @property
    def iterable(self) -> bool:
        return isinstance(self.dataset, IterableDataset)

    @property
    def length(self) -> int | None:
        try:
            return len(self.dataset)
        except TypeError:
            return None

    @property
    def own_order(self) -> bool:
        """The user's loader orders samples itself (a loader of theirs, or their sampler or batch_sampler):
        loadtune's shuffle, drop_last and shards do not apply, and samples are counted from the batches."""
        return self.form != "dataset" or any(name in OWN_ORDER for name in self.loader_args)

    def extras(self) -> dict:
        """The extra DataLoader arguments, checked, made afresh (a new sampler and generator per loader)."""
        if self.loader_kwargs is None:
            return {}
        return check_loader_args(self.loader_kwargs() if callable(self.loader_kwargs) else self.loader_kwargs)

    def build_loader(self, knobs: dict, shuffle: bool = False, drop_last: bool = False, seed: int = 0,
                     sampler: Any = None) -> Any:
        """The loader of one config: the user's own built with ``knobs`` (checked to carry them), or
        loadtune's DataLoader over the dataset with the spec's extras (``sampler``: a rank's shard)."""
        if self.loader is None:
            extras = self.extras()
            if sampler is not None:
                extras["sampler"] = sampler
            return with_extras(self.dataset, self.collate_fn, extras, knobs, shuffle, drop_last, seed)
        passed = factory_knobs(knobs, self.batch_knob)
        built = self.loader(**passed)
        ignored = ignored_knobs(built, passed) if self.form == "factory" else []
        if ignored:
            raise LoaderError(f"{self.name}() ignores the knobs it is given: called with {', '.join(ignored)}; pass them "
                              "on to the DataLoader it builds (e.g. DataLoader(dataset, ..., **knobs))")
        return built

    def sampled_batch_mean(self) -> float | None:
        """How many samples the batches of a loader that batches by itself with a ``batch_sampler``
        hold on average, read off the sampler's indices (``loaders.sampled_batch_mean``); None without one."""
        try:
            return sampled_batch_mean(self.build_loader({"batch_size": 1, "num_workers": 0, "pin_memory": False}))
        except Exception:  # noqa: BLE001 - building it is checked elsewhere; here only the number is missing
            return None


def module_name_for(path: Path) -> str:
    """The import name: the file's stem, so spawned workers can import it by name from sys.path."""
    stem = path.stem
    return stem if stem.isidentifier() else "loadtune_spec_" + "".join(c if c.isalnum() else "_" for c in stem)


def spec_line(exc: BaseException, path: Path) -> int | None:
    """The line of the spec file where ``exc`` was raised (deepest frame in that file)."""
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == path:
        return exc.lineno
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path:
            line = frame.lineno
    return line


def import_spec(path: Path) -> Any:
    """Import the file as a module registered in sys.modules; user errors become SpecError."""
    if not path.exists():
        raise SpecError("no such spec file; pass the path of a Python file that defines dataset()", path)
    if not path.is_file():
        raise SpecError("not a file; pass the path of a Python file that defines dataset()", path)
    name = module_name_for(path)
    existing = sys.modules.get(name)
    if existing is not None and Path(getattr(existing, "__file__", "") or "").resolve() == path:
        del sys.modules[name]  # the same spec again (a notebook re-run): read the file as it is now
    elif existing is not None:
        raise SpecError(
            f"the module name {name!r} is already taken by {getattr(existing, '__file__', 'a built-in module')}; "
            "rename the spec file",
            path,
        )
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[name]
        if exc.filename and Path(exc.filename).resolve() != path:  # in a module the spec imports
            raise SpecError(
                f"syntax error in {exc.filename}:{exc.lineno}, imported by the spec: {exc.msg}", path, spec_line(exc, path)
            ) from None
        raise SpecError(f"syntax error: {exc.msg}", path, spec_line(exc, path)) from None
    except SystemExit as exc:  # a script's own `sys.exit()`, e.g. an unguarded command-line entry point
        del sys.modules[name]
        raise SpecError(f"importing the spec called sys.exit({exc.code!r}); put script code under "
                        "`if __name__ == \"__main__\":`", path, spec_line(exc, path)) from None
    except Exception as exc:
        del sys.modules[name]
        raise SpecError(f"importing the spec raised {type(exc).__name__}: {exc}", path, spec_line(exc, path)) from None
    return module


def call_user(fn: Callable[[], Any], what: str, path: Path) -> Any:
    """Run the spec's own code; an exception becomes a SpecError naming ``what`` and the spec's line."""
    try:
        return fn()
    except Exception as exc:
        raise SpecError(f"{what} raised {type(exc).__name__}: {exc}", path, spec_line(exc, path)) from None


def checked_dataset(obj: Any, name: str, path: Path) -> Any:
    """A non-empty dataset, or a SpecError saying what ``name`` gave instead."""
    if not isinstance(obj, (Dataset, IterableDataset)) and not (hasattr(obj, "__getitem__") and hasattr(obj, "__len__")):
        raise SpecError(
            f"{name} gave {type(obj).__name__}, not a Dataset; return a torch.utils.data.Dataset "
            "or IterableDataset (or any object with __len__ and __getitem__), a DataLoader, a LightningDataModule, "
            "or define loader(**knobs) building your loader",
            path,
        )
    if not isinstance(obj, IterableDataset):
        try:
            n = len(obj)
        except Exception as exc:
            raise SpecError(f"len() of the dataset raised {type(exc).__name__}: {exc}", path, spec_line(exc, path)) from None
        if n == 0:
            raise SpecError("the dataset has length 0: there is nothing to load", path)
    return obj


def target_name(module: Any, ref: SpecRef, path: Path) -> str:
    """The name the spec is read from: the one after ':', else ``dataset``, else ``loader``."""
    name = ref.factory
    if name == DEFAULT_FACTORY and not hasattr(module, name) and hasattr(module, LOADER_FACTORY):
        return LOADER_FACTORY
    if not hasattr(module, name):
        hint = ("define dataset() returning your Dataset (or loader(**knobs) building your loader)"
                if name == DEFAULT_FACTORY else "check the name after ':'")
        raise SpecError(f"defines no {name!r}; {hint}", path)
    return name


def resolve(module: Any, ref: SpecRef, path: Path, prepare_data: bool = True) -> LoadedSpec:
    """What the spec's target is: a loader factory, a DataModule, a finished DataLoader, or a dataset
    (a factory of one called first); each becomes a LoadedSpec of its form."""
    name = target_name(module, ref, path)
    obj = getattr(module, name)
    if is_factory(obj) and (name != DEFAULT_FACTORY or "num_workers" in inspect.signature(obj).parameters):
        return factory_spec(obj, name, path)  # (``dataset(**kwargs)`` stays a dataset factory, as it always was)
    if callable(obj) and not isinstance(obj, (Dataset, IterableDataset, DataLoader)) and not is_datamodule(obj):
        obj = call_user(obj, f"{name}()", path)
    form, owner = "dataloader", name
    if is_datamodule(obj):
        obj, form, owner = datamodule_loader(obj, name, path, prepare_data), "datamodule", type(obj).__name__
    if isinstance(obj, DataLoader):
        return template_spec(obj, form, name, owner)
    return LoadedSpec(dataset=checked_dataset(obj, name, path), name=name)


def factory_spec(factory: Callable, name: str, path: Path) -> LoadedSpec:
    """``loader(**knobs)``: built once here at PyTorch's defaults, to learn its dataset and batch size."""
    batch_knob, default = takes_batch_size(factory)
    probe = factory_knobs({"num_workers": 0, "pin_memory": False, "batch_size": default or PROBE_BATCH}, batch_knob)
    built = call_user(lambda: factory(**probe), f"{name}(**knobs)", path)
    if isinstance(built, Dataset) and not isinstance(built, IterableDataset):
        raise SpecError(f"{name}(**knobs) returned a {type(built).__name__}, a dataset: a function that takes num_workers "
                        "or **knobs is read as a loader factory; give a dataset factory no such parameters", path)
    if not hasattr(built, "__iter__"):
        raise SpecError(f"{name}(**knobs) returned {type(built).__name__}, which cannot be iterated: return the loader "
                        "(a DataLoader, or any object whose iteration yields batches)", path)
    inner = inner_loader(built)
    return LoadedSpec(dataset=getattr(inner if inner is not None else built, "dataset", None), loader=factory,
                      form="factory", name=name, owner=name, batch_knob=batch_knob,
                      batch_size=default if batch_knob else own_batch_size(built), profilable=batches(built))


def datamodule_loader(module: Any, name: str, path: Path, prepare_data: bool) -> DataLoader:
    """A DataModule's training loader, as Lightning makes it: ``prepare_data()`` once (in loadtune's
    own process only: downloads), ``setup("fit")`` in every process that builds the loader."""
    kind = type(module).__name__
    if prepare_data and callable(getattr(module, "prepare_data", None)):
        call_user(module.prepare_data, f"{kind}.prepare_data()", path)
    call_user(lambda: module.setup("fit"), f'{kind}.setup("fit")', path)
    loader = call_user(module.train_dataloader, f"{kind}.train_dataloader()", path)
    if not isinstance(loader, DataLoader):
        raise SpecError(f"{kind}.train_dataloader() returned {type(loader).__name__}, not a DataLoader: loadtune scans "
                        "one loader; define loader(**knobs) building it instead", path)
    return loader


def template_spec(template: DataLoader, form: str, name: str, owner: str) -> LoadedSpec:
    """A finished DataLoader, rebuilt per config with the knobs (``loaders.rebuild``); its own
    settings are the user's current ones."""
    return LoadedSpec(dataset=template.dataset, loader=partial(rebuild, template), form=form, name=name, owner=owner,
                      batch_knob=template.batch_size is not None, batch_size=own_batch_size(template),
                      current=template_knobs(template), profilable=batches(template))


def batches(loader: Any) -> bool:
    """A DataLoader that batches samples itself, which the stage profile can replay sample by sample."""
    return isinstance(loader, DataLoader) and loader.batch_sampler is not None


def hook(module: Any, factory: str, name: str) -> Any:
    """``<factory>_<name>`` when the spec defines it (even as None: "none for this factory"), else the
    module-level ``<name>``."""
    own = f"{factory}_{name}"
    return getattr(module, own) if hasattr(module, own) else getattr(module, name, None)


def spec_options(module: Any, factory: str, path: Path) -> tuple[dict, list[str]]:
    """The spec's scan defaults: ``loadtune_options`` (or the deprecated ``loadtune``), then
    ``<factory>_options`` over them; and a note when the old name was used."""
    options, old = getattr(module, OPTIONS, None), getattr(module, OLD_OPTIONS, None)
    if isinstance(old, types.ModuleType):  # `import loadtune` in the spec: the package, not options
        old = None
    if options is not None and old is not None:
        raise SpecError(f"defines both {OPTIONS} and {OLD_OPTIONS}; keep {OPTIONS} alone", path)
    layers = [(OLD_OPTIONS, old) if old is not None else (OPTIONS, options),
              (f"{factory}_options", getattr(module, f"{factory}_options", None))]
    merged: dict = {}
    for name, value in layers:
        if value is None:
            continue
        if not isinstance(value, dict):
            raise SpecError(f"{name!r} must be a dict of scan defaults, not {type(value).__name__}", path)
        merged.update(value)
    notes = [DEPRECATED_OPTIONS] if old is not None else []
    return merged, notes


def add_hooks(spec: LoadedSpec, module: Any, factory: str, path: Path) -> None:
    """The optional hooks: ``step`` for every form; ``collate_fn`` and ``loader_kwargs`` for a dataset
    (a loader of the user's own has them already, so a module-level one is theirs to use)."""
    names = ("step",) if spec.form != "dataset" else ("collate_fn", "step", "loader_kwargs")
    for name in names:
        value = hook(module, factory, name)
        if value is not None and not callable(value) and not (name == "loader_kwargs" and isinstance(value, dict)):
            raise SpecError(f"{name!r} must be callable, not {type(value).__name__}", path)
        setattr(spec, name, value)
    if spec.loader_kwargs is not None:
        made = spec.loader_kwargs
        adopt_extras(spec, call_user(made, "loader_kwargs()", path) if callable(made) else made, path)


def adopt_extras(spec: LoadedSpec, extras: Any, path: Path | None = None) -> None:
    """Check the spec's extra DataLoader arguments once, before any trial, and note what they change:
    their names, and with a batch_sampler the batch size (its own, read from it; not searched)."""
    try:
        extras = check_loader_args(extras)
    except LoaderError as exc:
        raise SpecError(str(exc), path) from None
    if spec.collate_fn is not None and "collate_fn" in extras:
        raise SpecError("collate_fn is given twice, by the spec and by loader_kwargs: keep one", path)
    spec.loader_args = tuple(sorted(extras))
    if "batch_sampler" in extras:
        size = getattr(extras["batch_sampler"], "batch_size", None)
        spec.batch_knob, spec.batch_size = False, size if isinstance(size, int) and size > 0 else None


def load_spec(target: str | Path | SpecRef, prepare_data: bool = True) -> LoadedSpec:
    """Import a spec file and build what it describes; raises SpecError with file and line on user
    mistakes. ``prepare_data``: run a DataModule's ``prepare_data()`` (loadtune's own process only, not trials)."""
    ref = target if isinstance(target, SpecRef) else SpecRef.parse(target)
    path = Path(ref.path)
    module = importlib.import_module(ref.module) if ref.module else import_spec(path)
    spec = resolve(module, ref, path, prepare_data)
    spec.defaults, spec.notes = spec_options(module, spec.name, path)
    add_hooks(spec, module, spec.name, path)
    spec.ref, spec.module_name = ref, module.__name__
    return spec


def check_knobs(spec: LoadedSpec, knob_sets: list[dict]) -> list[str]:
    """A factory's loaders built with each set of knobs (nothing iterated, no worker started) carry
    them: a factory that drops one would have every config measure the same loader. Raises SpecError
    naming the knob; returns a note when the loader hides its settings and cannot be checked."""
    if spec.form != "factory":
        return []
    path = Path(spec.ref.path) if spec.ref else None
    for knobs in knob_sets:
        try:
            built = spec.build_loader(knobs)
        except LoaderError as exc:
            raise SpecError(str(exc), path) from None
        except Exception as exc:
            raise SpecError(f"{spec.name}(**knobs) with {knobs} raised {type(exc).__name__}: {exc}", path,
                            spec_line(exc, path) if path else None) from None
        if inner_loader(built) is None:
            return [f"{spec.name}() returned a {type(built).__name__}, which shows no num_workers: loadtune cannot check "
                    "that it uses the knobs it passes"]
    return []


def from_objects(dataset: Any, collate_fn: Callable | None = None, step: Callable | None = None,
                 loader_kwargs: dict | Callable[[], dict] | None = None) -> LoadedSpec:
    """A spec built in Python (notebooks, tests) rather than read from a file."""
    if not isinstance(dataset, IterableDataset):
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise SpecError(f"{type(dataset).__name__} is not a dataset: give a torch Dataset, an IterableDataset, "
                            "or an object with __len__ and __getitem__")
        if len(dataset) == 0:
            raise SpecError("the dataset has length 0: there is nothing to load")
    spec = LoadedSpec(dataset=dataset, collate_fn=collate_fn, step=step, loader_kwargs=loader_kwargs)
    if loader_kwargs is not None:
        adopt_extras(spec, loader_kwargs() if callable(loader_kwargs) else loader_kwargs)
    return spec
