"""The recommendation, as pure functions of measured trials.

Not merely the top row: among the configs the measured noise cannot tell from the fastest (and
that no other config clearly beats), the cheapest one wins (fewest workers, then least memory, then
no pinning). Extra workers cost memory and cores that training needs too; a 1% "gain" inside the
noise is not worth them. After a race, "cannot tell from the fastest" means tied with the race's
leader: the whole 95% interval of their ratio within the noise floor either side of 1
(``Comparison.against_floor``). A config the race left undecided is not picked over the leader,
however near 1 its ratio reads: 1.00× (0.76–1.31) is no tie, and the cheaper config by default would
be a guess (``race_pick``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from loadtune.model.config import DEFAULT_PREFETCH, TrialConfig, transfer_cost
from loadtune.model.results import ConfigResult, Recommendation, ScanResult, Versus, by_config
from loadtune.model.trial import Trial
from loadtune.model.settings import NOISE_FLOOR
from loadtune.analysis.footprint import fresh_text, over_limit, size_text, takes_fresh_pages
from loadtune.analysis.noise import clearly_faster, gain, run_noise
from loadtune.analysis.comparison import SLOWER, TIED, UNDECIDED, too_wide
from loadtune.analysis.race import (LEADER, RaceVerdict, allocator_moves, allocator_regimes, pair_noise, race_ratio, by_rounds,
                                    relative_to, run_range, unsettled)
from loadtune.analysis.race import verdict as race_verdict
from loadtune.analysis.stats import indistinguishable

MEMORY_GRAIN = 16 * 2**20  # memory differences below this are noise of the sampling, not cost


def noise_floor_of(result: ScanResult) -> float:
    """The floor a saved scan was judged with."""
    return result.settings.options.noise_floor


def cost(trial: ConfigResult | Trial) -> tuple:
    """Sort key, cheapest first: workers, memory, pinning, then the fewest departures from defaults."""
    c = trial.config
    memory = trial.memory.peak_bytes // MEMORY_GRAIN if trial.memory else float("inf")  # unknown is not cheap
    return (
        c.num_workers,
        memory,
        c.pin_memory,
        (c.prefetch_factor or DEFAULT_PREFETCH) if c.num_workers else 0,
        c.persistent_workers,
        transfer_cost(c.transfer),  # plain .to(device), then non_blocking=True, then a prefetcher
        not c.in_order,
        c.start_method is not None,
        c.batch_size,
    )


def baseline_for(configs: list[ConfigResult], batch_size: int, current: str | None = None) -> ConfigResult | None:
    """The reference the gain is stated against, if measured: the user's current settings (``current``,
    their config's key) when given, else PyTorch's defaults (no workers, no pinning) at this batch size."""
    if current is not None:
        return next((c for c in configs if c.ok and c.config.key == current), None)
    return next((c for c in configs if c.ok and c.config.batch_size == batch_size and c.config.is_pytorch_default), None)


def best_with_workers(configs: list[ConfigResult]) -> ConfigResult | None:
    """The fastest measured config with workers: what ``num_workers=0`` is set against when it wins."""
    others = [c for c in configs if c.ok and c.config.num_workers > 0]
    return max(others, key=lambda c: c.estimate.median) if others else None


def contenders(configs: list[ConfigResult], noise_floor: float = NOISE_FLOOR) -> list[ConfigResult]:
    """The configs that no measured config is clearly faster than, cheapest first: the fastest, and
    every config the noise cannot tell from it unless another config beats it beyond the noise. A
    fastest measured once and noisily (a heavy-tailed dataset's blocks can span ±45%) has an interval
    wide enough to take in configs that tighter ones clearly beat; without that second test, such
    an interval made ``num_workers=0`` at 55% of the others "tied", and so the cheapest pick. "Clearly
    faster" is judged side by side where two configs shared closing rounds, else with the run-to-run
    noise learned from the scan's repeats; ``noise_floor`` is the smallest difference that counts."""
    ok = [c for c in configs if c.ok]
    if not ok:
        return []
    noise = run_noise(ok)
    by_speed = sorted(ok, key=lambda c: c.estimate.median, reverse=True)

    def beaten(c: ConfigResult) -> bool:
        return any(clearly_faster(d, c, noise, noise_floor) for d in by_speed if d is not c)

    return sorted((c for c in ok if not beaten(c)), key=cost)


def recommend(trials: list[Trial], noise_floor: float = NOISE_FLOOR, max_memory: int | None = None,
              current: str | None = None) -> Recommendation | None:
    """Pool the runs of each config, then pick the cheapest of the contenders. Configs whose measured
    peak memory exceeds ``max_memory`` (bytes) are left out of the choice, and listed. The gain over
    PyTorch's defaults comes from the rounds that measured both side by side where there are any.
    With ``current`` (the key of the user's own settings) the gain is over those, and they stay the
    pick when they are among the contenders: nothing beats them beyond the noise."""
    configs = by_config(trials)
    excluded = over_limit(configs, max_memory)
    raced = race_verdict(trials, noise_floor)
    if raced is not None and len(raced.standings) >= 2:
        picked = race_pick(trials, configs, raced, excluded, max_memory, current)
        if picked is not None:
            return with_versus(picked, trials, current)
    tied = contenders([c for c in configs if c not in excluded], noise_floor)
    if not tied:
        return None
    best = max(tied, key=lambda c: c.estimate.median)
    pick = tied[0]
    mine = baseline_for(configs, pick.config.batch_size, current) if current else None
    if mine in tied:  # keep what you have: nothing measured beats it beyond the noise
        pick = mine
    base = baseline_for(configs, pick.config.batch_size, current)
    return with_versus(Recommendation(
        config=pick.config,
        best=best.config,
        tied=[t.config for t in tied],
        baseline=base.config if base else None,
        reason=(keep_reason(pick, tied) if pick is mine else explain(pick, best, tied)) + excluded_reason(excluded, max_memory),
        excluded=[c.config for c in excluded],
        max_memory=max_memory,
        **gain_over(trials, configs, pick, base),
    ), trials, current)


def race_pick(trials: list[Trial], configs: list[ConfigResult], raced: RaceVerdict, excluded: list[ConfigResult],
              max_memory: int | None, current: str | None) -> Recommendation | None:
    """The pick when the contenders were raced: the cheapest of the leader and the configs tied with it
    side by side (the whole 95% interval of their ratio within the noise floor either side of 1:
    ``Comparison.against_floor``); the user's current settings when they are among them. A race that
    ended undecided picks by its evidence, the leader (or one tied with it), never the undecided config
    because it is cheaper, whatever its point ratio: the reason names it with its interval
    (``race_reason``). The gain over the baseline comes from the race where it raced too. None when
    every such config is over the memory limit."""
    by = {c.config: c for c in configs}
    out = {c.config for c in excluded}
    tied = [by[s.config] for s in raced.standings if s.status in (LEADER, TIED) and s.config not in out]
    if not tied:
        return None
    tied.sort(key=cost)
    pick = tied[0]
    mine = baseline_for(configs, pick.config.batch_size, current) if current else None
    if mine in tied:
        pick = mine
    base = baseline_for(configs, pick.config.batch_size, current)
    reason = keep_reason(pick, tied) if pick is mine else race_reason(pick, raced, tied)
    return Recommendation(
        config=pick.config, best=raced.leader, tied=[t.config for t in tied], baseline=base.config if base else None,
        reason=reason + excluded_reason(excluded, max_memory), excluded=[c.config for c in excluded], max_memory=max_memory,
        **gain_over(trials, configs, pick, base),
    )


def gain_over(trials: list[Trial], configs: list[ConfigResult], pick: ConfigResult, base: ConfigResult | None) -> dict:
    """The recommendation's figures of the gain over ``base``: the range and its cause where the gain
    rests on a state the scan did not set (``unsettled_gain``), else the race's ratio side by side
    where both raced, else the closing rounds' or the runs' (``noise.gain``). Over itself a config gains
    exactly 1x: the ratio of its runs to themselves would be an interval of their spread (0.11-9.2x on a
    disk-bound array whose runs landed 2.6x apart), a figure of nothing."""
    none = {"speedup": None, "speedup_low": None, "speedup_high": None}
    if base is None:
        return none
    if base.config == pick.config:
        return {"speedup": 1.0, "speedup_low": 1.0, "speedup_high": 1.0}
    apart = unsettled_gain(trials, {c.config: c for c in configs}, pick, base)
    if apart is not None:
        return {**none, "speedup_low": apart[1], "speedup_high": apart[2], "gain_unsettled": apart[0]}
    paired = race_ratio(trials, pick.config, base.config)
    if paired is not None:
        rounds = by_rounds(trials, pick.config, base.config)  # timed again alone, in rounds that rule it
        return {"speedup": paired.value, "speedup_low": paired.low, "speedup_high": paired.high,
                "speedup_rounds" if rounds else "speedup_pairs": paired.pairs}
    speed = gain(pick, base, run_noise(configs))
    if speed is None:
        return none
    return {"speedup": speed.ratio.value, "speedup_low": speed.ratio.low, "speedup_rounds": speed.rounds,
            "speedup_high": speed.ratio.high if math.isfinite(speed.ratio.high) else None}


def unsettled_gain(trials: list[Trial], by: dict[TrialConfig, ConfigResult], pick: ConfigResult,
                   base: ConfigResult) -> tuple[str, float, float] | None:
    """Where the gain over ``base`` rests on a state the scan did not set: why, and the range of gains
    the two configs' runs span (the pick's slowest run over the baseline's fastest, its fastest over
    the baseline's slowest: the machine's pace moves the pick's runs too). Such a state is one
    ``race.unsettled`` finds, or the allocator's wherever either config takes its batches' pages fresh
    (``footprint.takes_fresh_pages``): how many pages, and so its speed, follows that state in the
    process that runs it, and a training job's process need not be in the state the scan's were (a
    loader without workers and 96 MiB batches took 96 or 192 MiB per batch, 366-632 samples/s), where
    that state is shown to move its speed (``allocator_moves``)."""
    regimes = allocator_regimes(trials, by, [pick.config, base.config])
    noise = pair_noise(trials, by, pick.config, base.config)
    why = unsettled(trials, by, pick.config, base.config, regimes, noise)
    fresh = [c for c in (base, pick) if takes_fresh_pages(c) and allocator_moves(trials, by, c)]
    if why is None and fresh:
        why = f"{fresh_text(fresh[0])}, as its allocator's state in each process had it"
    ours, seen = run_range(pick), run_range(base)
    if why is None or seen is None or ours is None:
        return None
    return why, ours[0] / seen[1], ours[1] / seen[0]


def defaults_versus(trials: list[Trial], pick: TrialConfig) -> Versus | None:
    """Where PyTorch's defaults are the pick, the pick against the best config with workers: the
    fastest of them raced beside it (its ratio side by side, inverted), else the fastest measured (the
    gain from closing rounds, or from figures taken apart); None when no config with workers was measured."""
    raced = {c: r for c, r in relative_to(trials, pick).items() if c.num_workers}
    if raced:
        runner, r = max(raced.items(), key=lambda item: item[1].value)
        rounds = by_rounds(trials, runner, pick)  # the pair was timed again alone: rounds, not turns
        return Versus(runner, 1 / r.value, 1 / r.high, 1 / r.low, pairs=0 if rounds else r.pairs,
                      rounds=r.pairs if rounds else 0)
    configs = by_config(trials)
    picked = next((c for c in configs if c.config == pick), None)
    runner_up = best_with_workers(configs)
    times = gain(picked, runner_up, run_noise(configs)) if runner_up is not None and picked is not None else None
    if times is None:
        return None
    return Versus(runner_up.config, times.ratio.value, times.ratio.low, times.ratio.high, rounds=times.rounds)


def with_versus(rec: Recommendation, trials: list[Trial], current: str | None) -> Recommendation:
    """``rec`` with ``versus`` where the defaults (not the user's settings) are the pick."""
    if current is None and rec.baseline is not None and rec.baseline == rec.config:
        return replace(rec, versus=defaults_versus(trials, rec.config))
    return rec


def race_reason(pick: ConfigResult, raced: RaceVerdict, tied: list[ConfigResult]) -> str:
    """Why the race's pick: ahead of every other side by side, or tied with the leader and cheaper; and,
    where the race ended with configs undecided, who and their interval to the leader (no tie, so not
    picked for being cheaper). Those whose standing rests on a state the scan did not set have a note of
    their own and no interval (``race.unsettled_note``)."""
    slower = [s for s in raced.standings if s.status == SLOWER]
    undecided = [s for s in raced.standings if s.status == UNDECIDED and not s.unsettled]
    unsure = ""
    if undecided:
        them = ", ".join(f"{s.config.label()} {s.ratio.text()}" if s.ratio else s.config.label() for s in undecided)
        unsure = (f"; undecided against {raced.leader.label()}: {them} (not within the noise floor: no tie, "
                  "and not picked for a lower cost)")
    if pick.config == raced.leader:
        beaten = ", ".join(f"{s.config.label()} at most {s.ratio.high:.2f}×" if too_wide(s.ratio.low, s.ratio.high)
                           else f"{s.config.label()} {s.ratio.value:.2f}×" for s in slower)  # no figure past 2x wide
        lead = "ahead in the race, side by side" if undecided else "fastest in the race, side by side"
        return lead + (f"; slower beyond the noise: {beaten}" if beaten else "") + (
            f"; {len(tied) - 1} config{'s' if len(tied) != 2 else ''} tied with it cost more" if len(tied) > 1 else "") + unsure
    mine = raced.standing(pick.config)
    r = mine.ratio if mine else None
    within = f" ({r.text()})" if r else ""
    return (f"side by side with the fastest in the race ({raced.leader.label()}){within}: tied with it, the whole "
            "95% interval within the noise floor; the cheapest of those (fewest workers, then least memory, then "
            "no pinning)" + unsure)


def keep_reason(mine: ConfigResult, tied: list[ConfigResult]) -> str:
    """Why the user's current settings stay: none of the measured configs is faster beyond the noise."""
    cheaper = [c for c in tied if cost(c) < cost(mine)]
    return ("no measured config is faster than your current settings beyond the noise"
            + (f"; {len(cheaper)} cheaper config{'s' if len(cheaper) != 1 else ''} tie with them (listed below)" if cheaper else ""))


def excluded_reason(excluded: list[ConfigResult], limit: int | None) -> str:
    if not excluded:
        return ""
    n = len(excluded)
    return f"; {n} config{'s' if n != 1 else ''} over the {size_text(limit)} memory limit left out"


@dataclass(frozen=True)
class PersistentSaving:
    """Seconds per epoch that ``persistent_workers=True`` saves (0.0 inside the noise), and the
    settings it was measured at: the pick's own, or its twin at the same workers and batch size."""

    seconds: float
    at: TrialConfig


def persistent_saving(configs: list[ConfigResult], config: TrialConfig, epoch_samples: int | None,
                      noise_floor: float = NOISE_FLOOR) -> PersistentSaving | None:
    """The epoch time without ``persistent_workers`` minus with it, from two measured rates: at
    ``config``'s other settings where both were measured, else at the same workers and batch size (the
    adaptive search tries the toggle around the leaders, and not again once restarting clearly lost).
    None unless such a pair was measured."""
    if not config.num_workers or not epoch_samples:
        return None
    pairs: dict[TrialConfig, dict[bool, ConfigResult]] = {}
    for c in configs:
        if c.ok and c.config.num_workers == config.num_workers and c.config.batch_size == config.batch_size:
            pairs.setdefault(replace(c.config, persistent_workers=True), {})[c.config.persistent_workers] = c
    complete = [k for k, pair in pairs.items() if len(pair) == 2 and min(p.estimate.median for p in pair.values()) > 0]
    if not complete:
        return None
    exact = replace(config, persistent_workers=True)
    at = exact if exact in complete else max(complete, key=lambda k: pairs[k][True].estimate.median)
    off, on = pairs[at][False].estimate, pairs[at][True].estimate
    if indistinguishable(off, on, noise_floor):
        return PersistentSaving(0.0, at)
    return PersistentSaving(epoch_samples / off.median - epoch_samples / on.median, at)


def explain(pick: ConfigResult, best: ConfigResult, tied: list[ConfigResult]) -> str:
    if pick is best and len(tied) == 1:
        return "fastest config, clear of every other beyond the measured noise"
    others = len(tied) - 1
    cheaper = "fewest workers" if pick.config.num_workers < best.config.num_workers else "cheapest"
    lead = "the fastest" if pick is best else f"within the noise of the fastest ({best.config.label()})"
    return (
        f"{lead}; {others} other config{'s' if others != 1 else ''} cannot be told apart from it, "
        f"and this is the {cheaper} of them (fewest workers, then least memory, then no pinning)"
    )


TRANSFER_LINES = {
    "stream": ["# in the training loop (from loadtune import CUDAPrefetcher): copies the next batch on a side stream",
               "# for batch in CUDAPrefetcher(loader, device): ..."],
    "non_blocking": ["# in the training loop: batch = batch.to(device, non_blocking=True)"],
    "sync": ["# in the training loop: batch = batch.to(device)"],
}


def order_args(shuffle: bool, distributed: bool) -> list[tuple[str, object]]:
    """How samples are ordered: a shuffle flag, or per rank a ``DistributedSampler`` (code, not a value)."""
    if distributed:
        return [("sampler", "DistributedSampler(dataset)" if shuffle else "DistributedSampler(dataset, shuffle=False)")]
    return [("shuffle", True)] if shuffle else []


def worker_args(config: TrialConfig) -> list[tuple[str, object]]:
    """The knobs that only exist with workers, where they differ from PyTorch's defaults."""
    if not config.num_workers:
        return []
    args: list[tuple[str, object]] = [("prefetch_factor", config.prefetch_factor or DEFAULT_PREFETCH)]
    if config.persistent_workers:
        args.append(("persistent_workers", True))
    if not config.in_order:
        args.append(("in_order", False))
    if config.start_method:
        args.append(("multiprocessing_context", config.start_method))
    return args


def snippet(config: TrialConfig, shuffle: bool, drop_last: bool, has_collate_fn: bool, distributed: bool = False,
            loader: str | None = None, loader_name: str | None = None, loader_args: tuple[str, ...] = (),
            batch_size: bool = True) -> str:
    """A ready-to-paste ``DataLoader(...)`` call for ``config`` (per rank, over its shard, when ``distributed``).
    With the spec's ``loader_args`` (its extra arguments) they are passed on; with the user's own
    ``loader`` (see ``SpecInfo.loader``), the call that builds it with the knobs found. ``batch_size``:
    False where the loader sets its own."""
    if loader is not None:
        return own_loader_snippet(config, loader, loader_name or "loader", batch_size)
    batched = "batch_sampler" not in loader_args  # a batch_sampler batches (and orders) by itself
    args = [("batch_size", config.batch_size), *order_args(shuffle, distributed)] if batched else []
    args += [("drop_last", True)] if drop_last and batched else []
    args += [("num_workers", config.num_workers), *worker_args(config)]
    args += [("pin_memory", True)] if config.pin_memory else []
    lines = ["loader = DataLoader(  # in every rank" if distributed else "loader = DataLoader(", "    dataset,"]
    lines += [f"    {name}={value}," if name == "sampler" else f"    {name}={value!r}," for name, value in args]
    if has_collate_fn:
        lines.append("    collate_fn=collate_fn,")
    if loader_args:
        lines.append(f"    **loader_kwargs(),  # your {', '.join(loader_args)}")
    lines.append(")")
    lines = environment_lines(config) + lines + TRANSFER_LINES.get(config.transfer, [])
    return "\n".join(lines)


def environment_lines(config: TrialConfig) -> list[str]:
    """The environment the config needs, as comments above the call: it must be set before the
    training process starts (``TrialConfig.environment``)."""
    if not config.environment:
        return []
    return ["# in the training job's environment, before Python starts (glibc then keeps each batch in the heap):",
            *(f"#   export {k}={v}" for k, v in config.environment.items())]


def own_loader_snippet(config: TrialConfig, loader: str, name: str, batch_size: bool) -> str:
    """The user's own loader with the knobs found: their factory called with them, or their
    DataLoader (a DataModule's ``train_dataloader()``) with these arguments set and the rest kept."""
    args = [("batch_size", config.batch_size)] if batch_size else []
    args += [("num_workers", config.num_workers), *worker_args(config)]
    args += [("pin_memory", config.pin_memory)]
    if loader == "factory":
        lines = [f"train_loader = {name}(  # your factory, with the knobs found"]
    else:
        where = f"in {name}.train_dataloader()" if loader == "datamodule" else f"your {name}"
        lines = [f"train_loader = DataLoader(  # {where}: these arguments set, the others kept", "    ...,"]
    lines += [f"    {key}={value!r}," for key, value in args]
    lines.append(")")
    lines = environment_lines(config) + lines + TRANSFER_LINES.get(config.transfer, [])
    return "\n".join(lines)
