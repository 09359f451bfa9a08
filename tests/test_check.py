"""``loadtune check``: passes on an unchanged dataset, fails on a really slowed one, refuses bad baselines."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from loadtune.model.check import PASS, REGRESSION

from loadtune.analysis.verdict import judge

from loadtune.engine.check import parse_tolerance

SPECS = Path(__file__).parent / "specs"
SLOWABLE = SPECS / "slowable.py"


def cli(*args, cwd=None, env=None):
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "loadtune", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=300)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    path = tmp_path_factory.mktemp("baseline") / "loadtune.json"
    proc = cli("scan", SLOWABLE, "--json", path, "-q", "--confirm", "0")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(path.read_text())
    assert [t["status"] for t in data["calibration"]] == ["ok", "ok"]  # measured at the start and the end
    return path


def test_unchanged_dataset_passes_with_reports(baseline, tmp_path):
    junit, md = tmp_path / "j.xml", tmp_path / "summary.md"
    proc = cli("check", SLOWABLE, "--baseline", baseline, "--rounds", "2", "--junit-xml", junit, "--markdown", md,
               "--json", tmp_path / "c.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "0" and suite.find("testcase") is not None
    assert "| calibration samples/s |" in md.read_text()
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["status"] == PASS and len(data["rounds"]) == 2 and all(r and c for r, c in data["rounds"])


def test_slowed_dataset_fails_with_figures_in_junit(baseline, tmp_path):
    junit = tmp_path / "j.xml"
    proc = cli("check", SLOWABLE, "--baseline", baseline, "--rounds", "2", "--junit-xml", junit,
               env={"LOADTUNE_TEST_SLEEP_MS": "2"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSION" in proc.stdout and "throughput fell" in proc.stdout
    failure = ET.parse(junit).getroot().find("testcase/failure")
    assert failure is not None and "samples/s now" in failure.text and "in the baseline" in failure.text


def test_min_throughput_floor_fails(baseline):
    proc = cli("check", SLOWABLE, "--baseline", baseline, "--rounds", "1", "--min-throughput", "1e12")
    assert proc.returncode == 1 and "under the floor" in proc.stdout


def test_pyproject_defaults_make_a_bare_check_work(baseline, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.loadtune]\nspec = "{SLOWABLE}"\nbaseline = "{baseline}"\ntolerance = "50%"\n'
    )
    sub = tmp_path / "deeper"
    sub.mkdir()
    proc = cli("check", "--rounds", "1", cwd=sub)  # the nearest pyproject.toml is found upwards
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tolerance 50%" in proc.stdout


def test_baseline_errors_exit_2(baseline, tmp_path):
    not_json = tmp_path / "x.json"
    not_json.write_text("nope")
    foreign = tmp_path / "f.json"
    foreign.write_text(json.dumps({"hello": 1}))
    other_version = tmp_path / "v.json"
    data = json.loads(baseline.read_text())
    other_version.write_text(json.dumps({**data, "schema_version": 99}))
    no_cal = tmp_path / "nocal.json"
    no_cal.write_text(json.dumps({**data, "calibration": []}))
    cases = [
        (tmp_path / "missing.json", SLOWABLE, "cannot read"),
        (not_json, SLOWABLE, "not valid JSON"),
        (foreign, SLOWABLE, "not a loadtune scan result"),
        (other_version, SLOWABLE, "schema version"),
        (no_cal, SLOWABLE, "no calibration"),
        (baseline, SPECS / "tiny.py", "another dataset"),
    ]
    for path, spec, needle in cases:
        proc = cli("check", spec, "--baseline", path, "--rounds", "1")
        assert proc.returncode == 2, (path, proc.stdout, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_bad_tolerance_is_refused():
    proc = cli("check", SLOWABLE, "--tolerance", "lots")
    assert proc.returncode == 2 and "--tolerance" in proc.stderr


# ------------------------------------------------------------ the verdict as a pure function

BASE = (10.0, 9.8, 10.2)  # normalised baseline throughput with its interval


def test_noise_below_tolerance_passes():
    assert judge(BASE, [9.6, 9.5, 9.7], 0.10, 100.0, None)[0] == PASS


def test_slowdown_beyond_tolerance_and_noise_is_a_regression():
    status, reasons, change = judge(BASE, [7.9, 8.0, 8.1], 0.10, 80.0, None)
    assert status == REGRESSION and change[0] == pytest.approx(-0.2)
    assert "fell 20.0%" in reasons[0]


def test_slowdown_inside_the_noise_is_not_called_a_regression():
    status, _, change = judge(BASE, [5.0, 8.0, 13.0], 0.10, 80.0, None)
    assert change[0] < -0.10 and status == PASS  # the median fell, but the rounds cannot tell


def test_floor_and_nothing_measured():
    assert judge(BASE, [10.0, 10.1], 0.10, 50.0, 100.0)[0] == REGRESSION
    assert judge(BASE, [], 0.10, None, None)[0] == "nothing measured"


def test_parse_tolerance():
    assert parse_tolerance("10%") == pytest.approx(0.10) and parse_tolerance(0.25) == 0.25
    with pytest.raises(ValueError):
        parse_tolerance("150%")


def test_noisy_baseline_does_not_divide_by_zero():
    status, _, change = judge((10.0, 0.0, 25.0), [9.0, 9.5, 10.0], 0.10, 90.0, None)
    assert status == PASS and change[2] == float("inf")


def test_explicit_config_is_normalised(baseline):
    from loadtune.engine.check import explicit_config
    from loadtune.model.results import ScanResult

    saved = ScanResult.load(baseline)
    assert explicit_config(saved, workers=None, batch_size=None, prefetch=None, pin=None, persistent=None) is None
    config = explicit_config(saved, workers=0, batch_size=None, prefetch=None, pin=None, persistent=None)
    assert config.num_workers == 0 and config.prefetch_factor is None and not config.persistent_workers
