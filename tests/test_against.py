"""``loadtune check --against REF``: the work tree's data code timed in turns with another revision's.

The decisions are pure functions, tested here without processes: a round from its blocks, the change
with its interval over rounds, the verdict and when to stop, which tree a module came from, where a
side's paths point. End to end, on a git repository made in a temporary folder (its dataset's work
per sample set in a package the spec imports): against a copy of itself a check's exit code, JSON and
JUnit agree whatever the verdict, and ten times the work fails; an editable install that makes the base
import the head's code is refused; an unknown revision is refused before any work; a spec new in the
change passes with a note; Ctrl-C leaves no worktree behind. How often an unchanged dataset passes and a
20% slower one fails is benchmarks/check_against.py's figure (benchmarks/RESULTS.md); the rounds of its
checks are read again in tests/test_verdict.py."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import assert_check_agrees, interrupt_when, run_cli
from test_ci_output import assert_valid
from typer.testing import CliRunner

from loadtune.analysis.against import (
    duet_round,
    foreign_message,
    foreign_modules,
    judge_against,
    next_against_step,
    owner,
)
from loadtune.cli.app import app
from loadtune.cli.check import knob_flags
from loadtune.engine.trial.duet import BASE, HEAD, moved, turns
from loadtune.model.against import Against, DuetRound, Revision
from loadtune.model.check import INCONCLUSIVE, NO_BASE, NOTHING, PASS, REGRESSION, CheckResult
from loadtune.model.config import TrialConfig
from loadtune.report import ci

CONFIG = TrialConfig(32, 0)


def rounds_of(*ratios):
    return [DuetRound(1000 * r, 1000, i % 2 == 0, 4, r) for i, r in enumerate(ratios)]


# --- the verdict, pure ----------------------------------------------------------------------------------


def test_a_round_is_the_median_of_its_turns_and_geometric_means_of_the_rates():
    got = duet_round([90, 100, 10], [100, 100, 100], head_first=False)
    assert got.pairs == 3 and got.ratio == pytest.approx(0.9) and not got.head_first  # the burst in turn 3 does not move it
    assert got.head_rate == pytest.approx((90 * 100 * 10) ** (1 / 3)) and got.base_rate == pytest.approx(100)
    assert duet_round([100, 90], [100], True).pairs == 1  # only turns both sides completed
    assert duet_round([], [100], True) == DuetRound(None, None, True, 0)


def test_the_change_is_a_t_interval_over_rounds():
    change = judge_against(rounds_of(0.80, 0.82, 0.78), 0.10)[2]
    assert change.value == pytest.approx(0.80 - 1, abs=0.002) and change.low < change.value < change.high
    assert change.rounds == 3
    assert judge_against(rounds_of(0.8), 0.10)[2] is None


@pytest.mark.parametrize("ratios, status", [
    ((0.99, 1.01, 1.00), PASS),
    ((0.77, 0.78, 0.76), REGRESSION),
    ((0.80, 1.05, 0.90), INCONCLUSIVE),
])
def test_the_verdict_reads_the_interval_against_the_tolerance(ratios, status):
    got, reasons, _ = judge_against(rounds_of(*ratios), 0.10)
    assert got == status
    if status == REGRESSION:
        assert "slower than the base" in reasons[0]


def test_nothing_measured_and_the_floor():
    assert judge_against([DuetRound(None, None)], 0.10)[0] == NOTHING
    status, reasons, _ = judge_against([DuetRound(1000, None), DuetRound(1000, None)], 0.10)
    assert status == NOTHING and reasons == ["no round measured both sides"]
    status, reasons, _ = judge_against(rounds_of(1.0, 1.0, 1.01), 0.10, min_throughput=5000)
    assert status == REGRESSION and "under the floor" in reasons[-1]


def test_more_rounds_while_undecided_and_an_early_stop_when_the_budget_cannot_decide():
    assert next_against_step(rounds_of(1.0, 1.0), 0.10, 3, 30) == (INCONCLUSIVE, False, None)  # under --rounds
    assert next_against_step(rounds_of(1.0, 1.0, 1.0), 0.10, 3, 30)[:2] == (PASS, True)
    assert next_against_step(rounds_of(0.85, 0.95, 0.9), 0.10, 3, 30)[:2] == (INCONCLUSIVE, False)  # the budget allows more
    assert next_against_step(rounds_of(0.85, 0.95, 0.9), 0.10, 3, 3)[:2] == (INCONCLUSIVE, True)  # it does not
    at_tolerance = rounds_of(*[0.9 + 0.02 * (-1) ** i for i in range(8)])
    status, stop, early = next_against_step(at_tolerance, 0.10, 3, 12)
    assert (status, stop) == (INCONCLUSIVE, True) and early.startswith("stopped after 8 rounds")


# --- the guards, pure ---------------------------------------------------------------------------------


def test_a_module_belongs_to_the_deepest_tree_holding_it():
    roots = {HEAD: "/repo", BASE: "/repo/.base"}
    assert owner("/repo/pkg/a.py", roots) == HEAD and owner("/repo/.base/pkg/a.py", roots) == BASE
    assert owner("/usr/lib/python3/os.py", roots) is None


def test_a_side_that_imported_the_others_code_is_named_with_the_remedy():
    roots = {HEAD: "/repo", BASE: "/tmp/base/tree"}
    origins = {HEAD: {"dataset": "/repo/dataset.py", "dial": "/repo/src/dial/__init__.py"},
               BASE: {"dataset": "/tmp/base/tree/dataset.py", "dial": "/repo/src/dial/__init__.py"}}
    found = foreign_modules(origins, roots)
    assert found == {BASE: {"dial": "/repo/src/dial/__init__.py"}}
    message = foreign_message(found, roots)
    assert "base revision's process imported the head's code (dial from /repo/src/dial/__init__.py)" in message
    assert "editable install" in message and "PYTHONPATH" in message
    assert foreign_modules({HEAD: origins[HEAD], BASE: {"dataset": "/tmp/base/tree/dataset.py"}}, roots) == {}


def test_a_sides_paths_point_into_its_own_tree_where_it_has_them(tmp_path):
    head, base = tmp_path / "head", tmp_path / "base"
    for folder in (head / "src", base / "src", head / "untracked"):
        folder.mkdir(parents=True)
    assert moved(str(head / "src"), str(head), str(base)) == str(base / "src")
    assert moved(str(head), str(head), str(base)) == str(base)
    assert moved(str(head / "untracked"), str(head), str(base)) == str(head / "untracked")  # the base has no such folder
    assert moved(str(head / ".venv/lib/python3.11/site-packages"), str(head), str(base)).startswith(str(head))
    assert moved("", str(head), str(base)) == "" and moved("/usr/lib/python3.11", str(head), str(base)) == "/usr/lib/python3.11"


def test_turns_alternate_and_each_round_starts_with_the_side_given():
    assert turns(HEAD, 3) == [(HEAD, BASE), (BASE, HEAD), (HEAD, BASE)]
    assert turns(BASE, 2) == [(BASE, HEAD), (HEAD, BASE)]


def test_knob_flags_go_over_the_config_string():
    assert knob_flags("num_workers=4,batch_size=64", num_workers=2, pin_memory=None) == {"num_workers": 2, "batch_size": 64}
    assert knob_flags(None, batch_size=16) == {"batch_size": 16}


# --- the reports --------------------------------------------------------------------------------------


def against_result(status=REGRESSION):
    against = Against(Revision("", "3f2a1c9", dirty=True), Revision("origin/main", "8e01b7d"), "dataset.py",
                      rounds_of(0.92, 0.93, 0.94), notes=["the work tree has uncommitted changes: they are part of the head"])
    change = judge_against(against.rounds, 0.05)[2]
    return CheckResult(CONFIG, 0.05, None, [], [], None, None, status, ["the head loads 7.0% slower than the base"],
                       change=change.value, change_low=change.low, change_high=change.high, wall_s=12.0, against=against)


def test_the_reports_name_both_revisions():
    result = against_result()
    assert ci.headline(result).startswith("head 3f2a1c9 + uncommitted changes vs base origin/main 8e01b7d: 0.93× (0.9")
    suite = ET.fromstring(ci.junit_xml(result))
    names = [c.get("name") for c in suite.findall("testcase")]
    assert names == ["head 3f2a1c9 + uncommitted changes (w0 bs32)", "base origin/main 8e01b7d (w0 bs32)"]
    assert suite.find("testcase/failure") is not None and suite.get("failures") == "1"
    markdown = ci.markdown(result)
    assert "### loadtune check: ❌ regression" in markdown and "| samples/s, timed in turns | 1,000 | 930 |" in markdown
    assert "uncommitted changes: they are part of the head" in markdown
    assert_valid(result.to_dict(), "check")


def test_a_spec_new_in_the_change_is_no_failure():
    result = against_result(NO_BASE)
    result.against.rounds.clear()
    result.change = result.change_low = result.change_high = None
    suite = ET.fromstring(ci.junit_xml(result))
    assert suite.get("failures") == "0" and suite.find("testcase/skipped") is not None
    assert "nothing to compare" in ci.markdown(result)
    assert_valid(result.to_dict(), "check")


# --- end to end, on a throw-away repository --------------------------------------------------------------

# 24 small matmuls per sample (about 0.3 ms): the loader's own costs per batch are small beside it, so ten
# times the work reads some 90% fewer samples/s, far beyond the 10% tolerance, the rounds' noise and the pace
# this VM's shares of a core swing through: short blocks and two rounds decide it
DATASET = '''import torch
from torch.utils.data import Dataset

from dial import WORK


class Dial(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = torch.full((12, 12), 0.01 * (i % 11))
        for _ in range(WORK):
            x = torch.relu(x @ x.T * 0.1 + 0.01)
        return x.flatten()[:16]


def dataset():
    return Dial()


loadtune_options = {"batch_size": 32, "warmup": 0.3, "block_time": 0.3, "blocks": 4, "timeout": 60}
'''
WORK = 24


def git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def worktrees(repo):
    out = subprocess.run(["git", "worktree", "list"], cwd=repo, check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def make_repo(path, work=WORK, package="dial"):
    """A repository whose first commit holds the spec and its package (``package``/``__init__.py``)."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    git(path, "config", "user.email", "test@example.com")
    git(path, "config", "user.name", "test")
    (path / "dataset.py").write_text(DATASET)
    set_work(path, work, package)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "A")
    return path


def set_work(repo, work, package="dial"):
    (repo / package).mkdir(parents=True, exist_ok=True)
    (repo / package / "__init__.py").write_text(f"WORK = {work}\n")


def commit(repo, message):
    git(repo, "commit", "-qam", message)


@pytest.fixture
def in_repo(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    return repo


def test_an_unknown_revision_is_refused_before_any_work(in_repo):
    got = CliRunner().invoke(app, ["check", "dataset.py", "--against", "no-such-branch"], env={"COLUMNS": "200"})
    assert got.exit_code == 2, got.output
    assert "no such revision" in got.output and "fetch-depth: 0" in got.output
    assert len(worktrees(in_repo)) == 1


def test_against_and_its_flags_are_refused_where_they_do_not_fit(in_repo):
    for args in (["--against", "HEAD", "--against-dir", "."], ["--config", "num_workers=0"], ["--against", "HEAD", "--record"]):
        got = CliRunner().invoke(app, ["check", "dataset.py", *args], env={"COLUMNS": "200"})
        assert got.exit_code == 2, (args, got.output)


@pytest.mark.slow
def test_a_check_against_a_copy_agrees_with_itself_and_ten_times_the_work_fails(tmp_path):
    """The main process alone (no workers): against a copy of the tree, whatever the verdict, its exit code,
    JSON and JUnit say the same; against the commit before ten times the work, a regression."""
    repo = make_repo(tmp_path / "repo")
    same = tmp_path / "same"
    subprocess.run(["cp", "-r", str(repo), str(same)], check=True)  # the base as a checkout the user made
    unchanged = run_cli("check", "dataset.py", "--against-dir", same, "--config", "num_workers=0", "--rounds", "2", "--budget", "20",
                        "--junit-xml", tmp_path / "same.xml", "--json", tmp_path / "same.json", cwd=repo)
    assert unchanged.returncode in (0, 1, 4), unchanged.stdout + unchanged.stderr
    assert_check_agrees(unchanged.returncode, json.loads((tmp_path / "same.json").read_text()), tmp_path / "same.xml")
    set_work(repo, WORK * 10)
    commit(repo, "ten times the work per sample")
    slowed = run_cli("check", "dataset.py", "--against", "HEAD~1", "--config", "num_workers=0", "--rounds", "2", "--budget", "60",
                     "--junit-xml", tmp_path / "junit.xml", "--json", tmp_path / "slowed.json", cwd=repo)
    assert slowed.returncode == 1, slowed.stdout + slowed.stderr
    assert "REGRESSION" in slowed.stdout and "vs base HEAD~1" in slowed.stdout
    data = json.loads((tmp_path / "slowed.json").read_text())
    assert_check_agrees(slowed.returncode, data, tmp_path / "junit.xml")
    # far below any noise at its point; its interval's width is the machine's (a fresh clone read its high end at -38%)
    assert data["change"] < -0.5 and data["change_high"] < -0.1 and data["against"]["base"]["name"] == "HEAD~1"
    assert data["machine"]["usable_cores"] >= 1  # where it ran
    assert_valid(data, "check")
    assert len(ET.parse(tmp_path / "junit.xml").getroot().findall("testcase")) == 2
    assert len(worktrees(repo)) == 1  # the base's checkout is gone


SITECUSTOMIZE = '''import importlib.util
import sys


class EditableFinder:
    """What an editable install (pip install -e) puts on sys.meta_path: the package from one folder, whatever
    sys.path says."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "dial":
            return None
        return importlib.util.spec_from_file_location(name, {init!r}, submodule_search_locations=[{folder!r}])


sys.meta_path.append(EditableFinder)
'''


@pytest.mark.slow
def test_a_base_that_imports_the_heads_code_is_refused(tmp_path):
    repo = make_repo(tmp_path / "repo", package="src/dial")  # src layout: the spec's folder does not hold the package
    site = tmp_path / "site"
    site.mkdir()
    folder = repo / "src" / "dial"
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(init=str(folder / "__init__.py"), folder=str(folder)))
    got = run_cli("check", "dataset.py", "--against", "HEAD", "--config", "num_workers=0", cwd=repo,
                  env={"PYTHONPATH": str(site)})
    assert got.returncode == 2, got.stdout + got.stderr
    message = " ".join(got.stderr.split())
    assert "the base revision's process imported the head's code (dial from" in message and "editable install" in message
    assert len(worktrees(repo)) == 1


@pytest.mark.slow
def test_a_spec_new_in_this_change_passes_with_a_note(tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / "loader.py").write_text(DATASET)
    git(repo, "add", "loader.py")
    commit(repo, "a second spec")
    got = run_cli("check", "loader.py", "--against", "HEAD~1", "--format", "json", cwd=repo)
    assert got.returncode == 0, got.stderr
    data = json.loads(got.stdout)
    assert data["status"] == NO_BASE and "the spec is new in this change" in data["reasons"][0]
    assert len(worktrees(repo)) == 1


@pytest.mark.slow
def test_ctrl_c_leaves_no_worktree_behind(tmp_path):
    repo = make_repo(tmp_path / "repo")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = tmp_path / "cli.out"
    cmd = [sys.executable, "-m", "loadtune", "check", "dataset.py", "--against", "HEAD", "--config", "num_workers=2",
           "--rounds", "20"]
    env = {**os.environ, "TMPDIR": str(scratch), "COLUMNS": "200", "PYTHONWARNINGS": "ignore"}
    code, stdout, stderr = interrupt_when(cmd, lambda: out.exists() and "round 1:" in out.read_text(), tmp_path, cwd=repo, env=env)
    assert code == 130, stdout + stderr
    assert "round 1:" in stdout  # it was measuring when interrupted
    assert len(worktrees(repo)) == 1
    assert not list(Path(scratch).glob("loadtune-base-*"))
