"""The layers stay apart: no import circles between sunk's modules, the runtime knows no
component, and what users deploy never imports the dev cluster or the demo."""

from __future__ import annotations

import ast
from pathlib import Path

import sunk

ROOT = Path(sunk.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Every sunk module → the sunk modules it imports (at any depth of its code, but not
    those imported only for type checking)."""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        checking_only = {
            id(node)
            for guard in ast.walk(tree)
            if isinstance(guard, ast.If) and "TYPE_CHECKING" in ast.unparse(guard.test)
            for node in ast.walk(guard)
        }
        found = set()
        for node in ast.walk(tree):
            if id(node) in checking_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sunk"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("sunk")}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_no_module_imports_itself_through_others() -> None:
    graph = imports()
    circles = sorted(name for name in graph if name in reachable(graph, name) and "." in name)
    # A package's __init__ re-exporting its submodules is not a circle of behaviour.
    circles = [
        name for name in circles if not all(m.startswith(name + ".") for m in graph[name] if m in circles)
    ]
    assert circles == []


def test_the_scheduler_never_imports_the_dev_cluster_the_demo_or_the_cli() -> None:
    deployed = reachable(imports(), "sunk.scheduler.app") | {"sunk.scheduler.app"}
    leaks = sorted(
        m for m in deployed if m.startswith(("sunk.devcluster", "sunk.demo", "sunk.cli", "sunk.testing"))
    )
    assert leaks == []


def test_the_runtime_knows_no_component() -> None:
    graph = imports()
    runtime = [m for m in graph if m.startswith("sunk.runtime")]
    components = {m for r in runtime for m in reachable(graph, r)}
    assert sorted(m for m in components if m.startswith(("sunk.scheduler", "sunk.operator"))) == []


def test_the_operator_and_the_scheduler_are_separate_components() -> None:
    graph = imports()
    operator = reachable(graph, "sunk.operator.app") | {"sunk.operator.app"}
    scheduler = reachable(graph, "sunk.scheduler.app") | {"sunk.scheduler.app"}
    foreign = ("sunk.scheduler", "sunk.devcluster", "sunk.testing")
    assert sorted(m for m in operator if m.startswith(foreign)) == []
    assert sorted(m for m in scheduler if m.startswith("sunk.operator")) == []
