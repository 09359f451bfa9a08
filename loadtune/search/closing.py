"""The closing rounds: the fallback where the race cannot run. The contenders are re-measured in
separate trials, interleaved, with PyTorch's defaults among them (beside a clear winner too), so drift
of the machine between the first and the last trial picks neither the winner nor the gain; a pick tied
with a faster config only by wide intervals is measured beside it a few more times.

The race (``engine/race.py``) replaces them wherever its loaders can take turns: not with several ranks
per trial (a leg's turns would have to pass between whole process groups, and the scan's agent runs
whole trials), not with ``--race-legs 0``, and not in autotune on an IterableDataset or a sampler of the
user's own (a race interleaves the racers' batches)."""

from __future__ import annotations

import random

from loadtune.analysis.recommend import baseline_for, best_with_workers, contenders
from loadtune.model.results import ConfigResult, ScanResult, by_config
from loadtune.search.strategy import Proposal, measured, skipped_keys


MAX_CONFIRM = 4  # contenders re-measured at most: the cheapest ones and the fastest


SETTLE_ROUNDS = 2  # more side-by-side rounds, at most, for a pick tied with the fastest only by wide intervals


def closing_rounds(result: ScanResult, rounds: int, noise_floor: float, seed: int) -> list[Proposal]:
    """Contenders from the search, re-measured once per round in a shuffled order, with PyTorch's
    defaults at the likely pick's batch size, even beside a clear winner: the gain over them is then
    measured side by side, not against the scan's very first trial. When the defaults are the pick,
    the fastest config with workers is their partner. No rounds asked for (or a race in their place,
    ``engine/race.py``): nothing."""
    if rounds < 1:
        return []
    search = list(measured(result).values())
    tied = contenders(search, noise_floor)
    if not tied:
        return []
    best = max(tied, key=lambda c: c.estimate.median)
    chosen = tied[: MAX_CONFIRM - 1] + ([best] if best not in tied[: MAX_CONFIRM - 1] else [])
    default = baseline_for(search, tied[0].config.batch_size, result.settings.current)  # the user's --current, if any
    partner = best_with_workers(search) if default is tied[0] else default
    chosen += [c for c in (default, partner) if c is not None and c not in chosen]
    if len(chosen) < 2:
        return []  # nothing to measure side by side
    out = []
    skipped = skipped_keys(result)
    for r in range(1, rounds + 1):
        done = measured(result, r)
        order = [c.config for c in chosen if c.config not in done and c.config.key not in skipped]
        random.Random(seed + r).shuffle(order)
        out += [Proposal(c, r) for c in order]
    if out:
        return out
    pooled = contenders(by_config(result.trials), noise_floor)  # every round so far: what the pick is made from
    return unconfirmed_pick(result, rounds, pooled, skipped) or settling(result, rounds, pooled, skipped, noise_floor, seed)


def unconfirmed_pick(result: ScanResult, rounds: int, tied: list[ConfigResult], skipped: set[str]) -> list[Proposal]:
    """Once the rounds are done: pooling them moves and widens intervals, and can make a config the
    search measured only once (and noisily) the cheapest of the tied, so the pick. It is re-measured
    too before it is declared; each config at most once, so this ends. ``tied``: the contenders of
    all rounds pooled."""
    confirmed = {t.config for t in result.trials if t.round}
    if not confirmed or len(confirmed) > 2 * MAX_CONFIRM:
        return []
    if not tied or tied[0].config in confirmed or tied[0].config.key in skipped:
        return []
    return [Proposal(tied[0].config, rounds)]


def settling(result: ScanResult, rounds: int, tied: list[ConfigResult], skipped: set[str], noise_floor: float,
             seed: int) -> list[Proposal]:
    """Once the rounds are done, a pick whose median lies further below the fastest's than the noise
    floor is tied with it only because their intervals are wide: the two are measured again side by
    side, up to ``SETTLE_ROUNDS`` more rounds. Each run narrows both pooled intervals, so a real gap
    shows; on a noisy 2-core VM one round left configs 10-30% apart tied, and the cheaper was picked.
    ``tied``: the contenders of all rounds pooled."""
    if rounds < 1 or len(tied) < 2:  # no re-measuring asked for, or nothing tied
        return []
    pick, best = tied[0], max(tied, key=lambda c: c.estimate.median)
    if pick is best or best.estimate.median - pick.estimate.median <= noise_floor * best.estimate.median:
        return []
    pair = [c.config for c in (pick, best) if c.config.key not in skipped]
    extra = [t.round for t in result.trials if t.round > rounds]
    r = max(extra, default=rounds + 1)
    missing = [c for c in pair if c not in measured(result, r)]
    if not missing:  # this round has the pair as it stands: the next one, while any is left
        r, missing = r + 1, pair
    if r > rounds + SETTLE_ROUNDS:
        return []
    random.Random(seed + r).shuffle(missing)
    return [Proposal(c, r) for c in missing]


