"""Gangs (R9.1) through the Pod controller on in-memory Kubernetes and Slurm: a PodGroup's
members get one heterogeneous job, are bound together or not at all, and are given back
their freedom when the group cannot start. Named after the requirement checked."""

from __future__ import annotations

import time

import pytest

from sunk.kube.client import KubeError
from sunk.scheduler.decide import steps
from sunk.scheduler.translate import gang
from sunk.slurm.errors import SlurmNoAnswer, SlurmUnavailable
from tests.fakes.clock import FakeClock
from tests.fakes.scheduler_world import PREFIX, World, pod

A, B = "ns/a", "ns/b"


def member(name: str) -> dict:
    return pod(name, labels={gang.GROUP_LABEL: "g"})


def cluster(min_member: int = 2, timeout_s: int | None = None, clock: FakeClock | None = None) -> World:
    world = World(clock=clock or FakeClock())
    world.add_node("n1", slurm_node="sn-1")
    world.add_node("n2", slurm_node="sn-2")
    world.add_podgroup("g", min_member, timeout_s)
    return world


async def submitted(timeout_s: int | None = None, clock: FakeClock | None = None) -> World:
    """Members a and b of PodGroup g (minMember 2): job 100 (a's component) + 101 (b's)."""
    world = cluster(timeout_s=timeout_s, clock=clock)
    world.create(member("a"))
    world.create(member("b"))
    await world.reconcile(A)
    assert (world.job_id(A), world.job_id(B)) == (100, 101)
    return world


def run(world: World, *, started: bool = True) -> None:
    """Slurm starts both components; only the first runs the script that marks the job started."""
    world.slurm.start(100, "sn-1", started=started)
    world.slurm.start(101, "sn-2", started=False)


async def bound() -> World:
    world = await submitted()
    run(world)
    await world.reconcile(A)
    assert nodes(world) == ["n1", "n2"]
    return world


def nodes(world: World) -> list[str | None]:
    return [world.pod(key)["spec"].get("nodeName") for key in (A, B)]


def annotation(world: World, key: str, name: str) -> str | None:
    return (world.pod(key)["metadata"].get("annotations") or {}).get(PREFIX + name)


def deleted(world: World, key: str) -> bool:
    return ("delete_pod", key) in world.kube.calls


def aged(world: World, job_id: int, seconds: float) -> None:
    world.slurm.raw_jobs[job_id]["submit_time"] = {"set": True, "number": int(time.time() - seconds)}


# -- waiting for the group -------------------------------------------------------------------------
async def test_r9_1_a_group_short_of_min_member_waits_and_submits_nothing() -> None:
    world = cluster()
    world.create(member("a"))
    await world.reconcile(A)
    assert world.slurm.submitted() == []
    condition = world.condition(A) or {}
    assert condition.get("reason") == "WaitingForPodGroup"
    assert "PodGroup ns/g needs 2 members" in condition.get("message", "")


async def test_r9_1_a_member_whose_podgroup_is_missing_waits_naming_it() -> None:
    world = cluster()
    del world.kube.objects[gang.path("ns", "g")]
    world.create(member("a"))
    world.create(member("b"))
    await world.reconcile(A)
    assert world.slurm.submitted() == []
    condition = world.condition(A) or {}
    assert condition.get("reason") == "WaitingForPodGroup"
    assert "PodGroup ns/g does not exist" in condition.get("message", "")


async def test_r9_1_a_waiting_member_gets_one_failed_scheduling_event_however_many_members_arrive() -> None:
    world = cluster(min_member=3)
    world.create(member("a"))
    await world.reconcile(A)
    world.create(member("b"))
    await world.reconcile(A)
    await world.reconcile(A)
    assert "2 waiting (a, b)" in (world.condition(A) or {}).get("message", "")
    assert world.kube.reasons("a") == ["FailedScheduling"]


# -- one job for the group -------------------------------------------------------------------------
async def test_r9_1_a_complete_group_gets_one_heterogeneous_job_with_a_component_per_member() -> None:
    world = await submitted()
    (submission,) = [call[2] for call in world.slurm.calls if call[0] == "submit"]
    assert len(submission.body["jobs"]) == 2
    assert [world.slurm.raw_jobs[i]["het_job_offset"] for i in (world.job_id(A), world.job_id(B))] == [0, 1]
    assert world.kube.reasons("a") == world.kube.reasons("b") == ["PlaceholderSubmitted"]


async def test_r9_1_a_group_job_waiting_past_the_transient_window_writes_no_second_submission_event() -> None:
    world = await submitted()
    for job_id in (100, 101):
        world.slurm.wait(job_id, "Resources")
        aged(world, job_id, steps.TRANSIENT_S + 1)
    await world.reconcile(A)
    await world.reconcile(B)
    assert world.kube.reasons("a") == world.kube.reasons("b") == ["PlaceholderSubmitted"]
    assert (world.condition(A) or {}).get("reason") == "PendingInSlurm"


async def test_r9_1_a_member_beyond_a_submitted_group_gets_a_job_of_its_own() -> None:
    world = await submitted()
    key = world.create(member("c"))
    await world.reconcile(key)
    assert world.slurm.submitted() == [100, 102]
    assert "het_job_id" not in world.slurm.raw_jobs[102]


async def test_r11_3_slurm_unavailable_on_a_group_submit_is_said_on_every_member_and_raised() -> None:
    world = cluster()
    world.create(member("a"))
    world.create(member("b"))
    world.slurm.fail("submit", SlurmUnavailable("connection refused"))
    with pytest.raises(SlurmUnavailable):
        await world.reconcile(A)
    assert [(world.condition(key) or {}).get("reason") for key in (A, B)] == ["SlurmUnavailable"] * 2


async def test_r8_2_an_api_server_down_after_a_group_submit_fails_the_pass_and_the_retry_adopts() -> None:
    world = cluster()
    world.create(member("a"))
    world.create(member("b"))
    world.kube.fail("patch_pod")
    with pytest.raises(KubeError):
        await world.reconcile(A)
    await world.reconcile(A, listing=False)
    await world.reconcile(B, listing=False)
    assert world.slurm.submitted() == [100]
    assert (world.job_id(A), world.job_id(B)) == (100, 101)


async def test_r8_2_an_unanswered_group_submit_is_not_sent_again_before_a_listing_could_show_it() -> None:
    world = cluster()
    world.create(member("a"))
    world.create(member("b"))
    world.slurm.fail("submit", SlurmNoAnswer("read timeout"))
    with pytest.raises(SlurmNoAnswer):
        await world.reconcile(A)
    outcome = await world.reconcile(B)
    assert world.slurm.submitted() == []
    assert outcome.requeue_after == 1


async def test_r8_2_a_group_submit_slurm_carried_out_without_answering_is_adopted_by_each_member() -> None:
    world = cluster()
    world.create(member("a"))
    world.create(member("b"))
    world.slurm.lost_answers = 1
    with pytest.raises(SlurmNoAnswer):
        await world.reconcile(A)
    await world.reconcile(A)
    await world.reconcile(B)
    assert world.slurm.submitted() == [100]
    assert (world.job_id(A), world.job_id(B)) == (100, 101)


# -- binding all members together ------------------------------------------------------------------
async def test_r9_1_no_member_is_bound_before_every_component_runs() -> None:
    world = await submitted()
    world.slurm.start(100, "sn-1")
    await world.reconcile(A)
    await world.reconcile(B)
    assert nodes(world) == [None, None]
    assert world.slurm.cancelled() == []


async def test_r9_1_no_member_is_bound_before_the_groups_script_has_started() -> None:
    world = await submitted()
    run(world, started=False)
    await world.reconcile(A)
    await world.reconcile(B)
    assert nodes(world) == [None, None]


async def test_r9_1_every_member_is_bound_in_one_pass_once_the_group_runs_and_its_script_started() -> None:
    world = await submitted()
    run(world)
    await world.reconcile(B)
    assert nodes(world) == ["n1", "n2"]
    assert "all members of PodGroup ns/g together" in world.kube.notes("Scheduled")[0]


async def test_r9_1_a_member_whose_node_is_cordoned_at_bind_time_leaves_every_member_unbound() -> None:
    world = await submitted()
    world.cordon("n2")
    run(world)
    await world.reconcile(A)
    assert nodes(world) == [None, None]


async def test_r9_1_a_rejected_placement_cancels_the_groups_job_and_releases_its_members() -> None:
    world = await submitted()
    world.cordon("n2")
    run(world)
    await world.reconcile(A)
    assert world.slurm.cancelled() == [(100, None)]
    assert (world.job_id(A), world.job_id(B)) == (None, None)
    assert "PlacementRejected" in world.kube.reasons("a")


async def test_r9_1_the_next_job_of_a_rejected_group_keeps_the_member_off_the_node_refused() -> None:
    world = await submitted()
    world.slurm.drain_as_admin("sn-2")
    run(world)
    await world.reconcile(A)
    assert (annotation(world, A, "avoid-nodes"), annotation(world, B, "avoid-nodes")) == (None, "sn-2")
    await world.reconcile(A)
    assert (world.job_id(A), world.job_id(B)) == (102, 103)
    assert world.slurm.raw_jobs[103]["excluded_nodes"] == "sn-2"


# -- giving the members back before the start ------------------------------------------------------
async def test_r9_1_a_group_pending_past_its_timeout_has_its_job_cancelled_and_its_members_kept() -> None:
    world = await submitted(timeout_s=60)
    aged(world, 100, 61)
    await world.reconcile(A)
    assert world.slurm.cancelled() == [(100, None)]
    assert not deleted(world, A) and not deleted(world, B)
    assert (world.job_id(A), world.job_id(B)) == (None, None)
    assert "PodGroupTimedOut" in world.kube.reasons("b")
    assert (world.condition(B) or {}).get("reason") == "WaitingForPodGroup"


async def test_r9_1_a_timed_out_group_is_submitted_again_only_once_its_timeout_has_passed(
    clock: FakeClock,
) -> None:
    world = await submitted(timeout_s=60, clock=clock)
    aged(world, 100, 61)
    await world.reconcile(A)
    await world.reconcile(A)
    assert world.slurm.submitted() == [100]
    clock.advance(60)
    await world.reconcile(A)
    assert world.slurm.submitted() == [100, 102]


async def test_r9_1_a_member_deleted_before_the_start_cancels_the_job_and_the_others_wait() -> None:
    world = await submitted()
    world.remove(B)
    await world.reconcile(B)
    assert world.slurm.cancelled() == [(100, None)]
    assert not deleted(world, A)
    assert world.job_id(A) is None
    assert "PodGroupReleased" in world.kube.reasons("a")


async def test_r9_1_the_first_member_deleted_before_the_start_releases_the_others_too() -> None:
    world = await submitted()
    world.remove(A)
    await world.reconcile(A)
    assert world.slurm.cancelled() == [(100, None)]
    assert world.job_id(B) is None
    assert "PodGroupReleased" in world.kube.reasons("b")


async def test_r9_1_after_a_member_left_the_others_are_not_submitted_without_it() -> None:
    world = await submitted()
    world.remove(B)
    await world.reconcile(B)
    await world.reconcile(A)
    assert world.slurm.submitted() == [100]
    assert "1 waiting (a)" in (world.condition(A) or {}).get("message", "")


# -- the group lives and dies as one job -----------------------------------------------------------
async def test_r9_1_scancel_of_the_groups_job_deletes_every_member() -> None:
    world = await bound()
    world.slurm.end_group(100)
    await world.reconcile(A)
    await world.reconcile(B)
    assert deleted(world, A) and deleted(world, B)
    assert world.kube.reasons("b")[-1] == "CancelledInSlurm"


async def test_r9_1_a_component_ended_alone_gets_the_whole_groups_job_cancelled() -> None:
    world = await bound()
    world.slurm.end(101)
    await world.reconcile(B)
    assert world.slurm.cancelled() == [(100, None)]
    await world.reconcile(A)
    assert deleted(world, A) and deleted(world, B)


async def test_r9_1_a_member_being_deleted_while_the_group_runs_leaves_the_job_alone() -> None:
    world = await bound()
    world.kube.delete_by_user("ns", "b")
    await world.reconcile(B)
    assert world.slurm.cancelled() == []


async def test_r9_1_a_running_members_pod_gone_ends_the_groups_job_through_its_leader() -> None:
    world = await bound()
    world.remove(B)
    await world.reconcile(B)
    assert world.slurm.cancelled() == [(100, None)]


async def test_r9_1_a_member_that_failed_ends_the_groups_job() -> None:
    world = await bound()
    world.finish(B, "Failed")
    await world.reconcile(B)
    assert world.slurm.cancelled() == [(100, None)]
    await world.reconcile(A)
    assert deleted(world, A)


async def test_r9_1_a_member_that_succeeded_waits_for_the_others() -> None:
    world = await bound()
    world.finish(B)
    await world.reconcile(B)
    assert world.slurm.cancelled() == []
