"""``loadtune check``'s outcome for CI systems: JUnit XML, a Markdown summary, and a one-line verdict."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from loadtune.model.check import INCONCLUSIVE, NOTHING, PASS, REGRESSION, CheckResult


def junit_xml(result: CheckResult) -> str:
    """One testcase per checked config: a regression is a ``<failure>``; inconclusive and nothing
    measured are ``<error>`` (the check could not decide, which is not a verdict on the code)."""
    name = quoteattr(f"throughput {result.config.label()}")
    tag = {REGRESSION: "failure", INCONCLUSIVE: "error", NOTHING: "error"}.get(result.status)
    body = ""
    if tag:
        text = "; ".join(result.reasons) + "\n" + summary_line(result)
        body = f'<{tag} message={quoteattr(result.reasons[0] if result.reasons else result.status)}>{escape(text)}</{tag}>'
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuite name="loadtune" tests="1" failures="{int(tag == "failure")}" errors="{int(tag == "error")}" '
        f'time="{result.wall_s:.1f}">\n'
        f'  <testcase classname="loadtune.check" name={name} time="{result.wall_s:.1f}">{body}'
        f'<system-out>{escape(summary_line(result))}</system-out></testcase>\n'
        "</testsuite>\n"
    )


def change_text(result: CheckResult, dash: str) -> str:
    if result.change is None:
        return "-"
    high = f"{result.change_high:+.1%}" if result.change_high is not None else "unbounded"
    return f"{result.change:+.1%} ({result.change_low:+.1%}{dash}{high})"


def summary_line(result: CheckResult) -> str:
    now = f"{result.rate_now:,.0f}" if result.rate_now else "-"
    change = change_text(result, " to ")
    return (f"{result.config.label()}: {now} samples/s now, {result.baseline_rate:,.0f} in the baseline; "
            f"change against the shaped calibration {change} over {len(result.rounds)} paired rounds; "
            f"tolerance {result.tolerance:.0%}; {result.status} ({result.wall_s:.0f} s)")


def markdown(result: CheckResult) -> str:
    """A short table for a CI job summary page."""
    now = f"{result.rate_now:,.0f}" if result.rate_now else "-"
    cal_then, cal_now = result.baseline_calibration, result.calibration_now
    machine = (f"{result.machine_change:+.1%} ({result.machine_low:+.1%} … {result.machine_high:+.1%})"
               if result.machine_change is not None else "-")
    icon = {PASS: "✅ pass", REGRESSION: "❌ regression", INCONCLUSIVE: "⚠️ inconclusive"}.get(result.status, "⚠️ " + result.status)
    lines = [
        f"### loadtune check: {icon}",
        "",
        "| | baseline | now |",
        "|---|---:|---:|",
        f"| `{result.config.label()}` samples/s | {result.baseline_rate:,.0f} | {now} |",
        f"| shaped calibration samples/s | {f'{cal_then:,.0f}' if cal_then else '-'} | {f'{cal_now:,.0f}' if cal_now else '-'} |",
        f"| paired rounds | {len(result.baseline_rounds)} | {len(result.rounds)} |",
        f"| change of config / calibration | | {change_text(result, ' … ')} |",
        f"| the machine (calibration alone) | | {machine} |",
        "",
        f"Tolerance {result.tolerance:.0%}" + (f", floor {result.min_throughput:,.0f} samples/s" if result.min_throughput else "")
        + f"; {result.wall_s:.0f} s.",
    ]
    lines += [f"- {r}" for r in result.reasons] + [f"- environment: {e}" for e in result.environment]
    return "\n".join(lines) + "\n"
