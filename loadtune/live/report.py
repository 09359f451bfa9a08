"""What autotune decided, on what figures, and what the tuning cost: ``loader.report()``.

The windows are kept as a scan's trials in a ``ScanResult`` (model/results.py), so ``save`` writes
loadtune's JSON and ``loadtune show`` renders it like a scan. ``text()`` is the summary logged once,
when the loader settles.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from loadtune.analysis.recommend import snippet
from loadtune.analysis.storage import tuned_cold
from loadtune.model.config import TrialConfig
from loadtune.model.results import ScanResult
from loadtune.model.trial import Trial
from loadtune.live.tuner import wait_share


@dataclass(frozen=True)
class LoaderForm:
    """How the user gave their loader, for the ``DataLoader(...)`` line: a dataset with DataLoader
    arguments, a factory ``loader(**knobs)``, or a finished DataLoader."""

    form: str  # "dataset" | "factory" | "dataloader"
    args: tuple[str, ...] = ()  # the DataLoader arguments given with a dataset, by name
    name: str | None = None  # the factory's name
    batch_knob: bool = True  # the batch size is set in the call (False: the factory's own)
    shuffle: bool = False
    drop_last: bool = False

    @property
    def own_args(self) -> tuple[str, ...]:
        """The arguments the snippet passes on as the user's own (``shuffle``, ``drop_last`` and
        ``collate_fn`` it writes out)."""
        return tuple(a for a in self.args if a not in ("shuffle", "drop_last", "collate_fn"))

    def snippet(self, config: TrialConfig, distributed: bool) -> str:
        """The call that builds the settled loader, with the snippet code of a scan's recommendation.
        The copy to the device is the training loop's own code: no transfer line."""
        config = replace(config, transfer="none")
        if self.form != "dataset":
            return snippet(config, False, False, False, loader=self.form, loader_name=self.name, batch_size=self.batch_knob)
        own = self.own_args
        return snippet(config, self.shuffle, self.drop_last, "collate_fn" in self.args,
                       distributed=distributed and "sampler" not in own and "batch_sampler" not in own, loader_args=own)


@dataclass
class Cost:
    """The time tuning took, counted on the live loop."""

    seconds: float = 0.0  # from the first tuned batch requested to the moment the loader settled
    batches: int = 0  # delivered to the training loop meanwhile (none is lost: they trained)
    samples: int = 0
    loaders: int = 0  # loaders started, each a worker start-up
    startup_s: float = 0.0  # their start-ups, each charged to the config that caused it
    switch_s: float = 0.0  # shutting down the loaders left behind


@dataclass
class LiveReport:
    """The decision and its figures. ``config`` is what the loader runs with once ``settled``."""

    result: ScanResult
    mode: str  # "in-epoch": configs switch between batches; "across epochs": one config per epoch
    form: LoaderForm
    ranks: int = 1
    settled: bool = False
    config: TrialConfig | None = None
    stop: str | None = None
    untried: list[TrialConfig] = field(default_factory=list)  # what the search had yet to try when tuning was cut short
    cost: Cost = field(default_factory=Cost)

    @property
    def cut_short(self) -> bool:
        """Tuning ended before the search did (a budget or the epochs it may take)."""
        return bool(self.untried)

    @property
    def trials(self) -> list[Trial]:
        return self.result.trials

    @property
    def snippet(self) -> str | None:
        return self.form.snippet(self.config, self.ranks > 1) if self.config is not None else None

    @property
    def rate(self) -> float | None:
        """The settled config's samples/s on the live loop (median of its blocks, runs pooled)."""
        pick = self.result.config_result(self.config) if self.config is not None else None
        est = pick.estimate if pick is not None else None
        return est.median if est is not None else None

    @property
    def lost_s(self) -> float | None:
        """Tuning's cost against the settled config run from the start: the time tuning took less the
        time the settled config needs for the same samples at its measured rate."""
        rate = self.rate
        return self.cost.seconds - self.cost.samples / rate if rate else None

    def save(self, path: str | Path) -> None:
        self.result.save(path)

    def table(self) -> list[str]:
        lines = [f"  {'config':<24}{'round':>6}{'samples/s':>12}{'±':>8}{'waited':>8}{'start-up':>10}{'blocks':>8}"]
        for t in self.trials:
            est = t.estimate
            start = f"{t.startup_s:.3f} s" if t.startup_s is not None else "-"
            lines.append(f"  {t.config.label():<24}{t.leg or t.round:>6}{est.median:>12,.0f}{est.rel_spread:>8.1%}"
                         f"{wait_share(t):>8.0%}{start:>10}{len(t.blocks):>8}")
        return lines

    def headline(self) -> str:
        rec = self.result.recommendation
        if rec is None:
            return (f"autotune measured no complete window ({self.stop}); it keeps {self.config.label()}. "
                    "Give it a longer budget (tune_fraction, tune_seconds, tune_epochs) to tune.")
        est = self.result.config_result(rec.config).estimate
        line = (f"autotune settled on {rec.config.label()}: {est.median:,.0f} samples/s ±{est.rel_spread:.1%} "
                f"(median of {est.n} blocks on the live loop")
        line += f", the slowest of {self.ranks} ranks)" if self.ranks > 1 else ")"
        if rec.speedup is not None and rec.baseline is not None and rec.baseline != rec.config:
            how = (f"raced side by side over {rec.speedup_pairs} turn pairs" if rec.speedup_pairs
                   else f"side by side in {rec.speedup_rounds} rounds" if rec.speedup_rounds else "from windows at different times")
            high = f"{rec.speedup_high:.2f}×" if rec.speedup_high is not None else "unbounded"
            line += f"; {rec.speedup:.2f}× PyTorch's defaults ({how}, 95% interval {rec.speedup_low:.2f}×–{high})"
        line += f".\nWhy: {rec.reason}. Tuning ended: {self.stop}."
        if self.untried:
            line += " The search was cut short: it had yet to try " + ", ".join(c.label() for c in self.untried) + "."
        return line

    def cost_line(self) -> str:
        c = self.cost
        line = (f"Tuning took {c.seconds:.1f} s of training ({c.batches} batches trained on, {len(self.trials)} windows, "
                f"{c.loaders} loaders started: {c.startup_s:.2f} s of start-up charged to their configs)")
        lost = self.lost_s
        if lost is not None:
            line += f"; about {lost:+.1f} s against the settled config run from the start"
        return line + "."

    def storage_note(self) -> str | None:
        """Where the pick was judged on a first epoch's reads from storage that later epochs will not make."""
        rec = self.result.recommendation
        if rec is None:
            return None
        return tuned_cold(self.trials, rec.config, self.result.spec.length, psutil.virtual_memory().available)

    def text(self) -> str:
        """The summary logged once when the loader settles."""
        if not self.settled:
            return f"autotune is still tuning: {len(self.trials)} windows measured so far."
        parts = [self.headline(), self.cost_line()]
        if (note := self.storage_note()) is not None:
            parts.append(f"Storage: {note}.")
        if self.trials:
            parts += self.table()
        parts.append(self.snippet)
        return "\n".join(parts)
