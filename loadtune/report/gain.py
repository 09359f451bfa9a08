"""The panel's line on what the pick gains: over ``--current``, over PyTorch's defaults, or why the
defaults win. The figures are the analysis's (``Recommendation.speedup``, ``versus``); this says them."""

from __future__ import annotations

import math

from loadtune.analysis.noise import RunNoise, alone, speeds_apart
from loadtune.analysis.bound import bound_by_storage
from loadtune.analysis.pace import gain_halfwidth, gain_pace_text, gain_storage_text, pace_wanted
from loadtune.analysis.race import GAIN_WIDE, by_rounds, leg_ratio
from loadtune.analysis.view import too_wide
from loadtune.analysis.recommend import defaults_versus
from loadtune.model.results import ConfigResult, ScanResult
from loadtune.report.text import rate


def gain_text(result: ScanResult, rec, noise: RunNoise) -> str:
    """The panel's line on what the pick gains: over the user's own settings (``--current``), else
    over PyTorch's defaults, or why the defaults themselves win."""
    if result.settings.current is not None:
        return current_text(result, rec, noise)
    if rec.speedup is not None and rec.baseline != rec.config:
        defaults = result.config_result(rec.baseline)
        base = alone(defaults).estimate
        return (f"{rec.speedup:.2f}× PyTorch's defaults (num_workers=0, pin_memory=False: {rate(base.median)} samples/s "
                f"at batch size {rec.baseline.batch_size}), {speedup_how(rec)}, 95% interval {rec.speedup_low:.2f}×–"
                + (f"{rec.speedup_high:.2f}×" if rec.speedup_high is not None else "unbounded")
                + pace_beside(result, rec) + two_speeds(defaults, "PyTorch's defaults", noise) + "\n")
    if rec.gain_unsettled and rec.baseline not in (None, rec.config):
        return unsettled_text(rec, "PyTorch's defaults")
    if rec.baseline != rec.config:
        return "PyTorch's defaults were not measured at this batch size.\n"
    versus = rec.versus or defaults_versus(result.trials, rec.config)  # files written before it was recorded
    if versus is None:
        return "PyTorch's defaults (num_workers=0) are the only config measured.\n"
    if versus.pairs:
        side = f", side by side in the race ({versus.pairs} turn pairs)"
    else:
        side = f", side by side in {versus.rounds} round{'s' if versus.rounds != 1 else ''}" if versus.rounds else ""
    figures = f"{versus.value:.2f}× the best config with workers ({result.label(versus.config)}{side}, 95% interval " \
              f"{versus.low:.2f}×–{versus.high:.2f}×)"
    if too_wide(versus.low, versus.high):  # no figure past 2x wide: its lower end is the claim that holds
        figures = ((f"at least {versus.low:.2f}× " if versus.low > 1 else "")
                   + f"the best config with workers ({result.label(versus.config)}{side}; the ratio's 95% interval "
                   "spans more than 2×)")
    if versus.low <= 1.0 and versus.config not in rec.tied:  # undecided, not tied: no cheapest rule
        by = "the race's evidence" if versus.pairs else "the rounds' evidence" if versus.rounds else "the evidence"
        return (f"PyTorch's defaults (num_workers=0) are undecided against {figures}: the interval reaches past the "
                f"noise floor, so no tie; {by} picks them.\n")
    if versus.low <= 1.0:  # tied with it: the defaults are the pick as the cheapest, not as the winner
        return (f"PyTorch's defaults (num_workers=0) cannot be told apart from {figures}, and need no workers: "
                "the cheapest of the fastest.\n")
    return (f"PyTorch's defaults (num_workers=0) win: {figures}; handing samples between processes costs more "
            "than producing them here.\n")


def short_gain_text(result: ScanResult, rec, noise: RunNoise) -> str:
    """The gain over PyTorch's defaults in one line (an interval past 2× says what would narrow it); the
    other cases as ``gain_text`` says them."""
    if result.settings.current is not None or rec.speedup is None or rec.baseline == rec.config:
        return gain_text(result, rec, noise)
    high = rec.speedup_high if rec.speedup_high is not None else math.inf
    if too_wide(rec.speedup_low, high):
        return f"The gain over PyTorch's defaults is undecided: its interval spans more than 2× ({narrowing(result, rec)}).\n"
    how = (f"side by side in the race over {rec.speedup_pairs} turn pairs" if rec.speedup_pairs
           else speedup_how(rec).replace("measured ", ""))
    return f"{rec.speedup:.2f}× PyTorch's defaults (95% interval {rec.speedup_low:.2f}–{high:.2f}×), {how}{pace_beside(result, rec)}\n"


def narrowing(result: ScanResult, rec) -> str:
    """What a gain too wide to print rests on, and what would narrow it: more legs where the race
    measured it; where the referee's rounds did (the race and the runs alone disagreed, and the rounds
    could not say which held), more legs would not, and the two readings are said instead."""
    if rec.speedup_rounds and by_rounds(result.trials, rec.config, rec.baseline):
        raced = leg_ratio(result.trials, rec.config, rec.baseline)
        race = f"; the race read {raced.text()}" if raced is not None else ""
        return (f"{rec.speedup_rounds} rounds timed alone in fresh processes, which ruled it where the race and the "
                f"runs alone disagreed{race}: runs alone spread too far apart here for a few rounds to narrow it")
    return "more race legs narrow it: --race-legs, --budget"


def pace_beside(result: ScanResult, rec) -> str:
    """After a gain raced side by side that stayed wider than ``GAIN_WIDE``: the CPU pace the scan
    measured then (``engine.scan.pace_beside_gain``), which says whether the machine kept it wide; or,
    where storage's bandwidth is the bound, that the reads did."""
    spread = result.machine.pace_spread
    if not pace_wanted(rec, GAIN_WIDE):
        return ""
    if bound_by_storage(result):
        return "; " + gain_storage_text(gain_halfwidth(rec))
    return "; " + gain_pace_text(spread, gain_halfwidth(rec)) if spread is not None else ""


def unsettled_text(rec, who: str) -> str:
    """The gain over a baseline whose speed followed a state the scan did not set: the range its runs
    span, said to be one, with the cause; no single figure and no interval."""
    return (f"Between {rec.speedup_low:.2f}× and {rec.speedup_high:.2f}× {who}: a range, not an interval, since "
            f"{rec.gain_unsettled}; their speed follows a state the scan did not set (see the notes).\n")


def current_text(result: ScanResult, rec, noise: RunNoise) -> str:
    """The panel's line against the user's own settings (``--current``): the gain over them, measured
    as the gain over PyTorch's defaults is, or "keep what you have"."""
    mine = next((c for c in result.configs if c.config.key == result.settings.current), None)
    if mine is None or not mine.ok:
        return "Your current settings could not be measured (see their row): no gain over them is stated.\n"
    label = mine.config.label()
    if rec.config == mine.config:
        return (f"Keep what you have: your current settings ({label}) are as fast as any config measured, "
                "within the noise.\n")
    if rec.gain_unsettled:
        return unsettled_text(rec, f"your current settings ({label})")
    if rec.speedup is None:
        return f"Your current settings: {label}.\n"
    how = speedup_how(rec)
    return (f"{rec.speedup:.2f}× your current settings ({label}: {rate(alone(mine).estimate.median)} samples/s), {how}, "
            f"95% interval {rec.speedup_low:.2f}×–" + (f"{rec.speedup_high:.2f}×" if rec.speedup_high is not None else "unbounded")
            + two_speeds(mine, "Your current settings", noise) + "\n")


def speedup_how(rec) -> str:
    """How the gain was measured: side by side in closing rounds, or from trials taken apart."""
    if rec.speedup_pairs:
        return f"measured side by side in the race ({rec.speedup_pairs} turn pairs)"
    return (f"measured side by side in {rec.speedup_rounds} round{'s' if rec.speedup_rounds != 1 else ''}"
            if rec.speedup_rounds else "from figures measured at different times")


def two_speeds(config: ConfigResult, who: str, noise: RunNoise) -> str:
    """A sentence where the config the gain is over ran at separate speeds by its allocator's state
    (``noise.speeds_apart``): the gain is the race's, at the speed its legs had."""
    apart = speeds_apart(config, noise)
    if apart is None:
        return ""
    return (f". {who} ran at {rate(apart[0])}–{rate(apart[1])} samples/s in this scan's runs: their speed rests on "
            "their allocator's state (see the notes), and so does the gain over them")
