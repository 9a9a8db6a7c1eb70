"""The decision core, case by case: given a Pod, a job and the time, what happens next.
Each case is one row; its id says which requirement it checks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sunk.scheduler.decide import claims, drains, group_plan, packing, problems, steps
from sunk.scheduler.decide.claims import Claim
from sunk.scheduler.decide.pod_state import PodView, view
from sunk.scheduler.decide.steps import Step
from sunk.scheduler.translate import JobOptions, PlaceholderJob, PodRef
from sunk.slurm.models import SlurmJob, SlurmNode

P = "sunk.coreweave.com/"
NOW = 1_800_000_000.0
REF = PodRef("ns", "web", "uid-1")


def pod(
    *,
    uid: str = "uid-1",
    job_id: int | None = 7,
    node: str | None = None,
    deleting: bool = False,
    phase: str = "Pending",
    refused: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "namespace": "ns", "uid": uid, "annotations": {}}
    if job_id is not None:
        meta["annotations"][P + "job-id"] = str(job_id)
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T00:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if refused:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": refused}]
    spec = {"nodeName": node} if node else {}
    return {"metadata": meta, "spec": spec, "status": status}


def seen(the_pod: dict[str, Any]) -> PodView:
    """What the Pod controller reads of `the_pod` once per pass."""
    return view(the_pod, P)


def seen_if(the_pod: dict[str, Any] | None) -> PodView | None:
    return seen(the_pod) if the_pod is not None else None


def job(state: str = "RUNNING", *, job_id: int = 7, started: bool | None = None, **kw: Any) -> SlurmJob:
    """A job of the Pod `pod()` makes; its placeholder's started mark is set unless it is
    PENDING (only a script that ran writes it)."""
    base = SlurmJob(
        job_id=job_id,
        name="sunk:s:ns/web:uid-1",
        state=state,
        reason=kw.pop("reason", "None"),
        nodes=("sn-1",) if state in ("RUNNING", "COMPLETING", "CONFIGURING") else (),
        comment="",
        user_id=0,
        group_id=0,
        partition="batch",
        time_limit_min=None,
        priority=None,
        started=state != "PENDING" if started is None else started,
        submit_time=int(NOW) - 10,
        start_time=int(NOW) - 10,
    )
    return replace(base, **kw)


# -- a job that names this Pod key (R5.1, R8.2) -------------------------------------------------
CLAIMS = [
    pytest.param(pod(), job(), None, False, 0.0, Claim.KEEP, id="r8_2_the_pods_own_job_lives"),
    pytest.param(
        pod(job_id=None),
        job(),
        None,
        False,
        0.0,
        Claim.KEEP,
        id="r8_2_a_job_the_pod_does_not_name_yet_is_kept_for_adoption",
    ),
    pytest.param(None, job(), None, False, 0.0, Claim.CANCEL, id="r5_1_a_job_whose_pod_is_gone_is_cancelled"),
    pytest.param(
        pod(uid="uid-2"),
        job(),
        None,
        False,
        0.0,
        Claim.CANCEL,
        id="r8_2_a_job_of_an_earlier_pod_of_the_same_name_is_cancelled",
    ),
    pytest.param(
        pod(job_id=8),
        job(),
        None,
        False,
        0.0,
        Claim.CANCEL,
        id="r4_3_a_replaced_job_of_a_rejected_placement_is_cancelled",
    ),
    pytest.param(
        pod(phase="Succeeded"),
        job(),
        None,
        False,
        0.0,
        Claim.CANCEL,
        id="r5_a_finished_pods_job_is_cancelled",
    ),
    pytest.param(
        pod(refused="RejectedBySlurm"),
        job("PENDING", started=False),
        None,
        False,
        0.0,
        Claim.CANCEL,
        id="r11_3_a_refused_pod_owns_no_job",
    ),
    pytest.param(
        pod(deleting=True),
        job(),
        None,
        False,
        0.0,
        Claim.SIGNAL,
        id="r5_1_a_deleting_pods_job_is_signalled_and_keeps_its_node",
    ),
    pytest.param(pod(deleting=True), job(), None, True, 0.0, Claim.KEEP, id="r5_1_a_job_is_signalled_once"),
    pytest.param(
        pod(deleting=True),
        job("PENDING", started=False),
        None,
        False,
        0.0,
        Claim.KEEP,
        id="r5_1_a_pending_job_of_a_deleting_pod_waits_for_the_pod_to_go",
    ),
    pytest.param(
        None, job(), 100.0, False, 101.0, Claim.RECHECK, id="r5_1_a_cancel_just_sent_is_checked_again"
    ),
    pytest.param(None, job(), 100.0, False, 106.0, Claim.CANCEL, id="r5_1_a_cancel_slurm_lost_is_sent_again"),
    pytest.param(
        None,
        job("COMPLETING"),
        100.0,
        False,
        200.0,
        Claim.KEEP,
        id="r5_1_a_cancelled_job_slurm_is_ending_is_left_to_end",
    ),
    pytest.param(
        None,
        job("COMPLETING"),
        None,
        False,
        0.0,
        Claim.CANCEL,
        id="r6_1_an_ending_orphan_is_cancelled_once_to_stop_a_requeue",
    ),
    pytest.param(None, job("CANCELLED"), None, False, 0.0, Claim.KEEP, id="r8_2_an_ended_job_needs_nothing"),
]


@pytest.mark.parametrize(("the_pod", "the_job", "cancelled_at", "signalled", "now", "verdict"), CLAIMS)
def test_a_job_claiming_a_pod_key(
    the_pod: dict[str, Any] | None,
    the_job: SlurmJob,
    cancelled_at: float | None,
    signalled: bool,
    now: float,
    verdict: Claim,
) -> None:
    got = claims.for_claim(
        seen_if(the_pod), REF, the_job, cancelled_at=cancelled_at, signalled=signalled, now=now
    )
    assert got is verdict


# -- the Pod's next step (R4, R5.2, R6.1) -----------------------------------------------------
PODS = [
    pytest.param(pod(job_id=None), None, True, Step.FIND_OR_SUBMIT, 0.0, id="r4_1_a_new_pod_gets_a_job"),
    pytest.param(
        pod(job_id=None), None, False, Step.WAIT, 1.0, id="r8_2_nothing_is_submitted_before_the_first_listing"
    ),
    pytest.param(
        pod(refused="InvalidForSlurm"),
        None,
        True,
        Step.NOTHING,
        0.0,
        id="r2_4_a_refused_pod_is_never_tried_again",
    ),
    pytest.param(
        pod(),
        job("PENDING", started=False, reason="Resources"),
        True,
        Step.REPORT_PENDING,
        0.0,
        id="r4_5_a_pending_job_says_why",
    ),
    pytest.param(
        pod(),
        job("PENDING", started=False, submit_time=int(NOW) - 1),
        True,
        Step.WAIT,
        2.0,
        id="r4_5_a_job_slurm_has_not_looked_at_is_not_reported_yet",
    ),
    pytest.param(
        pod(),
        job("PENDING", started=False, submit_time=int(NOW) - 10),
        True,
        Step.REPORT_PENDING,
        0.0,
        id="r4_5_a_job_waiting_long_without_a_reason_is_reported",
    ),
    pytest.param(
        pod(),
        job("PENDING", started=False, reason="Priority", submit_time=int(NOW) - 1),
        True,
        Step.WAIT,
        2.0,
        id="r4_5_an_ordinary_wait_for_priority_is_not_reported_in_its_first_seconds",
    ),
    pytest.param(
        pod(),
        job("PENDING", started=False, reason="Resources", submit_time=int(NOW) - 1),
        True,
        Step.WAIT,
        2.0,
        id="r4_5_an_ordinary_wait_for_resources_is_not_reported_in_its_first_seconds",
    ),
    pytest.param(
        pod(),
        job("PENDING", started=False, reason="PartitionDown", submit_time=int(NOW) - 1),
        True,
        Step.REPORT_PENDING,
        0.0,
        id="r4_5_an_unusual_wait_is_reported_at_once",
    ),
    pytest.param(pod(), job(), True, Step.BIND, 0.0, id="r4_2_a_started_placeholder_gets_its_pod_bound"),
    pytest.param(
        pod(),
        job(started=False, start_time=int(NOW) - 1),
        True,
        Step.WAIT,
        2.0,
        id="r4_2_running_is_not_started_wait_briefly",
    ),
    pytest.param(
        pod(),
        job(started=False),
        True,
        Step.REPORT_STARTING,
        0.0,
        id="r4_2_a_script_slow_to_start_is_reported",
    ),
    pytest.param(
        pod(),
        job("CONFIGURING", started=False),
        True,
        Step.REPORT_STARTING,
        0.0,
        id="r4_2_a_configuring_job_is_not_bound",
    ),
    pytest.param(
        pod(node="n1"),
        job(),
        True,
        Step.CHECK_BOUND,
        0.0,
        id="r4_3_a_bound_pod_is_checked_against_where_its_job_runs",
    ),
    pytest.param(
        pod(node="n1"),
        None,
        True,
        Step.CONFIRM_MISSING,
        0.0,
        id="r5_2_a_bound_pod_without_a_listed_job_asks_slurm_first",
    ),
    pytest.param(
        pod(node="n1"),
        None,
        False,
        Step.WAIT,
        1.0,
        id="r8_2_a_bound_pod_is_not_judged_before_the_first_listing",
    ),
    pytest.param(
        pod(node="n1"), job("COMPLETING"), True, Step.END_POD, 0.0, id="r5_2_a_job_slurm_ends_takes_its_pod"
    ),
    pytest.param(
        pod(node="n1"), job("CANCELLED"), True, Step.END_POD, 0.0, id="r5_2_a_cancelled_job_takes_its_pod"
    ),
    pytest.param(
        pod(node="n1"),
        job("PENDING", started=False, restarts=1),
        True,
        Step.END_POD,
        0.0,
        id="r6_1_a_requeued_job_gives_up_its_bound_pod",
    ),
    pytest.param(
        pod(node="n1"),
        job("SUSPENDED"),
        True,
        Step.END_POD,
        0.0,
        id="r6_1_a_suspended_job_gives_up_its_bound_pod",
    ),
    pytest.param(
        pod(), job("TIMEOUT"), True, Step.END_POD, 0.0, id="r6_2_a_job_at_its_time_limit_takes_its_pod"
    ),
    pytest.param(
        pod(deleting=True, node="n1"),
        job(),
        True,
        Step.NOTHING,
        0.0,
        id="r5_1_a_deleting_pod_is_left_to_terminate",
    ),
    pytest.param(
        pod(phase="Succeeded", node="n1"),
        job(),
        True,
        Step.NOTHING,
        0.0,
        id="r5_a_finished_pod_is_left_for_its_controller",
    ),
]


REPORTED = [
    pytest.param(
        pod(node="n1"), job(), Step.CONFIRM_ENDING, id="r5_2_a_reported_ending_is_checked_with_slurm"
    ),
    pytest.param(
        pod(node="n1"), None, Step.CONFIRM_ENDING, id="r5_2_a_reported_ending_of_an_unlisted_job_too"
    ),
    pytest.param(
        pod(node="n1"), job("COMPLETING"), Step.END_POD, id="r5_2_a_job_slurm_shows_ending_needs_no_check"
    ),
    pytest.param(
        pod(node="n1", deleting=True), job(), Step.NOTHING, id="r5_1_a_deleting_pods_report_changes_nothing"
    ),
    pytest.param(
        pod(node="n1", phase="Succeeded"), job(), Step.NOTHING, id="r5_a_finished_pods_report_changes_nothing"
    ),
    pytest.param(pod(refused="InvalidForSlurm"), job(), Step.NOTHING, id="r2_4_a_refused_pods_report_too"),
]


@pytest.mark.parametrize(("the_pod", "the_job", "step"), REPORTED)
def test_a_placeholders_word_that_its_job_ends_is_only_a_claim(
    the_pod: dict[str, Any], the_job: SlurmJob | None, step: Step
) -> None:
    decision = steps.for_pod(seen(the_pod), the_job, synced=True, now=NOW, ending_reported=True)
    assert decision.step is step


def node(
    state: str = "idle", flags: tuple[str, ...] = ("DRAIN",), reason: str = "disk", at: int = 1
) -> SlurmNode:
    return SlurmNode(name="sn-1", state=state, flags=flags, reason=reason, reason_changed_at=at)


KILL_WAIT = drains.kill_wait_drain_reason(REF, 7)


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        pytest.param(None, "Slurm does not know node sn-1", id="r4_3_an_unknown_node_is_refused"),
        pytest.param(node(flags=()), None, id="r4_3_an_idle_node_is_fine"),
        pytest.param(node(state="mixed", flags=()), None, id="r4_3_a_node_in_use_is_fine"),
        pytest.param(node(), "Slurm node sn-1 is idle+DRAIN (disk)", id="r4_3_a_draining_node_is_refused"),
        pytest.param(
            node(state="down", flags=(), reason=""),
            "Slurm node sn-1 is down (no reason given)",
            id="r4_3_a_down_node_is_refused",
        ),
    ],
)
def test_binding_checks_slurms_own_view_of_the_node(state: SlurmNode | None, problem: str | None) -> None:
    assert problems.slurm_node_problem("sn-1", state) == problem


def test_r5_3_a_node_in_use_gets_no_drain_notice() -> None:
    assert drains.drain_notice(node(flags=()), "s") is None


def test_r5_3_a_node_slurm_set_down_as_not_responding_is_told_like_a_drain() -> None:
    notice = drains.drain_notice(node(state="down", flags=("NOT_RESPONDING",), reason="Not responding"), "s")
    assert notice is not None and notice.pod is None
    assert "sn-1 is down (Not responding)" in notice.note and notice.name.startswith("sn-1.drained.")


def test_r5_3_a_down_node_with_no_reason_gets_no_notice() -> None:
    assert drains.drain_notice(node(state="down", flags=(), reason=""), "s") is None


def test_r5_3_a_drain_for_a_pod_past_killwait_is_told_on_that_pod() -> None:
    notice = drains.drain_notice(node(reason=KILL_WAIT), "s")
    assert notice is not None and notice.pod == ("ns", "web")
    assert "sn-1" in notice.note and "job 7" in notice.note and "state=resume" in notice.note
    assert notice.name.startswith("web.drained.")


def test_r5_3_any_other_drain_is_told_on_the_node_with_slurms_reason() -> None:
    notice = drains.drain_notice(node(state="mixed", flags=("DRAINING",), reason="Duplicate jobid"), "s")
    assert notice is not None and notice.pod is None
    assert "Duplicate jobid" in notice.note and notice.name.startswith("sn-1.drained.")


def test_r5_3_one_drain_has_one_event_name_and_a_new_drain_another() -> None:
    first = drains.drain_notice(node(), "s")
    assert first == drains.drain_notice(node(), "s")  # a restart records nothing new
    assert first != drains.drain_notice(node(at=2), "s")  # drained again later: a new Event
    assert first != drains.drain_notice(node(), "other-scheduler")


@pytest.mark.parametrize(("the_pod", "the_job", "synced", "step", "after"), PODS)
def test_the_next_step_for_a_pod(
    the_pod: dict[str, Any], the_job: SlurmJob | None, synced: bool, step: Step, after: float
) -> None:
    decision = steps.for_pod(seen(the_pod), the_job, synced=synced, now=NOW)
    assert decision.step is step
    assert decision.after == pytest.approx(after)


# -- where a Pod may go (R4.3) --------------------------------------------------------------------
NODES = {"sn-1", "sn-2"}
PLACEMENTS = [
    pytest.param((), {}, (), NODES, None, id="r4_3_any_usable_node_lets_the_pod_be_submitted"),
    pytest.param((), {"sn-1": "cordoned"}, (), NODES, None, id="r4_3_one_usable_node_is_enough"),
    pytest.param(
        (),
        {"sn-1": "cordoned"},
        ("sn-2",),
        NODES,
        "no Slurm node can host this Pod: a placement on sn-2 was rejected before; cordoned",
        id="r4_3_no_usable_node_waits_with_the_reasons",
    ),
    pytest.param(
        ("sn-1",),
        {"sn-1": "Node n1 is not Ready"},
        (),
        NODES,
        "required Slurm node(s) cannot host this Pod (sn-1: Node n1 is not Ready)",
        id="r4_3_a_required_node_the_pod_cannot_use_is_named",
    ),
    pytest.param(
        ("sn-2",),
        {},
        ("sn-2",),
        NODES,
        "required Slurm node(s) cannot host this Pod (sn-2: a placement there was rejected before)",
        id="r4_3_a_required_node_rejected_before_is_named",
    ),
    pytest.param((), {}, (), set(), None, id="r4_3_before_slurm_lists_its_nodes_nothing_is_ruled_out"),
]


def test_issue53_a_pod_no_node_can_host_hears_first_what_the_largest_node_lacks() -> None:
    """Catches a Pod too big for every Node told only of the first few by name, none of
    them the one that comes closest."""
    excluded = {f"sn-{i}": f"Node n{i} lacks {i} CPUs" for i in range(1, 8)}
    problem = problems.placement_problem((), excluded, (), set(excluded), largest="sn-7")
    assert problem == (
        "no Slurm node can host this Pod: Node n7 lacks 7 CPUs (the largest Node); Node n1 lacks 1 CPUs; "
        "Node n2 lacks 2 CPUs; Node n3 lacks 3 CPUs; Node n4 lacks 4 CPUs"
    )


@pytest.mark.parametrize(("required", "excluded", "avoid", "nodes", "problem"), PLACEMENTS)
def test_the_placement_problem_before_a_submit(
    required: tuple[str, ...],
    excluded: dict[str, str],
    avoid: tuple[str, ...],
    nodes: set[str],
    problem: str | None,
) -> None:
    assert problems.placement_problem(required, excluded, avoid, nodes) == problem


# -- when a node must be drained (R5.3) -----------------------------------------------------------
ENDED = int(NOW) - 10  # Slurm began ending the job 10 s ago
DRAINS = [
    pytest.param(job("COMPLETING", end_time=ENDED), True, 30, 17.0, id="r5_3_drain_is_due_before_killwait"),
    pytest.param(job("COMPLETING", end_time=ENDED), True, 12, 0.0, id="r5_3_a_late_pod_drains_now"),
    pytest.param(job("COMPLETING", end_time=ENDED), False, 12, None, id="r5_3_an_unbound_pod_drains_nothing"),
    pytest.param(
        job("CANCELLED", end_time=ENDED), True, 12, None, id="r5_3_a_job_over_and_freed_drains_nothing"
    ),
    pytest.param(job("COMPLETING"), True, 12, None, id="r5_3_no_end_time_no_deadline"),
]


@pytest.mark.parametrize(("the_job", "bound", "kill_wait", "due"), DRAINS)
def test_when_a_node_must_be_drained(
    the_job: SlurmJob, bound: bool, kill_wait: int, due: float | None
) -> None:
    assert drains.drain_due(the_job, bound, kill_wait, NOW) == due


# -- the allocation a Pod is bound to (R4.3, issue #12) ---------------------------------------------
ALLOCATIONS = [
    pytest.param("cpu=2,mem=1G,node=1,billing=2", (), 2, 1024, (), None, id="r12_3_what_was_asked_is_bound"),
    pytest.param("cpu=4,mem=2048M,node=1", (), 2, 1024, (), None, id="r12_3_more_than_asked_is_fine"),
    pytest.param("cpu=1,mem=1G,node=1", (), 2, 1024, (), "1 CPUs for 2", id="r12_3_fewer_cpus_are_rejected"),
    pytest.param(
        "cpu=2,mem=512M,node=1",
        (),
        2,
        1024,
        (),
        "512M of memory for 1024 MiB",
        id="r12_3_less_memory_is_rejected",
    ),
    pytest.param(
        "cpu=2,mem=1G,node=1",
        ("gpu:1(IDX:0)",),
        2,
        1024,
        (("gpu", 2),),
        "1 gpu for 2",
        id="r12_3_fewer_gpus_are_rejected",
    ),
    pytest.param(
        "cpu=2,mem=1G,node=1",
        ("gpu:a100:2(IDX:0-1)",),
        2,
        1024,
        (("gpu", 2),),
        None,
        id="r12_3_typed_gpus_count_as_gpus",
    ),
    pytest.param(
        "cpu=2,mem=1G,gres/gpu=1",
        (),
        2,
        1024,
        (("gpu", 2),),
        "1 gpu for 2",
        id="r12_3_gres_tracked_as_tres_are_judged",
    ),
    pytest.param("", (), 2, 1024, (("gpu", 1),), None, id="r12_3_what_slurm_does_not_report_is_not_judged"),
]


@pytest.mark.parametrize(("tres", "detail", "cpus", "mib", "gres", "problem"), ALLOCATIONS)
def test_the_allocation_checked_before_binding(
    tres: str,
    detail: tuple[str, ...],
    cpus: int,
    mib: int,
    gres: tuple[tuple[str, int], ...],
    problem: str | None,
) -> None:
    found = problems.allocation_problem(job(allocated=tres, gres_detail=detail), cpus, mib, gres)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found and "job 7" in found


def test_r5_2_a_started_job_pending_again_without_a_requeue_is_said_to_be_lost_not_cancelled() -> None:
    """slurmctld restarted from state saved before the start: nobody cancelled anything."""
    reason, words = job("PENDING", started=False).why_ending(NOW)
    assert reason == "PlaceholderJobEnded" and "PENDING again" in words
    assert job("PENDING", started=False, restarts=1).why_ending(NOW)[0] == "Preempted"


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("PREEMPTED", "Preempted"),
        ("TIMEOUT", "TimeLimitReached"),
        ("NODE_FAIL", "PlaceholderJobFailed"),
        ("CANCELLED", "CancelledInSlurm"),
    ],
)
def test_r5_2_a_completing_job_ends_the_way_its_other_state_words_say(how: str, reason: str) -> None:
    """While Slurm completes a job its one word is COMPLETING; how it ended is among its
    other words, which is all a state read carries (no preemption time). The bug this
    catches: a preempted Pod deleted with the reason CancelledInSlurm."""
    assert job("COMPLETING", flags=(how, "COMPLETING"), time_limit_min=None).why_ending(NOW)[0] == reason


# -- cordoned Nodes (R9.4, --drain-cordoned-nodes) --------------------------------------------------
OURS = drains.cordon_drain_reason("n1")
CORDONS = [
    pytest.param(True, node(flags=()), "drain", id="r9_4_a_cordoned_nodes_slurm_node_is_drained"),
    pytest.param(True, node(reason=OURS), None, id="r9_4_drained_once_is_enough"),
    pytest.param(True, node(reason="admin: disk"), None, id="r9_4_an_admins_drain_stands"),
    pytest.param(False, node(reason=OURS), "resume", id="r9_4_uncordoned_sunk_resumes_its_own_drain"),
    pytest.param(False, node(reason="admin: disk"), None, id="r9_4_uncordoned_someone_elses_drain_stays"),
    pytest.param(False, node(flags=()), None, id="r9_4_a_node_in_use_is_left_alone"),
]


@pytest.mark.parametrize(("cordoned", "slurm_node", "action"), CORDONS)
def test_what_a_cordon_does_to_the_slurm_node(
    cordoned: bool, slurm_node: SlurmNode, action: str | None
) -> None:
    assert drains.for_cordon(cordoned, "n1", slurm_node) == action


# -- gangs (R9.1): one heterogeneous job, its components listed one by one -------------------
def component(offset: int, state: str = "RUNNING", *, leader: int = 40, **kw: Any) -> SlurmJob:
    return job(state, job_id=leader + offset, het_job_id=leader, het_job_offset=offset, **kw)


GANG_CLAIMS = [
    pytest.param(
        pod(phase="Succeeded", job_id=41),
        component(1),
        True,
        Claim.KEEP,
        id="r9_1_a_member_that_succeeded_waits_for_the_others",
    ),
    pytest.param(
        pod(phase="Succeeded", job_id=41),
        component(1),
        False,
        Claim.CANCEL,
        id="r9_1_the_last_member_to_succeed_ends_the_group",
    ),
    pytest.param(
        pod(phase="Failed", job_id=41),
        component(1),
        True,
        Claim.CANCEL,
        id="r9_1_a_member_that_failed_ends_the_group",
    ),
    pytest.param(
        pod(deleting=True, job_id=41),
        component(1),
        True,
        Claim.KEEP,
        id="r9_1_a_member_being_deleted_keeps_its_node_and_is_not_signalled",
    ),
    pytest.param(None, component(1), True, Claim.CANCEL, id="r9_1_a_member_gone_ends_the_group"),
    pytest.param(
        None,
        component(1, "PENDING"),
        True,
        Claim.RELEASE_GROUP,
        id="r9_1_a_member_gone_before_the_start_releases_the_others",
    ),
    pytest.param(
        pod(phase="Failed", job_id=41),
        component(0, "PENDING"),
        False,
        Claim.RELEASE_GROUP,
        id="r9_1_a_member_failed_before_the_start_releases_the_others",
    ),
]


def test_r9_1_a_group_is_released_once_for_a_member_that_left() -> None:
    got = claims.for_claim(None, REF, component(1, "PENDING"), cancelled_at=1.0, signalled=False, now=100.0)
    assert got is Claim.KEEP


@pytest.mark.parametrize(("the_pod", "the_job", "others_running", "verdict"), GANG_CLAIMS)
def test_a_gangs_component_claiming_a_member(
    the_pod: dict[str, Any] | None, the_job: SlurmJob, others_running: bool, verdict: Claim
) -> None:
    got = claims.for_claim(
        seen_if(the_pod),
        REF,
        the_job,
        cancelled_at=None,
        signalled=False,
        now=0.0,
        others_running=others_running,
    )
    assert got is verdict


def test_r9_1_a_gang_pending_past_its_timeout_is_timed_out() -> None:
    got = steps.for_pod(
        seen(pod(job_id=41)), component(1, "PENDING"), synced=True, now=NOW, group_timed_out=True
    )
    assert got.step is Step.GROUP_TIMED_OUT


def test_r9_1_a_running_gang_is_never_timed_out() -> None:
    got = steps.for_pod(seen(pod(job_id=41)), component(1), synced=True, now=NOW, group_timed_out=True)
    assert got.step is Step.BIND


GROUP_BINDS = [
    pytest.param([component(0), component(1), component(2)], None, id="r9_1_all_components_run_all_bind"),
    pytest.param(
        [component(0), component(2)],
        "not all of them",
        id="r9_1_a_component_the_listing_lacks_holds_all_back",
    ),
    pytest.param(
        [component(0), component(1, "PENDING")], "not every component", id="r9_1_none_binds_before_all_run"
    ),
    pytest.param(
        [component(0, started=False), component(1)],
        "not started",
        id="r9_1_none_binds_before_the_script_starts",
    ),
]


@pytest.mark.parametrize(("components", "problem"), GROUP_BINDS)
def test_a_gang_binds_all_together_or_not_at_all(components: list[SlurmJob], problem: str | None) -> None:
    got = group_plan.group_bind(components)
    assert got == problem if problem is None else (got is not None and problem in got), got


# -- --placement=pack (R9.2) -----------------------------------------------------------------------
def gpu_node(name: str, used_gpus: int, *, cpus_used: int | None = None, **kw: Any) -> SlurmNode:
    """A node of 8 GPUs and 64 CPUs with `used_gpus` handed out (one CPU each, unless told)."""
    base = SlurmNode(
        name=name,
        state="mixed" if used_gpus else "idle",
        flags=(),
        reason="",
        partitions=("batch",),
        cpus=64,
        alloc_cpus=used_gpus if cpus_used is None else cpus_used,
        memory_mib=16000,
        alloc_memory_mib=64 * used_gpus,
        gres=(("gpu", 8),),
        gres_used=(("gpu", used_gpus),),
    )
    return replace(base, **kw)


def gpu_job(gpus: int, **options: Any) -> PlaceholderJob:
    return PlaceholderJob(
        pod=REF, scheduler="s", cpus=1, memory_mib=64, options=JobOptions(**options), gres=(("gpu", gpus),)
    )


PACKING = [
    pytest.param(
        gpu_job(2),
        [gpu_node("a", 0), gpu_node("b", 5), gpu_node("c", 0)],
        ("a", "c"),
        id="r9_2_a_partly_used_node_with_room_keeps_idle_nodes_out",
    ),
    pytest.param(
        gpu_job(4),
        [gpu_node("a", 0), gpu_node("b", 5)],
        (),
        id="r9_2_no_partly_used_node_has_room_so_nothing_is_left_out",
    ),
    pytest.param(
        gpu_job(8), [gpu_node("a", 0), gpu_node("b", 1)], (), id="r9_2_a_whole_node_pod_keeps_every_node"
    ),
    pytest.param(
        gpu_job(1), [gpu_node("a", 0), gpu_node("b", 0)], (), id="r9_2_an_idle_cluster_is_left_to_slurm"
    ),
    pytest.param(
        gpu_job(1),
        [gpu_node("a", 0), gpu_node("b", 1, cpus_used=64)],
        (),
        id="r9_2_a_node_out_of_cpus_has_no_room_whatever_its_gpus",
    ),
    pytest.param(
        gpu_job(1),
        [gpu_node("a", 0), gpu_node("b", 1, alloc_memory_mib=16000)],
        (),
        id="r9_2_a_node_out_of_memory_has_no_room",
    ),
    pytest.param(
        gpu_job(1),
        [gpu_node("a", 0), gpu_node("b", 1, flags=("DRAIN",))],
        (),
        id="r9_2_a_draining_node_is_no_place_to_pack",
    ),
    pytest.param(
        gpu_job(1, excluded_nodes=("b",)),
        [gpu_node("a", 0), gpu_node("b", 1)],
        (),
        id="r9_2_a_node_the_pod_excludes_is_no_place_to_pack",
    ),
    pytest.param(
        gpu_job(1, partition="other"),
        [gpu_node("a", 0, partitions=("other",)), gpu_node("b", 1)],
        (),
        id="r9_2_a_node_outside_the_pods_partition_is_no_place_to_pack",
    ),
    pytest.param(
        gpu_job(1, required_nodes=("a",)),
        [gpu_node("a", 0), gpu_node("b", 1)],
        (),
        id="r9_2_a_pod_naming_its_node_is_left_alone",
    ),
    pytest.param(
        gpu_job(1, constraints="h100"),
        [gpu_node("a", 0), gpu_node("b", 1)],
        (),
        id="r9_2_a_pod_asking_for_features_is_left_to_slurm",
    ),
    pytest.param(
        replace(gpu_job(2), gres=(("gpu:h100", 2),)),
        [gpu_node("a", 0), gpu_node("b", 1, gres=(("gpu:a100", 8),), gres_used=(("gpu:a100", 1),))],
        (),
        id="r9_2_free_gpus_of_another_type_are_no_room",
    ),
    pytest.param(
        replace(gpu_job(0), gres=()),
        [gpu_node("a", 0), gpu_node("b", 3)],
        ("a",),
        id="r9_2_a_cpu_pod_packs_too",
    ),
]


@pytest.mark.parametrize(("the_job", "nodes", "left_out"), PACKING)
def test_which_nodes_a_packed_job_leaves_out(
    the_job: PlaceholderJob, nodes: list[SlurmNode], left_out: tuple[str, ...]
) -> None:
    assert packing.pack(the_job, nodes).left_out == left_out


def test_r9_2_only_idle_nodes_are_left_out_and_slurm_picks_among_the_partly_used() -> None:
    nodes = [gpu_node("a", 0), gpu_node("b", 5), gpu_node("c", 1), gpu_node("d", 7)]
    assert packing.pack(gpu_job(2), nodes) == packing.Packing(left_out=("a",), towards=("b", "c"))


def test_r9_2_jobs_steered_to_a_node_count_there_until_the_next_listing() -> None:
    """A burst of Pods between two listings: once the partly used node is full in the
    scheduler's view, the idle nodes are no longer kept out."""
    nodes = [gpu_node("a", 0), gpu_node("b", 4)]
    for _ in range(2):
        steered = packing.pack(gpu_job(2), nodes)
        assert steered == packing.Packing(left_out=("a",), towards=("b",))
        nodes = [n.taking(1, 64, (("gpu", 2),)) if n.name in steered.towards[:1] else n for n in nodes]
    assert (nodes[1].free_gres("gpu"), nodes[1].alloc_cpus) == (0, 6)
    assert packing.pack(gpu_job(2), nodes) == packing.Packing()


def test_r9_2_a_packed_job_waits_its_patience_out_before_widening() -> None:
    pending = job("PENDING", reason="Resources", submit_time=int(NOW) - 2)
    got = steps.for_pod(seen(pod()), pending, synced=True, now=NOW, widen_after=packing.PACK_PATIENCE_S)
    assert got.step is Step.WAIT
    assert got.after == pytest.approx(packing.PACK_PATIENCE_S - 2)


def test_r9_2_a_packed_job_still_waiting_after_its_patience_is_widened() -> None:
    pending = job("PENDING", reason="Resources", submit_time=int(NOW) - 6)
    got = steps.for_pod(seen(pod()), pending, synced=True, now=NOW, widen_after=packing.PACK_PATIENCE_S)
    assert got.step is Step.WIDEN


def test_r9_2_a_pending_job_leaving_out_only_what_the_pod_rules_out_is_only_reported() -> None:
    pending = job("PENDING", reason="Resources", submit_time=int(NOW) - 6)
    got = steps.for_pod(seen(pod()), pending, synced=True, now=NOW, widen_after=None)
    assert got.step is Step.REPORT_PENDING


def test_r9_4_a_pending_job_leaving_out_nodes_usable_again_is_widened_at_once() -> None:
    pending = job("PENDING", reason="Resources", submit_time=int(NOW) - 1)
    got = steps.for_pod(seen(pod()), pending, synced=True, now=NOW, widen_after=0.0)
    assert got.step is Step.WIDEN


def test_r8_2_a_submission_with_no_answer_is_not_sent_again_before_a_listing_could_show_its_job() -> None:
    assert steps.unanswered_wait(100.0, 102.0, 3.0)  # the newest listing may predate the job
    assert not steps.unanswered_wait(100.0, 103.5, 3.0)  # a later listing did not show it
    assert not steps.unanswered_wait(0.0, 0.0, 3.0)  # nothing went unanswered


@pytest.mark.parametrize(
    ("manifest", "held"),
    [
        pytest.param(pod(job_id=7, node="n1", phase="Running"), True, id="r5_1-its-running-pod"),
        pytest.param(pod(job_id=7, node="n1", deleting=True), True, id="r5_1-its-terminating-pod"),
        pytest.param(pod(job_id=7), True, id="r5_1-its-pod-not-yet-bound-may-be-bound"),
        pytest.param(pod(job_id=None, node="n1"), True, id="r8_2-a-bound-pod-naming-no-job-yet"),
        pytest.param(pod(job_id=None), False, id="r9_1-a-released-members-unbound-pod"),
        pytest.param(pod(job_id=8, node="n1"), False, id="r5_1-a-pod-given-another-job"),
        pytest.param(pod(job_id=7, node="n1", phase="Succeeded"), False, id="r5_1-a-finished-pod"),
    ],
)
def test_whether_a_pod_still_holds_its_job(manifest: dict[str, Any], held: bool) -> None:
    """Catches a placeholder held to KillWait (and its node drained) for a gang member whose
    group was given a new job: unbound and naming no job, it runs nothing on the old one."""
    assert claims.holds_job(seen(manifest), REF, 7) is held
