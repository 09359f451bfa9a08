"""The architecture holds: no module imports a layer above its own, and no two modules import each
other through any chain (docs/architecture.md). Layers are declared once, in pyproject.toml's
``[tool.importlinter]``; this test runs that contract and looks for cycles, which layers alone allow
inside one layer."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: every group of modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [g for g in groups if len(g) > 1]


def test_tarjan_finds_a_cycle_and_only_cycles():
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    """Any import counts, at the top of a module or inside a function. The package's ``__init__``
    is left out: it imports its API lazily, by name, on first use."""
    graph = grimp.build_graph("loadtune")
    edges = {m: {d for d in graph.find_modules_directly_imported_by(m) if d != "loadtune"}
             for m in graph.modules if m != "loadtune"}
    assert strongly_connected(edges) == []


@pytest.mark.skipif(shutil.which("lint-imports") is None and not (Path(sys.executable).parent / "lint-imports").exists(),
                    reason="import-linter not installed (pip install -e '.[test]')")
def test_layer_contract_holds():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
