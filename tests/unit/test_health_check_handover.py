"""Issue #51 point 3, verify before return: with health checks on, the operator never
returns a member to jobs itself. A drain of its own that it would lift is handed to the
checks (`sunk-hc: verify: ...`), which lift it after a clean run; a drain the checks (or
anyone else) set is never the operator's to lift. Without checks it resumes as before."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from sunk.operator.nodeset import actions as a
from sunk.operator.nodeset import health_checks as hc
from sunk.operator.nodeset import removal as r
from sunk.runtime.actions import Drain, Event, Resume
from sunk.slurm.models import SlurmNode
from tests.fakes.operator_world import CONFIG, OperatorWorld
from tests.unit import test_health_check_runner as runner

NAME = "gpu-001-011"


def drained(reason: str, state: str = "idle") -> SlurmNode:
    return SlurmNode(NAME, state, ("DRAIN",), reason)


@dataclass(frozen=True)
class Row:
    name: str
    record: SlurmNode
    checks_on: bool
    want: a.Action | None


ROWS = [
    Row(
        "checks off: our own drain is resumed, as before",
        drained(r.drain_reason("gpu", r.SCALE_IN)),
        False,
        Resume(NAME),
    ),
    Row(
        "checks on: our own drain is handed to the checks, not resumed",
        drained(r.drain_reason("gpu", r.SCALE_IN)),
        True,
        Drain(NAME, hc.verify_reason("gpu")),
    ),
    Row(
        "checks on: a busy member's drain is handed over the same way",
        drained(r.drain_reason("gpu", r.SCALE_IN), "mixed"),
        True,
        Drain(NAME, hc.verify_reason("gpu")),
    ),
    Row(
        "a failing check's drain is the checks' to lift",
        drained("sunk-hc: gpus: sees 7 of 8 GPUs"),
        True,
        None,
    ),
    Row(
        "a hand-over already made is not made again",
        drained(hc.verify_reason("gpu")),
        True,
        None,
    ),
    Row(
        "a check's drain stays even with the checks turned off since",
        drained("sunk-hc: mounts: /shared is missing"),
        False,
        None,
    ),
    Row("an administrator's drain is theirs", drained("bad DIMM, ticket 42"), True, None),
    Row("another NodeSet's drain is its own", drained(r.drain_reason("cpu", r.SCALE_IN)), True, None),
    Row("Slurm's own drain is Slurm's", drained("Kill task failed"), True, None),
    Row("an undrained node needs nothing", SlurmNode(NAME, "idle", (), ""), True, None),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_issue51_giving_a_member_back(row: Row) -> None:
    """Catches: a resume that skips the checks (a node back in service without one clean
    run), or a drain of anyone else's (the checks' included) lifted by the operator."""
    assert hc.give_back("gpu", NAME, row.record, row.checks_on) == row.want


def test_issue51_a_hand_over_says_why_the_member_is_not_back_yet() -> None:
    """Catches a member left drained by the hand-over with no VerifyingMember Event to say
    why, and that Event raised on a plain resume."""
    ours = drained(r.drain_reason("gpu", r.SCALE_IN))
    handed = hc.wanted_back("gpu", NAME, ours, True)
    assert handed[0] == Drain(NAME, hc.verify_reason("gpu"))
    assert [type(x) for x in handed] == [Drain, Event] and handed[1].reason == hc.VERIFYING
    assert hc.wanted_back("gpu", NAME, ours, False) == [Resume(NAME)]


def test_issue51_the_runner_lifts_the_hand_over_after_a_clean_run(tmp_path: Path) -> None:
    """Catches: the operator and the runner disagreeing on the prefix or the check name,
    which would leave every handed-over member drained for ever."""
    member = runner.Node(tmp_path)
    member.record(runner.node_line("IDLE+DRAIN", hc.verify_reason("gpu")))
    member.script("10-ok", "exit 0")
    assert member.run().calls == [runner.RESUME]


def world(checks: bool) -> OperatorWorld:
    w = OperatorWorld(config=replace(CONFIG, health_checks_configmap="r1-health-checks" if checks else ""))
    w.add_node("node-1", "10.64.1.11")
    w.add_node("node-2", "10.64.1.12")
    w.add_nodeset("a", replicas=2)
    return w


async def test_issue51_scaling_back_up_hands_our_drain_to_the_checks_and_never_resumes() -> None:
    """Catches: the controller resuming a member itself while the checks are on."""
    w = world(checks=True)
    await w.settle("a")
    w.slurm.drain_as_admin("a-001-012", "sunk-hc: gpus: sees 7 of 8 GPUs")
    w.nodesets.get("slurm/a")["spec"]["replicas"] = 1  # type: ignore[index]
    await w.reconcile("a")  # drains one member to scale in
    [(_, scaled_in, _)] = [c for c in w.slurm.calls if c[0] == "drain"]
    w.nodesets.get("slurm/a")["spec"]["replicas"] = 2  # type: ignore[index]
    await w.settle("a")
    assert [c for c in w.slurm.calls if c[0] == "resume"] == []
    assert w.slurm.record(scaled_in).reason == hc.verify_reason("a")
    assert w.slurm.record("a-001-012").reason == "sunk-hc: gpus: sees 7 of 8 GPUs"


async def test_issue51_a_member_made_before_the_checks_were_on_is_resumed_as_before() -> None:
    """Catches: a hand-over to a member with no runner mounted (made before the checks were
    turned on; a roll-out skips members drained by someone else), drained for ever."""
    before = world(checks=False)
    before.spec("a")["updateStrategy"] = {"type": "OnDelete"}  # the old members stay
    await before.settle("a")
    w = before.restarted_with(replace(before.config, health_checks_configmap="r1-health-checks"))
    w.nodesets.get("slurm/a")["spec"]["replicas"] = 1  # type: ignore[index]
    await w.reconcile("a")
    [(_, scaled_in, _)] = [c for c in w.slurm.calls if c[0] == "drain"]
    w.nodesets.get("slurm/a")["spec"]["replicas"] = 2  # type: ignore[index]
    await w.settle("a")
    assert [c[1] for c in w.slurm.calls if c[0] == "resume"] == [scaled_in]
