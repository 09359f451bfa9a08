"""``--plot``: what is drawn (pure), the files (real PNG / SVG of the set size), and life without matplotlib."""

import struct
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from types import SimpleNamespace

import pytest
from conftest import FIXTURES, SPECS
from typer.testing import CliRunner

from loadtune.report import plot as plot_mod
from loadtune.cli.app import app
from loadtune.report.plot import DPI, FIGSIZE, INSTALL_HINT, PlotError, bound_of, plot_data, plot_format, write_plot
from loadtune.analysis.recommend import recommend
from loadtune.model.results import ScanResult


@pytest.fixture
def result():
    """A real grid scan of tests/specs/tiny.py: w0, w1, w2, w4 x prefetch 2, 4 at batch size 32."""
    return ScanResult.load(FIXTURES / "tiny_scan.json")


def test_one_line_per_prefetch_each_starting_at_no_workers(result):
    data = plot_data(result)
    assert data.batch_size == 32
    assert [line.label for line in data.lines] == ["prefetch 2", "prefetch 4"]
    w0 = result.config_result(result.recommendation.config).estimate
    for line in data.lines:
        assert [p.workers for p in line.points] == [0, 1, 2, 4]
        assert line.points[0].median == w0.median  # num_workers=0 has no prefetch: it starts every line
        assert all(p.low <= p.median <= p.high for p in line.points)  # error bars from the measured interval
    assert data.recommended.workers == result.recommendation.config.num_workers
    assert data.bound is None and data.failed == []


def test_knobs_that_vary_name_the_lines(result):
    """The same measured figures as if half the configs had pinned memory (a GPU scan's lines)."""
    result.trials = [replace(t, config=replace(t.config, pin_memory=True, transfer="non_blocking"))
                     if t.config.prefetch_factor == 4 else t for t in result.trials]
    result.recommendation = recommend(result.trials)
    labels = [line.label for line in plot_data(result).lines]
    assert labels == ["prefetch 2, no pin, on CPU", "prefetch 4, pin, non_blocking"]


def carry_bound(monkeypatch, rate: float, stage: str) -> None:
    """As if the scan had a stage profile whose bound is ``rate`` (``scan_bound`` derives it)."""
    monkeypatch.setattr("loadtune.report.plot.scan_bound", lambda result: SimpleNamespace(rate=rate, stage=stage, stages=[stage]))


def test_bound_is_read_when_the_result_carries_one(result, monkeypatch):
    assert bound_of(result) is None  # the fixture has no stage profile
    carry_bound(monkeypatch, 5000.0, "host-to-device copy")
    assert plot_data(result).bound == (5000.0, "bound: host-to-device copy")


@pytest.mark.parametrize("name", ["plot.pdf", "plot", "plot.jpg"])
def test_other_extensions_are_refused(name):
    with pytest.raises(PlotError, match=r"\.png or \.svg"):
        plot_format(name)
    assert plot_format("a/B.PNG") == "png" and plot_format("x.svg") == "svg"


def test_png_is_a_real_png_of_the_set_size(result, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    carry_bound(monkeypatch, 160_000.0, "dataset CPU work")
    path = tmp_path / "scan.png"
    write_plot(result, path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (FIGSIZE[0] * DPI, FIGSIZE[1] * DPI)
    assert len(data) > 10_000  # lines, bars and text, not an empty canvas


def test_svg_is_a_real_svg_of_the_set_size(result, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "scan.svg"
    write_plot(result, path)
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert (root.get("width"), root.get("height")) == (f"{FIGSIZE[0] * 72:g}pt", f"{FIGSIZE[1] * 72:g}pt")
    assert len(list(root.iter())) > 100


def test_nothing_measured_is_refused(result):
    result.trials = [replace(t, status="failed", blocks=[]) for t in result.trials]
    result.recommendation = None
    with pytest.raises(PlotError, match="nothing was measured"):
        plot_data(result)


@pytest.fixture
def no_matplotlib(monkeypatch):
    """As on a machine without the extra: ``import matplotlib`` raises ImportError."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def test_without_matplotlib_the_message_says_how_to_install(no_matplotlib, result, tmp_path):
    with pytest.raises(PlotError) as info:
        write_plot(result, tmp_path / "x.png")
    assert INSTALL_HINT in str(info.value) and "pip install matplotlib" in str(info.value)
    assert not (tmp_path / "x.png").exists()


def test_scan_without_matplotlib_exits_2_before_measuring(no_matplotlib, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []
    monkeypatch.setattr("loadtune.cli.app.prepare", lambda *a, **k: calls.append(a))  # would start the work
    out = CliRunner().invoke(app, ["scan", str(SPECS / "tiny.py"), "--plot", "p.png", "--json", "r.json"])
    assert out.exit_code == 2
    assert "pip install matplotlib" in out.stderr
    assert calls == [] and not (tmp_path / "r.json").exists() and not (tmp_path / "p.png").exists()


def test_scan_refuses_another_extension_before_measuring(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["scan", str(SPECS / "tiny.py"), "--plot", "p.pdf"])
    assert out.exit_code == 2 and ".png or .svg" in out.stderr
    assert not (tmp_path / "loadtune.json").exists()


def test_show_without_matplotlib_still_prints_the_table(no_matplotlib, tmp_path):
    out = CliRunner().invoke(app, ["show", str(FIXTURES / "tiny_scan.json"), "--plot", str(tmp_path / "p.svg")])
    assert out.exit_code == 2
    assert "w2 pf2 bs32" in out.stdout and "loader = DataLoader(" in out.stdout
    assert "pip install matplotlib" in out.stderr
    assert not (tmp_path / "p.svg").exists()


def test_show_writes_the_plot(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "p.png"
    out = CliRunner().invoke(app, ["show", str(FIXTURES / "tiny_scan.json"), "--plot", str(path)])
    assert out.exit_code == 0, out.output
    assert path.read_bytes()[:4] == b"\x89PNG" and f"Plot written to {path}" in " ".join(out.stdout.split())
    assert plot_mod.FORMATS[path.suffix] == "png"
