"""What loadtune's built sdist and wheel must hold, judged against the files git tracks: a file left out
of MANIFEST.in or the package data fails here, not on a user's machine. Standard library only, except
``result`` (jsonschema). Used by .ci/package and tests/test_package.py.

    package_contents.py copy DEST             the tracked files of this checkout into DEST (nothing untracked)
    package_contents.py check DIST            DIST's one sdist and one wheel against the tracked files
    package_contents.py version               loadtune/version.py's version
    package_contents.py result JSON SCHEMA    a saved scan: valid against SCHEMA, with a pick
"""

from __future__ import annotations

import json
import runpy
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST_NAME = "loadtune_dataloader"  # the distribution's name as sdist and wheel file names spell it
ENTRY_POINT = "loadtune = loadtune.cli:main"
# Grafted whole into the sdist (MANIFEST.in); a tracked file under them must be there. .github and
# action.yml are the GitHub Action's: checked where tracked, their absence is no error.
SDIST_TREES = ("loadtune/", "tests/", "examples/", "docs/", ".github/")
SDIST_FILES = ("README.md", "CHANGELOG.md", "CONTRIBUTING.md", "LICENSE", "pyproject.toml", "MANIFEST.in", "action.yml")
NOT_IN_SDIST = ("benchmarks/", ".ci/")
# What the build writes into an sdist beside the tracked files.
SDIST_GENERATED = ("PKG-INFO", "setup.cfg", f"{DIST_NAME}.egg-info/")
# Present whatever else changes: the schemas the docs publish, the example the docs scan.
REQUIRED_IN_WHEEL = ("loadtune/schema/scan.schema.json", "loadtune/schema/check.schema.json", "loadtune/__main__.py")
REQUIRED_IN_SDIST = ("README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml", "examples/images.py", "docs/cli.md", "tests/conftest.py")


class Refused(Exception):
    """Input this script cannot work with: its message says what and what to do (exit 2)."""


def version() -> str:
    """The version as loadtune/version.py writes it (run as a file, so nothing of loadtune is imported)."""
    return runpy.run_path(str(ROOT / "loadtune" / "version.py"))["__version__"]


def tracked_files(root: Path = ROOT) -> list[str]:
    """The files git tracks in ``root``'s checkout and the work tree still has, as it has them."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise Refused(f"{root} is not a git checkout (git ls-files failed: {exc}); run this from a clone of loadtune") from exc
    return sorted(name for name in out.decode().split("\0") if name and (root / name).is_file())


def copy_tracked(dest: Path, root: Path = ROOT) -> list[str]:
    """Copy the tracked files into ``dest`` (which must not exist yet or be empty): what is built from it
    cannot pick up a file a developer never committed."""
    if dest.exists() and any(dest.iterdir()):
        raise Refused(f"{dest} is not empty; give a new directory")
    names = tracked_files(root)
    for name in names:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    return names


def one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    if len(found) != 1:
        raise Refused(f"{dist} holds {len(found)} files matching {pattern}, not one; build into an empty directory")
    return found[0]


def wheel_problems(names: list[str], tracked: list[str], expected: str) -> list[str]:
    """What is wrong with a wheel holding ``names``: every tracked loadtune/ file and nothing else of
    the tree, the version's dist-info with the license and the command."""
    package = {n for n in tracked if n.startswith("loadtune/")}
    inside = {n for n in names if n.startswith("loadtune/")}
    info = f"{DIST_NAME}-{expected}.dist-info/"
    problems = [f"wheel lacks {n}" for n in sorted(package - inside)]
    problems += [f"wheel holds {n}, which git does not track" for n in sorted(inside - package)]
    problems += [f"wheel lacks {n}" for n in REQUIRED_IN_WHEEL if n not in names]
    problems += [f"wheel holds {n}, outside loadtune/ and its dist-info" for n in names
                 if not n.startswith(("loadtune/", info))]
    problems += [f"wheel lacks {info}{n}" for n in ("METADATA", "entry_points.txt", "licenses/LICENSE") if info + n not in names]
    return problems


def sdist_problems(names: list[str], tracked: list[str]) -> list[str]:
    """What is wrong with an sdist holding ``names`` (paths below its top directory): the whole source
    (SDIST_TREES, SDIST_FILES), nothing git does not track but what the build writes, no benchmarks."""
    wanted = {n for n in tracked if n.startswith(SDIST_TREES) or n in SDIST_FILES}
    generated = [n for n in names if n.startswith(SDIST_GENERATED)]
    inside = set(names) - set(generated)
    problems = [f"sdist lacks {n}" for n in sorted(wanted - inside)]
    problems += [f"sdist lacks {n}" for n in REQUIRED_IN_SDIST if n not in names]
    problems += [f"sdist holds {n}, which it should not (MANIFEST.in prunes it)" for n in sorted(inside) if n.startswith(NOT_IN_SDIST)]
    problems += [f"sdist holds {n}, which git does not track" for n in sorted(inside - set(tracked))]
    if "PKG-INFO" not in generated:
        problems.append("sdist lacks PKG-INFO")
    return problems


def metadata_version(text: str) -> str | None:
    """The ``Version:`` field of a METADATA or PKG-INFO file."""
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Version:")), None)


def check(dist: Path, root: Path = ROOT) -> list[str]:
    """Every problem with ``dist``'s sdist and wheel (empty: both hold what they should)."""
    expected = version()
    tracked = tracked_files(root)
    wheel = one(dist, f"{DIST_NAME}-{expected}-*.whl")
    sdist = one(dist, f"{DIST_NAME}-{expected}.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        problems = wheel_problems(names, tracked, expected)
        info = f"{DIST_NAME}-{expected}.dist-info/"
        if info + "METADATA" in names and metadata_version(z.read(info + "METADATA").decode()) != expected:
            problems.append(f"wheel's METADATA is not of version {expected}")
        if info + "entry_points.txt" in names and ENTRY_POINT not in z.read(info + "entry_points.txt").decode():
            problems.append(f"wheel's entry_points.txt lacks '{ENTRY_POINT}'")
    top = f"{DIST_NAME}-{expected}/"
    with tarfile.open(sdist) as t:
        members = [m.name for m in t.getmembers() if m.isfile()]
        problems += [f"sdist holds {m} outside {top}" for m in members if not m.startswith(top)]
        problems += sdist_problems([m[len(top):] for m in members if m.startswith(top)], tracked)
        if f"{top}PKG-INFO" in members and metadata_version(t.extractfile(f"{top}PKG-INFO").read().decode()) != expected:
            problems.append(f"sdist's PKG-INFO is not of version {expected}")
    return problems


def result_problems(path: Path, schema: Path) -> list[str]:
    """What is wrong with the scan saved at ``path``: not valid against ``schema``, or no pick."""
    import jsonschema  # only here: the contents checks need nothing outside the standard library

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return [f"{path} is not a readable JSON file: {exc}"]
    validator = jsonschema.Draft202012Validator(json.loads(schema.read_text()))
    problems = [f"{path}: {'/'.join(map(str, e.absolute_path)) or '$'}: {e.message}" for e in validator.iter_errors(doc)]
    if not isinstance(doc, dict) or not (doc.get("recommendation") or {}).get("config"):
        problems.append(f"{path}: no recommendation")
    return problems


def main(argv: list[str]) -> int:
    commands = {"copy": 1, "check": 1, "version": 0, "result": 2}
    if not argv or commands.get(argv[0]) != len(argv) - 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        if argv[0] == "version":
            print(version())
            return 0
        if argv[0] == "copy":
            print(f"copied {len(copy_tracked(Path(argv[1])))} tracked files to {argv[1]}")
            return 0
        problems = check(Path(argv[1])) if argv[0] == "check" else result_problems(Path(argv[1]), Path(argv[2]))
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = sys.stderr if problems else sys.stdout
    for problem in problems:
        print(f"error: {problem}", file=out)
    print(f"{argv[0]}: {'ok' if not problems else f'{len(problems)} problem(s)'}", file=out)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
