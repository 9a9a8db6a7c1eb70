"""The Pod controller through in-memory Kubernetes and Slurm: each step of a Pod's life,
and each failure of either side on each write. Named after the requirement checked."""

from __future__ import annotations

import copy
import time

import pytest

from sunk.kube.client import KubeError
from sunk.scheduler import policy
from sunk.scheduler.decide import claims, drains, steps
from sunk.scheduler.decide.drains import kill_wait_drain_reason
from sunk.scheduler.jobs import MIN_JOB_AGE_S
from sunk.scheduler.pod.submitting import UNANSWERED_GRACE_S
from sunk.scheduler.translate import PodRef, job_name
from sunk.slurm.errors import SlurmError, SlurmNoAnswer, SlurmUnavailable
from sunk.slurm.request import owner_tag
from tests.fakes.clock import FakeClock
from tests.fakes.scheduler_world import NAMESPACE, PREFIX, SCHEDULER, World, pod


def two_nodes(clock: FakeClock | None = None) -> World:
    world = World(clock=clock or FakeClock())
    world.add_node("n1", slurm_node="sn-1")
    world.add_node("n2", slurm_node="sn-2")
    return world


WEB = PodRef(NAMESPACE, "web", "uid-web")


async def submitted(world: World) -> str:
    key = world.create(pod())
    await world.reconcile(key)
    assert world.job_id(key) is not None
    return key


async def bound(world: World) -> str:
    key = await submitted(world)
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert world.pod(key)["spec"]["nodeName"] == "n1"
    return key


def aged(world: World, job_id: int, field: str, seconds: float) -> None:
    world.slurm.raw_jobs[job_id][field] = {"set": True, "number": int(time.time() - seconds)}


async def waiting_past_the_transient_window(world: World, reason: str) -> str:
    """Job 100 of a submitted Pod, pending for `reason` since longer than TRANSIENT_S."""
    key = await submitted(world)
    world.slurm.wait(100, reason)
    aged(world, 100, "submit_time", steps.TRANSIENT_S + 1)
    return key


def deleted(world: World, key: str) -> bool:
    return ("delete_pod", key) in world.kube.calls


# -- refusing (R2.4, R12.1) ------------------------------------------------------------------------
async def test_r2_4_an_invalid_pod_is_refused_for_good_and_never_submitted() -> None:
    world = two_nodes()
    key = world.create(pod(terminationGracePeriodSeconds=60))
    await world.reconcile(key)
    assert world.slurm.submitted() == []
    assert world.kube.reasons("web") == ["FailedScheduling"]
    assert "terminationGracePeriodSeconds is 60" in world.kube.notes("FailedScheduling")[0]
    condition = world.condition(key) or {}
    assert (condition.get("status"), condition.get("reason")) == ("False", "InvalidForSlurm")


async def test_r2_4_a_refused_pod_is_left_alone_on_later_passes() -> None:
    world = two_nodes()
    key = world.create(pod(terminationGracePeriodSeconds=60))
    await world.reconcile(key)
    writes, events = list(world.kube.calls), list(world.kube.events)
    await world.reconcile(key)
    assert (world.kube.calls, world.kube.events, world.slurm.submitted()) == (writes, events, [])


async def test_r2_4_a_refusal_the_cache_does_not_show_yet_is_not_made_twice() -> None:
    world = two_nodes()
    key = world.create(pod(terminationGracePeriodSeconds=60))
    unrefused = copy.deepcopy(world.pod(key))
    await world.reconcile(key)
    world.kube.pods.put(unrefused)  # the informer has not shown the condition yet
    outcome = await world.reconcile(key)
    assert world.kube.reasons("web") == ["FailedScheduling"]
    assert outcome.requeue_after  # looked at again once the cache has caught up


async def test_r12_1_a_pod_the_trust_policy_forbids_is_refused_for_good() -> None:
    world = two_nodes()
    world.pod_controller.reader.policy.policy = policy.parse("default:\n  accounts: [research]\n")
    key = world.create(pod(annotations={PREFIX + "account": "finance"}))
    await world.reconcile(key)
    assert world.slurm.submitted() == []
    assert (world.condition(key) or {}).get("reason") == "ForbiddenByPolicy"


# -- submitting and adopting (R3.4, R4.1, R8.2, R9.4) ----------------------------------------------
async def test_r4_1_a_valid_pod_gets_one_job_and_its_id() -> None:
    world = World()
    world.add_node("n1")
    key = world.create(pod())
    await world.reconcile(key)
    assert world.slurm.submitted() == [100]
    assert world.job_id(key) == 100


async def test_r4_1_a_submission_writes_no_event_while_the_job_may_still_start_at_once() -> None:
    world = two_nodes()
    key = await submitted(world)
    world.slurm.wait(100, "Resources")
    await world.reconcile(key)
    assert world.kube.reasons("web") == []


async def test_r4_1_with_placement_pack_the_submission_event_is_written_at_once() -> None:
    world = World(placement="pack")
    world.add_node("n1")
    await submitted(world)
    assert world.kube.notes("PlaceholderSubmitted") == ["Submitted Slurm job 100 (1 CPU, 1024 MiB)"]


async def test_r9_4_a_new_job_leaves_out_slurm_nodes_whose_node_is_cordoned() -> None:
    world = two_nodes()
    world.cordon("n2")
    await submitted(world)
    assert world.slurm.raw_jobs[100]["excluded_nodes"] == "sn-2"


async def test_r9_4_a_new_job_leaves_out_slurm_nodes_whose_node_is_not_ready() -> None:
    world = two_nodes()
    world.add_node("n3", slurm_node="sn-3", ready=False)
    await submitted(world)
    assert world.slurm.raw_jobs[100]["excluded_nodes"] == "sn-3"


async def test_r8_2_after_a_restart_the_job_slurm_holds_for_the_pod_is_adopted_not_submitted_again() -> None:
    world = two_nodes()
    key = world.create(pod())
    world.kube.fail("patch_pod")
    with pytest.raises(KubeError):
        await world.reconcile(key)
    restarted = world.restarted()
    await restarted.reconcile(key)
    assert world.slurm.submitted() == [100]
    assert world.job_id(key) == 100
    assert world.kube.reasons("web")[-1] == "PlaceholderAdopted"


async def test_r3_4_a_job_left_by_an_earlier_pod_of_the_same_name_is_cancelled_not_adopted() -> None:
    world = two_nodes()
    key = await submitted(world)
    world.remove(key)
    world.create(pod(uid="uid-web-2"))
    await world.restarted().reconcile(key)
    assert world.slurm.cancelled() == [(100, None)]
    assert world.job_id(key) == 101


@pytest.mark.parametrize(("handing_over", "cancelled"), [(True, []), (False, [(100, None)])])
async def test_r8_2_a_job_being_handed_over_to_its_pod_is_not_cancelled_by_the_pods_own_pass(
    handing_over: bool, cancelled: list[tuple[int, str | None]]
) -> None:
    """Catches a PodGroup member's own pass cancelling its group's new job (a re-adoption)
    between the job's submission and its record on the member: a fault run saw the group
    re-adopted in part, and a whole group deleted. Once handed over (or given up), the
    same job is a claim like any other."""
    world = two_nodes()
    key = await submitted(world)
    world.pod(key)["metadata"]["annotations"][PREFIX + "job-id"] = "99"  # names an older job
    later = world.restarted()  # its memory holds no expectation of job 100 on the Pod
    if handing_over:
        later.pod_controller.memory.handing_over.add(100)
    await later.reconcile(key)
    assert world.slurm.cancelled() == cancelled


async def test_r8_2_a_submit_that_got_no_answer_is_not_sent_again_before_a_listing_could_show_it() -> None:
    world = two_nodes()
    key = world.create(pod())
    world.slurm.fail("submit", SlurmNoAnswer("read timeout"))
    with pytest.raises(SlurmNoAnswer):
        await world.reconcile(key)
    outcome = await world.reconcile(key)
    assert world.slurm.submitted() == []
    assert outcome.requeue_after == 1


async def test_r8_2_a_submit_that_got_no_answer_is_sent_again_once_a_later_listing_shows_no_job(
    clock: FakeClock,
) -> None:
    world = two_nodes(clock=clock)
    key = world.create(pod())
    world.slurm.fail("submit", SlurmNoAnswer("read timeout"))
    with pytest.raises(SlurmNoAnswer):
        await world.reconcile(key)
    clock.advance(UNANSWERED_GRACE_S)
    await world.reconcile(key)
    assert world.slurm.submitted() == [100]


async def test_r8_2_a_submit_slurm_carried_out_without_answering_is_adopted() -> None:
    world = two_nodes()
    key = world.create(pod())
    world.slurm.lost_answers = 1
    with pytest.raises(SlurmNoAnswer):
        await world.reconcile(key)
    await world.reconcile(key)
    assert world.slurm.submitted() == [100]
    assert world.job_id(key) == 100
    assert world.kube.reasons("web")[-1] == "PlaceholderAdopted"


# -- waiting (R4.5) --------------------------------------------------------------------------------
async def test_r4_5_a_job_slurm_has_not_looked_at_is_not_reported_within_the_transient_window() -> None:
    world = two_nodes()
    key = await submitted(world)
    outcome = await world.reconcile(key)
    assert world.condition(key) is None
    assert outcome.requeue_after is not None and 0 < outcome.requeue_after <= steps.TRANSIENT_S


async def test_r4_5_a_pending_job_is_reported_with_slurms_reason_after_the_transient_window() -> None:
    world = two_nodes()
    key = await waiting_past_the_transient_window(world, "Priority")
    await world.reconcile(key)
    condition = world.condition(key) or {}
    assert condition.get("reason") == "PendingInSlurm"
    assert "Slurm job 100 is pending (Priority)" in condition.get("message", "")


async def test_r4_5_a_job_waiting_past_the_transient_window_gets_its_submission_event_once() -> None:
    world = two_nodes()
    key = await waiting_past_the_transient_window(world, "Priority")
    await world.reconcile(key)
    world.slurm.wait(100, "Resources")  # a new reason: a new condition, no second Event
    await world.reconcile(key)
    assert world.kube.notes("PlaceholderSubmitted") == [
        "Submitted Slurm job 100 (1 CPU, 1024 MiB); not started after 3 s"
    ]


async def test_r4_5_the_pending_condition_is_written_once_while_nothing_changes() -> None:
    world = two_nodes()
    key = await waiting_past_the_transient_window(world, "Resources")
    await world.reconcile(key)
    await world.reconcile(key)
    assert world.kube.calls.count(("patch_pod_status", key)) == 1


async def test_r4_2_a_running_job_whose_script_has_not_started_is_not_bound() -> None:
    world = two_nodes()
    key = await submitted(world)
    world.slurm.start(100, "sn-1", started=False)
    aged(world, 100, "start_time", steps.TRANSIENT_S + 1)
    await world.reconcile(key)
    assert "nodeName" not in world.pod(key)["spec"]
    assert (world.condition(key) or {}).get("reason") == "WaitingForPlaceholder"


# -- binding (R4.2, R4.3, R4.4) --------------------------------------------------------------------
async def test_r4_3_a_started_job_binds_its_pod_to_the_node_hosting_its_slurm_node() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    key = world.create(pod())
    await world.reconcile(key)
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert world.pod(key)["spec"]["nodeName"] == "n1"
    assert world.kube.reasons("web") == ["Scheduled"]


async def test_r4_3_the_scheduled_event_names_the_job_its_slurm_node_and_what_slurm_allocated() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    key = world.create(pod())
    await world.reconcile(key)
    world.slurm.start(100, "sn-1")
    world.slurm.raw_jobs[100]["tres_alloc_str"] = "cpu=1,mem=1G,node=1,billing=1"
    await world.reconcile(key)
    assert world.kube.notes("Scheduled") == [
        "Successfully assigned ns/web to n1 (Slurm job 100 on node sn-1, allocated cpu=1,mem=1G)"
    ]


async def test_r4_3_a_node_cordoned_at_bind_time_gets_the_pod_a_new_job_that_avoids_it() -> None:
    world = two_nodes()
    key = await submitted(world)
    world.cordon("n1")
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert "nodeName" not in world.pod(key)["spec"]
    assert "PlacementRejected" in world.kube.reasons("web")
    assert world.job_id(key) == 101
    assert world.slurm.raw_jobs[101]["excluded_nodes"] == "sn-1"


async def test_r8_2_a_cache_still_showing_the_rejected_job_never_ends_the_pod_or_its_new_job() -> None:
    """Seen in a fault run: the pass after a rejected placement read the Pod from a cache
    that did not show the new job yet, took the cancelled old job for Slurm ending the
    Pod's job, deleted the Pod, and cancelled its new job as unowned."""
    world = two_nodes()
    key = await submitted(world)
    before = copy.deepcopy(world.pod(key))  # what the informer still shows a moment later
    world.cordon("n1")
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert world.job_id(key) == 101
    world.kube.pods.put(before)
    outcome = await world.reconcile(key)
    assert not deleted(world, key)
    assert (101, None) not in world.slurm.cancelled()
    assert outcome.requeue_after is not None and outcome.requeue_after < 1
    world.kube.pods.put(
        {**before, "metadata": {**before["metadata"], "annotations": {PREFIX + "job-id": "101"}}}
    )
    await world.reconcile(key)  # the cache caught up: the Pod waits on its new job
    assert not deleted(world, key)


async def test_r4_3_a_rejected_job_is_cancelled_after_its_successor_is_submitted() -> None:
    world = two_nodes()
    key = await submitted(world)
    world.cordon("n1")
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    writes = [call[:2] for call in world.slurm.calls]
    assert writes[1:] == [("submit", 101), ("cancel", 100)]


async def test_r4_3_a_slurm_node_drained_at_bind_time_is_rejected_and_avoided() -> None:
    world = two_nodes()
    key = await submitted(world)
    world.slurm.drain_as_admin("sn-1")
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert "nodeName" not in world.pod(key)["spec"]
    assert "is idle+DRAIN (bad DIMM)" in world.kube.notes("PlacementRejected")[0]
    assert world.pod(key)["metadata"]["annotations"][PREFIX + "avoid-nodes"] == "sn-1"
    assert world.slurm.raw_jobs[101]["excluded_nodes"] == "sn-1"


async def test_r4_3_a_rejected_placement_with_no_other_node_leaves_the_pod_waiting() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    key = await submitted(world)
    world.cordon("n1")
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    await world.reconcile(key)
    assert not deleted(world, key)
    assert "CancelledInSlurm" not in world.kube.reasons("web")


async def test_r4_5_a_pod_whose_only_node_was_rejected_is_told_why_it_waits() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    key = await submitted(world)
    world.slurm.drain_as_admin("sn-1")
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    condition = world.condition(key) or {}
    assert condition.get("reason") == "Unschedulable"
    assert "sn-1" in condition.get("message", "")


# -- Slurm ends the job (R5.2, R5.3, R5.5) ---------------------------------------------------------
@pytest.mark.parametrize(
    ("state", "reason"),
    [
        pytest.param("CANCELLED", "CancelledInSlurm", id="scancel"),
        pytest.param("PREEMPTED", "Preempted", id="preempted"),
        pytest.param("TIMEOUT", "TimeLimitReached", id="timeout"),
        pytest.param("NODE_FAIL", "PlaceholderJobFailed", id="node_fail"),
    ],
)
async def test_r5_2_a_pod_whose_job_slurm_ends_is_deleted_saying_why(state: str, reason: str) -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.end(100, state)
    await world.reconcile(key)
    assert deleted(world, key)
    assert world.kube.reasons("web")[-1] == reason


async def test_r5_2_a_pod_is_deleted_only_once_the_event_saying_why_is_written() -> None:
    """Catches: the Event explaining a deletion lost while the API server was down, and the
    deletion landing as it came back (a fault run saw two Pods deleted with no word why)."""
    world = two_nodes()
    key = await bound(world)
    world.slurm.end(100, "CANCELLED")
    world.kube.failures.fail("create_event", KubeError(0, "ClientConnectorError"))
    with pytest.raises(KubeError):
        await world.reconcile(key)
    assert not deleted(world, key)
    await world.reconcile(key)  # the API server is back: the Event first, then the deletion
    assert deleted(world, key)
    assert world.kube.reasons("web")[-1] == "CancelledInSlurm"


async def test_r5_2_an_event_the_api_server_refuses_for_good_does_not_keep_the_pod() -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.end(100, "CANCELLED")
    world.kube.failures.fail("create_event", KubeError(422, "invalid"))
    await world.reconcile(key)
    assert deleted(world, key)


async def test_r5_2_a_job_requeued_by_slurm_under_a_bound_pod_is_cancelled_and_the_pod_deleted() -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.raw_jobs[100].update(job_state=["PENDING"], restart_cnt=1)
    await world.reconcile(key)
    assert world.slurm.cancelled() == [(100, None)]
    assert deleted(world, key)
    assert world.kube.reasons("web")[-1] == "Preempted"


async def test_r5_2_a_finished_pods_running_job_is_cancelled() -> None:
    world = two_nodes()
    key = await bound(world)
    world.finish(key)
    await world.reconcile(key)
    assert world.slurm.cancelled() == [(100, None)]
    assert not deleted(world, key)


async def test_r5_2_a_finished_pod_whose_job_ends_is_not_deleted() -> None:
    world = two_nodes()
    key = await bound(world)
    world.finish(key)
    world.slurm.end(100, "COMPLETED")
    await world.reconcile(key)
    assert not deleted(world, key)


async def test_r5_5_a_terminating_report_slurm_contradicts_leaves_the_pod() -> None:
    world = two_nodes()
    key = await bound(world)
    world.pod_controller.report_ending(WEB, 100)
    await world.reconcile(key)
    assert not deleted(world, key)


async def test_r5_5_a_terminating_report_slurm_confirms_deletes_the_pod_before_the_next_listing() -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.end(100)
    world.pod_controller.report_ending(WEB, 100)
    await world.reconcile(key, listing=False)
    assert deleted(world, key)
    assert world.kube.reasons("web")[-1] == "CancelledInSlurm"


async def test_r5_5_a_terminating_report_slurm_cannot_confirm_leaves_the_pod_and_asks_again() -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.end(100)
    world.pod_controller.report_ending(WEB, 100)
    world.slurm.fail("job", SlurmUnavailable("connection refused"))
    outcome = await world.reconcile(key, listing=False)
    assert not deleted(world, key)
    assert outcome.requeue_after == 1


async def test_r5_3_a_pod_outliving_its_ending_job_is_not_drained_before_kill_wait() -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.end(100, "COMPLETING")
    outcome = await world.reconcile(key)
    assert world.slurm.drains() == []
    assert outcome.requeue_after is not None
    assert world.kill_wait_s - drains.DRAIN_MARGIN_S - 2 < outcome.requeue_after


async def test_r5_3_a_pod_still_there_at_kill_wait_has_its_node_drained_once_naming_it() -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.end(100, "COMPLETING")
    aged(world, 100, "end_time", world.kill_wait_s)
    await world.reconcile(key)
    await world.reconcile(key)
    assert world.slurm.drains() == [("sn-1", kill_wait_drain_reason(WEB, 100))]


# -- a bound Pod's job (R8.2) ----------------------------------------------------------------------
async def test_r8_2_a_bound_pod_whose_job_a_listing_misses_stays_while_slurm_still_has_it() -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.unlisted.add(100)
    await world.reconcile(key)
    assert not deleted(world, key)


async def test_r8_2_a_bound_pod_whose_job_slurm_no_longer_has_is_deleted(clock: FakeClock) -> None:
    """With no evidence that Slurm lost the job rather than ended it (this process never
    saw it running: a restarted scheduler, and the Pod was bound longer than MinJobAge
    ago), the Pod goes; test_readoption has the rest."""
    world = two_nodes(clock=clock)
    key = await bound(world)
    clock.advance(MIN_JOB_AGE_S)
    del world.slurm.raw_jobs[100]
    world = world.restarted()
    await world.reconcile(key)
    assert deleted(world, key)
    note = world.kube.notes("PlaceholderJobEnded")[0]
    assert note.startswith("Slurm job 100 no longer exists in Slurm, and nothing shows that Slurm lost it")
    assert world.slurm.submitted() == [100]


async def test_r8_2_a_bound_pod_whose_job_slurm_requeued_onto_another_nodes_slurm_node_is_deleted() -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.raw_jobs[100]["nodes"] = "sn-2"
    world.slurm.raw_jobs[100]["restart_cnt"] = 1
    await world.reconcile(key)
    assert deleted(world, key)
    assert world.kube.reasons("web")[-1] == "PlaceholderJobMoved"


# -- the Pod goes first (R5.1, R8.2) ---------------------------------------------------------------
async def test_r5_1_a_pod_being_deleted_has_its_running_job_signalled_usr1_once() -> None:
    world = two_nodes()
    key = await bound(world)
    world.kube.delete_by_user(NAMESPACE, "web")
    await world.reconcile(key)
    await world.reconcile(key)
    assert world.slurm.cancelled() == [(100, "USR1")]


async def test_r5_1_a_signalled_job_is_cancelled_once_its_pod_is_gone() -> None:
    world = two_nodes()
    key = await bound(world)
    world.kube.delete_by_user(NAMESPACE, "web")
    await world.reconcile(key)
    world.remove(key)
    await world.reconcile(key)
    assert world.slurm.cancelled() == [(100, "USR1"), (100, None)]


async def test_r5_1_a_job_whose_pod_is_gone_is_cancelled() -> None:
    world = two_nodes()
    key = await bound(world)
    world.remove(key)
    await world.reconcile(key)
    assert world.slurm.cancelled() == [(100, None)]


async def test_r5_1_a_pending_job_whose_pod_is_gone_is_cancelled() -> None:
    world = two_nodes()
    key = await submitted(world)
    world.remove(key)
    await world.reconcile(key)
    assert world.slurm.cancelled() == [(100, None)]


async def test_r8_2_a_cancelled_job_still_running_is_not_cancelled_again_before_cancel_confirm_s() -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.lost_cancels = 1
    world.remove(key)
    await world.reconcile(key)
    outcome = await world.reconcile(key)
    assert world.slurm.cancelled() == [(100, None)]
    assert outcome.requeue_after == claims.CANCEL_CONFIRM_S


async def test_r8_2_a_cancel_slurm_lost_is_sent_again_after_cancel_confirm_s(clock: FakeClock) -> None:
    world = two_nodes(clock=clock)
    key = await bound(world)
    world.slurm.lost_cancels = 1
    world.remove(key)
    await world.reconcile(key)
    clock.advance(claims.CANCEL_CONFIRM_S)
    await world.reconcile(key)
    assert world.slurm.cancelled() == [(100, None), (100, None)]


async def test_r8_2_a_job_id_slurm_now_holds_for_another_pod_is_not_cancelled() -> None:
    """No listing since: the index still gives job 100 to the gone Pod; only Slurm's answer counts."""
    world = two_nodes()
    key = await bound(world)
    world.remove(key)
    world.slurm.raw_jobs[100]["admin_comment"] = owner_tag(
        job_name(PodRef(NAMESPACE, "other", "uid-other"), SCHEDULER), 0
    )
    await world.reconcile(key, listing=False)
    assert world.slurm.cancelled() == []


# -- each write failing (R4.4, R5.2, R8.1, R8.2, R11.3) --------------------------------------------
async def test_r11_3_slurm_unavailable_on_submit_is_said_on_the_condition_and_raised_for_a_retry() -> None:
    world = two_nodes()
    key = world.create(pod())
    world.slurm.fail("submit", SlurmUnavailable("connection refused"))
    with pytest.raises(SlurmUnavailable):
        await world.reconcile(key)
    assert (world.condition(key) or {}).get("reason") == "SlurmUnavailable"


async def test_r11_3_the_retry_after_slurm_was_unavailable_submits_once() -> None:
    world = two_nodes()
    key = world.create(pod())
    world.slurm.fail("submit", SlurmUnavailable("connection refused"))
    with pytest.raises(SlurmUnavailable):
        await world.reconcile(key)
    await world.reconcile(key)
    await world.reconcile(key)
    assert world.slurm.submitted() == [100]
    assert world.job_id(key) == 100


async def test_r8_2_an_api_server_down_after_submit_fails_the_pass_and_the_retry_adopts_the_job() -> None:
    """The retry comes before any listing: the index alone must remember the job just submitted."""
    world = two_nodes()
    key = world.create(pod())
    world.kube.fail("patch_pod")
    with pytest.raises(KubeError) as raised:
        await world.reconcile(key)
    assert raised.value.unreachable
    await world.reconcile(key, listing=False)
    assert world.slurm.submitted() == [100]
    assert world.job_id(key) == 100


async def test_r4_4_a_failed_binding_fails_the_pass_and_the_retry_binds() -> None:
    world = two_nodes()
    key = await submitted(world)
    world.slurm.start(100, "sn-1")
    world.kube.fail("bind")
    with pytest.raises(KubeError):
        await world.reconcile(key)
    await world.reconcile(key)
    assert world.pod(key)["spec"]["nodeName"] == "n1"


async def test_r5_2_a_failed_delete_fails_the_pass_and_the_retry_deletes() -> None:
    world = two_nodes()
    key = await bound(world)
    world.slurm.end(100)
    world.kube.fail("delete_pod")
    with pytest.raises(KubeError):
        await world.reconcile(key)
    await world.reconcile(key)
    assert deleted(world, key)


async def test_r11_3_a_failed_cancel_fails_the_pass_and_the_retry_cancels() -> None:
    world = two_nodes()
    key = await bound(world)
    world.remove(key)
    world.slurm.fail("cancel", SlurmUnavailable("connection refused"))
    with pytest.raises(SlurmError):
        await world.reconcile(key)
    await world.reconcile(key)
    assert world.slurm.cancelled() == [(100, None)]


async def test_r8_1_a_failed_event_write_never_fails_a_submit() -> None:
    world = two_nodes()
    key = world.create(pod())
    world.kube.fail("create_event", KubeError(500, "etcdserver: request timed out"))
    await world.reconcile(key)
    assert world.job_id(key) == 100
    assert world.kube.events == []


async def test_r8_1_a_failed_event_write_never_fails_a_binding() -> None:
    world = two_nodes()
    key = await submitted(world)
    world.slurm.start(100, "sn-1")
    world.kube.fail("create_event")
    await world.reconcile(key)
    assert world.pod(key)["spec"]["nodeName"] == "n1"
    assert "Scheduled" not in world.kube.reasons()


# -- one pass, two reasons to look again (R8.2) ----------------------------------------------------


async def test_r8_2_a_cancel_to_confirm_is_rechecked_whatever_step_the_new_pod_takes() -> None:
    """Was: the cancel's 5 s re-check was kept on two of the Pod's paths only; on the others
    a lost cancel waited for the 30 s resync."""
    world = two_nodes()
    key = await submitted(world)
    world.slurm.start(100, "sn-1")
    world.remove(key)
    world.create(pod(uid="uid-web-2"))  # the Pod replaced under the same name
    outcome = await world.reconcile(key)
    assert (100, None) in world.slurm.cancelled()
    assert world.slurm.submitted() == [100, 101]  # the new Pod's own step: a submit
    assert outcome.requeue_after == claims.CANCEL_CONFIRM_S
