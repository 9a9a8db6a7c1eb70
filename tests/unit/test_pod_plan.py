"""The Pod controller's planner, called directly: from what one pass gathered about a Pod,
the actions of its next step, in order. One row per case; its id says what it checks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sunk.kube import events as ev
from sunk.runtime.actions import Event
from sunk.scheduler.decide.actions import (
    Bind,
    ConfirmEnding,
    ConfirmMissing,
    DeletePod,
    FindOrSubmit,
    ForGroup,
    Plan,
    SetCondition,
    Widen,
)
from sunk.scheduler.decide.packing import PACK_PATIENCE_S
from sunk.scheduler.decide.pod_plan import PodFacts, Rules, plan
from sunk.scheduler.decide.steps import TRANSIENT_S, Step
from sunk.scheduler.translate import PodRef, Settings
from tests.unit.test_decide import NOW, P, job, pod, seen

RULES = Rules(Settings(P, 30, "sunk"), pack=False)
PACK = Rules(Settings(P, 30, "sunk"), pack=True)
LONG_AGO = int(NOW - TRANSIENT_S - 1)


def facts(the_pod: dict[str, Any], the_job: Any = None, *, group: str | None = None, **kw: Any) -> PodFacts:
    read = seen(the_pod)
    return PodFacts(the_pod, replace(read, group=group) if group else read, the_job, **kw)


def kinds(result: Plan) -> list[str]:
    return [type(action).__name__ for action in result.actions]


def told(reason: str, message: str) -> dict[str, Any]:
    """A Pod whose PodScheduled condition says this already."""
    found = pod()
    found["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
    ]
    return found


PENDING = job("PENDING", reason="Resources", submit_time=LONG_AGO)
PENDING_MESSAGE = "Slurm job 7 is pending (Resources) in partition batch"

ROWS = [
    pytest.param(
        facts(pod(refused=ev.INVALID), None), RULES, True, Plan(), id="r2_4_a_refused_pod_gets_nothing"
    ),
    pytest.param(
        facts(pod(job_id=None)), RULES, True, Plan((FindOrSubmit(),)), id="r4_1_a_pod_without_a_job_gets_one"
    ),
    # Catches a second job for one Pod after a crash between a submission and its record.
    pytest.param(
        facts(pod(job_id=None), claims=((PodRef("ns", "web", "uid-1"), job("PENDING", job_id=9)),)),
        RULES,
        True,
        Plan((FindOrSubmit(adoptable=9),)),
        id="r8_2_a_job_slurm_holds_for_the_pod_is_adopted",
    ),
    # Catches a job of the Pod's earlier incarnation (another UID) taken as its own.
    pytest.param(
        facts(pod(job_id=None), claims=((PodRef("ns", "web", "uid-0"), job("PENDING", job_id=9)),)),
        RULES,
        True,
        Plan((FindOrSubmit(),)),
        id="r8_2_a_job_of_an_earlier_pod_of_that_name_is_not_adopted",
    ),
    pytest.param(
        facts(pod(job_id=None), group="train"),
        RULES,
        True,
        Plan((ForGroup("train", Step.FIND_OR_SUBMIT),)),
        id="r9_1_a_members_job_is_the_groups_business",
    ),
    pytest.param(
        facts(pod(job_id=None)), RULES, False, Plan(after=1.0), id="r8_2_nothing_before_the_first_listing"
    ),
    pytest.param(
        facts(pod(node="n1")),
        RULES,
        True,
        Plan((ConfirmMissing(),)),
        id="r8_2_a_bound_pod_with_no_job_asks_slurm",
    ),
    pytest.param(
        facts(pod(), job(), ending_reported=True),
        RULES,
        True,
        Plan((ConfirmEnding(7),)),
        id="r5_2_a_hook_call_saying_the_job_ends_is_checked_with_slurm",
    ),
    pytest.param(facts(pod(), job()), RULES, True, Plan((Bind(),)), id="r4_3_a_started_job_binds_its_pod"),
    pytest.param(
        facts(pod(), job(het_job_id=7), group="train"),
        RULES,
        True,
        Plan((ForGroup("train", Step.BIND),)),
        id="r9_1_a_groups_job_binds_all_members_together",
    ),
    pytest.param(
        facts(pod(), PENDING, group="train", group_timed_out=True),
        RULES,
        True,
        Plan((ForGroup("train", Step.GROUP_TIMED_OUT),)),
        id="r9_1_a_group_that_waited_too_long_is_released",
    ),
    pytest.param(
        facts(pod(), PENDING),
        RULES,
        True,
        Plan(
            (
                SetCondition(ev.PENDING_IN_SLURM, PENDING_MESSAGE),
                Event(
                    ev.PLACEHOLDER_SUBMITTED, f"Submitted Slurm job 7; not started after {TRANSIENT_S:.0f} s"
                ),
            )
        ),
        id="r4_5_a_job_that_waits_is_said_on_the_pod_with_its_submission_the_first_time",
    ),
    pytest.param(
        facts(pod(), PENDING),
        PACK,
        True,
        Plan((SetCondition(ev.PENDING_IN_SLURM, PENDING_MESSAGE),)),
        id="r4_5_under_pack_the_submission_was_told_when_it_was_made",
    ),
    pytest.param(
        facts(told(ev.PENDING_IN_SLURM, PENDING_MESSAGE), PENDING),
        RULES,
        True,
        Plan(),
        id="r4_5_a_reason_the_pod_shows_already_is_not_written_again",
    ),
    pytest.param(
        facts(told(ev.PENDING_IN_SLURM, "Slurm job 7 is pending (Priority) in partition batch"), PENDING),
        RULES,
        True,
        Plan((SetCondition(ev.PENDING_IN_SLURM, PENDING_MESSAGE),)),
        id="r4_5_a_new_reason_for_the_same_job_changes_the_condition_only",
    ),
    pytest.param(
        facts(pod(), job("PENDING", excluded_nodes=("sn-1", "sn-2")), needed=frozenset({"sn-2"})),
        RULES,
        True,
        Plan(
            (
                Widen(7, ("sn-2",), ("sn-1",)),
                Event(
                    ev.PLACEMENT_WIDENED,
                    "Slurm job 7 may now use 1 node(s) it had left out (sn-1): they can host the Pod now",
                ),
            )
        ),
        id="r9_4_a_pending_job_gets_back_nodes_that_can_host_the_pod_now",
    ),
    pytest.param(
        facts(pod(), job("PENDING", excluded_nodes=("sn-1",), submit_time=int(NOW)), needed=frozenset()),
        PACK,
        True,
        Plan(after=PACK_PATIENCE_S),
        id="r9_2_under_pack_a_job_waits_for_a_partly_used_node_before_widening",
    ),
]


@pytest.mark.parametrize(("gathered", "rules", "synced", "expected"), ROWS)
def test_the_next_step_of_a_pod(gathered: PodFacts, rules: Rules, synced: bool, expected: Plan) -> None:
    assert plan(gathered, rules, synced=synced, now=NOW) == expected


def test_r5_2_a_job_slurm_ends_deletes_its_pod_saying_why() -> None:
    result = plan(facts(pod(node="n1"), job("CANCELLED")), RULES, synced=True, now=NOW)
    assert kinds(result) == ["Event", "DeletePod"]


def test_r8_2_a_bound_pod_whose_job_slurm_requeued_elsewhere_goes() -> None:
    moved = replace(job(), restarts=1)
    result = plan(facts(pod(node="n1"), moved, hosts=frozenset({"n2"})), RULES, synced=True, now=NOW)
    assert kinds(result) == ["Event", "DeletePod"] and result.actions[1] == DeletePod()


def test_issue53_a_bound_pod_whose_job_slurm_started_again_elsewhere_is_read_to_be_readopted() -> None:
    result = plan(facts(pod(node="n1"), job(), hosts=frozenset({"n2"})), RULES, synced=True, now=NOW)
    assert kinds(result) == ["ConfirmReverted"]


def test_r8_2_a_podgroup_member_whose_job_runs_elsewhere_goes() -> None:
    gathered = facts(pod(node="n1"), job(), hosts=frozenset({"n2"}), group="g")
    assert kinds(plan(gathered, RULES, synced=True, now=NOW)) == ["Event", "DeletePod"]


def test_r8_2_a_bound_pod_where_its_job_runs_stays() -> None:
    assert plan(facts(pod(node="n1"), job(), hosts=frozenset({"n1"})), RULES, synced=True, now=NOW) == Plan()


def test_issue53_an_unbound_pods_job_pending_though_its_script_started_is_replaced() -> None:
    lost = replace(job("PENDING", reason="Resources", submit_time=LONG_AGO), started=True)
    assert kinds(plan(facts(pod(), lost), RULES, synced=True, now=NOW)) == ["ReplaceLostStart"]


@pytest.mark.parametrize(
    ("the_job", "group"),
    [
        pytest.param(replace(PENDING, started=True, restarts=1), None, id="requeued_by_slurm_waits_as_any"),
        pytest.param(replace(PENDING, started=True), "g", id="a_podgroups_member_waits_with_its_group"),
        pytest.param(PENDING, None, id="never_started_waits_as_any"),
    ],
)
def test_a_pending_job_is_not_replaced(the_job: Any, group: str | None) -> None:
    result = plan(facts(pod(), the_job, group=group), RULES, synced=True, now=NOW)
    assert "ReplaceLostStart" not in kinds(result)


def test_r8_2_a_pod_this_process_deleted_is_not_told_again_that_its_job_moved() -> None:
    """Catches: a second Event (PlaceholderJobMoved) on a Pod already deleted for its job,
    seen in a fault run right after a failed re-adoption had deleted it, saying why."""
    gathered = facts(pod(node="n1"), job(), hosts=frozenset({"n2"}), being_deleted=True)
    assert plan(gathered, RULES, synced=True, now=NOW) == Plan()
