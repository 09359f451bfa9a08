"""How much faster is A than B, measured side by side, and how sure are we: the one answer.

Every side-by-side figure rests on paired observations, each the log of ``a / b`` over neighbouring
measurements: a race's turn pair (its two turns' mean), a ``check`` round (the config against its
shaped calibration), a ``check --against`` round (head against base), a closing round. What the
machine does meanwhile hits both sides of an observation alike, so their mean is the comparison and
their spread its noise. ``compare`` turns them into a ``Comparison``: the geometric mean ratio with a
Student-t interval. Observations come in groups, one per process they were measured in (a race leg
holds several turn pairs; a round is a group of its own): where the groups' means disagree beyond
what their observations' spread explains, that process-to-process part counts for the mean
(``variance_parts``), so many pairs of one process do not lend a ratio a precision it lacks.

Two variants answer the callers' other questions with the same estimate: a ``Prior`` pools the
observations' spread with what the scan learned elsewhere (a pair of closing rounds has too few
observations for an interval of its own), and a ``reference`` sample (a baseline's rounds) turns the
ratio into a change against it, with Welch's interval (each session its own spread).

The verdicts read the printed 95% interval against a threshold: against a noise floor for the race
(slower, tied: the whole interval within the floor either side of 1, undecided) and against a
tolerance for the checks (regression, pass, inconclusive), so no verdict is printed beside an interval
that denies it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from loadtune.model.check import INCONCLUSIVE, PASS, REGRESSION
from loadtune.model.estimate import t975

SLOWER, TIED, UNDECIDED = "slower", "tied", "undecided"


WIDE_FACTOR = 2.0  # an interval whose ends lie further apart than this decides nothing: the report shows no figure
WIDE_SPREAD = 0.5  # likewise a ± past this


def too_wide(low: float, high: float, median: float | None = None) -> bool:
    """An interval (or spread about ``median``) too wide to print as a number: its ends more than
    ``WIDE_FACTOR`` apart, or more than ``WIDE_SPREAD`` from the median."""
    if low <= 0 or not math.isfinite(high):
        return True
    if high / low > WIDE_FACTOR:
        return True
    return median is not None and median > 0 and max(high - median, median - low) / median > WIDE_SPREAD


@dataclass(frozen=True)
class Prior:
    """What a paired observation's log ratio was learned to spread by elsewhere: a variance, and the
    degrees of freedom it was learned with."""

    variance: float
    df: int


@dataclass(frozen=True)
class Comparison:
    """``a / b`` side by side: the geometric mean of the paired observations, its 95% interval, and
    what it rests on (``pairs`` observations from ``groups`` processes)."""

    value: float
    low: float
    high: float
    pairs: int
    groups: int
    se: float = 0.0  # of the log ratio, and its degrees of freedom: what more observations could narrow
    df: int = 0
    within: float = 0.0  # variance of one observation's log ratio within a group (``variance_parts``)
    between: float = 0.0  # what the groups' means vary beyond it
    reference: int = 0  # a reference sample's observations, where the ratio is a change against it

    @property
    def halfwidth(self) -> float:
        """The interval's half-width, relative (the larger side)."""
        return max(self.high / self.value - 1, 1 - self.low / self.value)

    def text(self) -> str:
        return f"{self.value:.2f}× ({self.low:.2f}–{self.high:.2f})"

    def against_floor(self, floor: float) -> str:
        """``a`` against ``b`` (the leader) with a noise floor: slower (the whole 95% interval below
        ``1 - floor``), tied (the whole interval within the floor on both sides of 1: at or above
        ``1 - floor`` and at or below ``1 / (1 - floor)``, so ``a`` is neither more than the floor slower
        nor more than the floor faster; the two one-sided tests of an equivalence test, each at 2.5%), or
        undecided: an interval that reaches past the floor on either side, such as 1.00× (0.76–1.31), is
        no tie however near 1 its middle lies. The band is symmetric in the log, so ``a`` is tied with
        ``b`` exactly where ``b`` is tied with ``a`` (the interval of ``b / a`` is the inverse), whichever
        the point ratios made the leader. The test reads the interval printed beside the verdict, so the
        two never contradict each other."""
        if self.high < 1 - floor:
            return SLOWER
        if self.low >= 1 - floor and self.high <= 1 / (1 - floor):
            return TIED
        return UNDECIDED

    def against_tolerance(self, tolerance: float) -> str:
        """A check's verdict: a regression when the whole interval lies below ``1 - tolerance``, a pass
        when it lies wholly above, else inconclusive."""
        if self.high < 1 - tolerance:
            return REGRESSION
        if self.low > 1 - tolerance:
            return PASS
        return INCONCLUSIVE


def compare(groups: Sequence[Sequence[float]], prior: Prior | None = None, reference: Sequence[float] | None = None,
            least: int = 2) -> Comparison | None:
    """``a / b`` from paired log ratios in ``groups`` (one per process); None under ``least``
    observations (or, with a ``reference``, under two of its own). ``prior``: pool the spread with what
    was learned elsewhere. ``reference``: the change of the mean log ratio against that sample's."""
    groups = [list(g) for g in groups if g]
    logs = [x for g in groups for x in g]
    n, k = len(logs), len(groups)
    if n < max(1, least):
        return None
    mean = statistics.fmean(logs)
    within, between = (0.0, 0.0) if n < 2 else variance_parts(groups)
    if prior is not None:
        df = n - 1 + prior.df
        if df < 1:
            return None
        within = (sum((x - mean) ** 2 for x in logs) + prior.df * prior.variance) / df
        se, between = math.sqrt(within / n), 0.0
    elif n >= 2:
        se, df = mean_error(within, between, n, k)
    else:
        return None
    if reference is not None:
        ref = list(reference)
        if len(ref) < 2:
            return None
        se, df = welch(statistics.variance(ref), len(ref), se, df, n)
        mean -= statistics.fmean(ref)
    half = t975(df) * se
    return Comparison(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, k, se, df, within, between,
                      len(reference) if reference is not None else 0)


def singly(logs: Sequence[float]) -> list[list[float]]:
    """Observations each from a process of its own (rounds) as ``compare``'s groups."""
    return [[x] for x in logs]


def variance_parts(groups: list[list[float]]) -> tuple[float, float]:
    """The observations' variance within a group, and what the groups add beyond it.

    Within a group the observations share a process: its workers' placement on the cores, its memory
    layout. When the groups' means disagree beyond what their observations' spread explains, that
    process-to-process component counts for the mean over groups (a one-way random-effects model).
    When they agree (or there is one group, or every group holds one observation), there is no such
    component, and the within part is the observations' plain variance."""
    logs = [x for g in groups for x in g]
    n, k = len(logs), len(groups)
    if k >= 2 and n - k >= 1:
        within = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups) / (n - k)
        spread = statistics.variance([statistics.fmean(g) for g in groups])  # of the groups' means
        extra = spread - within / (n / k)  # beyond their observations' noise (n / k per group)
        if extra > 0:
            return within, extra
    return statistics.variance(logs), 0.0


def mean_error(within: float, between: float, n: int, k: int) -> tuple[float, int]:
    """Standard error of the mean of ``n`` observations over ``k`` groups, and its degrees of freedom,
    from the variance parts: Satterthwaite's where the groups add a part of their own."""
    a, b = within / n, between / k
    if b <= 0:
        return math.sqrt(a), n - 1
    df = (a + b) ** 2 / (a * a / (n - k) + b * b / (k - 1))
    return math.sqrt(a + b), max(1, int(df))


def welch(ref_variance: float, ref_n: int, se: float, df: int, n: int) -> tuple[float, int]:
    """Standard error and degrees of freedom (Welch-Satterthwaite) of a difference of two means: a
    reference sample's (its variance and count) and one known as ``se`` with ``df``."""
    v0, v = ref_variance / ref_n, se * se
    total = math.sqrt(v0 + v)
    if not total:
        return 0.0, ref_n + n - 2
    return total, max(1, math.floor((v0 + v) ** 2 / (v0 ** 2 / (ref_n - 1) + v ** 2 / df)))


def after_more(c: Comparison, pairs: int, groups: int = 1) -> float:
    """The half-width (relative) ``c``'s interval would have with ``pairs`` more observations from
    ``groups`` more processes, were its variance parts to stay as measured: more observations shrink
    the within part, more processes the groups' part, and both add degrees of freedom. Two legs that
    disagree leave one degree of freedom (t = 12.7); a third gives two or more (t <= 4.3)."""
    se, df = mean_error(c.within, c.between, c.pairs + pairs, c.groups + groups)
    return math.exp(t975(df) * se) - 1
