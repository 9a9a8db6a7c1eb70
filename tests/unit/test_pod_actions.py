"""The Pod controller's multi-write steps, decided without I/O: a job Slurm ends (R5.2,
R5.3) and a bound Pod whose job moved (R8.2). One row per case."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sunk.kube import events as ev
from sunk.runtime.actions import CancelJob, Drain, Event
from sunk.scheduler.decide.actions import ConfirmReverted, DeletePod, Plan
from sunk.scheduler.decide.drains import DRAIN_MARGIN_S
from sunk.scheduler.decide.pod_actions import for_bound_pod, for_ending_job
from tests.unit.test_decide import NOW, job, pod

KILL_WAIT = 30


def ending(
    the_job: object,
    *,
    the_pod: object = None,
    leader: object = None,
    cancelled: bool = False,
    deleting: bool = False,
    drained: bool = False,
    now: float = NOW,
) -> Plan:
    return for_ending_job(
        the_pod or pod(node="n1"),  # type: ignore[arg-type]
        the_job,  # type: ignore[arg-type]
        leader,  # type: ignore[arg-type]
        cancelled_for_pod=cancelled,
        being_deleted=deleting,
        drained=drained,
        kill_wait_s=KILL_WAIT,
        now=now,
    )


def kinds(plan: Plan) -> list[str]:
    return [type(action).__name__ for action in plan.actions]


def test_r5_2_a_cancelled_job_deletes_its_pod_saying_why() -> None:
    plan = ending(job("CANCELLED", end_time=int(NOW), nodes=("sn-1",)))
    assert kinds(plan) == ["Event", "DeletePod"]
    explain = plan.actions[0]
    assert isinstance(explain, Event)
    assert explain.reason == "CancelledInSlurm"
    assert explain.note == "Slurm job 7 on sn-1 was cancelled in Slurm; deleting the Pod"


def test_r5_2_a_pod_whose_containers_finished_stays_for_its_controller() -> None:
    assert ending(job("CANCELLED"), the_pod=pod(node="n1", phase="Succeeded")) == Plan()


def test_r5_2_a_pod_already_being_deleted_is_not_deleted_again() -> None:
    assert kinds(ending(job("COMPLETING", end_time=int(NOW)), deleting=True)) == []


def test_r6_1_a_requeued_job_is_cancelled_so_it_never_comes_back_for_a_gone_pod() -> None:
    plan = ending(job("REQUEUED"))
    assert plan.actions[0] == CancelJob(7, "Slurm requeued it; its Pod goes")
    assert kinds(plan) == ["CancelJob", "Event", "DeletePod"]


def test_r6_1_a_requeued_job_is_cancelled_only_once() -> None:
    assert kinds(ending(job("REQUEUED"), cancelled=True)) == ["Event", "DeletePod"]


def test_r9_1_a_gang_component_ending_alone_ends_the_whole_job() -> None:
    component = job("CANCELLED", het_job_id=5, het_job_offset=1)
    plan = ending(component, leader=job("RUNNING", job_id=5))
    assert plan.actions[0] == CancelJob(5, "its component 7 ended")


def test_r9_1_a_leader_already_ending_is_not_cancelled_again() -> None:
    component = job("CANCELLED", het_job_id=5, het_job_offset=1)
    assert kinds(ending(component, leader=job("CANCELLED", job_id=5))) == ["Event", "DeletePod"]


def test_r5_3_a_pod_still_there_before_kill_wait_is_looked_at_again_in_time() -> None:
    plan = ending(job("COMPLETING", end_time=int(NOW) - 10), deleting=True)
    assert plan == Plan(after=pytest.approx(KILL_WAIT - DRAIN_MARGIN_S - 10))


def test_r5_3_a_pod_still_there_at_kill_wait_drains_the_node_naming_itself() -> None:
    plan = ending(job("COMPLETING", end_time=int(NOW) - KILL_WAIT), deleting=True)
    assert plan.actions == (Drain("sn-1", "sunk: Pod ns/web still running at KillWait (job 7)"),)


def test_r5_3_a_node_is_drained_once_per_job() -> None:
    assert ending(job("COMPLETING", end_time=int(NOW) - KILL_WAIT), deleting=True, drained=True) == Plan()


def test_r5_3_an_unbound_pod_never_drains_a_node() -> None:
    plan = ending(job("COMPLETING", end_time=int(NOW) - KILL_WAIT), the_pod=pod(), deleting=True)
    assert plan == Plan()


@pytest.mark.parametrize(
    ("the_job", "readoptable"),
    [
        pytest.param(
            replace(job("RUNNING"), restarts=1), True, id="r8_2_slurm_requeued_it_and_chose_another_node"
        ),
        pytest.param(job("RUNNING"), False, id="r8_2_a_podgroups_member_or_a_pod_being_deleted"),
    ],
)
def test_r8_2_a_bound_pod_whose_job_slurm_moved_goes(the_job: object, readoptable: bool) -> None:
    plan = for_bound_pod(pod(node="n1"), the_job, {"n2"}, readoptable=readoptable)  # type: ignore[arg-type]
    assert kinds(plan) == ["Event", "DeletePod"]
    explain = plan.actions[0]
    assert isinstance(explain, Event) and explain.reason == ev.JOB_MOVED
    assert "now runs on sn-1, hosted by n2, not on this Pod's Node n1" in explain.note


def test_issue53_a_job_started_again_elsewhere_without_a_requeue_is_read_again_to_be_readopted() -> None:
    """Catches: a running Pod deleted (PlaceholderJobMoved) because a slurmctld that lost
    the start of its job started it again on another node: Slurm did not move it for a
    reason, it lost the start, as with a job PENDING again."""
    plan = for_bound_pod(pod(node="n1"), job("RUNNING"), {"n2"}, readoptable=True)
    assert plan == Plan((ConfirmReverted(7),))


@pytest.mark.parametrize(
    ("the_job", "hosts"),
    [
        pytest.param(job("RUNNING"), {"n1"}, id="r8_2_still_where_it_was"),
        pytest.param(job("RUNNING"), set(), id="r8_2_no_node_hosts_it_now_nothing_to_judge"),
        pytest.param(job("COMPLETING"), {"n2"}, id="r8_2_an_ending_job_is_left_to_the_ending_path"),
        pytest.param(replace(job("RUNNING"), nodes=("sn-1", "sn-2")), {"n2"}, id="r8_2_several_nodes"),
    ],
)
def test_a_bound_pod_stays(the_job: object, hosts: set[str]) -> None:
    assert for_bound_pod(pod(node="n1"), the_job, hosts, readoptable=True) == Plan()  # type: ignore[arg-type]


def test_deleting_comes_after_saying_why() -> None:
    plan = ending(job("TIMEOUT", end_time=int(NOW)))
    assert plan.actions[1:] == (DeletePod(),)


def test_the_pure_decisions_name_the_same_reasons_the_events_module_does() -> None:
    from sunk.scheduler.decide import submission

    assert (submission.INVALID, submission.FORBIDDEN, submission.STATIC_CPU) == (
        ev.INVALID,
        ev.FORBIDDEN,
        ev.STATIC_CPU,
    )
    assert (submission.IGNORED_ANNOTATION, submission.RULE_NOT_HONOURED) == (
        ev.IGNORED_ANNOTATION,
        ev.RULE_NOT_HONOURED,
    )
