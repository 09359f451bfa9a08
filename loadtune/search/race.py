"""Who races: the contenders the screening found, chosen as pure functions of what it measured.

The screening times each config alone, in its own process, minutes apart from the others: enough to
find the region worth racing, not to tell configs 10% apart. The race then times the contenders
side by side (``engine/race.py``; its decisions in ``analysis/race.py``). It takes the fastest
screened configs, the cheapest config the screening could not tell from the fastest (the pick if the
race ties them), and PyTorch's defaults or the user's current settings (so the gain over them is a
paired verdict too), while their loaders, alive together, fit in memory. Where that leaves one config
(a pick far ahead of the rest, and the defaults' own), the best of the rest races it (the cheapest
that none of the others clearly beats): the pick's lead becomes a paired figure, and its repeated runs
teach the scan its run-to-run noise, without which the table's ± is one run's blocks' and says nothing
of the next run. Once it has, a cheaper config the screening left out may join (``challenger``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadtune.analysis.race import MAX_RACERS, allocator_moves
from loadtune.analysis.recommend import baseline_for, contenders, cost
from loadtune.model.config import TrialConfig
from loadtune.model.results import ConfigResult, ScanResult, by_config
from loadtune.model.trial import Trial

FASTEST = 2  # of the screening's fastest configs
MEMORY_SHARE = 0.5  # the live loaders together may hold this share of the memory available, without --max-memory


@dataclass(frozen=True)
class Entrants:
    """The race's configs, in order of priority, and the contenders left out for memory."""

    configs: list[TrialConfig]
    left_out: list[TrialConfig]


def screened(result: ScanResult) -> list[ConfigResult]:
    """Every config measured alone in the search (round 0)."""
    return by_config([t for t in result.trials if t.round == 0 and not t.raced])


def entrants(result: ScanResult, noise_floor: float, memory_limit: int, racers: int = MAX_RACERS,
             runner_up_too: bool = True) -> Entrants:
    """The configs to race: the cheapest contender, the fastest, the defaults (or the user's current
    settings), then the next fastest contenders (where all that is one config and ``runner_up_too``,
    the best other: ``runner_up``), up to ``racers`` and while the peak memory of their screening
    runs, summed, stays under ``memory_limit`` (a config whose memory was not measured counts as the
    largest measured)."""
    configs = screened(result)
    tied = contenders(configs, noise_floor)
    if not tied:
        return Entrants([], [])
    by_speed = sorted(tied, key=lambda c: c.estimate.median, reverse=True)
    base = baseline_for(configs, tied[0].config.batch_size, result.settings.current)
    wanted = [tied[0], by_speed[0]] + ([base] if base is not None else []) + by_speed[1:FASTEST] + tied[1:]
    if runner_up_too and len({c.config for c in wanted}) < 2:
        wanted += runner_up(configs, wanted, noise_floor)
    chosen: list[TrialConfig] = []
    left_out: list[TrialConfig] = []
    used = 0
    need_of = memory_need(configs)
    for c in {c.config: c for c in wanted}.values():
        if len(chosen) == racers:
            break
        need = need_of(c)
        if chosen and used + need > memory_limit:
            left_out.append(c.config)
            continue
        chosen.append(c.config)
        used += need
    return Entrants(chosen if len(chosen) >= 2 else [], left_out)


def memory_need(configs: list[ConfigResult]) -> Callable[[ConfigResult], int]:
    """What a config's live loader is counted to hold in a leg: the peak of its screening runs, or, where
    its memory was not measured, the largest any config measured."""
    largest = max((c.memory.peak_bytes for c in configs if c.memory), default=0)
    return lambda c: c.memory.peak_bytes if c.memory else largest


def runner_up(configs: list[ConfigResult], wanted: list[ConfigResult], noise_floor: float) -> list[ConfigResult]:
    """The best of the configs measured that are not in ``wanted``: the cheapest that none of the others
    is clearly faster than (``contenders``); none if there is no other. Not the fastest by its screening
    median: where two of the rest lie within the screening's noise, that choice is a coin toss, and the
    costlier loader (more workers to start and warm up beside the others) lengthens every leg."""
    taken = {c.config for c in wanted}
    rest = [c for c in configs if c.ok and c.estimate is not None and c.config not in taken]
    return contenders(rest, noise_floor)[:1]


def challenger(result: ScanResult, racing: list[TrialConfig], pick: TrialConfig | None, noise_floor: float,
               memory_limit: int) -> TrialConfig | None:
    """A config the race left out that may join ``racing`` in the next legs: cheaper than ``pick``,
    never raced, and a contender again (nothing clearly faster) now that the race's legs have taught
    the scan how far its runs land apart (``contenders`` over every trial). The screening left it out
    on one run of each config, minutes apart, and a floor set before any spread was learned: on a
    machine whose pace wandered ±20% between seconds, that read a config tied with the pick as 30%
    slower, and the race never met the cheaper answer. Of several, the fastest alone: the likeliest to
    tie the pick, as far as runs that far apart can say. None where no such config fits
    beside ``racing`` in ``memory_limit``, or ``pick`` is not known. Not the heap setting of a loader
    the race already met, where it does not move that loader's speed (``met_as_twin``)."""
    configs = by_config(result.trials)
    mine = next((c for c in configs if c.config == pick), None)
    if mine is None:
        return None
    raced = {t.config for t in result.trials if t.raced}
    by = {c.config: c for c in configs}
    need = memory_need(configs)
    used = sum(need(c) for c in configs if c.config in racing)
    cheaper = [c for c in contenders(configs, noise_floor) if cost(c) < cost(mine) and c.config not in raced
               and used + need(c) <= memory_limit and not met_as_twin(result.trials, by, c, raced)]
    return max(cheaper, key=lambda c: c.estimate.median).config if cheaper else None


def met_as_twin(trials: list[Trial], by: dict[TrialConfig, ConfigResult], config: ConfigResult,
                raced: set[TrialConfig]) -> bool:
    """``config`` is a loader the race already met, with its heap kept, and keeping it does not move that
    loader's speed (``analysis.race.allocator_moves``): the race's verdict on the loader speaks for it,
    and its legs would measure the same loader again (the README's images: ``w0 heap`` joined three
    races of five, read 0.75x the pick in each, and long loops put it at 0.86x ``w0``)."""
    if not config.config.heap:
        return False
    loader = by.get(config.config.with_knobs(heap=None))
    return loader is not None and loader.config in raced and not allocator_moves(trials, by, loader)


def race_memory_limit(max_memory: int | None, memory_available: int) -> int:
    """What the live loaders of a leg may hold together: ``--max-memory`` when given (it holds for
    all of them at once), else a share of what the machine has free."""
    return max_memory if max_memory else int(MEMORY_SHARE * memory_available)
