"""The verdict of ``check --against``, and its guards, as pure functions.

Each round times the head (the work tree) and the base (the revision compared against) in turns, each
in a fresh process; the figure of a round is the log of the median of its turns' head / base. Both
sides meet the same machine in the same seconds, so no calibration and no stored reference are
needed: the change is the mean of the rounds' logs with a Student-t interval over rounds (``analysis.comparison``:
each round a fresh pair of processes, so their spread holds what differs from one process to the
next), read against the tolerance as the stored-reference check's is (docs/ci.md).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from loadtune.analysis.comparison import compare, singly
from loadtune.analysis.verdict import (
    MIN_FUTILITY_ROUNDS,
    Change,
    change_reasons,
    decide,
    futility,
    settling_chance,
    tamed,
    under_floor,
)
from loadtune.model.against import DuetRound
from loadtune.model.check import INCONCLUSIVE, NOTHING, REGRESSION
from loadtune.model.estimate import t975


def duet_round(head_rates: list[float], base_rates: list[float], head_first: bool) -> DuetRound:
    """A round from its sides' block rates, turn by turn (the first block of each side in the first turn):
    the rates as geometric means over the turns both completed, the ratio as the median of the turns'
    head / base (robust to a neighbour's burst that hit one block of a turn)."""
    turns = [(h, b) for h, b in zip(head_rates, base_rates) if h > 0 and b > 0]
    if not turns:
        return DuetRound(None, None, head_first, 0)
    head = math.exp(statistics.fmean(math.log(h) for h, _ in turns))
    base = math.exp(statistics.fmean(math.log(b) for _, b in turns))
    return DuetRound(head, base, head_first, len(turns), statistics.median(h / b for h, b in turns))


def duet_logs(rounds: list[DuetRound]) -> list[float]:
    """log(head / base) of each measured round, a stray round pulled in (``verdict.tamed``)."""
    return tamed([math.log(r.ratio) for r in rounds if r.ratio])


def judge_against(rounds: list[DuetRound], tolerance: float,
                  min_throughput: float | None = None) -> tuple[str, list[str], Change | None]:
    """The verdict, its reasons and the change it rests on. Under ``min_throughput`` (the head's median
    samples/s) is a regression whatever the ratio says."""
    head = [r.head_rate for r in rounds if r.head_rate]
    if not head or not any(r.ratio for r in rounds):
        return NOTHING, ["no round measured both sides" if head else "no round of the head could be measured"], None
    compared = compare(singly(duet_logs(rounds)))
    status, change = decide(compared, tolerance), Change.of(compared)
    reasons = change_reasons(change, status, tolerance, "the head loads {fell} slower than the base, timed in turns",
                             "too few rounds measured both sides to estimate the noise")
    floor = under_floor(head, min_throughput)
    if floor:
        status = REGRESSION
        reasons.append(floor)
    return status, reasons, change


def chance_to_decide_duet(rounds: list[DuetRound], tolerance: float, rounds_at_end: int) -> float | None:
    """The chance that ``rounds_at_end`` rounds in all would end with an interval wholly on one side of
    ``-tolerance``, predicted from the rounds so far (``verdict.settling_chance``); None under two."""
    logs = duet_logs(rounds)
    n = len(logs)
    if n < 2:
        return None
    if rounds_at_end <= n:
        return 0.0
    var = statistics.variance(logs)
    half = t975(rounds_at_end - 1) * math.sqrt(var / rounds_at_end)  # the final interval's, at today's spread
    return settling_chance(statistics.fmean(logs), half, var, n, rounds_at_end, tolerance)


def next_against_step(rounds: list[DuetRound], tolerance: float, min_rounds: int, rounds_at_end: int,
                      min_throughput: float | None = None) -> tuple[str, bool, str | None]:
    """After each round: the verdict so far, whether to stop, and why when the stop comes before the
    budget does (as ``verdict.next_step``: decided, out of budget, or unlikely to be decided by it)."""
    if len(rounds) < min_rounds:
        return INCONCLUSIVE, False, None
    status, _, _ = judge_against(rounds, tolerance, min_throughput)
    if status != INCONCLUSIVE or rounds_at_end <= len(rounds):
        return status, True, None
    if len(rounds) < MIN_FUTILITY_ROUNDS:
        return status, False, None
    early = futility(chance_to_decide_duet(rounds, tolerance, rounds_at_end), len(rounds), rounds_at_end)
    return status, early is not None, early


def owner(file: str, roots: dict[str, str]) -> str | None:
    """Which tree a file lies in: the deepest root holding it (a base checked out inside the head's
    folder is the base's); None: neither."""
    path = Path(file)
    holding = [(len(Path(root).parts), side) for side, root in roots.items() if path.is_relative_to(root)]
    return max(holding)[1] if holding else None


def foreign_modules(origins: dict[str, dict[str, str]], roots: dict[str, str]) -> dict[str, dict[str, str]]:
    """For each side, the modules it loaded from the other side's tree (``origins``: side -> module ->
    file, as each side reported; ``roots``: side -> its tree). Empty when each imported its own code."""
    found = {}
    for side, modules in origins.items():
        strays = {name: file for name, file in modules.items() if owner(file, roots) not in (side, None)}
        if strays:
            found[side] = strays
    return found


def foreign_message(found: dict[str, dict[str, str]], roots: dict[str, str]) -> str:
    """The refusal, with the remedy: an import hook (an editable install) maps the package to one folder
    whatever ``sys.path`` says, so both sides would measure the same code."""
    side, modules = next(iter(found.items()))
    other = next(s for s in roots if s != side)
    names = sorted(modules)
    shown = ", ".join(f"{n} from {modules[n]}" for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (f"the {side} revision's process imported the {other}'s code ({shown}), not its own under {roots[side]}: "
            "both sides would measure the same code. Usually an editable install of your package (pip install -e) does "
            "this: its import hook ignores sys.path. Uninstall it (pip uninstall ...) and put the package's folder on "
            "PYTHONPATH instead (e.g. PYTHONPATH=src loadtune check ...), which loadtune points at each revision's own "
            "tree; or install it (non-editable) in neither")
