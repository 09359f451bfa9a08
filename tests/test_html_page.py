"""The HTML page (``--html PATH``): built from saved scans and checks, it holds the terminal's figures (the
pick, its samples/s, the race's ratios and intervals, the snippet), fetches nothing, parses with balanced
tags and escapes what users wrote; ``show``, ``scan`` and ``check`` write it, and refuse a path they cannot
write before any work."""

import dataclasses
import io
import json
import os
import re
import sys
from html.parser import HTMLParser

import pytest
from conftest import FIXTURES, SPECS, first_trial_saved, flat, interrupt_when, run_cli
from rich.console import Console
from test_against import against_result
from test_ci_output import check_result
from typer.testing import CliRunner

from loadtune.analysis.view import Filters, rows as view_rows, select
from loadtune.cli.app import app
from loadtune.model.check import PASS, REGRESSION
from loadtune.model.results import ScanResult
from loadtune.report.page import CSP, check_page, scan_page
from loadtune.report.plot import plot_data
from loadtune.report.recommendation import loader_code, recommendation_text
from loadtune.report.scan import print_report
from loadtune.report.svg import Interval, ratio_chart, workers_chart

RACE = FIXTURES / "race_scan.json"  # a race, a stage profile, a GPU
TINY = FIXTURES / "tiny_scan.json"  # a grid on the CPU: no race, no profile
PICK = "w8 pf2 pin persist stream bs32"
VOID = {"meta", "br", "img", "input", "link", "hr", "area", "base", "col", "embed", "source", "track", "wbr"}


class Page(HTMLParser):
    """The page as a browser's parser reads it: its text (references resolved), every tag's attributes, and
    the tags left open or closed out of turn."""

    def __init__(self, html):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.tags, self.chunks = [], [], [], []
        self.feed(html)
        self.close()
        self.errors += [f"<{tag}> never closed" for tag in self.stack]

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else 'nothing'}>")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.chunks.append(data)

    @property
    def text(self):
        return flat(" ".join(self.chunks))


BAR = str.maketrans("", "", "█▉▊▋▌▍▎▏")  # the table's relative bar, drawn in block characters


def terminal(result, width=250):
    console = Console(file=io.StringIO(), width=width, record=True)
    print_report(console, result, details=True)
    return console.export_text()


def part(html, start, end):
    """The text of the page from the first ``start`` (a string of its HTML) to the next ``end``."""
    begin = html.index(start)
    return Page(html[begin:html.index(end, begin)]).text


def pages():
    """Every kind of page: scans with and without a race or a profile, a check against a baseline and one against a revision."""
    baseline_check = check_result(REGRESSION)
    baseline_check.machine_change, baseline_check.machine_low, baseline_check.machine_high = 0.02, -0.01, 0.05
    return {"race": scan_page(ScanResult.load(RACE)), "tiny": scan_page(ScanResult.load(TINY)),
            "check": check_page(baseline_check, "tests/specs/slowable.py", "2026-11-29T05:00:00+00:00"),
            "against": check_page(against_result(), "dataset.py", "2026-11-29T05:00:00+00:00")}


# --- what the page says ---------------------------------------------------------------------------------


def test_the_page_holds_the_pick_its_figures_the_race_and_the_snippet():
    result = ScanResult.load(RACE)
    html = scan_page(result)
    text, table, race = Page(html).text, part(html, "<table>", "</table>"), part(html, "The race", "</svg>")
    # the pick, starred, and its samples/s as the table gives them: its runs' range, its interval being over 2x wide
    assert f"{PICK} ★" in table and "1,449–1,638 runs" in table
    assert "0.92× (0.77–1.11)" in table and "0.92× (0.77–1.11)" in race  # in the "vs pick" column, and by its bar in the race chart
    assert "0.27×" not in table + race and "slower" in table and "slower" in race  # over 2x wide: the verdict alone
    assert race.index(PICK) < race.index("non-blocking") < race.index("w0 bs32")  # the table's order
    assert "cap: workers ◀" in text and "Bound: 2,306 samples/s" in text  # the stage profile and the bound
    assert flat(loader_code(result)) in text and "num_workers=8," in text and "CUDAPrefetcher" in text
    assert flat(recommendation_text(result).plain) in text  # the panel's own words
    assert "NVIDIA H100 80GB HBM3" in text and "torch 2.11.0+cu130" in text and "2026-11-27T21:17:03+00:00" in text
    assert "/work/main/examples/images.py:dataset" in text


@pytest.mark.parametrize("fixture", [RACE, TINY])
def test_every_row_of_the_terminals_table_is_on_the_page(fixture):
    """Same rows, same figures, same statuses: each table line of the terminal's report, cell by cell, in the page."""
    result = ScanResult.load(fixture)
    text = flat(Page(scan_page(result)).text.translate(BAR))
    rows = [line for line in terminal(result).splitlines() if line.startswith("│")]
    assert len(rows) >= 7  # every config of the scan, and the stage profile's rows where it has one
    for line in rows:
        assert flat(line.translate(BAR).replace("│", " ")) in text, line


def test_a_filtered_page_shows_the_rows_chosen_and_says_so():
    result = ScanResult.load(TINY)
    rows = select(result, Filters(workers=frozenset({0, 1})))
    html = scan_page(result, rows)
    table = Page(html[html.index("<table>"):html.index("</table>") + 8])
    assert sum(1 for tag, _ in table.tags if tag == "tr") == 1 + len(rows) == 5  # the header, w0, w1 pf2, w1 pf4, pin skipped
    assert "w4 pf2" not in table.text and "w1 pf4" in table.text and "pin_memory=True" in table.text
    assert f"showing 4 of {len(view_rows(result))} rows" in Page(html).text


def test_the_race_chart_draws_each_interval_around_the_ratio_on_a_log_scale():
    chart = ratio_chart([Interval("a", 0.5, 0.4, 0.6, "0.50×"), Interval("b", 2.0, 1.5, 3.0, "2.00×"),
                         Interval("c", 1.2, 1.1, None, "unbounded"), Interval("d", None, text="unsettled")], "pick")
    dots = [float(x) for x in re.findall(r'<circle cx="([\d.]+)"', chart)]
    bars = [(float(x), float(w)) for x, w in re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', chart)]
    one = float(re.search(r'<line x1="([\d.]+)"[^>]*stroke-width="1.5"', chart).group(1))  # the pick's line
    assert len(dots) == len(bars) == 3 and "unsettled" in chart  # no bar, no dot where there is no ratio
    for dot, (left, width) in zip(dots, bars):
        assert left < dot < left + width
    assert abs((one - dots[0]) - (dots[1] - one)) < 0.5  # 0.5× and 2× lie equally far from 1.0
    assert bars[2][0] + bars[2][1] > max(left + width for left, width in bars[:2])  # unbounded: open to the edge
    assert "1 = pick" in chart and "0.5×" in chart and "2×" in chart


def test_the_workers_chart_draws_plots_lines_the_pick_and_the_bound():
    data = plot_data(ScanResult.load(RACE))
    chart = workers_chart(data)
    assert chart.count("<polyline") == len(data.lines) == 2
    assert chart.count("<polygon") == 2  # the pick's star and its legend's
    assert "bound: dataset CPU work" in chart and 'stroke-dasharray="6 4"' in chart
    assert all(line.label in chart for line in data.lines)
    assert "num_workers=8: 1,449 samples/s" in chart  # the pick's point, named on hover


def test_a_check_page_shows_both_sides_with_the_verdict_ratio_and_interval():
    text = Page(pages()["against"]).text
    assert "REGRESSION: the head loads 7.0% slower than the base" in text
    assert "base origin/main 8e01b7d head 3f2a1c9 + uncommitted changes" in text  # the two sides' headers, in a row
    assert "samples/s, timed in turns 1,000 930" in text and text.count("0.93× (0.91–0.96)") >= 2
    assert "tolerance −5%" in text and "round 3: head 940 samples/s, base 1,000 samples/s" in text

    text = Page(pages()["check"]).text
    assert "baseline (reference) now" in text and "w2 pf2 bs64 samples/s 1,100 1,000" in text
    assert "change of config / calibration -30.0% (interval from the rounds' noise alone: -40.0% to -20.0%)" in text
    assert "the config over PyTorch's defaults, side by side 3.20× 3.33× (3.00 to 3.70×)" in text
    assert "tolerance −10%" in text and "the baseline's reference" in text and "today" in text
    assert "machine 2 usable cores (4 logical) · AMD EPYC 9454 · 24.0 GiB RAM · no GPU" in text  # where it ran


def test_a_passing_check_and_one_with_nothing_to_compare():
    html = check_page(check_result(PASS), "d.py", "now")
    passed = Page(html)
    assert '<div class="verdict pass">PASS</div>' in html and not passed.errors
    nothing = against_result("no base")
    nothing.against.rounds.clear()
    nothing.change = nothing.change_low = nothing.change_high = None
    text = Page(check_page(nothing, "d.py", "now")).text
    assert "NO BASE" in text and "Both sides" not in text and "<svg" not in check_page(nothing, "d.py", "now")


# --- what the page is ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["race", "tiny", "check", "against"])
def test_the_page_fetches_nothing_parses_and_is_ascii(name):
    html = pages()[name]
    page = Page(html)
    assert not page.errors, page.errors[:5]
    assert html.isascii() and html.startswith("<!DOCTYPE html>")
    assert "http://" not in html and "https://" not in html and "url(" not in html and "@import" not in html
    assert not any(tag in ("script", "iframe", "object", "embed", "link", "img") for tag, _ in page.tags)
    for tag, attrs in page.tags:
        for key in ("src", "href", "srcset", "action", "data"):
            assert key not in attrs or attrs[key].startswith("data:"), (tag, attrs)
        assert not any(key.startswith("on") for key in attrs), (tag, attrs)
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == [CSP] and "default-src 'none'" in CSP


def test_what_users_wrote_is_escaped():
    result = ScanResult.load(RACE)
    result.spec.path = "data/<script>alert(1)</script>.py"
    result.spec.dataset_type = "X<img src=x onerror=alert(2)>"
    result.notes.append('a note with <b>markup</b> & "quotes"')
    html = scan_page(result)
    page = Page(html)
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert "data/<script>alert(1)</script>.py" in page.text and 'a note with <b>markup</b> & "quotes"' in page.text
    assert not page.errors
    against = against_result()
    against.against.base = dataclasses.replace(against.against.base, name="<script>x</script>")
    against.against.notes.append("<style>body{display:none}</style>")
    html = check_page(against, "<svg onload=alert(3)>.py", "now")
    assert "<script>x" not in html and "<style>body" not in html and "<svg onload" not in html
    assert "base <script>x</script> 8e01b7d" in Page(html).text


def test_the_notebook_rendering_is_unchanged():
    result = ScanResult.load(TINY)
    assert result._repr_html_().startswith("<pre") and "fastest first" in result._repr_html_()


# --- the commands ---------------------------------------------------------------------------------------


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def test_show_writes_the_page_of_the_rows_it_shows(tmp_path):
    out = tmp_path / "report.html"
    got = invoke("show", RACE, "--html", out, "--top", "2")
    assert got.exit_code == 0, got.output
    assert f"Report page written to {out}" in flat(got.output)
    page = Page(out.read_text())
    assert not page.errors and "showing 2 of 4 rows" in page.text and "w0 bs32 default" not in page.text.split("showing")[0]
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # written atomically: no temporary file left


def test_a_path_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    missing = tmp_path / "no" / "report.html"
    for args in (["show", TINY, "--html", missing], ["show", TINY, "--html", tmp_path],
                 ["scan", SPECS / "no_such_spec.py", "--html", missing], ["check", SPECS / "tiny.py", "--html", missing]):
        got = invoke(*args)
        assert got.exit_code == 2, (args, got.output)
        assert "--html" in got.output and ("does not exist" in got.output or "is a folder" in got.output), got.output
        assert "no_such_spec" not in got.output and "Traceback" not in got.output
    got = invoke("show", TINY, TINY, "--html", tmp_path / "r.html")
    assert got.exit_code == 2 and "--html draws one scan; run show --html on each of the two" in flat(got.output)
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_scan_writes_the_page_at_the_end_and_on_ctrl_c(tiny_scan, tmp_path):
    proc, html = tiny_scan.proc, tiny_scan.html
    result = ScanResult.load(tiny_scan.json)
    page = Page(html.read_text())
    assert not page.errors and result.label(result.recommendation.config) + " ★" in page.text
    assert flat(loader_code(result)) in page.text and f"Report page written to {html}" in flat(proc.stdout)

    partial, partial_html = tmp_path / "partial.json", tmp_path / "partial.html"
    cmd = [sys.executable, "-m", "loadtune", "scan", str(SPECS / "tiny.py"), "--workers", "0,1,2", "--prefetch", "2,4",
           "--json", str(partial), "--html", str(partial_html), "-q", "--warmup", "0.3", "--block-time", "0.3", "--blocks", "3"]
    code, stdout, stderr = interrupt_when(cmd, first_trial_saved(partial), tmp_path, env={**os.environ, "COLUMNS": "200"})
    assert code == 130, stderr
    trials = json.loads(partial.read_text())["trials"]
    text = Page(partial_html.read_text()).text
    assert "interrupted" in text and f"Partial scan (interrupted): {len(trials)} trials finished" in text


@pytest.mark.slow
def test_check_writes_both_sides_of_a_check_against_another_tree(tmp_path):
    """``check --against-dir``: the head and the base timed in turns; the page names both, with the figures the
    terminal printed."""
    quick = '\nloadtune_options = {"batch_size": 32, "warmup": 0.2, "block_time": 0.1, "blocks": 3}\n'  # the page, not the figures
    for side in ("head", "base"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "dataset.py").write_text((SPECS / "tiny.py").read_text() + quick)
    html = tmp_path / "check.html"
    proc = run_cli("check", "dataset.py", "--against-dir", tmp_path / "base", "--config", "num_workers=0", "--rounds", "2",
                   "--budget", "10", "--html", html, cwd=tmp_path / "head")
    assert proc.returncode in (0, 1, 4), proc.stdout + proc.stderr
    page = Page(html.read_text())
    summary = next(line for line in proc.stdout.splitlines() if line.startswith("w0 bs32: head "))
    assert not page.errors and flat(summary) in page.text
    assert "base ../base" in page.text or f"base {tmp_path / 'base'}" in page.text
    verdict = next(word for word in ("PASS", "REGRESSION", "INCONCLUSIVE") if f"\n{word}" in proc.stdout)
    assert '<div class="verdict' in html.read_text() and verdict in page.text
    assert "samples/s, timed in turns" in page.text and "round 2: head" in page.text
