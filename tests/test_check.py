"""``loadtune check``: a paired experiment against the baseline's reference, recorded by ``check --record`` (or
by a scan asked to). A 100x slower dataset fails with its figures in JUnit; bad baselines and round counts
too small to decide are refused. The statistical
promises end to end, on a dataset whose work per sample is a dial: unchanged it passes, also with another
process keeping a core busy (never a regression there); 20% slower it fails (at once without workers; with
the scan's pick, at the latest on a second check). Their error rates over many
checks are measured in benchmarks/check_alarms.py (benchmarks/RESULTS.md)."""

import contextlib
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from conftest import SPECS, flat, run_cli

from loadtune.model.check import INCONCLUSIVE, PASS
from loadtune.model.results import ScanResult

pytestmark = pytest.mark.slow

SLOWABLE = SPECS / "slowable.py"
DIAL = SPECS / "dial.py"


def scan_baseline(spec, path, *extra):
    proc = run_cli("scan", spec, "--json", path, "-q", "--confirm", "0", *extra)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(path.read_text())


def assert_reference(data, rounds=8):
    reference = data["reference"]
    assert reference["config"] == data["recommendation"]["config"] and len(reference["rounds"]) == rounds
    assert [r["config_first"] for r in reference["rounds"]] == [True, False] * (rounds // 2)
    assert all(r["config_rate"] and r["calibration_rate"] for r in reference["rounds"])
    assert reference["recorded_at"] and reference["machine"]["usable_cores"] >= 1
    # PyTorch's defaults take their turn in every round, unless the config is them
    pick = reference["config"]
    defaults = None if pick["num_workers"] == 0 and not pick["heap"] else {
        "batch_size": pick["batch_size"], "num_workers": 0, "pin_memory": False, "prefetch_factor": None,
        "persistent_workers": False, "transfer": "none", "in_order": True, "start_method": None, "heap": None}
    assert reference["defaults"] == defaults
    assert all(bool(r["default_rate"]) == bool(defaults) for r in reference["rounds"])


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """A scan (no reference unless asked), then ``check --record`` on it: the path CI takes."""
    path = tmp_path_factory.mktemp("baseline") / "loadtune.json"
    proc, scanned = scan_baseline(SLOWABLE, path)
    assert scanned["reference"] is None and "Reference for check" not in proc.stdout
    assert [t["status"] for t in scanned["calibration"]] == ["ok", "ok"]  # measured at the start and the end
    recorded = run_cli("check", SLOWABLE, "--baseline", path, "--record")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    lines = recorded.stdout.splitlines()
    assert lines[0].startswith("recording the reference for check of ") and len([x for x in lines if "  round " in x]) == 8
    assert f"Reference for check: 8 paired rounds of {ScanResult.load(path).reference.config.label()}" in lines[-1]
    data = json.loads(path.read_text())
    assert_reference(data)
    assert {k: v for k, v in data.items() if k != "reference"} == {k: v for k, v in scanned.items() if k != "reference"}
    return path


@pytest.fixture(scope="module")
def dial_baseline(tmp_path_factory):
    """A scan that records the reference itself (``--reference-rounds``), after printing its answer."""
    path = tmp_path_factory.mktemp("dial") / "loadtune.json"
    proc, data = scan_baseline(DIAL, path, "--reference-rounds", "8")
    # --quiet prints the recommendation as soon as it is final; the reference's line comes after it
    assert proc.stdout.index("loader = DataLoader(") < proc.stdout.index("Reference for check: 8 paired rounds"), proc.stdout
    assert_reference(data)
    return path


def test_recording_again_replaces_the_reference_and_says_so(baseline, tmp_path):
    copy = tmp_path / "copy.json"
    copy.write_text(baseline.read_text())
    before = json.loads(copy.read_text())["reference"]["recorded_at"]
    proc = run_cli("check", SLOWABLE, "--baseline", copy, "--record", "--rounds", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"it replaces the one recorded {before}" in proc.stdout
    assert_reference(json.loads(copy.read_text()), rounds=2)


def test_what_record_cannot_do_is_refused_before_any_work(baseline, tmp_path):
    cases = [(["--rounds", "1"], "cannot make a reference"), (["--junit-xml", tmp_path / "j.xml"], "no verdict"),
             (["--format", "json"], "no verdict")]
    for extra, needle in cases:
        proc = run_cli("check", SLOWABLE, "--baseline", baseline, "--record", *extra)
        assert proc.returncode == 2 and needle in proc.stderr and "round 1" not in proc.stdout, (extra, proc.stderr)


def machine_moved(proc, reasons) -> bool:
    """No verdict (exit 4) because this VM's pace moved beyond the range the paired ratio carries over,
    and the check says so: an unchanged dataset may get that instead of a pass, never a false alarm."""
    return proc.returncode == 4 and any("no verdict" in r and "carry over" in r for r in reasons)


def test_unchanged_dataset_passes_with_reports(baseline, tmp_path):
    junit, md = tmp_path / "j.xml", tmp_path / "summary.md"
    proc = run_cli("check", SLOWABLE, "--baseline", baseline, "--rounds", "2", "--tolerance", "50%",
                   "--junit-xml", junit, "--markdown", md, "--json", tmp_path / "c.json")
    data = json.loads((tmp_path / "c.json").read_text())
    moved = machine_moved(proc, data["reasons"])
    assert proc.returncode == 0 or moved, proc.stdout + proc.stderr
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "0" and suite.get("errors") == ("1" if moved else "0") and float(suite.get("time")) > 0
    assert "| shaped calibration samples/s |" in md.read_text()
    assert "round 1: config" in proc.stdout  # rounds are printed as they come
    assert data["status"] == (INCONCLUSIVE if moved else PASS) and len(data["rounds"]) >= 2
    assert data["machine"]["usable_cores"] >= 1 and "Runner: " in md.read_text()  # where it ran
    assert all(r["config_rate"] and r["calibration_rate"] for r in data["rounds"])
    assert data["change_low"] <= data["change"] <= data["change_high"]
    recorded = json.loads(baseline.read_text())["reference"]["recorded_at"]
    assert data["reference_recorded_at"] == recorded and f"paired rounds recorded {recorded}" in proc.stdout


def test_a_config_with_workers_is_checked_beside_pytorchs_defaults(baseline, tmp_path):
    """A reference of one worker (``--workers 1``) holds PyTorch's defaults in every round; its check
    measures them in the same rounds and states the gain side by side, in the console, JSON and JUnit."""
    copy, junit, out = tmp_path / "w1.json", tmp_path / "j.xml", tmp_path / "c.json"
    copy.write_text(baseline.read_text())
    recorded = run_cli("check", SLOWABLE, "--baseline", copy, "--record", "--rounds", "2", "--workers", "1")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert "paired rounds of the config, its shaped calibration and PyTorch's defaults" in recorded.stdout
    assert flat(recorded.stdout).count("PyTorch's defaults ") >= 3  # the first line and each round's
    reference = json.loads(copy.read_text())["reference"]
    assert reference["config"]["num_workers"] == 1 and reference["defaults"]["num_workers"] == 0
    proc = run_cli("check", SLOWABLE, "--baseline", copy, "--workers", "1", "--rounds", "2", "--tolerance", "50%",
                   "--json", out, "--junit-xml", junit)
    assert proc.returncode in (0, 4), proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["defaults"]["num_workers"] == 0 and all(r["default_rate"] and r["default_ratio"] for r in data["rounds"])
    assert data["gain_low"] <= data["gain"] <= data["gain_high"] and data["baseline_gain"] > 0
    interval = f"{data['gain_low']:.2f}–{data['gain_high']:.2f}×"
    assert f"the config {data['gain']:.2f}× (interval from the rounds' noise alone: {interval}) side by side" in flat(proc.stdout)
    names = [c.get("name") for c in ET.parse(junit).getroot().findall("testcase")]
    assert names[2].startswith("PyTorch's defaults w0 bs16") and len(names) == 3


def test_hundredfold_slower_dataset_fails_with_figures_in_junit(baseline, tmp_path):
    junit = tmp_path / "j.xml"
    proc = run_cli("check", SLOWABLE, "--baseline", baseline, "--rounds", "2", "--junit-xml", junit,
                   env={"LOADTUNE_TEST_SLEEP_MS": "2"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "REGRESSION" in proc.stdout and "throughput fell" in proc.stdout
    failure = ET.parse(junit).getroot().find("testcase/failure")
    assert failure is not None and "samples/s now" in failure.text and "in the baseline" in failure.text


def test_a_20_percent_slower_dataset_fails(dial_baseline):
    """Each sample 25% more work (the loader's fixed costs do not grow: some 15% fewer samples/s), beyond a 5%
    tolerance: never a pass; a regression, at the latest on a third check. With two workers on two cores a
    check reads about -13% with an interval reaching -6%, and a noisy moment can leave one undecided (exit 4):
    on the 2-core CI VM two in a row once were (-7.3%, -18.7% to +5.7%, beside a baseline whose rounds
    read the calibration's ratio at 0.97-1.42)."""
    for _ in range(3):
        slowed = run_cli("check", DIAL, "--baseline", dial_baseline, "--tolerance", "5%", "--budget", "60",
                         env={"LOADTUNE_TEST_SLOWDOWN": "0.2"})
        assert slowed.returncode in (1, 4), slowed.stdout + slowed.stderr
        if slowed.returncode == 1:
            break
    assert slowed.returncode == 1, slowed.stdout + slowed.stderr
    assert "REGRESSION" in slowed.stdout and "turns" in slowed.stdout


def test_an_unchanged_dataset_passes(dial_baseline):
    """Never a regression; a pass, at the latest on a second check. Exit 4 is the honest answer when
    the session's shift (a few percent, more on a busy test machine) leaves the interval straddling
    the tolerance, and what the docs tell a user to do then is to run the check again."""
    for _ in range(2):
        same = run_cli("check", DIAL, "--baseline", dial_baseline, "--budget", "60")
        assert same.returncode in (0, 4), same.stdout + same.stderr
        if same.returncode == 0:
            break
    assert same.returncode == 0, same.stdout + same.stderr


@pytest.fixture(scope="module")
def dial_without_workers(dial_baseline, tmp_path_factory):
    """The dial's baseline with a reference of ``num_workers=0`` (``check --record --workers 0``): the main
    process alone, whose rounds spread least on a small machine and which loses the whole slowdown."""
    path = tmp_path_factory.mktemp("dial-w0") / "loadtune.json"
    path.write_text(dial_baseline.read_text())
    recorded = run_cli("check", DIAL, "--baseline", path, "--record", "--workers", "0")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    return path


def test_without_workers_a_20_percent_slower_dataset_fails_and_an_unchanged_one_passes_at_once(dial_without_workers):
    """The same promises with no second chance: one check each, the verdict it must give."""
    slowed = run_cli("check", DIAL, "--baseline", dial_without_workers, "--workers", "0", "--tolerance", "5%",
                     "--json", dial_without_workers.with_name("slowed.json"), env={"LOADTUNE_TEST_SLOWDOWN": "0.2"})
    # caught, or undecided (exit 4): never a pass. How often it is caught is a benchmark's figure
    # (benchmarks/RESULTS.md, "loadtune check"): on this shared VM a check whose calibration swung 1,343-2,698
    # samples/s from round to round stopped undecided at -9.6% (-20.9% to +3.4%), the truth inside its interval
    undecided = slowed.returncode == 4
    assert slowed.returncode == 1 or undecided, slowed.stdout + slowed.stderr
    same = run_cli("check", DIAL, "--baseline", dial_without_workers, "--workers", "0")
    # no false alarm; inconclusive (4) is the honest answer where this shared machine's pace wandered too much
    # for the rounds to decide (its false-alarm and detection rates are benchmarks': benchmarks/RESULTS.md)
    assert same.returncode in (0, 4), same.stdout + same.stderr
    got = json.loads(dial_without_workers.with_name("slowed.json").read_text())
    # about the dial's 20%, not a 100x collapse; undecided, its interval still reaches a real slowdown
    assert (undecided and got["change_low"] < -0.10) or -0.30 < got["change"] < -0.10, got["change"]


@contextlib.contextmanager
def busy_core():
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def test_another_process_keeping_a_core_busy_does_not_fail_an_unchanged_dataset(dial_baseline):
    with busy_core():
        proc = run_cli("check", DIAL, "--baseline", dial_baseline, "--budget", "60")
    assert proc.returncode in (0, 4), proc.stdout + proc.stderr


def test_a_baseline_from_another_cpu_is_warned_of(baseline, tmp_path):
    """The baseline's CPU ran the calibration's unit of work in a quarter of the time it takes here (other
    hardware): the regression stands, with a warning and the CPU's change in the JSON. A quarter, not a
    nearer figure: this shared VM's own reading of the unit swung 2x between the module's baseline and this
    test (a fresh-clone run read 29% less time against a baseline scaled to 70%)."""
    data = json.loads(baseline.read_text())
    here = data["reference"]["shape"]["unit_s"]
    data["reference"]["shape"]["unit_s"] = here * 0.25
    other = tmp_path / "other-cpu.json"
    other.write_text(json.dumps(data))
    proc = run_cli("check", SLOWABLE, "--baseline", other, "--rounds", "2", "--json", tmp_path / "c.json",
                   env={"LOADTUNE_TEST_SLEEP_MS": "2"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "c.json").read_text())
    assert result["cpu_change"] > 0.10 and result["change_high"] < -0.5
    assert any("read with care" in r and "longer on this CPU" in r for r in result["reasons"])


def test_min_throughput_floor_fails(baseline):
    proc = run_cli("check", SLOWABLE, "--baseline", baseline, "--rounds", "2", "--min-throughput", "1e12")
    assert proc.returncode == 1 and "under the floor" in proc.stdout


def test_pyproject_defaults_make_a_bare_check_work(baseline, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.loadtune]\nspec = "{SLOWABLE}"\nbaseline = "{baseline}"\ntolerance = "50%"\n'
    )
    sub = tmp_path / "deeper"
    sub.mkdir()
    proc = run_cli("check", "--rounds", "2", "--json", tmp_path / "c.json", cwd=sub)  # the nearest pyproject.toml is found upwards
    moved = machine_moved(proc, json.loads((tmp_path / "c.json").read_text())["reasons"])
    assert proc.returncode == 0 or moved, proc.stdout + proc.stderr
    assert "tolerance 50%" in proc.stdout


def test_baseline_errors_exit_2(baseline, tmp_path):
    not_json = tmp_path / "x.json"
    not_json.write_text("nope")
    foreign = tmp_path / "f.json"
    foreign.write_text(json.dumps({"hello": 1}))
    other_version = tmp_path / "v.json"
    data = json.loads(baseline.read_text())
    other_version.write_text(json.dumps({**data, "schema_version": 99}))
    no_reference = tmp_path / "noref.json"
    no_reference.write_text(json.dumps({**data, "reference": None}))
    cases = [
        (tmp_path / "missing.json", SLOWABLE, [], "cannot read"),
        (not_json, SLOWABLE, [], "not valid JSON"),
        (foreign, SLOWABLE, [], "not a loadtune scan result"),
        (other_version, SLOWABLE, [], "schema version"),
        (no_reference, SLOWABLE, [], "no paired reference for check (a scan records none unless asked to): record one "
         "with this command and --record"),
        (baseline, SPECS / "tiny.py", [], "another dataset"),
        (baseline, SLOWABLE, ["--rounds", "1"], "cannot decide"),
        (baseline, SLOWABLE, ["--rounds", "61"], "at most"),
        (baseline, SLOWABLE, ["--batch-size", "999"], "reference is of"),
        (baseline, SLOWABLE, ["--budget", "0"], "--budget"),
    ]
    for path, spec, extra, needle in cases:
        proc = run_cli("check", spec, "--baseline", path, *extra)
        assert proc.returncode == 2, (path, extra, proc.stdout, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_bad_tolerance_is_refused():
    proc = run_cli("check", SLOWABLE, "--tolerance", "lots")
    assert proc.returncode == 2 and "--tolerance" in proc.stderr


@pytest.mark.parametrize("value", ["1", "-1"])
def test_a_reference_of_one_round_is_refused_before_any_work(value, tmp_path):
    proc = run_cli("scan", SLOWABLE, "--reference-rounds", value, "--json", tmp_path / "x.json")
    assert proc.returncode == 2 and "reference_rounds" in proc.stderr and not (tmp_path / "x.json").exists()


def test_explicit_config_is_normalised(baseline):
    from loadtune.engine.check import explicit_config
    from loadtune.model.results import ScanResult

    saved = ScanResult.load(baseline)
    assert explicit_config(saved, workers=None, batch_size=None, prefetch=None, pin=None, persistent=None) is None
    config = explicit_config(saved, workers=0, batch_size=None, prefetch=None, pin=None, persistent=None)
    assert config.num_workers == 0 and config.prefetch_factor is None and not config.persistent_workers
