"""The NodeSet planner called directly, as a table: one NodeSet, one Node it takes, and
what Slurm lists; the actions it returns, in order. No caches, ports or controller: a
change to what the plan decides shows here, apart from how it is carried out (R10.2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from sunk.operator.nodeset import actions as a
from sunk.operator.nodeset import plan as p
from sunk.operator.nodeset.selection import Share
from sunk.operator.nodeset.spec import parse
from sunk.operator.nodeset.view import SlurmView
from sunk.runtime.actions import Event
from sunk.slurm.models import SlurmJob, SlurmNode
from tests.fakes.operator_world import IMAGE, NOW, SETTINGS, node, nodeset

Json = dict[str, Any]
MEMBER = "gpu-001-011"  # the member the Node below gets (named after its address)
NODE = node("node-1", "10.64.1.11")


def listed(
    records: tuple[SlurmNode, ...] = (), jobs: dict[str, tuple[SlurmJob, ...]] | None = None
) -> SlurmView:
    return SlurmView(nodes={r.name: r for r in records}, partitions=frozenset({"batch"}), jobs=jobs or {})


def record(state: str = "idle", address: str = "10.9.9.9") -> SlurmNode:
    return SlurmNode(MEMBER, state, (), "", address=address)


def job(job_id: int) -> SlurmJob:
    return SlurmJob(job_id, "train", "RUNNING", "", (MEMBER,), "", 1000, 1000, "batch", 60, 1)


@dataclass(frozen=True)
class Row:
    name: str
    slurm: SlurmView
    spec: Json = field(default_factory=dict)
    deleting: bool = False
    want: tuple[type[a.Action], ...] = ()
    waits: str = ""  # a line the Ready condition's message must carry


ROWS = [
    Row(
        "a free Node gets a member and an Event saying so",
        listed(),
        want=(a.SetFinalizer, a.CreatePod, Event, a.PatchStatus),
    ),
    Row(
        "nothing is created while Slurm's nodes are unknown",
        SlurmView(problem="slurmrestd: connection refused"),
        want=(a.SetFinalizer, a.PatchStatus),
        waits="connection refused",
    ),
    Row(
        "an idle record an earlier Pod left is deleted before the new member is made",
        listed((record(),)),
        want=(a.SetFinalizer, a.DeleteSlurmNode, Event, a.CreatePod, Event, a.PatchStatus),
    ),
    Row(
        "a record still running an earlier Pod's job keeps the new member waiting",
        listed((record("allocated"),), {MEMBER: (job(7),)}),
        want=(a.SetFinalizer, a.PatchStatus),
        waits="still runs jobs from an earlier Pod",
    ),
    Row(
        "a partition Slurm does not declare makes the NodeSet invalid, nothing else",
        listed(),
        spec={"partitions": ["nope"]},
        want=(a.SetFinalizer, Event, a.PatchStatus),
    ),
    Row(
        "a deleted NodeSet with no member and no record lets its finalizer go",
        listed(),
        deleting=True,
        want=(a.SetFinalizer, a.PatchStatus),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_r10_2_the_plan_returns_these_actions_in_this_order(row: Row) -> None:
    obj = nodeset("gpu", **row.spec)
    meta = obj["metadata"]
    if row.deleting:
        meta.update(deletionTimestamp=NOW, finalizers=[p.FINALIZER])
    share = Share(wanted=1, new=["node-1"], feasible=1)
    plan = p.plan(obj, parse(obj, IMAGE), share, [], {"node-1": NODE}, row.slurm, SETTINGS, now=NOW)
    assert tuple(type(action) for action in plan.actions) == row.want
    if row.deleting:
        assert plan.actions[0] == a.SetFinalizer(False)
    if row.waits:
        [status] = [action.status for action in plan.actions if isinstance(action, a.PatchStatus)]
        [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
        assert row.waits in ready["message"]
