"""``loadtune check``'s outcome for CI systems: JUnit XML, a Markdown summary, and a one-line verdict."""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from loadtune.model.against import Against
from loadtune.model.check import INCONCLUSIVE, NO_BASE, NOTHING, PASS, REGRESSION, CheckResult
from loadtune.model.config import TrialConfig
from loadtune.model.paired import CALIBRATION, CONFIG, DEFAULTS, turn_order
from loadtune.model.scanfile import write_atomic
from loadtune.model.trial import Trial
from loadtune.report.text import machine_text, rate


@dataclass
class Measured:
    """One loader the check measured, as a JUnit test case: what it is, its trials, and whose blocks
    are read in them (``role``; only the checked config carries the verdict). A paired trial holds
    every loader of its round, and each is given its share of the trial's seconds."""

    name: str
    config: TrialConfig
    trials: list[Trial]
    role: str = CONFIG

    @property
    def checked(self) -> bool:
        return self.role == CONFIG

    @property
    def seconds(self) -> float:
        return sum(t.wall_s / (1 + bool(t.calibration_blocks) + bool(t.default_blocks)) for t in self.trials)

    @property
    def rates(self) -> list[float]:
        rates = []
        for t in self.trials:
            own = {CALIBRATION: t.calibration_blocks, DEFAULTS: t.default_blocks}.get(self.role)
            if t.calibration_blocks and own is not None:  # a paired trial: this loader's blocks in it
                rates += [statistics.median(b.rate for b in own)] if own else []
            elif t.ok and t.estimate is not None:
                rates.append(t.estimate.median)
        return rates


def measured(result: CheckResult) -> list[Measured]:
    """The check's trials by the loader they measured: one paired trial per round holding the config,
    its shaped calibration and PyTorch's defaults (unless the config is them), or (several ranks) a
    trial per loader in the order the round ran them (``model.paired.turn_order``)."""
    trials, n, with_defaults = list(result.trials), len(result.rounds), result.defaults is not None
    roles = turn_order(with_defaults, True)
    by_role: dict[str, list[Trial]] = {role: [] for role in roles}
    if n and len(trials) == n:
        by_role = {role: trials for role in roles}
    elif n and len(trials) == len(roles) * n:
        for i, paired in enumerate(result.rounds):
            for role, trial in zip(turn_order(with_defaults, paired.config_first), trials[i * len(roles):]):
                by_role[role].append(trial)
    else:  # not a check's own trial list (hand-made): every trial of the config counts as its own
        by_role = {CONFIG: [t for t in trials if t.config == result.config]}
    label = result.config.label()
    cases = [(CONFIG, f"throughput {label}", result.config), (CALIBRATION, f"shaped calibration ({label})", result.config)]
    if with_defaults:
        cases.append((DEFAULTS, f"PyTorch's defaults {result.defaults.label()}", result.defaults))
    return [Measured(name, config, by_role[role], role) for role, name, config in cases if role in by_role]


def testcase(case: Measured, result: CheckResult) -> tuple[str, str | None]:
    """One ``<testcase>`` and its outcome tag: the checked config fails on a regression and errors when
    the check could not decide (inconclusive, nothing measured: no verdict on the code); a context
    config that measured nothing is skipped, since the verdict does not rest on it."""
    tag, message, text = None, "", ""
    if case.checked:
        tag = {REGRESSION: "failure", INCONCLUSIVE: "error", NOTHING: "error"}.get(result.status)
        message = result.reasons[0] if result.reasons else result.status
        text = "; ".join(result.reasons) + "\n" + summary_line(result)
        out = summary_line(result)
    elif case.role == DEFAULTS and case.rates and result.gain is not None:
        out = defaults_line(result)
    elif case.rates:
        out = f"{case.name}: {rate(statistics.median(case.rates))} samples/s now, median of {len(case.rates)} trials"
    else:
        failed = next((t.error.message for t in case.trials if t.error), "it was not measured")
        tag, message, out = "skipped", f"not measured: {failed.splitlines()[0]}", f"{case.name}: not measured"
    body = ""
    if tag == "skipped":
        body = f"<skipped message={quoteattr(message)}/>"
    elif tag:
        body = f"<{tag} message={quoteattr(message)}>{escape(text)}</{tag}>"
    xml = (f'  <testcase classname="loadtune.check" name={quoteattr(case.name)} time="{case.seconds:.1f}">{body}'
           f"<system-out>{escape(out)}</system-out></testcase>\n")
    return xml, tag


def junit_xml(result: CheckResult) -> str:
    """One test case per config the check measured (the checked one, its shaped calibration, PyTorch's
    defaults), each with the seconds its trials took; see ``testcase`` for the outcomes. Against another
    revision: one per side (``side_cases``)."""
    cases = side_cases(result) if result.against else [testcase(case, result) for case in measured(result)]
    tags = [tag for _, tag in cases]
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuite name="loadtune check" tests="{len(cases)}" failures="{tags.count("failure")}" '
        f'errors="{tags.count("error")}" skipped="{tags.count("skipped")}" time="{result.wall_s:.1f}">\n'
        + "".join(xml for xml, _ in cases)
        + "</testsuite>\n"
    )


def appends(path: Path, environ: Mapping[str, str] | None = None) -> bool:
    """GitHub's job summary (``$GITHUB_STEP_SUMMARY``) is one file that every step appends to: written
    over, it would lose what earlier steps wrote. Any other Markdown target is replaced."""
    summary = (os.environ if environ is None else environ).get("GITHUB_STEP_SUMMARY")
    return bool(summary) and Path(summary).resolve() == Path(path).resolve()


def write_markdown(path: Path, text: str, environ: Mapping[str, str] | None = None) -> None:
    """The Markdown summary: appended (after a blank line) to the job summary, written atomically elsewhere."""
    if not appends(path, environ):
        write_atomic(Path(path), text)
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(("\n" if f.tell() else "") + text)


def change_text(result: CheckResult, dash: str) -> str:
    """The change with its interval, named for what it holds: the noise of the rounds (the drift
    between the baseline's session and today's, a few percent over hours on one machine, is not in it,
    so it is not called 95%: it held an unchanged dataset's change in 30 of 77 checks)."""
    if result.change is None:
        return "-"
    high = f"{result.change_high:+.1%}" if result.change_high is not None else "unbounded"
    return f"{result.change:+.1%} (interval from the rounds' noise alone: {result.change_low:+.1%}{dash}{high})"


def defaults_line(outcome: CheckResult) -> str | None:
    """PyTorch's defaults in the same rounds, and the config's gain over them side by side (today, and
    in the reference's rounds); None when they were not measured. The interval is named for what it
    holds, as the change's is: checks minutes apart read gains further apart than it (benchmarks/RESULTS.md)."""
    if outcome.defaults is None:
        return None
    label = outcome.defaults.label()
    if outcome.gain is None:
        return f"PyTorch's defaults {label}: not measured in enough rounds for a gain"
    then = f"; {outcome.baseline_gain:.2f}× in the reference" if outcome.baseline_gain else ""
    return (f"PyTorch's defaults {label}: {outcome.default_rate:,.0f} samples/s in the same rounds; the config "
            f"{outcome.gain:.2f}× (interval from the rounds' noise alone: {outcome.gain_low:.2f}–{outcome.gain_high:.2f}×) side by side{then}")


def summary_line(result: CheckResult) -> str:
    if result.against:
        return against_line(result)
    now = f"{result.rate_now:,.0f}" if result.rate_now else "-"
    change = change_text(result, " to ")
    then = f"{result.baseline_rate:,.0f} in the baseline" if result.baseline_rate else "not measured by the baseline's scan"
    return (f"{result.config.label()}: {now} samples/s now, {then}; "
            f"change against the shaped calibration {change} over {len(result.rounds)} paired rounds; "
            f"tolerance {result.tolerance:.0%}; {result.status} ({result.wall_s:.0f} s)")


@dataclass(frozen=True)
class SideRow:
    """A row of a check's two sides, as the Markdown summary and the HTML page show it: what it is
    (``code``: the config label it is about, shown as code before it), the baseline's (or the base's)
    figure, and today's (or the head's)."""

    label: str
    then: str
    now: str
    code: str = ""


def markdown_row(row: SideRow) -> str:
    """``| `w2 pf2 bs64` samples/s | 1,100 | 1,000 |``; an empty cell stays ``| |``."""
    label = f"`{row.code}` {row.label}" if row.code else row.label
    return "|" + "|".join(f" {cell} " if cell else " " for cell in (label, row.then, row.now)) + "|"


def reference_rows(result: CheckResult, dash: str = " … ") -> list[SideRow]:
    """The baseline's figures beside today's: the config, the shaped calibration, the rounds, the change
    of their ratio with its interval, the gain over PyTorch's defaults, the machine, the CPU time."""
    now = f"{result.rate_now:,.0f}" if result.rate_now else "-"
    cal_then, cal_now = result.baseline_calibration, result.calibration_now
    machine = (f"{result.machine_change:+.1%} ({result.machine_low:+.1%}{dash}{result.machine_high:+.1%})"
               if result.machine_change is not None else "-")
    cpu = f"{result.cpu_change:+.1%}" if result.cpu_change is not None else "-"
    gain = f"{result.gain:.2f}× ({result.gain_low:.2f}{dash}{result.gain_high:.2f}×)" if result.gain is not None else "-"
    then = f"{result.baseline_gain:.2f}×" if result.baseline_gain else "-"
    recorded = f", recorded {result.reference_recorded_at}" if result.reference_recorded_at else ""  # drift grows with its age
    return [
        SideRow("samples/s", f"{result.baseline_rate:,.0f}" if result.baseline_rate else "-", now, code=result.config.label()),
        SideRow("shaped calibration samples/s", f"{cal_then:,.0f}" if cal_then else "-", f"{cal_now:,.0f}" if cal_now else "-"),
        SideRow("paired rounds", f"{len(result.baseline_rounds)}{recorded}", str(len(result.rounds))),
        SideRow("change of config / calibration", "", change_text(result, dash)),
        *([SideRow("the config over PyTorch's defaults, side by side", then, gain)] if result.defaults else []),
        SideRow("the machine (calibration alone)", "", machine),
        SideRow("CPU time per unit of calibration work", "", cpu),
    ]


def limits_line(result: CheckResult) -> str:
    """``Tolerance 10%, floor 500 samples/s; 42 s.``"""
    return (f"Tolerance {result.tolerance:.0%}" + (f", floor {result.min_throughput:,.0f} samples/s" if result.min_throughput else "")
            + f"; {result.wall_s:.0f} s.")


def runner_lines(result: CheckResult) -> list[str]:
    """Where the check ran, for a summary read days later (none for results without it)."""
    return [f"Runner: {machine_text(result.machine)}."] if result.machine is not None else []


def markdown(result: CheckResult) -> str:
    """A short table for a CI job summary page."""
    if result.against:
        return against_markdown(result)
    icon = {PASS: "✅ pass", REGRESSION: "❌ regression", INCONCLUSIVE: "⚠️ inconclusive"}.get(result.status, "⚠️ " + result.status)
    lines = [
        f"### loadtune check: {icon}",
        "",
        "| | baseline | now |",
        "|---|---:|---:|",
        *[markdown_row(row) for row in reference_rows(result)],
        "",
        limits_line(result),
        *runner_lines(result),
    ]
    lines += [f"- {r}" for r in result.reasons] + [f"- environment: {e}" for e in result.environment]
    return "\n".join(lines) + "\n"


# --- check --against: the head and the base timed in turns -----------------------------------------------


ICONS = {PASS: "✅ pass", REGRESSION: "❌ regression", INCONCLUSIVE: "⚠️ inconclusive", NO_BASE: "➖ nothing to compare"}


def samples(value: float | None) -> str:
    return rate(value) if value else "-"


def ratio_text(result: CheckResult, dash: str = "–") -> str:
    """head / base with its interval, ``0.93× (0.91–0.95)``; ``-`` when not estimated."""
    if result.change is None:
        return "-"
    high = f"{1 + result.change_high:.2f}" if result.change_high is not None else "unbounded"
    return f"{1 + result.change:.2f}× ({1 + result.change_low:.2f}{dash}{high})"


def headline(result: CheckResult) -> str:
    """``head 3f2a1c9 vs base origin/main 8e01b7d: 0.93× (0.91–0.95)``."""
    return f"{result.against.title()}: {ratio_text(result)}"


def against_line(result: CheckResult) -> str:
    """The one-line verdict of a check against another revision."""
    against: Against = result.against
    if result.status == NO_BASE:
        return f"{result.config.label()}: {against.title()}: nothing to compare; {NO_BASE}"
    rates = f"head {samples(against.head_rate)}, base {samples(against.base_rate)} samples/s"
    return (f"{result.config.label()}: {headline(result)} over {len(against.rounds)} rounds timed in turns ({rates}); "
            f"tolerance {result.tolerance:.0%}; {result.status} ({result.wall_s:.0f} s)")


def side_cases(result: CheckResult) -> list[tuple[str, str | None]]:
    """One ``<testcase>`` per side: the head carries the verdict (as ``testcase`` says for the checked
    config; skipped when the base has no spec), the base passes with its samples/s, or is skipped when
    it measured nothing."""
    against: Against = result.against
    head_tag = "skipped" if result.status == NO_BASE else {REGRESSION: "failure", INCONCLUSIVE: "error", NOTHING: "error"}.get(result.status)
    base_tag = None if against.base_rate or result.status == NO_BASE else "skipped"
    label = result.config.label()
    cases = []
    for side, revision, tag, seconds in (("head", against.head, head_tag, result.trials[0::2]),
                                         ("base", against.base, base_tag, result.trials[1::2])):
        out = summary_line(result) if side == "head" else f"base {revision.label()}: {samples(against.base_rate)} samples/s"
        message = (result.reasons[0] if result.reasons else result.status) if side == "head" else "it was not measured"
        body = ""
        if tag == "skipped":
            body = f"<skipped message={quoteattr(message)}/>"
        elif tag:
            body = f"<{tag} message={quoteattr(message)}>{escape('; '.join(result.reasons))}</{tag}>"
        name = f"{side} {revision.label()} ({label})"
        cases.append((f'  <testcase classname="loadtune.check" name={quoteattr(name)} time="{sum(t.wall_s for t in seconds):.1f}">'
                      f"{body}<system-out>{escape(out)}</system-out></testcase>\n", tag))
    return cases


def against_rows(result: CheckResult, dash: str = " … ") -> list[SideRow]:
    """The base's figures beside the head's: samples/s timed in turns, and head / base with its interval."""
    against: Against = result.against
    return [SideRow("samples/s, timed in turns", samples(against.base_rate), samples(against.head_rate)),
            SideRow(f"head / base over {len(against.rounds)} rounds", "", ratio_text(result, dash))]


def against_markdown(result: CheckResult) -> str:
    """The job summary of a check against another revision: both revisions named, their samples/s
    timed in turns, the ratio with its interval, the reasons and notes."""
    against: Against = result.against
    icon = ICONS.get(result.status, "⚠️ " + result.status)
    lines = [f"### loadtune check: {icon}", "", f"{headline(result)}", ""]
    if result.status != NO_BASE:
        lines += [
            f"| `{result.config.label()}` | base `{against.base.label()}` | head `{against.head.label()}` |",
            "|---|---:|---:|",
            *[markdown_row(row) for row in against_rows(result)],
            "",
            limits_line(result),
            *runner_lines(result),
        ]
    lines += [f"- {r}" for r in result.reasons + against.notes]
    return "\n".join(lines) + "\n"
