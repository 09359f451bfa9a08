"""Datasets defined in a notebook: what works, and what is refused before any trial runs.

A class or function defined in a notebook cell (or a ``python -c`` or stdin script) lives in
``__main__``, which has no file. Pickle refers to it by name, ``__main__.MyDataset``, and a fresh
interpreter has no such name: a spawn or forkserver DataLoader worker cannot unpickle the dataset,
and neither can a trial started from the fork server (on a CUDA device, where trials cannot be forked,
``harness.context_for``). Forked processes inherit ``__main__`` as it is, so on the CPU with fork
workers (Linux's default before Python 3.14) such a dataset works. Elsewhere every trial would fail
with an unpickling error; this module finds that out up front and says what to do instead.
"""

from __future__ import annotations

import pickle
import sys
import types
from typing import Any

from loadtune.engine.spec import LoadedSpec, SpecError

FRESH_INTERPRETERS = ("spawn", "forkserver")  # start methods whose processes unpickle what they run


class _Found(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class _Discard:
    def write(self, data: bytes) -> int:
        return len(data)


class _MainFinder(pickle.Pickler):
    """A pickler that writes nothing and stops at the first class or function of ``__main__``."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType)):
            module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", repr(obj))
        else:
            module, name = type(obj).__module__, type(obj).__qualname__
        if module == "__main__":
            raise _Found(name)
        return NotImplemented


def main_defined(obj: Any) -> str | None:
    """The name of the first class or function defined in ``__main__`` that pickling ``obj`` would
    refer to (the dataset's class, one nested inside it, a collate_fn...), or None. Objects that do not
    pickle for another reason count as None: that is not this check's to report."""
    try:
        _MainFinder(_Discard(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    except _Found as found:
        return found.name
    except Exception:  # noqa: BLE001 - a lambda, an open file, a C object: reported elsewhere, or harmless when forked
        return None
    return None


def main_has_file() -> bool:
    """A script run from a file: spawn and forkserver re-import it in the new process, so its classes are found."""
    return bool(getattr(sys.modules.get("__main__"), "__file__", None))


def check_main_objects(spec: LoadedSpec, device: str, worker_methods: set[str]) -> None:
    """Refuse a dataset (or collate_fn, step, loader arguments) defined in ``__main__`` where a process
    that must unpickle it would be started: a trial on a CUDA device, or workers started by spawn or
    forkserver when ``__main__`` has no file. ``worker_methods``: the start methods of the configs with
    workers."""
    cuda = device.startswith("cuda")
    fresh = sorted(m for m in worker_methods if m in FRESH_INTERPRETERS)
    if not cuda and (not fresh or main_has_file()):
        return
    name = main_defined([spec.dataset, spec.collate_fn, spec.step, spec.loader_kwargs, spec.loader])
    if name is None:
        return
    if cuda:
        why = ("on a CUDA device each trial starts in a fresh process (CUDA does not survive a fork), which cannot "
               "import it from there")
        instead = "; or pass device='cpu'"
    else:
        why = (f"DataLoader workers started by {' and '.join(fresh)} unpickle the dataset in a fresh interpreter, which "
               "cannot import it from there")
        instead = "; or measure fork workers only (start_method=['fork'])" if "fork" in _methods() else ""
    raise SpecError(
        f"{name} is defined in __main__ (a notebook cell or an interactive session), and {why}: every trial would fail. "
        f"Move it into a .py file next to the notebook and import it from there (from mydata import {name.split('.')[0]}), "
        f"or put it in a spec file and run `loadtune scan dataset.py`{instead}."
    )


def _methods() -> list[str]:
    import multiprocessing

    return multiprocessing.get_all_start_methods()
