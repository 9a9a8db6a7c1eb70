"""The PodGroup steps' planner, called directly (R9.1): from what a pass gathered about a
gang, the typed actions of its next step, in order. One row per case; its id says what it
checks."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.kube import events as ev
from sunk.runtime.actions import Event
from sunk.scheduler.decide import group_plan
from sunk.scheduler.decide.actions import (
    BindMember,
    CheckNodes,
    Plan,
    ReleaseGroup,
    SetCondition,
    SubmitAlone,
    SubmitGroup,
)
from sunk.scheduler.decide.group_plan import GROUP_WAIT_S, BindFacts, SubmitFacts, Target
from sunk.scheduler.translate import gang
from tests.fakes.scheduler_world import pod
from tests.unit.test_decide import component

GROUP = gang.PodGroup("ns", "g", 2, 60)
A, B = pod("a"), pod("b")


def told(the_pod: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """`the_pod` with its PodScheduled condition saying this already."""
    condition = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
    return {**the_pod, "status": {"conditions": [condition]}}


SHORT = gang.waiting_for_members(GROUP, ["a"])

SUBMITS = [
    pytest.param(
        SubmitFacts(A, None, "PodGroup ns/g does not exist"),
        Plan(
            (
                SetCondition(ev.WAITING_FOR_GROUP, "PodGroup ns/g does not exist", A),
                Event(ev.FAILED_SCHEDULING, "PodGroup ns/g does not exist", warning=True, pod=A),
            ),
            GROUP_WAIT_S,
        ),
        id="r9_1_a_member_without_its_podgroup_waits_told_why",
    ),
    pytest.param(
        SubmitFacts(A, GROUP, waiting=(A,)),
        Plan(
            (
                SetCondition(ev.WAITING_FOR_GROUP, SHORT, A),
                Event(ev.FAILED_SCHEDULING, SHORT, warning=True, pod=A),
            ),
            GROUP_WAIT_S,
        ),
        id="r9_1_a_group_short_of_members_waits_told_why",
    ),
    pytest.param(
        SubmitFacts(A, GROUP, waiting=(told(A, ev.WAITING_FOR_GROUP, "earlier count"),)),
        Plan(
            (SetCondition(ev.WAITING_FOR_GROUP, SHORT, told(A, ev.WAITING_FOR_GROUP, "earlier count")),),
            GROUP_WAIT_S,
        ),
        id="r9_1_a_new_count_of_members_changes_the_condition_but_adds_no_event",
    ),
    pytest.param(
        SubmitFacts(A, GROUP, waiting=(told(A, ev.WAITING_FOR_GROUP, SHORT),)),
        Plan(after=GROUP_WAIT_S),
        id="r9_1_a_member_told_already_is_not_told_again",
    ),
    pytest.param(
        SubmitFacts(A, GROUP, waiting=(A, B)),
        Plan((SubmitGroup(GROUP, (A, B)),)),
        id="r9_1_enough_members_get_one_job",
    ),
    pytest.param(
        SubmitFacts(A, GROUP, waiting=(A, B), unanswered=True),
        Plan(after=1.0),
        id="r8_2_a_group_whose_submit_got_no_answer_waits_for_a_listing",
    ),
    pytest.param(
        SubmitFacts(A, GROUP, waiting=(A, B), retry_in=12.0),
        Plan(after=12.0),
        id="r9_1_a_group_that_timed_out_waits_before_its_next_job",
    ),
    pytest.param(
        SubmitFacts(A, GROUP, waiting=(A,), placed=True),
        Plan((SubmitAlone(),)),
        id="r9_1_a_member_beyond_a_placed_group_gets_a_job_of_its_own",
    ),
]


@pytest.mark.parametrize(("facts", "expected"), SUBMITS)
def test_a_member_without_a_job(facts: SubmitFacts, expected: Plan) -> None:
    assert group_plan.for_submit(facts) == expected


RUNNING = (component(0, leader=100), component(1, leader=100))
BOUND_NOTE = "; all members of PodGroup ns/g together"
REJECTED = (
    "Slurm started job 100 but member b cannot go to sn-1: Node n2 is cordoned; no member is bound; "
    "the group gets a new job avoiding it"
)

BINDS = [
    pytest.param(
        BindFacts("ns/g", 100, RUNNING[1:], (B,)),
        Plan(after=1.0),
        id="r9_1_no_member_is_bound_before_the_listing_shows_every_component",
    ),
    pytest.param(
        BindFacts("ns/g", 100, (RUNNING[0], component(1, "PENDING", leader=100)), (A, B)),
        Plan(after=1.0),
        id="r9_1_no_member_is_bound_before_every_component_runs",
    ),
    pytest.param(
        BindFacts("ns/g", 100, RUNNING, (A, None)),
        Plan(after=1.0),
        id="r9_1_no_member_is_bound_while_one_is_gone",
    ),
    pytest.param(
        BindFacts("ns/g", 100, RUNNING, (A, B)),
        Plan((CheckNodes(),)),
        id="r4_3_the_members_nodes_are_checked_first",
    ),
    pytest.param(
        BindFacts("ns/g", 100, RUNNING, (A, B), (Target(A, RUNNING[0], "n1"), Target(B, RUNNING[1], "n2"))),
        Plan(
            (
                BindMember(A, RUNNING[0], "n1", BOUND_NOTE),
                BindMember(B, RUNNING[1], "n2", BOUND_NOTE),
            )
        ),
        id="r9_1_all_members_are_bound_together",
    ),
    pytest.param(
        BindFacts(
            "ns/g",
            100,
            RUNNING,
            (A, B),
            (Target(A, RUNNING[0], "n1"), Target(B, RUNNING[1], None, "Node n2 is cordoned")),
        ),
        Plan((ReleaseGroup(100, ev.NODE_REJECTED, REJECTED, "ns/g", avoid=(("uid-b", "sn-1"),)),)),
        id="r9_1_one_member_that_cannot_go_binds_none_and_the_group_gets_a_new_job",
    ),
]


@pytest.mark.parametrize(("facts", "expected"), BINDS)
def test_a_group_whose_job_runs(facts: BindFacts, expected: Plan) -> None:
    assert group_plan.for_bind(facts) == expected


def test_r9_1_a_group_pending_past_its_timeout_is_released_and_waits_as_long_again() -> None:
    leader = component(0, "PENDING", leader=100, reason="Resources")
    got = group_plan.for_timeout(GROUP, leader)
    assert got == Plan(
        (ReleaseGroup(100, ev.GROUP_TIMED_OUT, gang.timeout_message(GROUP, 100, "Resources"), "ns/g", 60),)
    )


@pytest.mark.parametrize("leader", [None, component(0, leader=100)], ids=["gone", "started"])
def test_r9_1_a_group_that_started_or_went_meanwhile_is_not_released(leader: Any) -> None:
    assert group_plan.for_timeout(GROUP, leader) == Plan(after=1.0)


def test_r9_1_members_given_back_are_told_why_and_wait_for_the_group() -> None:
    release = ReleaseGroup(100, ev.GROUP_RELEASED, "member c left")
    assert group_plan.released([A, B], release) == (
        Event(ev.GROUP_RELEASED, "member c left", warning=True, pod=A),
        SetCondition(ev.WAITING_FOR_GROUP, "member c left", A),
        Event(ev.GROUP_RELEASED, "member c left", warning=True, pod=B),
        SetCondition(ev.WAITING_FOR_GROUP, "member c left", B),
    )
