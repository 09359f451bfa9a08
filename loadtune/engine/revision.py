"""The two source trees of ``check --against``: the work tree (the head) and the base, a git revision
checked out outside the work tree (``git worktree add --detach`` into a temporary folder, removed
afterwards: also on Ctrl-C and on failure) or a folder the user already checked out (docs/ci.md).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from loadtune.engine.trial.harness import sigint_held
from loadtune.model.against import Revision

GIT_TIMEOUT_S = 120.0  # a checkout of a large repository takes a while; a hung git should not hold CI for ever


class RevisionError(ValueError):
    """The base cannot be had (no git, an unknown revision, a folder that is not there): exit 2."""


@dataclass(frozen=True)
class Tree:
    """One side's source: the folder its spec and code live in, and which revision that is."""

    root: Path
    revision: Revision


def git(*args: str, cwd: Path) -> str:
    """Run git; its complaint becomes a RevisionError."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise RevisionError("git is not installed: --against needs it (or give the base's checkout with --against-dir)") from None
    if done.returncode != 0:
        raise RevisionError(f"git {' '.join(args)}: {done.stderr.strip() or f'exit code {done.returncode}'}")
    return done.stdout.strip()


def git_root(folder: Path) -> Path | None:
    """The top folder of the git work tree holding ``folder``; None outside one (or without git)."""
    try:
        return Path(git("rev-parse", "--show-toplevel", cwd=folder)).resolve()
    except RevisionError:
        return None


def head_tree(spec: Path) -> Tree:
    """The work tree the spec lives in, at its commit; with uncommitted changes (tracked or new files),
    which are part of the head. Outside git: the current folder, no commit."""
    root = git_root(spec.parent)
    if root is None:
        return Tree(Path.cwd().resolve(), Revision("work tree"))
    try:
        commit = git("rev-parse", "--short", "HEAD", cwd=root)
    except RevisionError:
        commit = None  # a repository with no commit yet
    dirty = bool(git("status", "--porcelain", cwd=root))
    return Tree(root, Revision("", commit, dirty))


def relative_spec(spec: Path, head: Tree) -> Path:
    """The spec's path inside the trees, the same in both."""
    try:
        return spec.resolve().relative_to(head.root)
    except ValueError:
        raise RevisionError(f"the spec {spec} is not inside {head.root}, the folder compared with the base: run the check "
                            "from the repository holding it") from None


def resolve_ref(ref: str, head: Tree) -> str:
    """The full commit ``ref`` names in the head's repository, or a RevisionError with the remedy (a
    shallow clone, as CI checks out by default, lacks the base)."""
    if git_root(head.root) is None:
        raise RevisionError(f"--against {ref}: {head.root} is not a git work tree; give the base's checkout with --against-dir")
    try:
        return git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=head.root)
    except RevisionError:
        raise RevisionError(f"--against {ref}: no such revision in {head.root}. Fetch it first (git fetch origin; in "
                            "GitHub Actions, actions/checkout with fetch-depth: 0), or name a branch, tag or commit that "
                            "exists") from None


def spec_at(commit: str, spec: Path, head: Tree) -> bool:
    """Whether the base revision has the spec file at all."""
    try:
        git("cat-file", "-e", f"{commit}:{spec.as_posix()}", cwd=head.root)
    except RevisionError:
        return False
    return True


@contextlib.contextmanager
def checked_out(ref: str, commit: str, head: Tree) -> Iterator[Tree]:
    """The base revision in a temporary folder of its own (``git worktree add --detach``), removed with
    its git bookkeeping when the block ends, however it ends."""
    folder = Path(tempfile.mkdtemp(prefix="loadtune-base-"))
    target = folder / "tree"
    try:
        git("worktree", "add", "--detach", str(target), commit, cwd=head.root)
        yield Tree(target.resolve(), Revision(ref, git("rev-parse", "--short", commit, cwd=head.root)))
    finally:
        with sigint_held():  # a second Ctrl-C must not leave the checkout half removed
            remove_worktree(target, head.root)
            shutil.rmtree(folder, ignore_errors=True)


def remove_worktree(target: Path, repo: Path) -> None:
    """``git worktree remove --force``, and ``prune`` for a checkout that never completed."""
    for args in (("worktree", "remove", "--force", str(target)), ("worktree", "prune")):
        try:
            git(*args, cwd=repo)
        except RevisionError:
            pass


def given_tree(folder: Path) -> Tree:
    """``--against-dir``: a checkout of the base the user made; its commit when it is a git work tree."""
    if not folder.is_dir():
        raise RevisionError(f"--against-dir {folder}: no such folder")
    root = folder.resolve()
    commit = None
    if git_root(root) is not None:
        with contextlib.suppress(RevisionError):
            commit = git("rev-parse", "--short", "HEAD", cwd=root)
    return Tree(root, Revision(str(folder), commit))
