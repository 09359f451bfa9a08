"""The HTML page in a real browser: headless Chromium renders the page of a saved scan and of a check with
no console error and no request refused, its DOM holds the key figures, and its screenshot shows the
charts drawn. A control page with a script shows that the page's Content-Security-Policy is enforced and
that a refusal would be seen here. Skipped where no Chromium is on PATH (``apt-get install chromium``)."""

import shutil
import subprocess

import pytest
from conftest import FIXTURES
from PIL import Image
from test_against import against_result

from loadtune.model.results import ScanResult
from loadtune.report.page import check_page, scan_page
from loadtune.report.svg import BAR

pytestmark = pytest.mark.slow

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
PROBLEMS = ("Uncaught", "Refused", "Content Security Policy", "net::ERR")  # in Chromium's log of the page's console


@pytest.fixture(scope="module")
def browser():
    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found is None:
        pytest.skip(f"no headless Chromium on PATH ({', '.join(BROWSERS)}): the page is not checked in a browser")
    return found


def render(browser, page, tmp_path, *how):
    """Chromium on the page written to ``tmp_path``, with its console logged to stderr: (stdout, stderr)."""
    path = tmp_path / "page.html"
    path.write_text(page)
    proc = subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", *how,
                           path.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def problems(stderr):
    return [line for line in stderr.splitlines() if any(p in line for p in PROBLEMS)]


def test_a_scan_page_renders_without_errors_and_draws_its_charts(browser, tmp_path):
    dom, log = render(browser, scan_page(ScanResult.load(FIXTURES / "race_scan.json")), tmp_path, "--dump-dom")
    assert not problems(log), problems(log)
    for figure in ("w8 pf2 pin persist stream bs32 ★", "1,449–1,638 runs", "0.92× (0.77–1.11)", "cap: workers ◀", "num_workers=8,",
                   "Bound: 2,306 samples/s"):
        assert figure.encode("ascii", "xmlcharrefreplace").decode() in dom or figure in dom, figure
    assert dom.count("<svg") == 2
    shot = tmp_path / "page.png"
    _, log = render(browser, scan_page(ScanResult.load(FIXTURES / "race_scan.json")), tmp_path, f"--screenshot={shot}",
                    "--window-size=1280,2000")
    assert not problems(log), problems(log)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 2000)
    colours = image.getcolors(maxcolors=1 << 20)
    count = {rgb: n for n, rgb in colours}
    bar = tuple(int(BAR[i:i + 2], 16) for i in (1, 3, 5))
    assert count.get(bar, 0) > 200, "the race chart's interval bars are not drawn"
    assert sum(n for rgb, n in count.items() if rgb[0] > 230 and rgb[1] > 190 and rgb[2] < 60) > 50, "no gold star drawn"


def test_a_check_page_renders_without_errors(browser, tmp_path):
    dom, log = render(browser, check_page(against_result(), "dataset.py", "2026-11-29T05:00:00+00:00"), tmp_path, "--dump-dom")
    assert not problems(log), problems(log)
    assert "REGRESSION: the head loads 7.0% slower than the base" in dom and "base origin/main 8e01b7d" in dom


def test_the_policy_is_enforced_and_a_refusal_would_be_seen(browser, tmp_path):
    """The control: a script slipped into the page is refused by its own policy, and the log says so."""
    page = scan_page(ScanResult.load(FIXTURES / "tiny_scan.json"))
    tampered = page.replace("</main>", "<script>document.body.dataset.ran = 'yes'</script></main>")
    dom, log = render(browser, tampered, tmp_path, "--dump-dom")
    assert problems(log) and 'data-ran="yes"' not in dom
