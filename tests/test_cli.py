"""The real CLI, end to end: real spec files, real worker processes, exit codes, table and JSON."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, QUICK, SPECS, first_trial_saved, flat, interrupt_when, invoke, run_cli

import loadtune
from loadtune.model.results import ScanResult


@pytest.mark.slow
def test_scan_end_to_end_table_snippet_and_json(tiny_scan, tmp_path):
    proc, out = tiny_scan.proc, tiny_scan.json
    assert "Traceback" not in proc.stdout + proc.stderr
    text = proc.stdout
    assert "w0 bs32" in text and "w2 pf2 bs32" in text  # both trials ranked (batch size from the spec)
    assert "Recommendation" in text and "loader = DataLoader(" in text
    assert "pin_memory=True" in text and "skipped" in text  # batches stay on the CPU: said, not silently dropped

    data = json.loads(out.read_text())
    assert data["schema"] == "loadtune/scan" and data["schema_version"] == 2
    assert data["state"] == "complete"
    assert data["machine"]["usable_cores"] >= 1
    assert data["spec"]["path"].endswith("tiny.py") and data["spec"]["length"] == 512
    # the search's: not the race's legs, nor the referee's rounds (a race its runs alone contradict is timed again alone)
    search = [t for t in data["trials"] if t["round"] == 0 and not t["leg"] and not t.get("referee")]
    assert len(search) == 2
    for trial in data["trials"]:  # the two race too (one config far ahead races the best other)
        assert trial["status"] == "ok" and all(b["samples"] > 0 and b["seconds"] > 0 for b in trial["blocks"])
        if not trial["raced"]:
            assert len(trial["blocks"]) == 3 and trial["startup_s"] > 0 and trial["memory"]["peak_bytes"] > 0
    workers = sorted(t["config"]["num_workers"] for t in search)
    assert workers == [0, 2]
    rec = data["recommendation"]
    assert rec["config"]["num_workers"] in (0, 2)
    assert f"num_workers={rec['config']['num_workers']}" in text

    result = ScanResult.load(out)  # the saved file reads back into the same model
    assert result.recommendation.config.num_workers == rec["config"]["num_workers"]

    shown = run_cli("show", out)  # rendered again from the file, nothing measured
    assert shown.returncode == 0, shown.stderr
    assert "w0 bs32" in shown.stdout and "w2 pf2 bs32" in shown.stdout and "loader = DataLoader(" in shown.stdout
    assert invoke("show", tmp_path / "missing.json").exit_code == 2


@pytest.mark.slow
def test_reference_default_config_is_measured_when_grid_lacks_it(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("scan", SPECS / "tiny.py", "--workers", "1", "--prefetch", "2", "--no-persistent", "--json", out, "-q", *QUICK)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    refs = {json.dumps(t["config"], sort_keys=True) for t in data["trials"] if t["reference"]}  # runs may repeat
    assert [json.loads(r)["num_workers"] for r in refs] == [0]
    assert data["recommendation"]["baseline"]["num_workers"] == 0
    assert data["recommendation"]["speedup"] is not None


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--workers", "-1"], "num_workers"),
        (["--workers", "two"], "--workers"),
        (["--batch-size", "0"], "batch size"),
        (["--prefetch", "0"], "prefetch_factor"),
        (["--blocks", "0"], "blocks"),
        (["--device", "cuda:99"], "cuda"),
        (["--json", "/nonexistent-folder/x.json"], "does not exist"),
    ],
)
@pytest.mark.slow
def test_invalid_flags_are_refused_before_any_work(tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    got = invoke("scan", SPECS / "tiny.py", *args)
    assert got.exit_code == 2 and isinstance(got.exception, SystemExit), (got.output, got.exception)
    assert needle in got.stderr
    assert not (tmp_path / "loadtune.json").exists()  # refused before a result was started


@pytest.mark.slow
def test_spec_errors_exit_2_naming_file_and_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --json path: nothing may be written there
    bad = tmp_path / "broken.py"
    bad.write_text("import torch\n\ndef dataset(:\n    pass\n")
    empty = tmp_path / "empty_ds.py"
    empty.write_text("import torch\nfrom torch.utils.data import TensorDataset\n\ndef dataset():\n    return TensorDataset(torch.zeros(0, 3))\n")
    none = tmp_path / "no_dataset.py"
    none.write_text("x = 1\n")
    for spec, needles in ((tmp_path / "nope.py", ["nope.py", "no such spec file"]), (bad, ["broken.py:3", "syntax error"]),
                          (empty, ["length 0"]), (none, ["defines no 'dataset'"])):
        got = invoke("scan", spec)
        assert got.exit_code == 2 and isinstance(got.exception, SystemExit), (spec, got.output, got.exception)
        assert all(needle in got.stderr for needle in needles), (needles, got.stderr)
    assert not (tmp_path / "loadtune.json").exists()


@pytest.mark.slow
def test_every_trial_failing_exits_3_with_the_dataset_error(tmp_path):
    out = tmp_path / "f.json"
    proc = run_cli("scan", SPECS / "failing.py", "--workers", "0,1", "--prefetch", "2", "--no-persistent", "--json", out, "-q", *QUICK)
    assert proc.returncode == 3
    text = flat(proc.stdout)
    assert "Every trial failed the same way: the dataset raised ValueError at index 77" in text
    assert "corrupt record at index 77" in text
    data = json.loads(out.read_text())
    assert len(data["trials"]) == 2 and all(t["status"] == "failed" for t in data["trials"])
    assert data["recommendation"] is None


@pytest.mark.slow
def test_factory_selection_and_console_script(tmp_path):
    spec = tmp_path / "two_sets.py"
    spec.write_text(
        "import torch\nfrom torch.utils.data import TensorDataset\n"
        "def dataset():\n    raise RuntimeError('not this one')\n"
        "def make_val_set():\n    return TensorDataset(torch.arange(40.0).reshape(20, 2))\n"
    )
    script = Path(sys.executable).parent / "loadtune"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "loadtune"]
    proc = subprocess.run(
        [*cmd, "scan", f"{spec}:make_val_set", "--workers", "0", "--batch-size", "4", "--json", tmp_path / "v.json", "-q", *QUICK],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "v.json").read_text())["spec"]["factory"] == "make_val_set"


class Doubling:  # not a torch Dataset: any object with __len__ and __getitem__ loads
    def __len__(self):
        return 64

    def __getitem__(self, i):
        import torch

        return torch.tensor([2.0 * i])


@pytest.mark.slow
def test_python_api_with_an_in_memory_dataset(tmp_path):
    result = loadtune.scan(
        Doubling(), workers=[0, 1], prefetch=[2], persistent=False, batch_size=8,
        warmup=0.1, block_time=0.05, blocks=2, json_path=tmp_path / "api.json",
    )
    assert isinstance(result, loadtune.ScanResult)
    screened = [t for t in result.ok_trials if t.round == 0 and not t.raced and not t.referee]  # the referee's: a race its runs alone contradicted
    assert result.state == "complete" and len(screened) == 2
    assert result.recommendation is not None
    assert ScanResult.load(tmp_path / "api.json").to_dict()["trials"] == result.to_dict()["trials"]


@pytest.mark.slow
def test_ctrl_c_prints_and_saves_the_finished_trials(tmp_path):
    out = tmp_path / "partial.json"
    cmd = [sys.executable, "-m", "loadtune", "scan", str(SPECS / "tiny.py"), "--workers", "0,1,2", "--prefetch", "2,4",
           "--json", str(out), "-q", "--warmup", "0.3", "--block-time", "0.3", "--blocks", "3"]
    # the first finished trial on disk, then what a terminal's Ctrl-C does: SIGINT to the whole foreground group
    code, stdout, stderr = interrupt_when(cmd, first_trial_saved(out), tmp_path,
                                          env={**os.environ, "COLUMNS": "100"})
    assert code == 130, stderr
    assert "Interrupted" in stdout and "Recommendation" in stdout
    data = json.loads(out.read_text())
    assert data["state"] == "interrupted"
    assert 1 <= len(data["trials"]) < 9
    assert all(t["status"] == "ok" for t in data["trials"])  # the trial cut short is not saved as a result


@pytest.mark.slow
def test_ctrl_c_while_the_reference_is_recorded_keeps_the_answer_and_resume_records_it(tmp_path):
    out = tmp_path / "scan.json"
    args = ["scan", str(SPECS / "tiny.py"), "--workers", "0,1", "--prefetch", "2", "--no-persistent", "--confirm", "0",
            "--reference-rounds", "8", "--json", str(out), "-q", *QUICK]
    printed = tmp_path / "cli.out"  # interrupt_when's file for stdout, unbuffered: the answer is printed
    answered = lambda: printed.exists() and "loader = DataLoader(" in printed.read_text()
    code, stdout, stderr = interrupt_when([sys.executable, "-m", "loadtune", *args], answered, tmp_path,
                                          env={**os.environ, "COLUMNS": "100", "PYTHONUNBUFFERED": "1"})
    assert code == 130, stderr
    assert "loader = DataLoader(" in stdout and "Interrupted while recording the reference for check" in stdout
    data = json.loads(out.read_text())
    assert data["state"] == "complete" and data["recommendation"] and data["reference"] is None
    assert any(n.startswith("no reference for check: the scan was interrupted") for n in data["notes"])
    trials = len(data["trials"])

    resumed = run_cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "Reference for check: 8 paired rounds" in resumed.stdout
    data = json.loads(out.read_text())
    assert len(data["reference"]["rounds"]) == 8 and len(data["trials"]) == trials  # nothing measured twice
    assert not any(n.startswith("no reference for check") for n in data["notes"])


def show(*args):
    """``loadtune show`` in this process (it measures nothing, so no isolation is needed)."""
    from typer.testing import CliRunner

    from loadtune.cli.app import app

    return CliRunner().invoke(app, ["show", *map(str, args)], env={"COLUMNS": "100"})


def test_show_renders_a_saved_scan_with_filters_sort_and_top():
    saved = FIXTURES / "tiny_scan.json"  # a real grid scan of tiny.py: nothing is measured here
    short = show(saved)
    assert short.exit_code == 0, short.stderr
    assert "w4 pf4 bs32" not in short.stdout and "--details: 3 more configs" in short.stdout  # the fastest of each worker count
    full = show(saved, "--details")
    assert full.exit_code == 0, full.stderr
    assert all(label in full.stdout for label in ("w0 bs32", "w1 pf2 bs32", "w4 pf4 bs32", "pin_memory=True"))
    assert "loader = DataLoader(" in full.stdout and "loader = DataLoader(" in short.stdout

    picked = show(saved, "--workers", "2,4", "--status", "ok", "--sort", "workers", "--top", "3")
    assert picked.exit_code == 0, picked.stderr
    table = picked.stdout.split("showing")[0]
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert [row.split("│")[2].split()[0] for row in rows] == ["w2", "w2", "w4"]
    assert "pin_memory=True" not in table  # --status ok: the skipped row is left out
    assert "showing 3 of 8 rows" in picked.stdout and "loader = DataLoader(" in picked.stdout

    as_json = show(saved, "--format", "json")
    # the saved record through the data model: today's schema (fields added since are filled in), nothing lost
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == json.loads(json.dumps(ScanResult.load(saved).to_dict()))

    for bad in (["--sort", "speed"], ["--status", "broken"], ["--top", "0"], ["--workers", "two"], ["--format", "json", "--top", "2"]):
        proc = show(saved, *bad)
        assert proc.exit_code == 2 and "error:" in proc.stderr and isinstance(proc.exception, SystemExit), bad


def test_show_two_scans_compares_them(tmp_path):
    before, after = FIXTURES / "slowable_before.json", FIXTURES / "slowable_after.json"
    proc = show(before, after)
    assert proc.exit_code == 0, proc.stderr
    text = proc.stdout
    assert "w0 bs16" in text and "slower" in text and "only in B" in text and "B recommends" in text

    data = json.loads(show(before, after, "--format", "json", "--workers", "0").stdout)
    assert data["schema"] == "loadtune/compare" and [c["label"] for c in data["configs"]] == ["w0 bs16"]
    assert data["configs"][0]["verdict"] == "slower" and data["configs"][0]["ratio"]["high"] < 1

    foreign = tmp_path / "other.json"
    foreign.write_text('{"schema": "something/else"}')
    corrupt = tmp_path / "cut.json"
    corrupt.write_text(before.read_text()[:500])
    for args, needle in (([before, foreign], "not a loadtune scan result"), ([corrupt, after], "not valid JSON"),
                         ([before, tmp_path / "absent.json"], "cannot read"), ([before, after, after], "one result, or two")):
        proc = show(*args)
        assert proc.exit_code == 2 and needle in proc.stderr and isinstance(proc.exception, SystemExit), args


@pytest.mark.slow
def test_scan_format_json_writes_only_the_result_to_stdout(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("scan", SPECS / "tiny.py", "--workers", "0", "--json", out, "--format", "json", *QUICK)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # all of stdout is the one JSON document
    assert data == json.loads(out.read_text()) and data["state"] == "complete"
    assert "Saved to" in proc.stderr and "Recommendation" not in proc.stdout


@pytest.mark.slow
def test_scan_quiet_prints_only_the_recommendation(tmp_path):
    proc = run_cli("scan", SPECS / "tiny.py", "--workers", "0", "--json", tmp_path / "r.json", "--quiet", *QUICK)
    assert proc.returncode == 0, proc.stderr
    assert "Recommendation" in proc.stdout and "loader = DataLoader(" in proc.stdout and "num_workers=0" in proc.stdout
    assert "fastest first" not in proc.stdout and "samples/s ┃" not in proc.stdout  # no table
    assert "loadtune: trial" not in proc.stderr  # and no progress, not even the log's line per trial


def test_numpy_is_installed_with_loadtune_so_torch_imports_without_a_warning():
    """Without numpy, torch warns "Failed to initialize NumPy" in every process that imports it: the
    quick start's first screen, on a fresh clone, would carry it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((SPECS.parent.parent / "pyproject.toml").read_text())
    assert any(dep.startswith("numpy") for dep in pyproject["project"]["dependencies"])
    done = subprocess.run([sys.executable, "-W", "default", "-c", "import torch"], capture_output=True, text=True)
    assert "NumPy" not in done.stderr
