"""The planner for a job that names a Pod key, called directly: the typed actions that
settle the claim, in order, and when to look again. One row per case; its id says what it
checks (whether the job may live at all is `claims.for_claim`, tested in test_decide.py)."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.kube import events as ev
from sunk.runtime.actions import CancelJob
from sunk.scheduler.decide.actions import ConfirmClaim, Plan, ReleaseGroup, SignalJob
from sunk.scheduler.decide.claim_plan import HANDOVER_RECHECK_S, ClaimFacts, plan
from sunk.scheduler.decide.claims import CANCEL_CONFIRM_S
from sunk.scheduler.decide.pod_state import PodView
from tests.unit.test_decide import REF, component, job, seen
from tests.unit.test_decide import pod as pod_object


def pod(**kw: Any) -> PodView:
    return seen(pod_object(**kw))


RELEASED = (
    "member web left before the group's Slurm job 40 started; that job was cancelled and the group "
    "waits for its members again"
)

ROWS = [
    pytest.param(ClaimFacts(REF, job(), pod()), Plan(), id="r8_2_the_pods_own_job_is_left_alone"),
    pytest.param(
        ClaimFacts(REF, job(), None),
        Plan(
            (ConfirmClaim(7), CancelJob(7, "its Pod is gone or done", settles_claim=True)),
            after=CANCEL_CONFIRM_S,
        ),
        id="r5_1_a_job_whose_pod_is_gone_is_cancelled_once_slurm_confirms_it_is_the_pods",
    ),
    # Catches a PodGroup's new job (a re-adoption) cancelled by a member's own pass before it
    # was recorded on the members.
    pytest.param(
        ClaimFacts(REF, job(), pod(job_id=6), handing_over=True),
        Plan(after=HANDOVER_RECHECK_S),
        id="r8_2_a_job_being_handed_over_to_its_pod_is_left_alone_and_looked_at_again",
    ),
    pytest.param(
        ClaimFacts(REF, job("COMPLETING"), None),
        Plan((ConfirmClaim(7), CancelJob(7, "its Pod is gone or done", settles_claim=True))),
        id="r5_1_a_job_slurm_ends_is_cancelled_without_a_recheck",
    ),
    pytest.param(
        ClaimFacts(REF, job(), None, cancelled_at=100.0),
        Plan(after=CANCEL_CONFIRM_S),
        id="r5_1_a_cancel_just_sent_is_looked_at_again",
    ),
    pytest.param(
        ClaimFacts(REF, job(), None, cancelled_at=90.0),
        Plan(
            (
                ConfirmClaim(7),
                CancelJob(
                    7,
                    "its Pod is gone or done again (Slurm did not act on the first cancel)",
                    settles_claim=True,
                ),
            ),
            after=CANCEL_CONFIRM_S,
        ),
        id="r5_1_a_cancel_slurm_lost_is_sent_again",
    ),
    pytest.param(
        ClaimFacts(REF, job(), pod(deleting=True)),
        Plan((SignalJob(7, "USR1", "its Pod is being deleted"),)),
        id="r5_1_a_pod_being_deleted_has_its_job_signalled",
    ),
    pytest.param(
        ClaimFacts(REF, job(), pod(deleting=True), signalled=True),
        Plan(),
        id="r5_1_a_job_is_signalled_once",
    ),
    pytest.param(
        ClaimFacts(REF, component(1), None),
        Plan(
            (ConfirmClaim(41), CancelJob(40, "its Pod is gone or done", settles_claim=True)),
            after=CANCEL_CONFIRM_S,
        ),
        id="r9_1_a_member_gone_ends_the_group_through_its_leader",
    ),
    pytest.param(
        ClaimFacts(REF, component(1, "PENDING"), None),
        Plan((ConfirmClaim(41), ReleaseGroup(40, ev.GROUP_RELEASED, RELEASED))),
        id="r9_1_a_member_gone_before_the_start_releases_the_others",
    ),
    pytest.param(
        ClaimFacts(REF, component(1, "PENDING"), None, cancelled_at=90.0),
        Plan(),
        id="r9_1_a_group_is_released_once_for_a_member_that_left",
    ),
    pytest.param(
        ClaimFacts(REF, component(1), pod(phase="Succeeded", job_id=41), others_running=True),
        Plan(),
        id="r9_1_a_member_that_succeeded_waits_for_the_others",
    ),
]


@pytest.mark.parametrize(("facts", "expected"), ROWS)
def test_what_settles_a_claim(facts: ClaimFacts, expected: Plan) -> None:
    assert plan(facts, now=101.0) == expected
