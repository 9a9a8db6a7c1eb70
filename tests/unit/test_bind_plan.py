"""The binding planner, called directly: from the strict check of a started job's node,
bind the Pod, let it wait for the kubelet's room, or reject the placement and submit
again. One row per case; its id says what it checks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sunk.kube import events as ev
from sunk.runtime.actions import CancelJob, Event
from sunk.scheduler import policy
from sunk.scheduler.decide.actions import BindPod, Plan, RecordJob, SubmitPod
from sunk.scheduler.decide.bind_plan import Choice, for_choice, rejected
from sunk.scheduler.decide.pod_actions import ROOM_RECHECK_S
from sunk.scheduler.decide.submit_plan import NO_NODE_RECHECK_S, SubmitInputs, SubmitRules
from sunk.scheduler.translate import Settings, translate
from sunk.slurm.models import SlurmJob
from tests.fakes.scheduler_world import PREFIX, pod

SETTINGS = Settings(PREFIX, 30, "sunk")
RULES = SubmitRules(PREFIX, lambda _request: [], refuse_static_cpu=False, pack=False)
POD = pod()
JOB = SlurmJob(
    job_id=7,
    name="sunk:s:ns/web:uid-web",
    state="RUNNING",
    reason="None",
    nodes=("sn-1",),
    comment="",
    user_id=0,
    group_id=0,
    partition="batch",
    time_limit_min=None,
    priority=None,
    started=True,
    submit_time=1_800_000_000,
    start_time=1_800_000_001,
    allocated="cpu=1,mem=1G,node=1,billing=1",
)


def inputs(excluded: dict[str, str] | None = None) -> SubmitInputs:
    return SubmitInputs(
        translate(POD, SETTINGS),
        policy.parse(policy.PERMISSIVE_YAML),
        excluded or {},
        frozenset({"sn-1", "sn-2"}),
        lambda: "sn-2",
    )


def kinds(result: Plan[Any]) -> list[str]:
    return [type(action).__name__ for action in result.actions]


ROWS = [
    # Catches a Pod bound without its Scheduled Event, or before its node was checked.
    pytest.param(Choice("n1"), None, ["BindPod", "Event"], None, id="r4_3_a_checked_node_binds_the_pod"),
    # Catches a binding the kubelet would refuse (OutOfcpu) while other Pods hold the room.
    pytest.param(
        Choice(None, "too little cpu", waits_on="n1"),
        None,
        ["SetCondition", "Event"],
        ROOM_RECHECK_S,
        id="r4_4_room_other_pods_hold_is_waited_for",
    ),
    # Catches a doubtful node used anyway, or the rejected job left running beside the new one.
    pytest.param(
        Choice(None, "its Node is cordoned", avoid_node=True),
        inputs(),
        ["Attempt", "Event", "SubmitPod", "CancelJob"],
        None,
        id="r4_3_a_rejected_node_gets_a_new_job_and_the_old_is_cancelled",
    ),
    # Catches a Pod left naming a job about to be cancelled (its end would delete the Pod).
    pytest.param(
        Choice(None, "its Node is cordoned", avoid_node=True),
        inputs({"sn-2": "tainted"}),
        ["Attempt", "Event", "SetCondition", "Event", "RecordJob", "CancelJob"],
        NO_NODE_RECHECK_S,
        id="r4_3_with_no_other_node_the_pod_stops_naming_the_job_before_it_is_cancelled",
    ),
]


@pytest.mark.parametrize(("choice", "given", "expected", "after"), ROWS)
def test_a_started_jobs_pod(
    choice: Choice, given: SubmitInputs | None, expected: list[str], after: float | None
) -> None:
    result = for_choice(POD, JOB, choice, (), given, RULES)
    assert kinds(result) == expected
    assert result.after == after


def test_r4_3_the_binding_names_the_node_and_the_event_the_job_and_allocation() -> None:
    bind, event = for_choice(POD, JOB, Choice("n1"), (), None, RULES).actions
    assert bind == BindPod(POD, "n1", 1_800_000_000)
    assert isinstance(event, Event) and event.reason == ev.SCHEDULED
    assert (
        event.note == "Successfully assigned ns/web to n1 (Slurm job 7 on node sn-1, allocated cpu=1,mem=1G)"
    )


def test_r4_3_a_rejected_node_is_remembered_and_the_old_job_cancelled_as_settled() -> None:
    """Catches a node the Pod must avoid forgotten (Slurm would pick it again), and a lost
    cancel of the old job never sent again."""
    result = for_choice(
        POD, JOB, Choice(None, "its Node is cordoned", avoid_node=True), ("sn-9",), inputs(), RULES
    )
    submit, cancel = result.actions[2:]
    assert isinstance(submit, SubmitPod) and submit.avoid == ("sn-9", "sn-1")
    assert cancel == CancelJob(7, "its placement was rejected: its Node is cordoned", settles_claim=True)


def test_r4_4_a_node_short_of_room_for_now_is_left_out_of_the_next_job_only() -> None:
    """Catches a passing shortage written on the Pod for good (`avoid-nodes`)."""
    choice = Choice(None, "too little memory", avoid_node=True, remember=False)
    submit = for_choice(POD, JOB, choice, (), inputs(), RULES).actions[2]
    assert isinstance(submit, SubmitPod)
    assert submit.avoid == ()
    assert "sn-1" in submit.job.excluded_nodes


def test_a_lost_start_gets_a_new_job_without_avoiding_its_node() -> None:
    """Catches a node held against the Pod when only slurmctld's restart was at fault."""
    lost = replace(JOB, state="PENDING", nodes=())
    result = rejected(POD, lost, None, "lost its start", (), inputs(), RULES, avoid_node=False)
    assert kinds(result) == ["Attempt", "Event", "SubmitPod", "CancelJob"]
    note = result.actions[1]
    assert isinstance(note, Event) and note.note.endswith("; submitting a new job")
    assert isinstance(result.actions[2], SubmitPod) and result.actions[2].avoid == ()


def test_r4_3_no_other_node_records_none_with_the_node_avoided() -> None:
    result = for_choice(
        POD, JOB, Choice(None, "cordoned", avoid_node=True), (), inputs({"sn-2": "tainted"}), RULES
    )
    assert result.actions[4] == RecordJob(POD, None, ("sn-1",))
