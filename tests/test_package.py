"""The package as built: the wheel holds every module and the JSON schemas and nothing of the rest of
the tree, the sdist the whole source, both at loadtune/version.py's version; the contents check that
.ci/package runs (.ci/package_contents.py) passes them and fails a wheel or sdist that lacks a file.
Built from a copy of the tracked files, without build isolation (seconds; .ci/package builds isolated,
then installs the wheel outside the checkout and runs it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from loadtune.version import __version__

ROOT = Path(__file__).resolve().parent.parent
CONTENTS = ROOT / ".ci" / "package_contents.py"
NAME = f"loadtune_dataloader-{__version__}"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def contents():
    """.ci/package_contents.py as a module; an unpacked sdist has neither it nor git to list files with."""
    if not CONTENTS.is_file() or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout of loadtune (.ci/package_contents.py and git ls-files)")
    spec = importlib.util.spec_from_file_location("package_contents", CONTENTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dist(tmp_path_factory, contents) -> Path:
    """The sdist and the wheel built from it, as `python -m build` makes them, from the tracked files."""
    work = tmp_path_factory.mktemp("package")
    contents.copy_tracked(work / "src")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(work / "dist"), str(work / "src")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work / "dist"


def wheel_names(dist: Path) -> list[str]:
    with zipfile.ZipFile(dist / f"{NAME}-py3-none-any.whl") as z:
        return z.namelist()


def sdist_names(dist: Path) -> list[str]:
    with tarfile.open(dist / f"{NAME}.tar.gz") as t:
        return [m.name for m in t.getmembers() if m.isfile()]


def test_the_wheel_holds_every_module_and_the_schemas(dist, contents):
    names = set(wheel_names(dist))
    modules = [n for n in contents.tracked_files() if n.startswith("loadtune/") and n.endswith(".py")]
    assert len(modules) > 100 and "loadtune/cli/__init__.py" in modules
    assert [m for m in modules if m not in names] == []
    assert {"loadtune/schema/scan.schema.json", "loadtune/schema/check.schema.json"} <= names
    # nothing of the tree but the package: no tests, benchmarks, examples or docs
    assert {n.split("/")[0] for n in names} == {"loadtune", f"{NAME}.dist-info"}
    assert f"{NAME}.dist-info/licenses/LICENSE" in names


def test_the_sdist_holds_the_whole_source(dist):
    names = {n.removeprefix(f"{NAME}/") for n in sdist_names(dist)}
    for name in ("examples/images.py", "docs/cli.md", "docs/api.md", "tests/conftest.py", "tests/test_package.py",
                 "loadtune/schema/scan.schema.json", "README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml"):
        assert name in names
    assert not [n for n in names if n.startswith(("benchmarks/", ".ci/"))]


def test_both_are_of_the_version_in_version_py(dist):
    with zipfile.ZipFile(dist / f"{NAME}-py3-none-any.whl") as z:
        metadata = z.read(f"{NAME}.dist-info/METADATA").decode()
    with tarfile.open(dist / f"{NAME}.tar.gz") as t:
        pkg_info = t.extractfile(f"{NAME}/PKG-INFO").read().decode()
    assert f"\nVersion: {__version__}\n" in metadata
    assert f"\nVersion: {__version__}\n" in pkg_info
    assert "License-Expression: MIT" in metadata


def rewrite_wheel(source: Path, target: Path, drop: str, add: str) -> None:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            if item.filename != drop:
                new.writestr(item, old.read(item))
        new.writestr(add, "")


def rewrite_sdist(source: Path, target: Path, drop: str, add: str) -> None:
    with tarfile.open(source) as old, tarfile.open(target, "w:gz") as new:
        for member in old.getmembers():
            if member.name != drop:
                new.addfile(member, old.extractfile(member) if member.isfile() else None)
        (target.parent / "added").write_text("")
        new.add(target.parent / "added", arcname=add)


def test_the_contents_check_passes_these_and_fails_what_lacks_a_file(dist, contents, tmp_path):
    assert contents.check(dist) == []
    broken = tmp_path / "dist"
    broken.mkdir()
    rewrite_wheel(dist / f"{NAME}-py3-none-any.whl", broken / f"{NAME}-py3-none-any.whl",
                  drop="loadtune/schema/scan.schema.json", add="tests/test_cli.py")
    rewrite_sdist(dist / f"{NAME}.tar.gz", broken / f"{NAME}.tar.gz",
                  drop=f"{NAME}/examples/images.py", add=f"{NAME}/benchmarks/overhead.py")
    problems = contents.check(broken)
    assert "wheel lacks loadtune/schema/scan.schema.json" in problems
    assert "wheel holds tests/test_cli.py, outside loadtune/ and its dist-info" in problems
    assert "sdist lacks examples/images.py" in problems
    assert "sdist holds benchmarks/overhead.py, which it should not (MANIFEST.in prunes it)" in problems
