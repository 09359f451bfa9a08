"""Which rows of a saved scan to show, and in what order: pure functions behind ``loadtune show``.

A row is a config with its runs (measured, failed, or whatever status a later stage gives it) or a
knob value that was never run (a ``Skip``). Filters and sorting only choose and order rows: the
rank (by throughput over the whole scan) and the recommendation stay those of the whole scan, so a
filtered table never suggests a different winner than the scan found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from loadtune.analysis.footprint import memory_limit, over_limit
from loadtune.analysis.race import race_order
from loadtune.model.config import Skip, TrialConfig, parse_int_list
from loadtune.model.results import ConfigResult, ScanResult

STATUSES = ("ok", "failed", "skipped", "excluded")  # "excluded": measured, then ruled out (e.g. a memory cap)
SORT_KEYS = ("rate", "workers", "memory", "startup")


class ViewError(ValueError):
    """A filter or sort value that makes no sense: exit code 2, naming the flag."""


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    status: str
    config: ConfigResult | None = None
    skip: Skip | None = None
    rank: int | None = None  # 1 = fastest of the whole scan; None when not measured

    @property
    def knobs(self) -> dict | None:
        """batch_size, num_workers and pin_memory of the row, when it is about one config."""
        if self.config is not None:
            return config_knobs(self.config.config)
        return key_knobs(self.skip.key) if self.skip is not None and self.skip.key else None


def config_knobs(config: TrialConfig) -> dict:
    """The knobs the filters look at."""
    return {"batch_size": config.batch_size, "num_workers": config.num_workers, "pin_memory": config.pin_memory}


def key_knobs(key: str) -> dict | None:
    """The knobs a ``TrialConfig.key`` (``bs=32,w=2,pin=0,...``) names; None if it is not one."""
    try:
        parts = dict(part.split("=", 1) for part in key.split(","))
        return {"batch_size": int(parts["bs"]), "num_workers": int(parts["w"]), "pin_memory": parts["pin"] == "1"}
    except (KeyError, ValueError):
        return None


def config_status(config: ConfigResult) -> str:
    """"ok" when any run measured; else the first other status its runs carry (e.g. "failed")."""
    if config.ok:
        return "ok"
    return next((t.status for t in config.trials if t.status != "ok"), "failed")


def rows(result: ScanResult) -> list[Row]:
    """Every row in the table's default order: measured configs fastest first (the raced ones first,
    as the race ranks them side by side), then the others in run order, then what was skipped."""
    configs = result.configs
    excluded = {c.config for c in over_limit(configs, memory_limit(result))}  # --max-memory
    raced = {c: i for i, c in enumerate(race_order(result.trials, result.settings.options.noise_floor))}
    ok = sorted((c for c in configs if c.ok), key=lambda c: (raced.get(c.config, len(raced)), -c.estimate.median))
    out = [Row("excluded" if c.config in excluded else "ok", c, rank=i) for i, c in enumerate(ok, 1)]
    out += [Row(config_status(c), c) for c in configs if not c.ok]
    out += [Row("skipped", skip=s) for s in result.skipped]
    return out


@dataclass(frozen=True)
class Filters:
    """Knob values to keep (None: any). Rows about no single config (e.g. "pin_memory=True skipped:
    no accelerator") are notes on the whole scan: only ``status`` applies to them."""

    batch_size: frozenset[int] | None = None
    workers: frozenset[int] | None = None
    pin: bool | None = None
    status: frozenset[str] | None = None

    def keeps(self, row: Row) -> bool:
        return self.keeps_status({row.status}) and self.keeps_knobs(row.knobs)

    def keeps_status(self, statuses: set[str]) -> bool:
        """Any of a row's statuses (a comparison has two) is asked for."""
        return self.status is None or bool(statuses & self.status)

    def keeps_knobs(self, knobs: dict | None) -> bool:
        if knobs is None:
            return True
        return (
            (self.batch_size is None or knobs["batch_size"] in self.batch_size)
            and (self.workers is None or knobs["num_workers"] in self.workers)
            and (self.pin is None or knobs["pin_memory"] == self.pin)
        )

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.batch_size, self.workers, self.pin, self.status))


def filters_from(batch_size: str | None = None, workers: str | None = None, pin: bool | None = None,
                 status: str | None = None) -> Filters:
    """Filters from the command line's text (``"32,64"``, ``"ok,failed"``); bad values name their flag."""
    return Filters(
        batch_size=frozenset(parse_int_list(batch_size, "--batch-size")) if batch_size is not None else None,
        workers=frozenset(parse_int_list(workers, "--workers")) if workers is not None else None,
        pin=pin,
        status=parse_statuses(status),
    )


def parse_statuses(text: str | None) -> frozenset[str] | None:
    """``"ok,failed"`` -> {"ok", "failed"}; unknown names refused with the known ones."""
    if text is None:
        return None
    values = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(values - set(STATUSES))
    if not values or unknown:
        raise ViewError(f"--status: expected some of {', '.join(STATUSES)} (comma-separated), got {text!r}")
    return frozenset(values)


def sort_key(name: str) -> Callable[[ConfigResult], tuple]:
    """Ascending sort keys of a measured config; unknown figures sort last."""
    inf = float("inf")
    keys: dict[str, Callable[[ConfigResult], tuple]] = {
        "rate": lambda c: (-c.estimate.median,),
        "workers": lambda c: (c.config.num_workers, -c.estimate.median),
        "memory": lambda c: (c.memory.peak_bytes if c.memory else inf, -c.estimate.median),
        "startup": lambda c: (c.startup_s if c.startup_s is not None else inf, -c.estimate.median),
    }
    if name not in keys:
        raise ViewError(f"--sort: expected one of {', '.join(SORT_KEYS)}, got {name!r}")
    return keys[name]


def select(result: ScanResult, filters: Filters = Filters(), sort: str = "rate", top: int | None = None) -> list[Row]:
    """The rows to show: filtered, measured ones ordered by ``sort``, the rest after them in the
    default order, cut to the first ``top``."""
    if top is not None and top < 1:
        raise ViewError(f"--top must be a whole number >= 1, got {top}")
    key = sort_key(sort)
    kept = [r for r in rows(result) if filters.keeps(r)]
    measured = sorted((r for r in kept if r.rank is not None), key=lambda r: key(r.config))
    ordered = measured + [r for r in kept if r.rank is None]
    return ordered[:top] if top is not None else ordered
