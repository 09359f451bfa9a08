"""Where users run loadtune: CI logs (a line per trial off a terminal), the job summary (appended), JUnit
(one test case per measured config), the published JSON Schemas, old results read rather than refused,
`--version` and `--format json`, the install (Python 3.10's TOML), and notebooks (the HTML result, and a
dataset class defined in ``__main__``)."""

import builtins
import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import typer
from conftest import QUICK, SPECS, assert_check_agrees, assert_reference, fake_trial
from torch.utils.data import Dataset, Subset
from typer.testing import CliRunner

from loadtune.cli import project
from loadtune.cli.app import app
from loadtune.engine.interactive import check_main_objects, main_defined
from loadtune.engine.spec import SpecError, from_objects
from loadtune.model import scanfile
from loadtune.model.check import INCONCLUSIVE, NOTHING, PASS, REGRESSION, CheckResult
from loadtune.model.config import TrialConfig
from loadtune.model.machine import MachineInfo
from loadtune.model.paired import CALIBRATION, CONFIG, DEFAULTS, CalibrationShape, PairedRound, turn_order
from loadtune.model.results import ScanResult
from loadtune.model.scanfile import ResultError
from loadtune.model.trial import Trial, TrialError
from loadtune.report import ci, notebook
from loadtune.report.html import html_report
from loadtune.report.progress import AnswerOnly, LineProgress, ProgressDisplay, scan_progress
from loadtune.version import __version__

ROOT = Path(__file__).parent.parent
SCHEMAS = ROOT / "loadtune" / "schema"
FIXTURES = Path(__file__).parent / "fixtures"
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
STORED_WORKFLOW = ROOT / "examples" / "ci" / "github-actions-stored-reference.yml"  # the history-keeping form
PICK = TrialConfig(64, 2, prefetch_factor=2)
RUNNER = MachineInfo(usable_cores=2, logical_cores=4, cgroup_cpu_limit=None, cpu_model="AMD EPYC 9454",
                     memory_total_bytes=24 * 2**30, memory_available_bytes=20 * 2**30, shm_total_bytes=None,
                     python="3.11.7", platform="Linux", torch="2.13.0", cuda=None, start_method="fork")
DEFAULTS_W0 = TrialConfig(64, 0)


# --- a minimal JSON Schema reader: the keywords the published schemas use --------------------------

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def of_type(value, name):
    if name in ("integer", "number"):
        kinds = (int,) if name == "integer" else (int, float)
        return isinstance(value, kinds) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])


def violations(doc, schema, root, path="$", strict=False):
    """What in ``doc`` breaks ``schema``; ``strict``: also every key the schema does not describe
    (the writers and the published schema must not drift apart)."""
    if "$ref" in schema:
        return violations(doc, root["$defs"][schema["$ref"].rsplit("/", 1)[1]], root, path, strict)
    if "anyOf" in schema:
        found = [violations(doc, s, root, path, strict) for s in schema["anyOf"]]
        return [] if any(not f for f in found) else min(found, key=len)
    if "const" in schema and doc != schema["const"]:
        return [f"{path}: {doc!r} is not {schema['const']!r}"]
    if "enum" in schema and doc not in schema["enum"]:
        return [f"{path}: {doc!r} is not one of {schema['enum']}"]
    types = schema.get("type")
    if types and not any(of_type(doc, t) for t in ([types] if isinstance(types, str) else types)):
        return [f"{path}: {type(doc).__name__} is not {types}"]
    if "minimum" in schema and of_type(doc, "number") and doc < schema["minimum"]:
        return [f"{path}: {doc} < {schema['minimum']}"]
    if isinstance(doc, dict):
        return object_violations(doc, schema, root, path, strict)
    if isinstance(doc, list):
        items = schema.get("prefixItems") or [schema.get("items", {})] * len(doc)
        errors = [e for i, (item, sub) in enumerate(zip(doc, items)) for e in violations(item, sub, root, f"{path}[{i}]", strict)]
        if len(doc) < schema.get("minItems", 0) or len(doc) > schema.get("maxItems", len(doc)):
            errors.append(f"{path}: {len(doc)} items")
        return errors
    return []


def object_violations(doc, schema, root, path, strict):
    errors = [f"{path}: lacks {key!r}" for key in schema.get("required", []) if key not in doc]
    props = schema.get("properties")
    for key, value in doc.items() if props is not None else ():
        if key in props:
            errors += violations(value, props[key], root, f"{path}.{key}", strict)
        elif strict:
            errors.append(f"{path}.{key}: not described in the schema")
    return errors


def schema(name):
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def assert_valid(doc, name, strict=True):
    doc = json.loads(json.dumps(doc))  # as a reader sees it: tuples are lists
    root = schema(name)
    assert violations(doc, root, root, strict=strict) == []
    try:
        import jsonschema
    except ImportError:  # not a dependency: the reader above covers what the schemas use
        return
    jsonschema.Draft202012Validator.check_schema(root)
    jsonschema.validate(doc, root)


def test_the_schema_reader_finds_what_it_should():
    root = schema("scan")
    good = json.loads((FIXTURES / "tiny_scan.json").read_text())
    assert violations(good, root, root) == []
    bad = json.loads(json.dumps(good))
    bad["trials"][0]["blocks"][0]["samples"] = "many"
    bad["state"] = "paused"
    del bad["machine"]
    bad["extra"] = 1
    found = violations(bad, root, root, strict=True)
    assert any("blocks[0].samples" in f for f in found) and any("paused" in f for f in found)
    assert any("lacks 'machine'" in f for f in found) and any("$.extra" in f for f in found)


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.name)
def test_saved_scans_match_the_published_schema(fixture):
    assert_valid(json.loads(fixture.read_text()), "scan", strict=False)  # files of an older loadtune: keys since added are absent


def test_a_scan_of_batches_of_varying_size_matches_the_published_schema():
    from loadtune.model.batch import BatchInfo, BatchSizes

    result = ScanResult.load(sorted(FIXTURES.glob("*.json"))[0])
    for trial in result.trials:
        trial.batch, trial.batch_sizes = BatchInfo(4096, [("float32", [31, 32])], 31), BatchSizes(30.7, 2, 212, True)
    data = result.to_dict()
    assert data["batch_sizes"]["varying"]
    assert_valid(data, "scan")


def test_the_schemas_ship_with_the_package():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'loadtune = ["schema/*.json"]' in pyproject
    assert {p.name for p in SCHEMAS.glob("*.json")} == {"scan.schema.json", "check.schema.json"}


# --- progress ---------------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def failed_trial(config):
    return Trial(config, "failed", error=TrialError("exception", "the dataset raised KeyError in a worker\nat index 7"))


def test_line_progress_prints_each_trial_with_its_figure_count_and_time(tmp_path):
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    result.trials = []
    out, clock = io.StringIO(), Clock()
    progress = LineProgress(out, now=clock)
    progress.scan_started(result, planned=3, budget=None)
    for seconds, trial in ((4, fake_trial(PICK, 1234.0)), (65, failed_trial(TrialConfig(64, 0)))):
        clock.t += seconds
        progress.trial_finished(0, trial, result)
    confirming = fake_trial(PICK, 1200.0)
    confirming.round = 1
    progress.trial_finished(0, confirming, result)
    progress.profile_started()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("loadtune: scan of ") and "3 configs planned" in lines[0] and lines[0].endswith("(0:00 elapsed)")
    assert re.fullmatch(r"loadtune: trial 1/3: w2 pf2 bs64: samples/s 1,2\d\d ±\d+\.\d% \(0:04 elapsed\)", lines[1]), lines[1]
    assert lines[2] == "loadtune: trial 2/3: w0 bs64: failed: the dataset raised KeyError in a worker (1:09 elapsed)"
    assert lines[3].startswith("loadtune: confirming (round 1): w2 pf2 bs64: samples/s ")  # not counted against the plan
    assert lines[4].startswith("loadtune: profiling the stages")


def test_adaptive_progress_counts_without_a_total():
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    out = io.StringIO()
    progress = LineProgress(out)
    progress.scan_started(result, planned=None, budget=300)
    assert "adaptive search, within a 300 s budget" in out.getvalue() and "trials already measured" in out.getvalue()
    progress.trial_finished(0, fake_trial(PICK, 500.0), result)
    assert f"trial {len(result.trials) + 1}: w2 pf2 bs64" in out.getvalue()  # a resumed scan counts on


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_a_live_bar_on_a_terminal_and_lines_elsewhere(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # set in many CI jobs: must not turn a log into a live bar
    assert isinstance(scan_progress(io.StringIO()), LineProgress)
    assert isinstance(scan_progress(Tty()), ProgressDisplay)


def test_every_display_hands_the_answer_over_before_the_reference_is_recorded():
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    seen = []
    for display in (scan_progress(io.StringIO(), on_answer=seen.append), scan_progress(Tty(), on_answer=seen.append),
                    AnswerOnly(seen.append)):
        with contextlib.nullcontext(display) if isinstance(display, AnswerOnly) else display:
            display.scan_started(result, planned=3, budget=None)
            display.answer_ready(result)  # the live bar steps aside for the report and comes back
            display.reference_started(8)
    assert seen == [result] * 3


# --- JUnit and the job summary ------------------------------------------------------------------------


def check_result(status, defaults_ok=True, rounds=2, back_to_back=False):
    """A check as engine.check builds it: one paired trial per round (the config's blocks, the shaped
    calibration's and PyTorch's defaults'), or, as with several ranks, each round's three trials in the
    order the round ran them."""
    paired = [PairedRound(1000.0, 500.0, config_first=i % 2 == 0, pairs=0 if back_to_back else 3,
                          default_rate=300.0 if defaults_ok else None) for i in range(rounds)]
    trials = []
    for p in paired:
        own, calibration = fake_trial(PICK, 1000.0), fake_trial(PICK, 500.0)
        defaults = fake_trial(DEFAULTS_W0, 300.0) if defaults_ok else failed_trial(DEFAULTS_W0)
        own.wall_s, calibration.wall_s, defaults.wall_s = 3.0, 2.0, 0.75
        if not back_to_back:
            own.calibration_blocks, own.default_blocks, own.wall_s = calibration.blocks, defaults.blocks, 6.0
            trials.append(own)
        else:
            by_role = {CONFIG: own, CALIBRATION: calibration, DEFAULTS: defaults}
            trials += [by_role[role] for role in turn_order(True, p.config_first)]
    reasons = {PASS: [], REGRESSION: ["throughput fell 30.0% against the shaped calibration"],
               INCONCLUSIVE: ["the change straddles the tolerance"], NOTHING: ["no round of the checked config could be measured"]}
    return CheckResult(config=PICK, tolerance=0.1, baseline_rate=1100.0, rounds=paired, baseline_rounds=paired,
                       shape=CalibrationShape(10, 0.0, 16, 1e-6, "stage profile"), min_throughput=None, status=status,
                       reasons=reasons[status], change=-0.3, change_low=-0.4, change_high=-0.2, wall_s=12.0, trials=trials,
                       defaults=DEFAULTS_W0, gain=3.33 if defaults_ok else None, gain_low=3.0 if defaults_ok else None,
                       gain_high=3.7 if defaults_ok else None, baseline_gain=3.2, machine=RUNNER)


@pytest.mark.parametrize("back_to_back", [False, True])
@pytest.mark.parametrize("status, tag", [(PASS, None), (REGRESSION, "failure"), (INCONCLUSIVE, "error"), (NOTHING, "error")])
def test_junit_has_a_timed_testcase_per_measured_config(status, tag, back_to_back):
    suite = ET.fromstring(ci.junit_xml(check_result(status, back_to_back=back_to_back)))
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["throughput w2 pf2 bs64", "shaped calibration (w2 pf2 bs64)", "PyTorch's defaults w0 bs64"]
    # each loader's own trials; a paired trial's 6 s are shared by its three loaders
    assert [float(c.get("time")) for c in cases] == ([6.0, 4.0, 1.5] if back_to_back else [4.0, 4.0, 4.0])
    calibration = cases[1].find("system-out").text  # the calibration's own rate, about 500, not the config's
    assert "samples/s now, median of 2 trials" in calibration and 490 <= float(calibration.split(": ")[1].split()[0]) <= 510
    assert cases[2].find("system-out").text == ("PyTorch's defaults w0 bs64: 300 samples/s in the same rounds; the config 3.33× "
                                                "(interval from the rounds' noise alone: 3.00–3.70×) side by side; 3.20× in the reference")
    assert suite.get("tests") == "3" and float(suite.get("time")) == 12.0
    assert suite.get("failures") == str(int(tag == "failure")) and suite.get("errors") == str(int(tag == "error"))
    checked = cases[0]
    outcome = [child.tag for child in checked if child.tag != "system-out"]
    assert outcome == ([tag] if tag else [])
    if tag:
        assert checked.find(tag).get("message") == check_result(status).reasons[0]
    assert "samples/s now" in checked.find("system-out").text
    assert all(c.find("failure") is None and c.find("error") is None for c in cases[1:])  # context: never the verdict


def test_junit_skips_a_context_config_that_measured_nothing():
    suite = ET.fromstring(ci.junit_xml(check_result(PASS, defaults_ok=False, back_to_back=True)))
    defaults = suite.findall("testcase")[2]
    assert defaults.find("skipped").get("message").startswith("not measured: the dataset raised KeyError")
    assert suite.get("skipped") == "1" and suite.get("errors") == "0"


def test_a_config_the_baseline_scan_did_not_measure_has_no_baseline_rate():
    result = check_result(PASS)
    result.baseline_rate = None  # checked with knob flags naming a config the scan never ran
    assert "not measured by the baseline's scan" in ci.summary_line(result) and " 0 in the baseline" not in ci.summary_line(result)
    assert "| `w2 pf2 bs64` samples/s | - | 1,000 |" in ci.markdown(result)
    assert_valid(result.to_dict(), "check")


def test_a_check_without_defaults_in_its_rounds_has_no_defaults_case():
    result = check_result(PASS)
    result.defaults = None  # the checked config is PyTorch's defaults (or an older reference)
    for t in result.trials:
        t.default_blocks = []
    suite = ET.fromstring(ci.junit_xml(result))
    assert [float(c.get("time")) for c in suite.findall("testcase")] == [6.0, 6.0]  # shared by two loaders
    assert "PyTorch's defaults" not in ci.markdown(result)
    assert "| the config over PyTorch's defaults, side by side | 3.20× | 3.33× (3.00 … 3.70×) |" in ci.markdown(check_result(PASS))
    dated = check_result(PASS)
    dated.reference_recorded_at = "2026-11-25T11:09:22+00:00"
    assert "| paired rounds | 2, recorded 2026-11-25T11:09:22+00:00 | 2 |" in ci.markdown(dated)
    assert "Runner: 2 usable cores (4 logical) · AMD EPYC 9454 · 24.0 GiB RAM · no GPU." in ci.markdown(dated)
    dated.machine = None  # a result without it (older versions) has no runner line
    assert "Runner" not in ci.markdown(dated)


def test_the_check_json_matches_the_published_schema():
    data = check_result(REGRESSION).to_dict()
    assert data["schema"] == "loadtune/check" and data["schema_version"] == 1
    assert data["machine"]["cpu_model"] == "AMD EPYC 9454"
    assert_valid(data, "check")


def test_markdown_appends_to_the_job_summary_and_replaces_elsewhere(tmp_path):
    summary, other = tmp_path / "step_summary.md", tmp_path / "summary.md"
    for path in (summary, other):
        path.write_text("## tests\n\n12 passed\n")
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    ci.write_markdown(summary, "### loadtune check\n", env)
    ci.write_markdown(other, "### loadtune check\n", env)
    assert summary.read_text() == "## tests\n\n12 passed\n\n### loadtune check\n"
    assert other.read_text() == "### loadtune check\n"
    ci.write_markdown(tmp_path / "new.md", "x\n", {})
    assert (tmp_path / "new.md").read_text() == "x\n"


# --- old results, the command line, the install -------------------------------------------------------


def test_an_older_schema_version_is_migrated_and_a_newer_one_refused(monkeypatch):
    data = json.loads((FIXTURES / "tiny_scan.json").read_text())
    now = scanfile.SCHEMA_VERSION
    data = {**data, "schema_version": now}
    monkeypatch.setattr(scanfile, "SCHEMA_VERSION", now + 1)
    monkeypatch.setitem(scanfile.MIGRATIONS, now, lambda d: {**d, "notes": d["notes"] + ["migrated"]})
    assert ScanResult.from_dict(data).notes[-1] == "migrated"  # read through the step to the next version
    monkeypatch.delitem(scanfile.MIGRATIONS, now)
    assert ScanResult.from_dict(data).trials  # no step needed: read as it is, missing keys at their defaults
    with pytest.raises(ResultError, match="newer loadtune .* upgrade loadtune"):
        ScanResult.from_dict({**data, "schema_version": now + 2})


def test_a_version_1_file_keeps_its_race_legs_apart_from_the_closing_rounds():
    data = json.loads((FIXTURES / "tiny_scan.json").read_text())
    trial = data["trials"][0]
    data["trials"] = [{**trial, "raced": True, "round": 2}, {**trial, "round": 1}]
    legged, closing = ScanResult.from_dict(data).trials
    assert (legged.raced, legged.leg, legged.round) == (True, 2, 0)
    assert (closing.raced, closing.leg, closing.round) == (False, 0, 1)


def invoke(*args):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_version_and_help_texts():
    got = invoke("--version")
    assert got.exit_code == 0 and got.output.strip() == f"loadtune {__version__}"
    scan_help = invoke("scan", "--help").output
    assert "(default: [tool.loadtune] spec)" in scan_help and "(needs matplotlib)" in scan_help
    for command in ("scan", "show", "check", "doctor"):
        assert "--format" in invoke(command, "--help").output
    assert "[tool.loadtune] baseline" in invoke("check", "--help").output


def test_the_version_is_answered_without_importing_torch():
    code = "import sys; sys.argv = ['loadtune', '--version']; from loadtune.cli import main; main(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.split()
    assert out == ["loadtune", __version__, "False"]


def test_format_is_checked_before_any_work():
    got = invoke("check", "--format", "yaml")
    assert got.exit_code == 2 and "expected table or json" in got.output


def test_pyproject_without_a_toml_reader_is_refused_not_ignored(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.loadtune]\ntolerance = "5%"\n')
    monkeypatch.setattr(project, "tomllib", None)  # Python 3.10 with tomli removed by hand
    with pytest.raises(project.ProjectError, match="pip install tomli"):
        project.project_defaults(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert project.project_defaults(tmp_path) == ({}, None)  # nothing of loadtune's to miss


def test_packaging_does_not_clash_and_installs_a_toml_reader_on_3_10():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'name = "loadtune-dataloader"' in text and 'loadtune = "loadtune.cli:main"' in text
    assert "\"tomli>=1.1; python_version < '3.11'\"" in text
    assert 'version = { attr = "loadtune.version.__version__" }' in text


# --- the GitHub Actions example ------------------------------------------------------------------------


def loadtune_commands(text):
    """Every ``loadtune ...`` command line in a workflow or a Markdown page (continuations joined)."""
    text = text.replace("\\\n", " ")
    return [line.strip()[line.strip().index("loadtune "):] for line in text.splitlines()
            if re.match(r"^\s*(run:\s*|- )?loadtune (scan|check|show|doctor)\b", line)]


def parse(line):
    """Parse a ``loadtune`` command line as the CLI would, running nothing: a bad flag or value raises."""
    name, *rest = shlex.split(line.split(" #")[0].replace("$GITHUB_STEP_SUMMARY", "summary.md"))[1:]
    typer.main.get_command(app).commands[name].make_context(name, rest)


@pytest.mark.parametrize("workflow", [WORKFLOW, STORED_WORKFLOW], ids=lambda p: p.name)
def test_workflow_commands_parse_and_it_installs_loadtune_not_the_pypi_namesake(workflow):
    text = workflow.read_text()
    commands = loadtune_commands(text) + loadtune_commands((ROOT / "docs" / "ci.md").read_text())
    assert any(c.startswith("loadtune check") for c in commands) and any(c.startswith("loadtune scan") for c in commands)
    for line in commands:
        parse(line)
    with pytest.raises(Exception, match="No such option: --no-such-flag"):  # click's (or typer's own copy's) UsageError
        parse("loadtune check --no-such-flag")
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"pip install\s+['\"]?loadtune\b(?!-)", code)  # the namesake on PyPI
    assert "mikepenz/action-junit-report@" in text
    if workflow == WORKFLOW:  # the simple form: the action (check --against), nothing kept between runs
        assert "fetch-depth: 0" in text and "/loadtune@v" in text and "actions/cache" not in text
    else:  # loadtune from a tag of its repository (tests/test_action.py checks the action's own install)
        assert "pip install" in code and "actions/cache/restore@" in text and "actions/cache/save@" in text
    yaml = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema (pip install -e '.[test]')")
    flow = yaml.YAML(typ="safe").load(text)
    steps = next(iter(flow["jobs"].values()))["steps"]
    report = next(s for s in steps if "action-junit-report" in s.get("uses", ""))
    assert report["if"].startswith("always()")
    assert report["with"]["report_paths"] in ("loadtune-junit.xml", "${{ steps.loadtune.outputs.junit-xml }}")


def test_the_workflow_in_the_docs_is_the_example_file():
    blocks = re.findall(r"^```yaml\n(.*?)^```$", (ROOT / "docs" / "ci.md").read_text(), re.S | re.M)
    assert WORKFLOW.read_text() in blocks  # what a reader copies is what is tested


# --- notebooks -------------------------------------------------------------------------------------------


def test_a_result_renders_as_html_for_jupyter():
    result = ScanResult.load(FIXTURES / "tiny_scan.json")
    html = result._repr_html_()
    assert html == html_report(result) and html.startswith("<pre") and "fastest first" in html and "DataLoader(" in html


def test_in_a_notebook_progress_goes_to_the_cell_output(monkeypatch):
    """Where the display goes, not the scan: the engine's scan is replaced by one that records its observer."""
    seen = []
    monkeypatch.setattr(notebook, "engine_scan", lambda *args, observer=None, **kwargs: seen.append(observer))
    notebook.scan("dataset.py")
    notebook.scan("dataset.py", progress=True)
    assert seen[0] is None and isinstance(seen[1], LineProgress)  # a script whose stderr is a file: silent unless asked

    class ZMQInteractiveShell:  # what rich (and IPython's display) take for a Jupyter kernel
        pass

    monkeypatch.setattr(builtins, "get_ipython", ZMQInteractiveShell, raising=False)
    notebook.scan("dataset.py")
    notebook.scan("dataset.py", progress=False)
    assert isinstance(seen[2], LineProgress) and seen[2].stream is sys.stdout and seen[3] is None
    assert html_report(ScanResult.load(FIXTURES / "tiny_scan.json")).startswith("<pre")  # not rich's own Jupyter output


class Local(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return i


def test_classes_of_main_are_found_even_nested(monkeypatch):
    main = sys.modules["__main__"]
    monkeypatch.setattr(Local, "__module__", "__main__")
    monkeypatch.setattr(main, "Local", Local, raising=False)
    assert main_defined([Subset(Local(), [1, 2]), None]) == "Local"
    assert main_defined([Subset(list(range(3)), [1])]) is None
    spec = from_objects(Local())
    monkeypatch.delattr(main, "__file__", raising=False)  # a notebook kernel's __main__ has no file
    check_main_objects(spec, "cpu", {"fork"})  # forked workers inherit __main__: fine
    with pytest.raises(SpecError, match="Local is defined in __main__.*spawn.*from mydata import Local"):
        check_main_objects(spec, "cpu", {"fork", "spawn"})
    with pytest.raises(SpecError, match="CUDA device.*device='cpu'"):
        check_main_objects(spec, "cuda:0", set())
    monkeypatch.setattr(main, "__file__", "/somewhere/script.py", raising=False)
    check_main_objects(spec, "cpu", {"spawn"})  # a script's file is re-imported by spawn: its classes are found


NOTEBOOK = """
import torch
from torch.utils.data import Dataset
import loadtune

class Squares(Dataset):  # defined in __main__, as in a notebook cell
    def __len__(self):
        return 256
    def __getitem__(self, i):
        return torch.full((8,), float(i))

quick = dict(batch_size=[32], prefetch=[2], persistent=False, warmup=0.1, block_time=0.1, blocks=3, timeout=30,
             diagnose=False, reference_rounds=0, confirm=0, search="grid")
try:
    loadtune.scan(Squares(), workers=[1], start_method=["spawn"], **quick)
except loadtune.SpecError as exc:
    print("REFUSED", exc)
result = loadtune.scan(Squares(), workers=[0, 1], progress=True, **quick)
print("STATUSES", [t.status for t in result.trials])
print("HTML", "fastest first" in result._repr_html_())
"""


@pytest.mark.slow
def test_a_dataset_class_defined_in_main_as_in_a_notebook(tmp_path):
    """``python -c``: a ``__main__`` without a file, as a Jupyter kernel's."""
    proc = subprocess.run([sys.executable, "-c", NOTEBOOK], capture_output=True, text=True, cwd=tmp_path, timeout=240,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "REFUSED Squares is defined in __main__" in proc.stdout
    assert "STATUSES ['ok', 'ok']" in proc.stdout and "HTML True" in proc.stdout  # forked trials and workers inherit it
    assert "loadtune: trial 2/2: w1 pf2 bs32: samples/s" in proc.stderr  # progress=True off a terminal: lines


# --- end to end: a scan and a check as a CI job runs them ------------------------------------------------------


@pytest.fixture(scope="module")
def ci_baseline(tmp_path_factory):
    """A scan with stdout and stderr going to one file, as in a CI log (unbuffered: in the order written)."""
    folder = tmp_path_factory.mktemp("ci")
    path, log = folder / "loadtune.json", folder / "job.log"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, "-m", "loadtune", "scan", str(SPECS / "tiny.py"), "--json", str(path), "--grid",
                               "--workers", "0,1", "--prefetch", "2", "--no-persistent", "--confirm", "0", "--reference-rounds", "2",
                               *QUICK], stdout=out, stderr=subprocess.STDOUT, text=True, timeout=300,
                              env={**env, "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    assert proc.returncode == 0, log.read_text()
    return path, log.read_text()


@pytest.mark.slow
def test_a_scan_logs_a_line_per_trial_and_saves_what_the_schema_says(ci_baseline):
    path, log = ci_baseline
    assert re.search(r"^loadtune: trial 1/2: w0 bs32: samples/s [\d,.]+ ", log, re.M), log
    assert re.search(r"^loadtune: trial 2/2: w1 pf2 bs32: samples/s .* \(\d+:\d\d elapsed\)$", log, re.M), log
    assert "reference for check: 2 paired rounds" in log and "\x1b[" not in log  # plain text: no colour, no cursor moves
    # the answer is printed before the reference for check is recorded, and a last line says it was
    assert log.index("loader = DataLoader(") < log.index("loadtune: reference for check: 2 paired rounds"), log
    assert "Reference for check: 2 paired rounds of w" in log.split("loadtune: reference for check")[-1], log
    data = json.loads(path.read_text())
    assert data["stages"] and data["reference"]  # every part of a result, for the schema to describe
    assert_reference(data, rounds=2)  # recorded by the scan itself, after its answer
    assert_valid(data, "scan")


@pytest.mark.slow
def test_a_check_in_ci_appends_its_summary_and_writes_junit_and_json(ci_baseline, tmp_path):
    baseline, _ = ci_baseline
    summary, junit = tmp_path / "step_summary.md", tmp_path / "junit.xml"
    summary.write_text("## unit tests\n\nall passed\n")
    proc = subprocess.run([sys.executable, "-m", "loadtune", "check", str(SPECS / "tiny.py"), "--baseline", str(baseline),
                           "--rounds", "2", "--budget", "30", "--tolerance", "90%", "--junit-xml", str(junit),
                           "--markdown", str(summary), "--format", "json"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", "GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode in (0, 1, 4), proc.stdout + proc.stderr  # a verdict, whichever: never a crash
    data = json.loads(proc.stdout)  # stdout is the JSON alone; the rounds went to stderr
    assert_valid(data, "check")
    assert_check_agrees(proc.returncode, data, junit, summary.read_text())
    assert re.search(r"round 2: config .*; \d+:\d\d elapsed", proc.stderr)
    text = summary.read_text()
    assert text.startswith("## unit tests\n\nall passed\n\n### loadtune check:")  # earlier steps' summary kept
    cases = ET.parse(junit).getroot().findall("testcase")
    assert cases[0].get("name").startswith("throughput ") and all(float(c.get("time")) > 0 for c in cases)
    assert {c.get("name").split(" ")[0] for c in cases} >= {"throughput", "shaped"}
