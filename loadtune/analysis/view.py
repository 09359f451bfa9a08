"""Which rows of a saved scan to show, and in what order: pure functions behind ``loadtune show``.

A row is a config with its runs (measured, failed, or whatever status a later stage gives it) or a
knob value that was never run (a ``Skip``). Filters and sorting only choose and order rows: the
rank (by throughput over the whole scan) and the recommendation stay those of the whole scan, so a
filtered table never suggests a different winner than the scan found.

One order, one figure a row: the configs raced side by side come first, each at its speed as the race
measured it (the pick's speed times its ratio to the pick), then the others at their runs' speed. A
reader reads the column, so a row's figure never tops a row ranked above it unless the row says why
(``Speed.apart``: measured alone, and faster than a raced row above it). A figure known no better than
a factor of two (``too_wide``) decides nothing and is printed as the range its runs spanned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from loadtune.analysis.comparison import Comparison, too_wide
from loadtune.analysis.footprint import memory_limit, over_limit
from loadtune.analysis.noise import long_run, run_noise
from loadtune.analysis.race import relative_to, run_range, unsettled_configs
from loadtune.analysis.race import verdict as race_verdict
from loadtune.model.config import Skip, TrialConfig, parse_int_list
from loadtune.model.estimate import rel_half_width
from loadtune.model.results import ConfigResult, ScanResult

STATUSES = ("ok", "failed", "skipped", "excluded")  # "excluded": measured, then ruled out (e.g. a memory cap)
SORT_KEYS = ("rate", "workers", "memory", "startup")


class ViewError(ValueError):
    """A filter or sort value that makes no sense: exit code 2, naming the flag."""


@dataclass(frozen=True)
class Speed:
    """The figure a row prints: ``raced`` ones are the pick's speed times their ratio to it, side by
    side (``ratio``: that ratio, with its interval; ``low``/``high``: the pick's own interval times the
    ratio, so a row raced beside a pick too wide for one figure is too wide too); the others their long
    runs' estimate. ``runs``:
    the slowest and fastest of its runs, printed instead where the figure is ``wide``. ``apart``: a
    figure measured alone that tops a raced row ranked above it."""

    median: float
    low: float
    high: float
    raced: bool = False
    ratio: Comparison | None = None
    runs: tuple[float, float] | None = None
    apart: bool = False

    @property
    def rel_spread(self) -> float:
        return rel_half_width(self.median, self.low, self.high)

    @property
    def wide(self) -> bool:
        if self.ratio is not None and too_wide(self.ratio.low, self.ratio.high):
            return True
        return too_wide(self.low, self.high, self.median)


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    status: str
    config: ConfigResult | None = None
    skip: Skip | None = None
    rank: int | None = None  # 1 = fastest of the whole scan; None when not measured
    speed: Speed | None = None  # what its samples/s column prints (``speeds``)

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


def speeds(result: ScanResult) -> dict[TrialConfig, Speed]:
    """Each measured config's printed figure (``Speed``): side by side for the pick and the configs raced
    beside it (not one whose ratio rests on a state the scan did not set), else its runs'."""
    noise = run_noise(result.configs)
    rec = result.recommendation
    by = {c.config: c for c in result.configs if c.ok}
    out: dict[TrialConfig, Speed] = {}
    for config in by.values():
        est = long_run(config, noise)
        if est is not None:
            out[config.config] = Speed(est.median, est.low, est.high, runs=measured_range(config))
    if rec is None or rec.config not in out:
        return out
    relative = relative_to(result.trials, rec.config)
    unsettled = unsettled_configs(race_verdict(result.trials, result.settings.options.noise_floor))
    pick = out[rec.config]
    if relative:
        out[rec.config] = Speed(pick.median, pick.low, pick.high, raced=True, runs=pick.runs)
    for config, r in relative.items():
        if config in out and config not in unsettled and not too_wide(r.low, r.high):
            out[config] = Speed(pick.median * r.value, pick.low * r.value, pick.high * r.value, raced=True, ratio=r,
                                runs=out[config].runs)
    return out


def measured_range(config: ConfigResult) -> tuple[float, float] | None:
    """The slowest and fastest of its runs; of its blocks where it ran once."""
    runs = run_range(config)
    if runs is not None and runs[1] > runs[0]:
        return runs
    blocks = [b.samples / b.seconds for t in config.trials if t.ok for b in t.blocks if b.seconds > 0]
    return (min(blocks), max(blocks)) if blocks else runs


def rows(result: ScanResult) -> list[Row]:
    """Every row in the table's default order: the raced configs at their speed side by side, fastest
    first, then the others by their runs' speed, then those that did not measure, then what was skipped."""
    configs = result.configs
    excluded = {c.config for c in over_limit(configs, memory_limit(result))}  # --max-memory
    speed = speeds(result)
    ok = sorted((c for c in configs if c.ok and c.config in speed),
                key=lambda c: (not speed[c.config].raced, -speed[c.config].median))
    floor = min((speed[c.config].median for c in ok if speed[c.config].raced), default=math.inf)
    out = []
    for i, c in enumerate(ok, 1):
        s = speed[c.config]
        if not s.raced and s.median > floor:
            s = Speed(s.median, s.low, s.high, runs=s.runs, apart=True)
        out.append(Row("excluded" if c.config in excluded else "ok", c, rank=i, speed=s))
    out += [Row(config_status(c), c) for c in configs if not c.ok or c.config not in speed]
    out += [Row("skipped", skip=s) for s in result.skipped]
    return out


def essential(result: ScanResult, table: list[Row]) -> list[Row]:
    """The rows a short report keeps: the pick, PyTorch's defaults (or the user's current settings), the
    configs raced, and the fastest of each worker count; the rest are behind ``--details``."""
    rec = result.recommendation
    current = result.settings.current
    best: set[int] = set()
    kept = []
    for row in table:
        if row.config is None or row.rank is None:
            continue
        c = row.config.config
        first_of_workers = c.num_workers not in best
        best.add(c.num_workers)
        if (first_of_workers or (rec is not None and c == rec.config) or c.is_pytorch_default
                or (current is not None and c.key == current) or (row.speed is not None and row.speed.raced)):
            kept.append(row)
    return kept


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
    measured = [r for r in kept if r.rank is not None]  # by rate: as ranked (``rows``)
    measured = measured if sort == "rate" else sorted(measured, key=lambda r: key(r.config))
    ordered = measured + [r for r in kept if r.rank is None]
    return ordered[:top] if top is not None else ordered
