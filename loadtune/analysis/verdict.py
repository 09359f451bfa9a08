"""The verdict of ``loadtune check``, as pure functions.

Each round measures the checked config and a calibration workload shaped like the user's dataset,
block by block in turn with the same loader settings, so contention and drift hit both alike; the
figure of a round is the log of their ratio. The baseline recorded the same paired rounds when it was scanned.
Today's change is the difference of the mean log ratios, with Welch's t-interval from each session's
own round-to-round variance (``analysis.comparison`` with the baseline's rounds as its reference; a
round is a fresh process, so the rounds' spread holds what differs from one process to the next). The
verdict reads the interval against the tolerance (``Comparison.against_tolerance``):

- regression: the whole interval lies below ``-tolerance`` (slower beyond it, beyond the noise);
- pass: the whole interval lies above ``-tolerance``;
- inconclusive: the interval straddles it; ``check`` measures more rounds while its budget lasts,
  and stops early when the rounds the budget still allows would almost surely not settle it
  (``next_step``: a change sitting at the tolerance stays undecided however long it is measured, and
  a CI job should not wait minutes to be told so).

Where the machine ran the calibration outside ``MACHINE_RANGE`` of its speed at the baseline
(``beyond_range``), the ratio was never shown to carry over; a verdict then stands only where it would
with the machine's whole factor charged to the ratio (``beyond_machine``), else there is none.

A slowdown exactly at the tolerance is called either way about as often; the error rates at 0%,
10% and 25% on a noisy machine are measured in ``benchmarks/check_alarms.py``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from loadtune.analysis.comparison import Comparison, compare, singly, welch
from loadtune.model.check import INCONCLUSIVE, NOTHING, PASS, REGRESSION
from loadtune.model.estimate import MAD_TO_SIGMA, t975
from loadtune.model.paired import PairedRound

MIN_BASELINE_ROUNDS = 2  # paired rounds a baseline needs: one ratio has no spread to learn from
MIN_ROUNDS = 2  # rounds a check measures at least, for the same reason
CPU_TOLERANCE = 0.10  # the CPU runs the calibration's unit of work this much slower or faster than the baseline's: no verdict
FUTILITY = 0.02  # an undecided check stops early once the budget's rounds would decide it with less chance than this
MIN_FUTILITY_ROUNDS = 8  # ...and not before this many rounds: fewer say too little about their own spread
# how fast the machine may run the shaped calibration against the baseline's for the paired ratio to be read:
# the stored baseline's error rates were measured with it from 29% slower to 68% faster (busy cores, a pace
# that changed, a morning's drift: benchmarks/RESULTS.md, "loadtune check"); a 2-core VM whose pace doubled
# within minutes read an unchanged dataset 16% slow (-21% to -11%) beside a calibration 2.0x as fast
MACHINE_RANGE = (0.7, 1.7)


@dataclass(frozen=True)
class Change:
    """Today's ratio over the baseline's, less one (-0.12: 12% slower), with its 95% interval."""

    value: float
    low: float
    high: float
    rounds: int  # today's paired rounds used
    baseline_rounds: int

    @classmethod
    def of(cls, c: Comparison | None) -> "Change | None":
        """A side-by-side ratio as a change (ratio less one)."""
        return None if c is None else cls(c.value - 1, c.low - 1, c.high - 1, c.pairs, c.reference)


def log_ratios(rounds: list[PairedRound]) -> list[float]:
    """log(config / calibration) of each round where both were measured, winsorized (``tamed``)."""
    return tamed([math.log(r.ratio) for r in rounds if r.ratio])


WINSOR_SIGMAS = 3.0  # a round further than this many robust standard deviations from its session's median...
WINSOR_MIN_ROUNDS = 5  # ...is pulled in to that bound, in a session of this many rounds at least


def tamed(logs: list[float]) -> list[float]:
    """Rounds beyond ``WINSOR_SIGMAS`` robust standard deviations (from the MAD) of the session's median
    pulled in to that bound. Under contention a fresh process now and then lands its workers badly
    and reads 30-50% off (4 of some 60 loaded rounds did on the development machine): left as it is,
    one such round widens the interval for the rest of the check, so an unchanged dataset runs to the
    budget and a real slowdown goes unproven. Too few rounds to judge what is typical: unchanged."""
    if len(logs) < WINSOR_MIN_ROUNDS:
        return logs
    mid = statistics.median(logs)
    sigma = MAD_TO_SIGMA * statistics.median(abs(x - mid) for x in logs)
    if sigma == 0:
        return logs
    low, high = mid - WINSOR_SIGMAS * sigma, mid + WINSOR_SIGMAS * sigma
    return [min(max(x, low), high) for x in logs]


def paired_change(baseline: list[float], now: list[float]) -> Comparison | None:
    """The mean log ratio of ``now`` against ``baseline``'s with Welch's interval (each session's own
    round-to-round variance: a check under load spreads far more than a quiet baseline, and pooling the
    two would lend the noisy one the quiet one's confidence); None when either has under two rounds."""
    return compare(singly(now), reference=baseline)


def other_cpu(cpu_change: float | None, baseline_readings: int = 2) -> bool:
    """One unit of the calibration's work takes more than ``CPU_TOLERANCE`` longer or less time on this CPU
    than on the baseline's (the fastest of a few thread-time readings, which another process on another
    core barely moves): other hardware, or a host whose cores another tenant shares. The config and its
    calibration then need not slow alike -- the paired ratio of an unchanged dataset moved 13-17% between
    two 2-core VMs of one kind (benchmarks/RESULTS.md, "A baseline from another VM") -- so neither a pass nor a regression can be read from
    it. A baseline of one reading (older files) may have read slow, which makes this CPU look faster: only
    a slower one counts against it."""
    if cpu_change is None:
        return False
    return cpu_change > CPU_TOLERANCE or (baseline_readings > 1 and cpu_change < -CPU_TOLERANCE)


def other_cpu_text(cpu_change: float) -> str:
    how = f"{cpu_change:.0%} longer" if cpu_change > 0 else f"{-cpu_change:.0%} less time"
    return (f"one unit of the calibration's work takes {how} on this CPU than on the baseline's (beyond "
            f"{CPU_TOLERANCE:.0%}: other hardware, or cores shared with another tenant), where the ratio to the "
            "calibration does not carry over; record the baseline on this runner, best in the same job")


def beyond_range(moved: Change | None) -> bool:
    """The machine ran the shaped calibration outside ``MACHINE_RANGE`` of the baseline's speed: how the
    config and its calibration move together that far was never measured, so the ratio says nothing."""
    return moved is not None and not MACHINE_RANGE[0] <= 1 + moved.value <= MACHINE_RANGE[1]


def beyond_machine(change: Change | None, moved: Change, tolerance: float) -> str | None:
    """The verdict a change still earns on a machine outside ``MACHINE_RANGE``: one that would stand even
    if the machine's whole factor ``f`` (the calibration's speed against the baseline's) had moved the
    ratio, which can then lie up to ``f`` off either way (the config's speed follows the machine fully,
    or not at all). A 99% drop is a regression on a machine at 0.5x; an unchanged dataset gets no verdict."""
    if change is None:
        return None
    f = 1 + moved.value
    least = min(f, 1 / f)
    if 1 + change.high < (1 - tolerance) * least:
        return REGRESSION
    if 1 + change.low > (1 - tolerance) / least:
        return PASS
    return None


def outside_text(moved: Change) -> str:
    return (f"the machine ran the shaped calibration {1 + moved.value:.2f}× as fast as when the baseline was recorded, "
            f"outside the {MACHINE_RANGE[0]:.1f}–{MACHINE_RANGE[1]:.1f}× over which the paired ratio was shown to carry over")


def held_text(moved: Change, verdict: str) -> str:
    what = "drop" if verdict == REGRESSION else "change"
    return f"{outside_text(moved)}; the {what} is beyond what that factor alone could explain"


def beyond_range_text(moved: Change) -> str:
    return (f"{outside_text(moved)}: no verdict; record the baseline again on this runner, or compare with a revision "
            "in the same job (check --against)")


def decide(c: Comparison | None, tolerance: float) -> str:
    """Regression, pass or inconclusive from where the interval lies against the tolerance."""
    return INCONCLUSIVE if c is None else c.against_tolerance(tolerance)


MORE_ROUNDS = "more rounds or a quieter machine would decide it"


def change_reasons(change: Change | None, status: str, tolerance: float, regressed: str, too_few: str,
                   remedy: str = MORE_ROUNDS) -> list[str]:
    """What a verdict on ``change`` rests on, in words: ``too_few`` without a change; for a regression,
    ``regressed`` (its ``{fell}`` the drop) with the interval; for an undecided one, the interval against
    the tolerance and ``remedy``."""
    if change is None:
        return [too_few]
    span = f"interval {change.low:+.1%} to {change.high:+.1%}"
    if status == REGRESSION:
        return [f"{regressed.format(fell=f'{-change.value:.1%}')} ({span}, wholly beyond the {tolerance:.0%} tolerance)"]
    if status == INCONCLUSIVE:
        return [f"the change {change.value:+.1%} ({span}) straddles the {tolerance:.0%} tolerance: {remedy}"]
    return []


def under_floor(rates: list[float], min_throughput: float | None) -> str | None:
    """Why the median of ``rates`` fails ``--min-throughput``, whatever the ratio says; None when it does not."""
    rate_now = statistics.median(rates)
    if min_throughput is not None and rate_now < min_throughput:
        return f"{rate_now:,.0f} samples/s is under the floor of {min_throughput:,.0f}"
    return None


def chance_to_decide(baseline: list[float], now: list[float], tolerance: float, rounds_at_end: int) -> float | None:
    """The chance that ``rounds_at_end`` rounds in all (the budget's) would end with an interval wholly on
    one side of ``-tolerance``, predicted from today's rounds so far (log ratios): the final mean is
    today's mean plus the mean of the rounds to come, whose spread is today's plus the uncertainty of
    today's mean (flat prior), widened by t/z for the few rounds the spread is learned from. The final
    interval is Welch's at ``rounds_at_end`` rounds. None when either session has under two rounds."""
    n0, n = len(baseline), len(now)
    if n0 < 2 or n < 2:
        return None
    if rounds_at_end <= n:
        return 0.0
    var = statistics.variance(now)
    se, df = welch(statistics.variance(baseline), n0, math.sqrt(var / rounds_at_end), rounds_at_end - 1, rounds_at_end)
    half = t975(df) * se  # the final interval's, at today's spread
    return settling_chance(statistics.fmean(now) - statistics.fmean(baseline), half, var, n, rounds_at_end, tolerance)


def settling_chance(d: float, half: float, var: float, n: int, rounds_at_end: int, tolerance: float) -> float:
    """The chance that the log change, ``d`` today from ``n`` rounds of variance ``var``, ends ``rounds_at_end``
    rounds later with an interval of half-width ``half`` wholly on one side of ``-tolerance`` (see
    ``chance_to_decide``; ``check --against`` has no baseline session, only its own rounds)."""
    spread = math.sqrt(var * (rounds_at_end - n) / (rounds_at_end * n)) * t975(n - 1) / 1.96
    bound = math.log(1 - tolerance)
    if spread == 0:
        return float(abs(d - bound) > half)
    return normal_cdf((d - bound - half) / spread) + normal_cdf((bound - half - d) / spread)


def normal_cdf(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def next_step(
    baseline: list[PairedRound],
    rounds: list[PairedRound],
    tolerance: float,
    min_rounds: int,
    rounds_at_end: int,
    min_throughput: float | None = None,
    other: bool = False,
) -> tuple[str, bool, str | None]:
    """After each of today's rounds: the verdict so far, whether to stop measuring, and why when the stop
    comes before the budget does. ``rounds_at_end``: how many rounds the check would have measured when
    its budget runs out (today's included). Decided: stop. Undecided: go on while the budget allows,
    unless (after ``MIN_FUTILITY_ROUNDS``) the budget's rounds would settle it with a chance under
    ``FUTILITY`` -- a change at the tolerance would only run the budget out to the same verdict.
    ``other``: the baseline is of another CPU (``other_cpu``), which no round can make up for; nor can
    they for a machine outside the range the ratio was measured over (``beyond_range``)."""
    if len(rounds) < min_rounds:
        return INCONCLUSIVE, False, None
    status, _, _ = judge(baseline, rounds, tolerance, min_throughput)
    if status != INCONCLUSIVE or rounds_at_end <= len(rounds) or other or beyond_range(machine_change(baseline, rounds)):
        return status, True, None
    if len(rounds) < MIN_FUTILITY_ROUNDS:
        return status, False, None
    early = futility(chance_to_decide(log_ratios(baseline), log_ratios(rounds), tolerance, rounds_at_end), len(rounds),
                     rounds_at_end)
    return status, early is not None, early


def futility(chance: float | None, done: int, rounds_at_end: int) -> str | None:
    """Why an undecided check stops before its budget: the budget's rounds would settle it with a chance
    under ``FUTILITY``; None: measure on."""
    if chance is None or chance >= FUTILITY:
        return None
    return (f"stopped after {done} rounds: measured up to the budget ({rounds_at_end} rounds), the check would settle "
            f"it with a chance of {chance:.1%} (under {FUTILITY:.0%}), predicted from the rounds so far")


def machine_change(baseline: list[PairedRound], now: list[PairedRound]) -> Change | None:
    """How fast this machine ran the shaped calibration against the baseline's machine (the same
    interval method): below 0, the machine got slower or busier, which the paired ratio discounts."""
    then = tamed([math.log(r.calibration_rate) for r in baseline if r.calibration_rate])
    today = tamed([math.log(r.calibration_rate) for r in now if r.calibration_rate])
    return Change.of(paired_change(then, today))


def side_by_side_gain(rounds: list[PairedRound]) -> Comparison | None:
    """The config over PyTorch's defaults, from the rounds that measured both side by side (each a fresh
    process, so their spread holds what differs from one process to the next; drift within a round hits
    both loaders alike). Not tamed: the gain decides nothing, and pulling in rounds from five on would
    cost its interval its coverage (91% at five rounds in simulation). None under two rounds."""
    return compare(singly([math.log(r.gain) for r in rounds if r.gain]))


def judge(
    baseline: list[PairedRound],
    rounds: list[PairedRound],
    tolerance: float,
    min_throughput: float | None = None,
    cpu_change: float | None = None,
    baseline_readings: int = 2,
) -> tuple[str, list[str], Change | None]:
    """The verdict, the reasons for it, and the change it rests on. Under ``min_throughput`` (the
    median samples/s of today's rounds) is a regression whatever the ratio says. ``cpu_change``: how
    much longer one unit of the calibration's work takes on this CPU than it did on the baseline's (of
    ``baseline_readings``), less one; on another CPU (``other_cpu``) the verdict stands, with a warning."""
    moved = other_cpu(cpu_change, baseline_readings)
    rates = [r.config_rate for r in rounds if r.config_rate]
    if not rates:
        return NOTHING, ["no round of the checked config could be measured"], None
    compared = paired_change(log_ratios(baseline), log_ratios(rounds))
    status, change = decide(compared, tolerance), Change.of(compared)
    machine = machine_change(baseline, rounds)
    outside = beyond_range(machine)
    held = beyond_machine(change, machine, tolerance) if outside else None
    if outside and held is None:
        status, reasons = INCONCLUSIVE, [beyond_range_text(machine)]
    else:
        reasons = change_reasons(change, status, tolerance, "throughput fell {fell} against the shaped calibration",
                                 "too few paired rounds to estimate the noise", other_cpu_text(cpu_change) if moved else MORE_ROUNDS)
        reasons += [held_text(machine, held)] if held else []
    if moved and status != INCONCLUSIVE:  # a warning, not a verdict: on one VM the reading itself strayed 20-40%
        reasons.append(f"read with care: {other_cpu_text(cpu_change)}")
    floor = under_floor(rates, min_throughput)
    if floor:
        status = REGRESSION
        reasons.append(floor)
    return status, reasons, change
