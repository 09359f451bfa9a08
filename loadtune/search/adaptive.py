"""The default search: a coordinate search that reaches the exhaustive grid's best within its noise in
a fraction of the grid's trials (see ``AdaptiveSearch``)."""

from __future__ import annotations

import random
from dataclasses import replace

from loadtune.search.space import SearchSpace

from loadtune.model.config import Skip, TrialConfig, transfers_for
from loadtune.analysis.recommend import contenders
from loadtune.model.results import ConfigResult, ScanResult
from loadtune.analysis.stats import indistinguishable
from loadtune.search.strategy import Proposal, measured, skipped_keys
from loadtune.search.allocator import heap_trials
from loadtune.search.closing import closing_rounds

PATIENCE = 2  # consecutive worker counts (>= 1) without a gain before the sweep stops
EXTEND_MEMORY_FRACTION = 0.5  # extend past the grid only while projected memory stays under this share


class AdaptiveSearch:
    """Coordinate search: sweep num_workers upwards at default knobs and the first batch size until
    throughput stops rising (extending past the grid while it still rises and memory allows), then
    try the other knobs, other batch sizes included, one at a time around the best configs, then
    confirm the contenders side by side. Per-sample cost against cores sets the best worker count
    far more than batch size does, so other batch sizes start at the best counts of the sweep and
    only a batch size that leads gets its neighbouring counts measured."""

    name = "adaptive"
    planned = None  # how many trials depends on what they measure

    def __init__(
        self,
        space: SearchSpace,
        accelerator: bool,
        references: list[TrialConfig],
        noise_floor: float,
        max_workers: int,
        memory_available: int,
        confirm_rounds: int = 1,
        seed: int = 0,
        extend: bool = True,
    ):
        self.extend = extend  # False when the user listed the worker counts: theirs is the range
        self.space, self.accelerator, self.references = space, accelerator, references
        self.noise_floor, self.max_workers, self.memory_available = noise_floor, max_workers, memory_available
        self.rounds, self.seed = confirm_rounds, seed

    @property
    def sweep_batch(self) -> int:
        """The batch size the worker sweep runs at: the first one given (the spec's, or the user's first)."""
        return self.space.batch_sizes[0]

    def base(self, batch_size: int, workers: int) -> TrialConfig:
        """The sweep's config: smallest prefetch, persistent where allowed, pinned with an accelerator,
        the pin's default transfer (``non_blocking`` when pinned) unless the transfers were narrowed."""
        pin = self.accelerator if self.space.pin is None else self.space.pin
        choices = transfers_for(pin, self.accelerator, self.space.transfers)
        if not choices:  # only strategies that need the other pinning were allowed
            pin = not pin
            choices = transfers_for(pin, self.accelerator, self.space.transfers)
        transfer = choices[0]
        if workers == 0:
            return TrialConfig(batch_size, 0, pin, None, False, transfer)
        persistent = self.space.persistent is not False
        return TrialConfig(batch_size, workers, pin, min(self.space.prefetch), persistent, transfer,
                           self.space.in_order[0], self.space.start_methods[0])

    def propose(self, result: ScanResult) -> list[Proposal]:
        done = measured(result)
        skipped = skipped_keys(result)
        wanted = [c for c in self.references if c not in done and c.key not in skipped]
        if wanted:
            return [Proposal(c) for c in wanted]
        step = self.sweep(self.sweep_batch, done, skipped)
        if step is not None:
            return [Proposal(step)]
        refine = [c for c in self.refinements(done) if c not in done and c.key not in skipped]
        if refine:
            random.Random(self.seed).shuffle(refine)
            return [Proposal(c) for c in refine]
        return heap_trials(result) or closing_rounds(result, self.rounds, self.noise_floor, self.seed)

    def first_trials(self) -> list[TrialConfig]:
        """The references, then the sweep up to its first count with workers: its first steps do not
        depend on what they measure (a count without workers is no step of the curve)."""
        sweep = []
        for workers in sorted(set(self.space.workers)):
            sweep.append(self.base(self.sweep_batch, workers))
            if workers:
                break
        return list(dict.fromkeys(self.references + sweep))

    def sweep(self, batch_size: int, done: dict, skipped: set[str]) -> TrialConfig | None:
        """The next worker count to measure at this batch size, or None when the sweep is over."""
        grid = sorted(set(self.space.workers))
        points: list[ConfigResult] = []
        misses = 0
        workers = grid[0]
        while True:
            config = self.base(batch_size, workers)
            if config.key in skipped:
                return None
            if config not in done:
                return config
            point = done[config]
            if workers == 0:
                pass  # the in-process loader is another regime, not a step of the worker curve: no gain or miss
            elif point.ok:
                best = max((p for p in points if p.ok and p.config.num_workers), key=lambda p: p.estimate.median, default=None)
                gained = best is None or (
                    point.estimate.median > best.estimate.median
                    and not indistinguishable(point.estimate, best.estimate, self.noise_floor)
                )
                misses = 0 if gained else misses + 1
            else:
                misses += 1  # a failure (e.g. out of memory) is no gain
            points.append(point)
            if misses >= PATIENCE:
                return None
            workers = self.next_workers(workers, grid, points, misses)
            if workers is None:
                return None

    def next_workers(self, workers: int, grid: list[int], points: list[ConfigResult], misses: int) -> int | None:
        """The next count up the grid; past its end, double while still gaining and memory allows."""
        higher = [w for w in grid if w > workers]
        if higher:
            return higher[0]
        if not self.extend or misses or workers == 0 or 2 * workers > self.max_workers:
            return None
        ok = [p for p in points if p.ok and p.memory]
        if len(ok) >= 2:  # per-worker memory, from the last two measured counts
            a, b = ok[-2], ok[-1]
            per_worker = max(0, b.memory.peak_bytes - a.memory.peak_bytes) / max(1, b.config.num_workers - a.config.num_workers)
            if b.memory.peak_bytes + per_worker * workers > EXTEND_MEMORY_FRACTION * self.memory_available:
                return None
        return 2 * workers

    def refinements(self, done: dict) -> list[TrialConfig]:
        """One knob at a time around the best configs so far (the cheapest tied and the fastest)."""
        swept = [c for c in done.values() if c.ok]
        if not swept:
            return []
        tops = contenders(swept, self.noise_floor)[:1] + [max(swept, key=lambda c: c.estimate.median)]
        restarting_lost = self.restarting_lost(done)
        out: list[TrialConfig] = []
        for top in {t.config: t for t in tops}.values():
            c = top.config
            if c.num_workers:
                out += [replace(c, prefetch_factor=p) for p in self.space.prefetch]
                if self.space.persistent is None and self.epochs_matter(top) and not (
                        c.persistent_workers and restarting_lost):
                    out.append(replace(c, persistent_workers=not c.persistent_workers))
                out += [replace(c, in_order=o) for o in self.space.in_order]
                out += [replace(c, start_method=m) for m in self.space.start_methods]
            if self.accelerator and self.space.pin is None:
                out.append(c.with_knobs(pin_memory=not c.pin_memory))
            out += [replace(c, batch_size=b) for b in self.space.batch_sizes]
            if c.batch_size != self.sweep_batch:  # not swept at this batch size: the counts either side
                out += [c.with_knobs(num_workers=w) for w in self.neighbours(c.num_workers, done)]
            if self.accelerator:  # how the batch reaches the GPU: sync, non_blocking (pinned only), stream
                out += [c.with_knobs(transfer=t) for t in transfers_for(c.pin_memory, True, self.space.transfers)
                        if t != c.transfer]
        if self.accelerator and self.space.transfers is not None:  # a pin toggle must not bring back a strategy left out
            out = [c for c in out if c.transfer in self.space.transfers]
        return list(dict.fromkeys(out))

    def neighbours(self, workers: int, done: dict) -> list[int]:
        """The worker counts next to ``workers`` on the ladder the sweep measured (grid and extension)."""
        ladder = sorted(set(self.space.workers) | {c.num_workers for c in done if c.batch_size == self.sweep_batch})
        lower = [w for w in ladder if w < workers]
        higher = [w for w in ladder if w > workers]
        return lower[-1:] + higher[:1]

    def restarting_lost(self, done: dict) -> bool:
        """``persistent_workers=False`` lost to its persistent twin beyond the noise somewhere. Starting
        the workers at every epoch only adds work, so once it clearly lost it is not tried again around
        other configs: on a short dataset those are the slowest trials of the search (each epoch pays
        the start-up), and the panel's saving falls back to the pair measured."""
        for config, point in done.items():
            if config.num_workers and not config.persistent_workers and point.ok:
                twin = done.get(replace(config, persistent_workers=True))
                if (twin is not None and twin.ok and point.estimate.median < twin.estimate.median
                        and not indistinguishable(point.estimate, twin.estimate, self.noise_floor)):
                    return True
        return False

    @staticmethod
    def epochs_matter(config: ConfigResult) -> bool:
        """persistent_workers only changes what happens at an epoch's end; if no epoch ended inside a
        trial, training's epochs are long next to start-up and the knob cannot be told apart here."""
        return any((t.warmup and t.warmup.epochs) or any(b.epochs for b in t.blocks) for t in config.trials)

    def remarks(self, result: ScanResult) -> list[str]:
        """What the search measured beyond the grid, said plainly."""
        top = max(self.space.workers)
        beyond = sorted({c.num_workers for c in measured(result) if c.num_workers > top})
        if not beyond:
            return []
        return [f"num_workers {','.join(map(str, beyond))} added past the grid's {top}: throughput was still "
                "rising at its edge (workers that wait on I/O need no core each)"]

    def sweep_end(self, result: ScanResult, done: dict, last: int) -> str:
        """Why the worker sweep measured no count above ``last``."""
        if self.sweep(self.sweep_batch, done, skipped_keys(result)) is not None:
            return "the scan ended (budget, or interrupted) before the sweep reached them"
        point = done.get(self.base(self.sweep_batch, last))
        if point is not None and not point.ok:
            return f"the sweep stopped where num_workers={last} failed (see its row)"
        return f"throughput stopped rising by num_workers={last}"

    def notes(self, result: ScanResult) -> list[Skip]:
        """What the search chose not to measure, and why (shown as skipped rows)."""
        done = measured(result)
        notes = []
        batch = self.sweep_batch
        tried = sorted(c.num_workers for c in done if c.batch_size == batch)
        untried = [w for w in self.space.workers if tried and w > tried[-1]]
        if untried:
            notes.append(Skip(f"num_workers {','.join(map(str, untried))} (bs{batch})",
                              self.sweep_end(result, done, tried[-1])))
        others = [b for b in dict.fromkeys(self.space.batch_sizes) if b != batch]
        if others:
            notes.append(Skip(f"other worker counts at batch size {','.join(map(str, others))}",
                              f"measured at the best counts of the sweep at bs{batch} (and next to them where "
                              "a batch size led); --grid measures every combination"))
        swept = [c for c in done.values() if c.ok and c.config.num_workers]
        if self.space.persistent is None and swept and not any(self.epochs_matter(c) for c in swept):
            notes.append(Skip("persistent_workers toggle", "no epoch ended inside a trial: epochs are long next to "
                              "worker start-up, which is all persistent_workers saves (see the start column)"))
        return notes
