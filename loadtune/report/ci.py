"""TODO docstring."""

from __future__ import annotations




import statistics
from xml.sax.saxutils import escape, quoteattr

from loadtune.model.check import CheckResult, PASS, REGRESSION


def junit_xml(result: CheckResult) -> str:
    """One testcase per checked config; the failure text carries the figures."""
    name = quoteattr(f"throughput {result.config.label()}")
    failed = result.status != PASS
    body = ""
    if failed:
        text = "; ".join(result.reasons) + "\n" + summary_line(result)
        body = f'<failure message={quoteattr(result.reasons[0] if result.reasons else result.status)}>{escape(text)}</failure>'
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuite name="loadtune" tests="1" failures="{int(failed)}">\n'
        f'  <testcase classname="loadtune.check" name={name}>{body}<system-out>{escape(summary_line(result))}</system-out></testcase>\n'
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
            f"normalised change {change}; tolerance {result.tolerance:.0%}; {result.status}")


def markdown(result: CheckResult) -> str:
    """A short table for a CI job summary page."""
    now = f"{result.rate_now:,.0f}" if result.rate_now else "-"
    cal_now = statistics.median([c for _, c in result.rounds if c]) if any(c for _, c in result.rounds) else None
    change = change_text(result, " … ")
    icon = {PASS: "✅ pass", REGRESSION: "❌ regression"}.get(result.status, "⚠️ " + result.status)
    lines = [
        f"### loadtune check: {icon}",
        "",
        "| | baseline | now |",
        "|---|---:|---:|",
        f"| `{result.config.label()}` samples/s | {result.baseline_rate:,.0f} | {now} |",
        f"| calibration samples/s | {result.baseline_calibration:,.0f} | {f'{cal_now:,.0f}' if cal_now else '-'} |",
        f"| normalised change | | {change} |",
        "",
        f"Tolerance {result.tolerance:.0%}" + (f", floor {result.min_throughput:,.0f} samples/s" if result.min_throughput else "") + ".",
    ]
    lines += [f"- {r}" for r in result.reasons] + [f"- environment: {e}" for e in result.environment]
    return "\n".join(lines) + "\n"


