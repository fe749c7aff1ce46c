"""The project scripts form one package: run as ``python -m experiments.NAME``, they import each other as
``experiments.X`` (no bare sibling imports, no ``sys.path`` edits in scripts or tests) and without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "experiments").glob("*.py"))
NAMES = {p.stem for p in SCRIPTS}


def _imports(path: Path) -> list[str]:
    """Every module name an ``import`` or ``from ... import`` of ``path`` names, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
            if node.module == "experiments":  # from experiments import a, b
                out += [f"experiments.{a.name}" for a in node.names]
    return out


@pytest.mark.parametrize("path", SCRIPTS + sorted((REPO / "tests").glob("*.py")), ids=lambda p: p.name)
def test_no_sys_path_edits(path):
    tree = ast.parse(path.read_text())
    edits = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "path"
             and isinstance(n.value, ast.Name) and n.value.id == "sys"]
    assert not edits, f"{path.name} uses sys.path at lines {edits}"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_scripts_import_each_other_through_the_package(path):
    bare = [m for m in _imports(path) if m.split(".")[0] in NAMES]
    assert not bare, f"{path.name} imports {bare} outside the experiments package"


def test_no_import_cycle_among_the_scripts():
    graph = {p.stem: {m.split(".")[1] for m in _imports(p) if m.startswith("experiments.") and m.count(".") >= 1
                      and m.split(".")[1] in NAMES} for p in SCRIPTS}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join(path + [node, nxt])
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert graph["bench_speed"] >= {"speed_steps", "speed_loop", "speed_diagnostics"}  # the graph is read
