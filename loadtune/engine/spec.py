"""Loading the user's dataset spec file (docs/spec-file.md).

The file is imported as a real module, registered in ``sys.modules`` under its file name and with
its folder on ``sys.path``: DataLoader workers started with ``spawn`` or ``forkserver`` unpickle the
dataset by importing the module that defines its class, and multiprocessing hands ``sys.path`` to
them, so classes defined in the spec file load there as they would from any package.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from torch.utils.data import Dataset, IterableDataset

DEFAULT_FACTORY = "dataset"


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

    dataset: Any
    collate_fn: Callable | None = None
    step: Callable | None = None
    defaults: dict = field(default_factory=dict)
    ref: SpecRef | None = None
    module_name: str | None = None
    picklable: bool = False  # made of loadtune's own classes: start trials from the fork server, never by fork

    @property
    def iterable(self) -> bool:
        return isinstance(self.dataset, IterableDataset)

    @property
    def length(self) -> int | None:
        try:
            return len(self.dataset)
        except TypeError:
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


def build_dataset(module: Any, ref: SpecRef, path: Path) -> Any:
    """Call the factory (or take the module-level object) and check it is a non-empty dataset."""
    if not hasattr(module, ref.factory):
        hint = "define dataset() returning your Dataset" if ref.factory == DEFAULT_FACTORY else "check the name after ':'"
        raise SpecError(f"defines no {ref.factory!r}; {hint}", path)
    obj = getattr(module, ref.factory)
    if callable(obj) and not isinstance(obj, (Dataset, IterableDataset)):
        try:
            obj = obj()
        except Exception as exc:
            raise SpecError(
                f"{ref.factory}() raised {type(exc).__name__}: {exc}", path, spec_line(exc, path)
            ) from None
    if not isinstance(obj, (Dataset, IterableDataset)) and not (hasattr(obj, "__getitem__") and hasattr(obj, "__len__")):
        raise SpecError(
            f"{ref.factory} gave {type(obj).__name__}, not a Dataset; return a torch.utils.data.Dataset "
            "or IterableDataset (or any object with __len__ and __getitem__)",
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


def load_spec(target: str | Path | SpecRef) -> LoadedSpec:
    """Import a spec file and build its dataset; raises SpecError with file and line on user mistakes."""
    ref = target if isinstance(target, SpecRef) else SpecRef.parse(target)
    path = Path(ref.path)
    module = importlib.import_module(ref.module) if ref.module else import_spec(path)
    dataset = build_dataset(module, ref, path)
    defaults = getattr(module, "loadtune", {})
    if not isinstance(defaults, dict):
        raise SpecError(f"'loadtune' must be a dict of scan defaults, not {type(defaults).__name__}", path)
    hooks = {}
    for name in ("collate_fn", "step"):
        hook = getattr(module, name, None)
        if hook is not None and not callable(hook):
            raise SpecError(f"{name!r} must be callable, not {type(hook).__name__}", path)
        hooks[name] = hook
    return LoadedSpec(dataset=dataset, defaults=dict(defaults), ref=ref, module_name=module.__name__, **hooks)


def from_objects(dataset: Any, collate_fn: Callable | None = None, step: Callable | None = None) -> LoadedSpec:
    """A spec built in Python (notebooks, tests) rather than read from a file."""
    if not isinstance(dataset, IterableDataset):
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise SpecError(f"{type(dataset).__name__} is not a dataset: give a torch Dataset, an IterableDataset, "
                            "or an object with __len__ and __getitem__")
        if len(dataset) == 0:
            raise SpecError("the dataset has length 0: there is nothing to load")
    return LoadedSpec(dataset=dataset, collate_fn=collate_fn, step=step)
