"""One fake per port (issue #54): every component's tests meet the same in-memory Slurm,
so the scheduler's and the operator's tests cannot drift into two Slurms that disagree."""

from __future__ import annotations

import ast
from pathlib import Path

from sunk.operator.app import PolledSlurm
from sunk.operator.chart.config_apply import ConfigSlurm
from sunk.operator.nodeset.controller import OperatorSlurm
from sunk.scheduler.ports import SlurmPort
from tests.fakes.slurm import FakeSlurm

TESTS = Path(__file__).resolve().parents[1]
SLURM_PORTS = (SlurmPort, OperatorSlurm, PolledSlurm, ConfigSlurm)


def slurm_fakes() -> list[str]:
    """Every class under tests/ named as a fake of Slurm (Fake...Slurm), as path:name."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            named = node.name if isinstance(node, ast.ClassDef) else ""
            if named.startswith("Fake") and named.endswith("Slurm"):
                found.append(f"{path.relative_to(TESTS)}:{named}")
    return found


def test_the_tests_have_one_slurm_fake() -> None:
    assert slurm_fakes() == ["fakes/slurm.py:FakeSlurm"]


def test_the_one_slurm_fake_offers_every_components_slurm_port() -> None:
    """Its signatures are mypy's to check (the assignment below); this catches a port that
    grows a call the fake lacks before a test trips on it."""
    slurm = FakeSlurm()
    ports: tuple[SlurmPort, OperatorSlurm, PolledSlurm, ConfigSlurm] = (slurm, slurm, slurm, slurm)
    missing = [
        f"{protocol.__name__}.{name}"
        for protocol, port in zip(SLURM_PORTS, ports, strict=True)
        for name in vars(protocol)
        if not name.startswith("_") and not hasattr(port, name)
    ]
    assert missing == []
