"""The layers stay apart: no import circles between sunk's modules, the shared layers
(runtime, the Kubernetes and Slurm adapters) know no component, neither component imports
the other, what users deploy never imports the dev cluster or the demo, and the product
never imports the tests' fakes (tests/fakes, outside the package), and in the scheduler
only each controller's executor writes through a port and the time is read only on the one
injected clock."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_scheduler_never_imports_the_cli() -> None:
    deployed = reachable(imports(), "sunk.scheduler.app") | {"sunk.scheduler.app"}
    assert sorted(m for m in deployed if m.startswith("sunk.cli")) == []


def test_no_module_of_the_product_imports_the_tests() -> None:
    """The fakes and worlds of the unit tests live in tests/ (tests.fakes), which the
    `sunk` image does not contain; no module of sunk may import them, not even for type
    checking, and sunk ships no test package of its own."""
    named = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found = [node.module]
            elif isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            else:
                continue
            named += [f"{path.relative_to(ROOT.parent)}: {m}" for m in found if m.split(".")[0] == "tests"]
    assert named == []
    assert not (ROOT / "testing").exists()


def test_no_module_of_the_product_names_the_dev_package() -> None:
    """The dev cluster and the demo live in their own package (dev/), which the `sunk`
    image does not contain: a product module importing it would fail there."""
    named = sorted(
        f"{path.relative_to(ROOT.parent)}" for path in ROOT.rglob("*.py") if "sunk_dev" in path.read_text()
    )
    assert named == []


# Starts a command through the `sunk` console script as installed, stops it where it would
# start serving, and prints the modules then loaded.
_STARTED_MODULES = """
import asyncio, sys
from importlib.metadata import entry_points
def started(main):
    main.close()
    print(" ".join(sorted(sys.modules)))
asyncio.run = started
(script,) = entry_points(group="console_scripts", name="sunk")
sys.exit(script.load()(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("command", "app"),
    [
        (
            [
                "scheduler",
                "--scheduler-name=sunk",
                "--slurm-api-base=http://127.0.0.1:9",
                "--slurm-auth-token-file={token}",
                "--hooks-insecure-http=true",
            ],
            "sunk.scheduler.app",
        ),
        (
            [
                "operator",
                "--namespace=slurm",
                "--release=slurm",
                "--slurm-api-base=http://127.0.0.1:9",
                "--slurm-jwt-key-file={token}",
                "--conf-server=slurmctld:6817",
                "--auth-secret=auth",
            ],
            "sunk.operator.app",
        ),
    ],
)
def test_sunk_scheduler_and_operator_start_without_loading_the_dev_package(
    tmp_path: Path, command: list[str], app: str
) -> None:
    """What a user's cluster runs, started as it is started there: the dev cluster (a
    quarter of the code, with its builders) is not loaded; a lazy import slipped into the
    command line would load it."""
    token = tmp_path / "token"
    token.write_text("not-a-real-token\n")
    argv = [arg.format(token=token) for arg in command]
    run = subprocess.run(
        [sys.executable, "-c", _STARTED_MODULES, *argv], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    loaded = run.stdout.split()
    assert app in loaded  # it got as far as the component itself
    assert [m for m in loaded if m.startswith("sunk_dev")] == []
    if app == "sunk.scheduler.app":
        # The operator's directory client is not the scheduler's: its flags are parsed by
        # the same command line, but reading them must not load the LDAP library.
        assert [m for m in loaded if m.startswith(("ldap3", "sunk.ldap.reader", "sunk.operator.app"))] == []


def test_sunk_dev_comes_from_the_checkouts_dev_package() -> None:
    """`sunk dev` still works from a checkout: the command line finds the dev package's
    entry point (it reports on the dev cluster rather than rejecting the command)."""
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from sunk.cli import main; sys.exit(main(['dev', '--help']))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "usage: sunk dev" in run.stdout


COMPONENTS = ("sunk.scheduler", "sunk.operator")
# What both components run on; none of it may know either of them.
SHARED = ("sunk.runtime", "sunk.kube", "sunk.slurm", "sunk.ldap", "sunk.metrics", "sunk.flags", "sunk.logs")


def in_package(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


@pytest.mark.parametrize("shared", SHARED)
def test_the_shared_layers_know_no_component(shared: str) -> None:
    graph = imports()
    modules = [m for m in graph if in_package(m, (shared,))]
    assert modules, f"{shared} names no module"
    reached = {m for start in modules for m in reachable(graph, start) | {start}}
    assert sorted(m for m in reached if in_package(m, (*COMPONENTS, "sunk.cli"))) == []


@pytest.mark.parametrize(("component", "other"), [COMPONENTS, COMPONENTS[::-1]])
def test_no_module_of_one_component_imports_the_other(component: str, other: str) -> None:
    graph = imports()
    modules = [m for m in graph if in_package(m, (component,))]
    reached = {m for start in modules for m in reachable(graph, start)}
    assert sorted(m for m in reached if in_package(m, (other,))) == []


# The files allowed to call a port's write methods: each controller's one executor. The
# Slurm-node controller is a controller of its own (its drains and resumes, their Events
# and the Pods' `drain-explained` annotation), with its executor in its one file.
EXECUTORS = {"sunk.scheduler.pod.executor", "sunk.scheduler.slurmnodes"}
# What the ports offer that only reads (a read added to a port is named here; until it is,
# the test below takes it for a write).
PORT_READS = {"get", "dialect", "submission", "owner_name", "jobs", "job", "job_group", "nodes", "node"}


def port_writes() -> set[str]:
    """The write methods of the scheduler's ports (`KubePort`, `SlurmPort`) and of the
    Event recorder that writes through them, read from their own source, so a write added
    to a port is checked without this test changing."""
    found = set()
    for path, classes in (
        (ROOT / "scheduler" / "ports.py", {"KubePort", "SlurmPort"}),
        (ROOT / "kube" / "events.py", {"Recorder"}),
    ):
        for cls in ast.walk(ast.parse(path.read_text())):
            if isinstance(cls, ast.ClassDef) and cls.name in classes:
                found |= {
                    f.name
                    for f in cls.body
                    if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and not f.name.startswith("_")
                }
    return found - PORT_READS


def test_issue54_only_the_executors_call_a_ports_write_methods() -> None:
    """Catches: a collaborator of the Pod controller (submitting, binding, the PodGroup
    steps, re-adoption, job IDs) writing to Kubernetes or Slurm itself again, so that who
    writes what is no longer found in one file. A call is matched by the method's name
    alone: no other method in the scheduler may share a port write's name."""
    writes = port_writes()
    assert {"bind", "patch_pod", "delete_pod", "submit", "cancel", "release_job", "drain", "event"} <= writes
    calls = []
    for path in sorted((ROOT / "scheduler").rglob("*.py")):
        if module_name(path) in EXECUTORS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in writes
            ):
                calls.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} .{node.func.attr}(")
    assert calls == []


# The clocks a module could read the time on behind the scheduler's one `Clock`: the `time`
# module's and `datetime`'s "now".
TIME_READS = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter"}
DATETIME_READS = {"now", "utcnow", "today"}


def reads_the_time(node: ast.AST) -> bool:
    """`time.monotonic` (called or handed on as a default), `datetime.now`,
    `dt.datetime.now`, or `from time import monotonic`."""
    if isinstance(node, ast.ImportFrom) and node.module == "time":
        return any(alias.name in TIME_READS for alias in node.names)
    if not isinstance(node, ast.Attribute):
        return False
    owner = ast.unparse(node.value)
    if owner == "time":
        return node.attr in TIME_READS
    return owner.split(".")[-1] in {"datetime", "date"} and node.attr in DATETIME_READS


def test_issue54_the_scheduler_reads_the_time_only_through_its_one_clock() -> None:
    """Catches: a scheduler module reading the time itself again, which the tests could
    only move on by patching that module (and a module they forget keeps the real time,
    so waits and ages disagree). The app builds one `sunk.runtime.ports.Clock`, which owns
    the real clock, and hands it to every module that needs the time."""
    reads = sorted(
        f"{path.relative_to(ROOT.parent)}:{node.lineno} {ast.unparse(node)}"
        for path in sorted((ROOT / "scheduler").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if reads_the_time(node)
    )
    assert reads == [], "\n".join(reads)


def test_issue54_an_action_both_components_mean_alike_is_defined_once() -> None:
    """Catches: a component defining its own drain, resume, cancel or Event again beside
    the shared one in `sunk.runtime.actions`, so that the two vocabularies drift apart
    (different field names for one meaning). The shared names are read from that module."""
    shared = {
        node.name
        for node in ast.walk(ast.parse((ROOT / "runtime" / "actions.py").read_text()))
        if isinstance(node, ast.ClassDef)
    }
    assert {"Drain", "Resume", "CancelJob", "Event"} <= shared
    again = sorted(
        f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}"
        for component in ("scheduler", "operator")
        for path in sorted((ROOT / component).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name in shared
    )
    assert again == []
