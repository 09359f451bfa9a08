"""A scan's or a check's report as one self-contained HTML page (``--html PATH``): a file to hand a
colleague or keep as a CI artifact, which opens anywhere with nothing to fetch.

The page says what the terminal says: its tables are the terminal's own (``scan_table``,
``diagnosis_table``) turned into HTML cell by cell, its text the panel's and the notes' (rich ``Text``,
styles kept), so no figure is computed twice. The charts are inline SVG (``report.svg``). Everything a
user wrote (spec paths, labels, notes) is escaped; the page holds no script, and its
Content-Security-Policy forbids fetching anything, so a browser that opens it contacts no one.
Non-ASCII characters are written as character references, so the file reads the same in any encoding.
(A notebook's rendering of a result is ``report.html``: the terminal's report as preformatted HTML.)
"""

from __future__ import annotations

import io
from html import escape

from rich.console import Console
from rich.style import Style
from rich.table import Table
from rich.text import Text

from loadtune.analysis.view import Row, rows as view_rows
from loadtune.model.check import NO_BASE, PASS, REGRESSION, CheckResult
from loadtune.model.results import ScanResult
from loadtune.report.check import check_notes, duet_line, round_line
from loadtune.report.ci import SideRow, against_rows, change_text, defaults_line, limits_line, ratio_text, reference_rows, summary_line
from loadtune.report.diagnosis import diagnosis_table
from loadtune.report.notes import notes
from loadtune.report.plot import PlotError, plot_data
from loadtune.report.recommendation import loader_code, no_recommendation_text, recommendation_text
from loadtune.report.scan import reference_line, scan_table, shown_line
from loadtune.report.svg import Interval, ratio_chart, workers_chart
from loadtune.report.table import race_cell, race_figures
from loadtune.report.text import machine_text
from loadtune.version import __version__

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;color:#24292f;background:#fff;margin:0}
main{max-width:1180px;margin:0 auto;padding:20px 28px 40px}
h1{font-size:22px;margin:0 0 10px}
h2{font-size:17px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid #d0d7de}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}
dl.facts dt{color:#57606a}
dl.facts dd{margin:0}
table{border-collapse:collapse;margin:6px 0;font-variant-numeric:tabular-nums}
th,td{padding:3px 10px;border-bottom:1px solid #eaeef2;vertical-align:top;text-align:left}
th{border-bottom:2px solid #d0d7de;white-space:nowrap}
td.right,th.right{text-align:right}
td.center,th.center{text-align:center}
td.nowrap{white-space:nowrap}
tr.section td{border-bottom:2px solid #d0d7de}
.caption{color:#57606a;font-size:12.5px;max-width:1100px;margin:4px 0 0}
.text{white-space:pre-wrap;margin:6px 0}
ul.notes{padding-left:20px;margin:6px 0}
ul.notes li{margin:4px 0}
pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;overflow-x:auto;font-size:13px}
code,pre{font-family:ui-monospace,'DejaVu Sans Mono',Menlo,Consolas,monospace}
figure{margin:8px 0}
figcaption{color:#57606a;font-size:12.5px}
svg{max-width:100%;height:auto}
.verdict{font-size:18px;font-weight:600;padding:8px 12px;border-radius:6px;margin:8px 0}
.pass{background:#dafbe1;color:#116329}
.regression{background:#ffebe9;color:#a40e26}
.other{background:#fff8c5;color:#7d4e00}
footer{margin-top:32px;color:#57606a;font-size:12px}
"""
# rich's colour names on a white page (its terminal yellow and cyan are unreadable there)
COLOURS = {"green": "#1a7f37", "red": "#cf222e", "yellow": "#9a6700", "magenta": "#8250df", "cyan": "#0a6e8a",
           "blue": "#0969da", "white": "#57606a", "black": "#24292f"}
RENDER = Console(file=io.StringIO(), width=10_000, color_system="truecolor")  # resolves a Text's styles; prints nothing


# --- rich text and tables as HTML -----------------------------------------------------------------------


def css(style: Style | None) -> str:
    """A rich style as inline CSS: bold, dim, italic, underline and the foreground colour."""
    if style is None:
        return ""
    parts = [rule for flag, rule in ((style.bold, "font-weight:600"), (style.dim, "opacity:.7"),
                                      (style.italic, "font-style:italic"), (style.underline, "text-decoration:underline")) if flag]
    if style.color is not None and not style.color.is_default:
        name = style.color.name.removeprefix("bright_")
        parts.append(f"color:{COLOURS.get(name) or style.color.get_truecolor().hex}")
    return ";".join(parts)


def text_html(content: Text | str) -> str:
    """Escaped text with its styles as ``<span style>``; a plain string as it is (never read as markup)."""
    if isinstance(content, str):
        return escape(content)
    base = RENDER.get_style(content.style) if content.style else Style.null()  # render() applies it only where spans are
    out = []
    for segment in content.render(RENDER, end=""):
        rules = css(base + segment.style)
        out.append(f'<span style="{rules}">{escape(segment.text)}</span>' if rules else escape(segment.text))
    return "".join(out)


def table_html(table: Table, heading: str = "h3") -> str:
    """A rich table as an HTML table: its title (as a ``heading``), headers, cells (styles kept, the columns'
    alignment and wrapping), sections and caption."""
    columns = table.columns
    classes = [column_class(col) for col in columns]
    head = "".join(f'<th class="{cls}">{text_html(col.header)}</th>' for col, cls in zip(columns, classes))
    cells = [list(col.cells) for col in columns]
    body = []
    for i, row in enumerate(table.rows):
        tds = "".join(cell_html(cells[j][i], columns[j].style, classes[j]) for j in range(len(columns)))
        body.append(f'<tr class="section">{tds}</tr>' if row.end_section else f"<tr>{tds}</tr>")
    title = f"<{heading}>{text_html(table.title)}</{heading}>" if table.title else ""
    caption = f'<p class="caption">{text_html(table.caption)}</p>' if table.caption else ""
    return f"{title}<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{caption}"


def column_class(column) -> str:
    """A rich column's alignment and wrapping, as the page's CSS classes."""
    names = [column.justify] if column.justify in ("right", "center") else []
    return " ".join(names + (["nowrap"] if column.no_wrap else []))


def cell_html(cell, style, cls: str) -> str:
    """One ``<td>``: a ``Text`` or a string (the only cells loadtune's tables hold), the column's style on it."""
    content = cell if isinstance(cell, (Text, str)) else str(cell)
    rules = css(RENDER.get_style(style)) if style else ""
    return f'<td class="{cls}"' + (f' style="{rules}"' if rules else "") + f">{text_html(content)}</td>"


def section(title: str, *parts: str) -> str:
    """A titled part of the page; without a title, its first part brings its own heading."""
    heading = f"<h2>{escape(title)}</h2>" if title else ""
    return f"<section>{heading}{''.join(parts)}</section>"


def facts(pairs: list[tuple[str, str]]) -> str:
    """A definition list of the header's facts, every value escaped."""
    return '<dl class="facts">' + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in pairs) + "</dl>"


def document(title: str, body: list[str]) -> str:
    """The page: the CSP that forbids fetching anything, the styles inline, the body; ASCII throughout."""
    page = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n"
            + "\n".join(p for p in body if p)
            + f"\n<footer>Written by loadtune {escape(__version__)}.</footer>\n</main>\n</body>\n</html>\n")
    return page.encode("ascii", "xmlcharrefreplace").decode("ascii")


# --- a scan ----------------------------------------------------------------------------------------------


def spec_text(result: ScanResult) -> str:
    """``examples/images.py:dataset (sha256 3f2a…)``; a dataset handed over in Python has no file."""
    spec = result.spec
    where = (spec.path + (f":{spec.factory}" if spec.factory else "")) if spec.path else "a dataset given in Python"
    return where + (f" (sha256 {spec.sha256[:12]}…)" if spec.sha256 else "")


def scan_header(result: ScanResult) -> str:
    """What was measured, where, when, with which versions."""
    m, spec = result.machine, result.spec
    cuda = f" · CUDA {m.cuda}" if m.cuda else ""
    return facts([
        ("dataset", spec.dataset_type + (f", {spec.length:,} samples" if spec.length else "") + (" (iterable)" if spec.iterable else "")),
        ("spec", spec_text(result)),
        ("machine", machine_text(m) + (f" · busy as the scan started: {m.busy_text()}" if m.busy else "")),
        ("device", result.settings.device),
        ("measured", f"{result.created} · {result.state} · {len(result.trials)} trials"),
        ("versions", f"loadtune {result.loadtune_version} · torch {m.torch} · Python {m.python}{cuda} · {m.platform}"),
    ])


def race_bars(result: ScanResult, rows: list[Row]) -> list[Interval]:
    """The race's ratios to the pick, in the table's order and with the table's figures (``race_cell``); an
    unsettled ratio without a bar, as the table gives it none."""
    relative, apart, ruled = race_figures(result)
    if not relative:  # the table then shows no "vs pick" column either
        return []
    rec = result.recommendation
    bars = []
    for row in rows:
        cell = race_cell(row, rec, relative, apart, ruled)  # empty for a row the race did not hold
        if not cell:
            continue
        config = row.config.config
        label = result.label(config)
        if config == rec.config:
            bars.append(Interval(label + " ★", 1.0, text=cell))
        elif config in apart:
            bars.append(Interval(label, None, text=f"{cell}: see the notes"))
        else:
            r = relative[config]
            bars.append(Interval(label, r.value, r.low, r.high, cell))
    return bars


def race_section(result: ScanResult, rows: list[Row]) -> str:
    bars = race_bars(result, rows)
    if not bars:
        return ""
    return section("The race: throughput relative to the pick", figure(
        ratio_chart(bars, "pick"),
        "Measured side by side (loaders alive together, short blocks taking turns); the bar is the 95% interval over the "
        "turn pairs, the dot the ratio; log scale, so 0.5× and 2× lie equally far from the pick."))


def workers_section(result: ScanResult) -> str:
    """``--plot``'s figure, where the scan measured something to draw."""
    try:
        data = plot_data(result)
    except PlotError:
        return ""
    if not data.lines:
        return ""
    return section("Throughput against num_workers", figure(workers_chart(data), f"{data.title}. {data.subtitle}"))


def figure(chart: str, caption: str) -> str:
    return f"<figure>{chart}<figcaption>{escape(caption)}</figcaption></figure>"


def notes_section(result: ScanResult) -> str:
    items = [note[2:] if note.plain.startswith("• ") else note for note in notes(result)]
    if not items:
        return ""
    return section("Notes", '<ul class="notes">' + "".join(f"<li>{text_html(item)}</li>" for item in items) + "</ul>")


def recommendation_section(result: ScanResult) -> str:
    """The panel's text and its ``DataLoader(...)`` call (with the environment lines it needs); without a
    pick, why there is none."""
    if result.recommendation is None:
        return section("No recommendation", f'<p class="text">{escape(no_recommendation_text(result))}</p>')
    reference = reference_line(result)
    return section("Recommendation", f'<div class="text">{text_html(recommendation_text(result))}</div>',
                   f"<pre><code>{escape(loader_code(result))}</code></pre>",
                   f'<p class="caption">{escape(reference)}</p>' if reference else "")


def scan_page(result: ScanResult, rows: list[Row] | None = None) -> str:
    """The scan's page: the header, the ranked table (``rows``: a selection from ``view.select``, as the
    terminal showed it; default all), the race's ratios, throughput against num_workers, where the time
    goes and the bound, the notes, the recommendation."""
    shown = shown_line(result, rows)
    diagnosis = diagnosis_table(result)
    body = [
        f"<h1>loadtune scan: {escape(result.spec.dataset_type)}</h1>",
        scan_header(result),
        section("", table_html(scan_table(result, rows), "h2"), f'<p class="caption">{escape(shown)}</p>' if shown else ""),
        race_section(result, view_rows(result) if rows is None else rows),
        workers_section(result),
        section("", table_html(diagnosis, "h2")) if diagnosis is not None else "",
        notes_section(result),
        recommendation_section(result),
    ]
    return document(f"loadtune scan: {result.spec.dataset_type}", body)


# --- a check ---------------------------------------------------------------------------------------------


def verdict_html(outcome: CheckResult) -> str:
    """The status in its colour, with its reasons, and the one-line summary the terminal starts with."""
    kind = {PASS: "pass", REGRESSION: "regression"}.get(outcome.status, "other")
    reasons = ": " + "; ".join(outcome.reasons) if outcome.reasons else ""
    return (f'<div class="verdict {kind}">{escape(outcome.status.upper() + reasons)}</div>'
            f'<p class="text">{escape(summary_line(outcome))}</p>')


def sides_table(outcome: CheckResult) -> str:
    """Both sides side by side: the baseline's reference and today's rounds, or the base and the head."""
    if outcome.against is not None:
        against = outcome.against
        heads, rows = (f"base {against.base.label()}", f"head {against.head.label()}"), against_rows(outcome, "–")
        first = f"<code>{escape(outcome.config.label())}</code>"
    else:
        heads, rows, first = ("baseline (reference)", "now"), reference_rows(outcome, " to "), ""
    head = f"<tr><th>{first}</th>" + "".join(f'<th class="right">{escape(h)}</th>' for h in heads) + "</tr>"
    return f"<table><thead>{head}</thead><tbody>{''.join(side_row(r) for r in rows)}</tbody></table>"


def side_row(row: SideRow) -> str:
    label = (f"<code>{escape(row.code)}</code> " if row.code else "") + escape(row.label)
    return f'<tr><td>{label}</td><td class="right nowrap">{escape(row.then)}</td><td class="right nowrap">{escape(row.now)}</td></tr>'


def check_bars(outcome: CheckResult) -> tuple[list[Interval], str]:
    """The check's ratios with their intervals, and what 1.0 stands for: head / base, or today's config
    / calibration against the baseline's (and the machine's own change)."""
    if outcome.change is None:
        return [], ""
    high = 1 + outcome.change_high if outcome.change_high is not None else None
    if outcome.against is not None:
        return [Interval("head / base", 1 + outcome.change, 1 + outcome.change_low, high, ratio_text(outcome))], "base"
    bars = [Interval("config / calibration", 1 + outcome.change, 1 + outcome.change_low, high,
                     change_figure(outcome.change, outcome.change_low, outcome.change_high))]
    if outcome.machine_change is not None:
        bars.append(Interval("the machine (calibration alone)", 1 + outcome.machine_change, 1 + outcome.machine_low,
                             1 + outcome.machine_high, change_figure(outcome.machine_change, outcome.machine_low, outcome.machine_high)))
    return bars, "baseline"


def change_figure(value: float, low: float, high: float | None) -> str:
    """``-30.0% (-40.0% to -20.0%)``: a change beside its bar."""
    return f"{value:+.1%} ({low:+.1%} to {f'{high:+.1%}' if high is not None else 'unbounded'})"


def ratio_section(outcome: CheckResult) -> str:
    bars, reference = check_bars(outcome)
    if not bars:
        return ""
    what = ("head / base, the median of each round's turns, with its interval over the rounds" if outcome.against is not None
            else f"today against the baseline: change of config / calibration {change_text(outcome, ' to ')}")
    return section("Ratio", figure(ratio_chart(bars, reference, [(1 - outcome.tolerance, f"tolerance −{outcome.tolerance:.0%}")]),
                                   f"{what}; log scale; the dashed line is the tolerance."))


def rounds_section(outcome: CheckResult) -> str:
    """Each round as the terminal prints it: the base and the head in turns, or the baseline's reference rounds
    and today's."""
    if outcome.against is not None:
        sides = [("", [duet_line(i, r) for i, r in enumerate(outcome.against.rounds, 1)])]
    else:
        sides = [(name, [round_line(i, r) for i, r in enumerate(rounds, 1)])
                 for name, rounds in (("the baseline's reference", outcome.baseline_rounds), ("today", outcome.rounds))]
    parts = [(f"<h3>{escape(name)}</h3>" if name else "") + f"<pre>{escape(chr(10).join(x.strip() for x in lines))}</pre>"
             for name, lines in sides if lines]
    return section("Rounds", *parts) if parts else ""


def check_notes_section(outcome: CheckResult) -> str:
    lines = ([defaults_line(outcome)] if outcome.against is None else []) + (
        outcome.against.notes if outcome.against is not None else check_notes(outcome))
    lines = [line for line in lines if line]
    if not lines:
        return ""
    return section("Notes", '<ul class="notes">' + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ul>")


def check_header(outcome: CheckResult, spec: str, created: str) -> str:
    pairs = [("spec", spec), ("config", outcome.config.label()), ("limits", limits_line(outcome)), ("checked", created)]
    if outcome.against is not None:
        pairs[1:1] = [("head", outcome.against.head.label()), ("base", outcome.against.base.label())]
    elif outcome.reference_recorded_at:
        pairs.append(("reference recorded", outcome.reference_recorded_at))
    if outcome.machine is not None:
        pairs.append(("machine", machine_text(outcome.machine)))
    return facts(pairs + [("versions", f"loadtune {__version__}")])


def check_page(outcome: CheckResult, spec: str, created: str) -> str:
    """The check's page: the verdict, both sides side by side (the baseline's reference and today, or the
    base and the head), the ratio with its interval against the tolerance, the notes and the rounds.
    ``spec``: the spec file checked; ``created``: when (ISO 8601)."""
    title = f"loadtune check: {outcome.status}"
    body = [f"<h1>{escape(title)}</h1>", check_header(outcome, spec, created), verdict_html(outcome)]
    if outcome.status != NO_BASE:
        body += [section("Both sides", sides_table(outcome)), ratio_section(outcome)]
    body += [check_notes_section(outcome), rounds_section(outcome)]
    return document(title, body)
