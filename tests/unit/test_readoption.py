"""A running Pod outlives Slurm's own state loss (R8.2, issue #34): a bound Pod whose job
slurmctld lost in a restart gets a new job on its own node instead of being deleted, and
every case in doubt still ends the Pod, saying why. Through the Pod controller on
in-memory Kubernetes and Slurm; each test names the bug it catches."""

from __future__ import annotations

import asyncio
import copy

import pytest

from sunk.kube.client import KubeError
from sunk.scheduler.decide.actions import Readopt
from sunk.scheduler.jobs import MIN_JOB_AGE_S
from sunk.scheduler.pod import readopting
from sunk.scheduler.pod.memory import WRITE_UNSEEN_RECHECK_S
from sunk.scheduler.translate import PodRef, gang
from sunk.slurm.dataparser import DataParser
from sunk.slurm.dialect import Submission
from sunk.slurm.errors import SlurmRejected, SlurmUnavailable
from sunk.slurm.models import ACTIVE_STATES, SlurmJob
from tests.fakes.clock import FakeClock
from tests.fakes.scheduler_world import World, pod
from tests.fakes.slurm import FakeSlurm, FakeSubmitResult

KEY = "ns/web"
WEB = PodRef("ns", "web", "uid-web")


class CannotChoose(DataParser):
    """A REST API whose job description cannot name a job ID (Slurm 22.05's v0.0.38)."""

    chooses_job_ids = False


def two_nodes(*, ids_chosen: bool = True, clock: FakeClock | None = None) -> World:
    """Two Nodes, each hosting one Slurm node; `ids_chosen`: the scheduler can ask Slurm for
    a job's ID."""
    slurm = FakeSlurm() if ids_chosen else FakeSlurm(dialect=CannotChoose("v0.0.42"))
    world = World(clock=clock or FakeClock(), slurm=slurm)
    world.add_node("n1", slurm_node="sn-1")
    world.add_node("n2", slurm_node="sn-2")
    return world


async def bound(world: World, key: str = KEY) -> None:
    """The Pod's job 100 runs on sn-1 and a listing has seen it so; the Pod is on n1."""
    await world.reconcile(world.create(pod()))
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert world.pod(key)["spec"]["nodeName"] == "n1"


def submissions(world: World) -> list[dict]:
    return [call[2].body["job"] for call in world.slurm.calls if call[0] == "submit"]


def deleted(world: World) -> bool:
    return ("delete_pod", KEY) in world.kube.calls


def active_jobs(world: World) -> list[int]:
    return [i for i, raw in world.slurm.raw_jobs.items() if raw["job_state"][0] in ACTIVE_STATES]


async def test_r8_2_a_job_slurmctld_lost_in_a_restart_is_readopted_on_the_pods_node() -> None:
    """Catches: a running Pod deleted because slurmctld came back without its job."""
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)  # and its counter hands 100 out again
    await world.reconcile(KEY)
    assert not deleted(world)
    assert world.job_id(KEY) == 101
    new = submissions(world)[-1]
    assert (new["required_nodes"], new["hold"], new["job_id"]) == (["sn-1"], True, 101)
    assert ("release_job", 101) in world.slurm.calls
    assert world.slurm.raw_jobs[101]["job_state"] == ["RUNNING"]
    note = world.kube.notes("PlaceholderReadopted")[0]
    assert "job 100" in note and "job 101" in note and "sn-1" in note
    await world.reconcile(KEY)  # the next pass keeps the Pod and its new job
    assert (deleted(world), active_jobs(world), world.slurm.drains()) == (False, [101], [])


async def test_r8_2_a_job_bound_on_its_started_read_and_lost_before_any_listing_is_readopted() -> None:
    """Catches: evidence taken from listings only. Most Pods are bound on the read of their
    job that the placeholder's `started` call brings, and slurmctld loses the jobs of its
    last seconds: the first fault run deleted such Pods for want of evidence."""
    world = two_nodes()
    await world.reconcile(world.create(pod()))  # job 100, listed PENDING
    world.slurm.start(100, "sn-1")
    found = await world.slurm.job(100)
    assert found is not None
    world.index.observe(WEB, found)  # the hook call's read
    await world.reconcile(KEY, listing=False)
    assert world.pod(KEY)["spec"]["nodeName"] == "n1"
    world.slurm.restart_without(100)
    await world.reconcile(KEY)
    assert world.job_id(KEY) == 101 and not deleted(world)


async def test_issue53_a_counter_rolled_back_by_several_jobs_costs_one_submission_and_no_cancel() -> None:
    """Catches: cancel-and-resubmit until the ID is new, which never outruns a counter
    slurmctld rolled back by more jobs than it tries (a fault run: 41 tries, every one "has
    an ID handed out before", no Pod re-adopted). The new job asks for an ID above every one
    seen, and gets it at once."""
    world = two_nodes()
    await bound(world)
    world.slurm.next_id = 115  # users' jobs 101-115, the last one listed: the highest ID seen
    await world.slurm.submit(Submission({"job": {"name": "a user's job"}}))
    await world.list_jobs()
    world.slurm.restart_without(100, 115, next_id=100)  # the counter is back at 100
    await world.reconcile(KEY)
    assert not deleted(world) and world.job_id(KEY) == 116
    assert world.slurm.submitted() == [100, 115, 116] and world.slurm.cancelled() == []
    assert submissions(world)[-1]["job_id"] == 116


async def test_issue53_where_slurm_does_not_let_the_scheduler_choose_a_reused_id_is_cancelled_held() -> None:
    """Catches: the new job launched under the ID of the lost job whose processes still run
    on the node (slurmd refuses it, "Duplicate jobid", and Slurm drains the node), where the
    scheduler cannot ask for an ID (Slurm 22.05's REST API, a token slurmctld does not let
    choose): there it is cancelled, held, and another submitted."""
    world = two_nodes(ids_chosen=False)
    await bound(world)
    world.slurm.restart_without(100)  # IDs are handed out again from 100
    await world.reconcile(KEY)
    assert world.slurm.submitted()[-2:] == [100, 101]
    assert (100, None) in world.slurm.cancelled()
    assert ("release_job", 100) not in world.slurm.calls  # never let run
    assert world.job_id(KEY) == 101 and not deleted(world)
    assert world.slurm.raw_jobs[101]["job_state"] == ["RUNNING"]


async def test_r8_2_a_new_job_given_an_id_no_listing_saw_run_is_not_let_run_either() -> None:
    """Catches: a check of the new ID against the jobs seen vanishing only. A fault run
    found a job lost before any listing saw it run; the re-adopted job got its ID and Slurm
    drained the node ("Duplicate jobid"). Any ID handed out before is one handed out again
    (where the scheduler cannot ask for one)."""
    world = two_nodes(ids_chosen=False)
    await bound(world)
    world.slurm.next_id = 105  # jobs 101-104 were submitted, started and lost unseen
    await world.reconcile(world.create(pod("other")))  # job 105: the highest ID seen
    world.slurm.restart_without(100, 105, next_id=102)
    await world.reconcile(KEY)
    assert world.slurm.submitted()[-5:] == [102, 103, 104, 105, 106]
    assert all((i, None) in world.slurm.cancelled() for i in (102, 103, 104, 105))
    assert world.job_id(KEY) == 106 and not deleted(world)


async def test_r8_2_jobs_other_workers_submit_meanwhile_do_not_make_the_new_id_look_reused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: the new ID compared with the highest seen after its own submission. Right
    after a slurmctld restart other Pods are submitted at the same time and get higher IDs;
    each try then looked reused and the Pod was deleted after ten."""
    world = two_nodes(ids_chosen=False)
    await bound(world)
    world.slurm.restart_without(100, next_id=200)
    submit = world.slurm.submit

    async def while_another_worker_submits(held: Submission) -> FakeSubmitResult:
        answer = await submit(held)
        world.index.expect_submitted(PodRef("ns", "other", "uid-other"), answer.job_id + 1, "other", "")
        return answer

    monkeypatch.setattr(world.slurm, "submit", while_another_worker_submits)
    await world.reconcile(KEY)
    assert world.job_id(KEY) == 200 and world.slurm.submitted() == [100, 200]


async def test_r8_2_when_every_new_job_gets_an_id_handed_out_before_the_pod_goes_saying_why() -> None:
    """Catches: a loop of submissions, or a job left behind, when the IDs keep colliding
    (where the scheduler cannot ask for one)."""
    world = two_nodes(ids_chosen=False)
    await bound(world)
    world.slurm.restart_without(100, next_id=100 - readopting.TRIES)  # far older state
    await world.reconcile(KEY)
    assert deleted(world)
    assert "an ID it had handed out before" in world.kube.notes("PlaceholderJobEnded")[0]
    assert len(world.slurm.submitted()) == 1 + readopting.TRIES
    tries = world.slurm.submitted()[-readopting.TRIES :]
    assert all(world.slurm.raw_jobs[i]["job_state"] == ["CANCELLED"] for i in tries)


async def test_r8_2_a_lost_job_whose_node_another_job_took_ends_the_pod_naming_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: a Pod kept on a node whose resources Slurm handed to another job meanwhile,
    or its new job left waiting for them."""
    monkeypatch.setattr(readopting, "START_WITHIN_S", 0.3)
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)
    world.slurm.taken.add("sn-1")
    await world.reconcile(KEY)
    assert deleted(world)
    note = world.kube.notes("PlaceholderJobEnded")[0]
    assert "cannot be re-adopted on sn-1" in note and "at once (Resources)" in note
    assert (101, None) in world.slurm.cancelled()
    assert world.kube.notes("PlaceholderReadopted") == []


async def test_r8_2_a_lost_job_waits_until_its_node_has_registered_again_after_the_restart() -> None:
    """Catches: a Pod deleted because its new job could not start on a node slurmctld,
    just restarted, still lists UNKNOWN (its slurmd registers a few seconds later)."""
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)
    world.slurm.raw_nodes["sn-1"]["state"] = ["UNKNOWN"]
    outcome = await world.reconcile(KEY)
    assert (deleted(world), world.slurm.submitted(), outcome.requeue_after) == (False, [100], 1.0)
    world.slurm.raw_nodes["sn-1"]["state"] = ["IDLE"]
    await world.reconcile(KEY)
    assert world.job_id(KEY) == 101 and not deleted(world)


async def test_r8_2_a_lost_job_whose_node_is_drained_ends_the_pod_without_a_new_job() -> None:
    """Catches: a new job queued on a drained node for a Pod that then waits there."""
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)
    world.slurm.drain_as_admin("sn-1", "Duplicate jobid")
    await world.reconcile(KEY)
    assert deleted(world)
    assert "Duplicate jobid" in world.kube.notes("PlaceholderJobEnded")[0]
    assert world.slurm.submitted() == [100]


async def test_r5_2_a_job_cancelled_by_a_user_ends_its_pod_and_is_never_readopted() -> None:
    """Catches: a job Slurm ended for a reason (seen ending, then purged) taken for lost."""
    world = two_nodes()
    await bound(world)
    world.slurm.end(100, "CANCELLED")
    await world.list_jobs()  # the listing sees it ended before the Pod's pass
    del world.slurm.raw_jobs[100]  # and Slurm purges it (a short MinJobAge)
    await world.reconcile(KEY)
    assert deleted(world)
    assert world.slurm.submitted() == [100] and world.kube.notes("PlaceholderReadopted") == []


async def test_r8_2_a_job_last_seen_running_longer_ago_than_min_job_age_is_not_readopted(
    clock: FakeClock,
) -> None:
    """Catches: evidence kept past MinJobAge, by when an ended job may be purged."""
    world = two_nodes(clock=clock)
    await bound(world)
    clock.advance(MIN_JOB_AGE_S + 1)  # no listing for that long (slurmrestd away)
    world.slurm.restart_without(100)
    await world.reconcile(KEY)
    assert deleted(world) and world.slurm.submitted() == [100]


async def test_r8_2_a_readopted_job_gets_only_what_was_left_of_its_time_limit(clock: FakeClock) -> None:
    """Catches: a fresh time limit, which would let the Pod outlive the one it was given."""
    world = two_nodes(clock=clock)
    await world.reconcile(world.create(pod(annotations={"sunk.coreweave.com/timeout": "10"})))
    world.slurm.raw_jobs[100]["time_limit"] = {"set": True, "number": 10}
    world.slurm.start(100, "sn-1")
    await world.reconcile(KEY)
    clock.advance(4 * 60 + 30)
    await world.list_jobs()
    world.slurm.restart_without(100)
    await world.reconcile(KEY)
    assert submissions(world)[-1]["time_limit"] == {"set": True, "number": 6}
    assert world.job_id(KEY) == 101


async def test_r8_2_a_readopted_pod_whose_job_slurm_loses_again_is_readopted_again() -> None:
    """Catches: a second loss handled differently from the first (the new job must count
    as seen running once a listing shows it)."""
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)
    await world.reconcile(KEY)
    await world.reconcile(KEY)  # a listing shows job 200 running
    world.slurm.restart_without(101)
    await world.reconcile(KEY)
    assert world.job_id(KEY) == 102 and not deleted(world)
    assert len(world.kube.notes("PlaceholderReadopted")) == 2


async def test_r8_2_a_pod_gone_while_its_job_is_readopted_leaves_no_job_behind() -> None:
    """Catches: a re-adoption racing the Pod's deletion leaving its new job running."""
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)
    world.kube.fail("patch_pod", KubeError(404, 'pods "web" not found'))
    await world.reconcile(KEY)
    assert (101, None) in world.slurm.cancelled() and active_jobs(world) == []
    assert world.kube.notes("PlaceholderReadopted") == []


async def gang_bound(world: World) -> None:
    """PodGroup g's members a (job 100 on sn-1) and b (101 on sn-2) are bound; a listing saw
    both components run."""
    world.add_podgroup("g", 2)
    for name in ("a", "b"):
        world.create(pod(name, labels={gang.GROUP_LABEL: "g"}))
    await world.reconcile("ns/a")
    world.slurm.start(100, "sn-1")
    world.slurm.start(101, "sn-2", started=False)
    await world.reconcile("ns/a")
    assert world.pod("ns/b")["spec"]["nodeName"] == "n2"


async def test_issue53_a_gang_slurm_lost_is_readopted_whole_with_one_new_job() -> None:
    """Catches: a PodGroup's members always deleted when slurmctld lost their job, or one
    member given a job of its own (the group lives and dies as one job)."""
    world = two_nodes()
    await gang_bound(world)
    world.slurm.restart_without(100, 101)
    await world.reconcile("ns/a")
    assert not any(call[0] == "delete_pod" for call in world.kube.calls)
    body = [call[2].body for call in world.slurm.calls if call[0] == "submit"][-1]
    assert [spec["required_nodes"] for spec in body["jobs"]] == [["sn-1"], ["sn-2"]]
    assert [spec["job_id"] for spec in body["jobs"]] == [102, 103]
    assert (world.job_id("ns/a"), world.job_id("ns/b")) == (102, 103)
    assert len(world.kube.notes("PlaceholderReadopted")) == 2
    await world.reconcile("ns/b")  # b's pass finds the group re-adopted: nothing more
    assert len(world.slurm.submitted()) == 2 and active_jobs(world) == [102, 103]


async def test_issue53_a_members_own_pass_during_its_gangs_readoption_leaves_the_new_job_alone() -> None:
    """Catches: member b's own pass, run between the group's new job's submission and its
    record on the members, cancelling that job as one b does not name (a fault run saw the
    group re-adopted in part, and a whole group deleted)."""
    world = two_nodes()
    await gang_bound(world)
    world.slurm.restart_without(100, 101)
    release = world.slurm.release_job
    passes: list[asyncio.Task[object]] = []

    async def release_while_b_passes(job_id: int) -> None:
        if job_id == 102:
            passes.append(asyncio.create_task(world.reconcile("ns/b")))
            for _ in range(20):  # b's pass settles its claims, then waits for the group's lock
                await asyncio.sleep(0)
        await release(job_id)

    world.slurm.release_job = release_while_b_passes  # type: ignore[method-assign]
    await world.reconcile("ns/a")
    await asyncio.gather(*passes)
    assert not any(call[0] == "delete_pod" for call in world.kube.calls)
    assert (world.job_id("ns/a"), world.job_id("ns/b")) == (102, 103)
    assert active_jobs(world) == [102, 103]


async def test_issue53_a_pass_that_waited_for_its_gangs_lock_never_readopts_an_old_copy() -> None:
    """Catches: a member's pass that decided to re-adopt before another member's pass did
    it, and got the group's lock while the cache still showed the member's lost job,
    re-adopting the group a second time (a fault run saw a member named by two jobs)."""
    world = two_nodes()
    await gang_bound(world)
    stale_b = copy.deepcopy(world.pod("ns/b"))
    world.slurm.restart_without(100, 101)
    await world.reconcile("ns/a")  # a's pass re-adopts the whole group: b names 103
    assert world.job_id("ns/b") == 103
    world.kube.pods.put(stale_b)  # the cache has not shown b's record yet
    waited = await world.pod_controller.group_readoption.readopt(
        stale_b, Readopt(101, "sn-2", None, group="g"), []
    )
    assert waited == WRITE_UNSEEN_RECHECK_S
    assert len(world.slurm.submitted()) == 2 and active_jobs(world) == [102, 103]


async def test_issue53_a_gangs_new_job_slurm_loses_too_is_tried_again_not_the_groups_end() -> None:
    """Catches: every member deleted ("Slurm lost its new job N too") because slurmctld
    restarted again before it saved the group's new job: tried again, whole."""
    world = two_nodes()
    await gang_bound(world)
    world.slurm.restart_without(100, 101)
    release = world.slurm.release_job

    async def released_then_lost(job_id: int) -> None:
        await release(job_id)
        if job_id == 103:  # its last component: then slurmctld restarts without the job
            world.slurm.restart_without(102, 103)
            world.slurm.release_job = release  # type: ignore[method-assign]

    world.slurm.release_job = released_then_lost  # type: ignore[method-assign]
    with pytest.raises(SlurmUnavailable):
        await world.reconcile("ns/a")
    assert not any(call[0] == "delete_pod" for call in world.kube.calls)
    await world.reconcile("ns/a")
    assert not any(call[0] == "delete_pod" for call in world.kube.calls)
    a, b = world.job_id("ns/a"), world.job_id("ns/b")
    assert a is not None and b == a + 1 and a > 103
    assert active_jobs(world) == [a, b]


async def test_issue53_a_gang_whose_job_slurmctld_put_back_to_pending_is_readopted_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: every member of a running PodGroup deleted because a slurmctld restarted
    from older state lists the group's job PENDING again (a fault run deleted seven
    members so): the whole group gets one new job on its members' nodes, and the PENDING
    job, no longer theirs, is cancelled."""
    monkeypatch.setattr(readopting, "START_WITHIN_S", 0.3)
    world = two_nodes()
    await gang_bound(world)
    revert(world, 100)
    revert(world, 101)
    await world.list_jobs()
    await world.reconcile("ns/a")
    assert not any(call[0] == "delete_pod" for call in world.kube.calls)
    body = [call[2].body for call in world.slurm.calls if call[0] == "submit"][-1]
    assert [spec["required_nodes"] for spec in body["jobs"]] == [["sn-1"], ["sn-2"]]
    assert (world.job_id("ns/a"), world.job_id("ns/b")) == (102, 103)
    notes = world.kube.notes("PlaceholderReadopted")
    assert len(notes) == 2 and all("lost the start of" in n for n in notes)
    await world.reconcile("ns/a")
    await world.reconcile("ns/b")
    assert not any(call[0] == "delete_pod" for call in world.kube.calls)
    assert active_jobs(world) == [102, 103]


async def test_issue53_a_gang_with_one_member_on_a_drained_node_loses_every_member() -> None:
    """Catches: half a group re-adopted. One member's node cannot be given back, so none
    is: every member goes, each told why, and no job is submitted."""
    world = two_nodes()
    await gang_bound(world)
    world.slurm.restart_without(100, 101)
    world.slurm.drain_as_admin("sn-2", "Duplicate jobid")
    await world.reconcile("ns/a")
    assert ("delete_pod", "ns/a") in world.kube.calls and ("delete_pod", "ns/b") in world.kube.calls
    notes = world.kube.notes("PlaceholderJobEnded")
    assert len(notes) == 2 and all("whole or not at all" in n and "Duplicate jobid" in n for n in notes)
    assert world.slurm.submitted() == [100]


async def test_issue53_a_users_scancel_of_a_gangs_new_job_ends_every_member(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: a group's new job ended by a user before it ran taken for a failure to
    re-adopt, or re-adopted again: every member ends with it."""
    world = two_nodes()
    await gang_bound(world)
    world.slurm.restart_without(100, 101)
    release = world.slurm.release_job

    async def scancelled_first(job_id: int) -> None:
        world.slurm.end_group(102)  # the user's scancel of the new group job
        await release(job_id)

    monkeypatch.setattr(world.slurm, "release_job", scancelled_first)
    await world.reconcile("ns/a")
    await world.reconcile("ns/b")
    assert ("delete_pod", "ns/a") in world.kube.calls and ("delete_pod", "ns/b") in world.kube.calls
    assert world.kube.reasons("a")[-1] == world.kube.reasons("b")[-1] == "CancelledInSlurm"
    assert len(world.slurm.submitted()) == 2


async def test_issue53_a_users_scancel_of_the_new_job_before_its_release_ends_the_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: a user's cancel taken for the scheduler's own. The user scancels the job
    squeue shows for the Pod (the new one, still held); the scheduler must not submit yet
    another: the Pod ends, saying Slurm cancelled its job."""
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)
    release = world.slurm.release_job

    async def scancelled_first(job_id: int) -> None:
        world.slurm.end(job_id, "CANCELLED")  # the user's scancel
        if world.slurm.raw_jobs[job_id]["job_state"] == ["CANCELLED"]:
            raise SlurmRejected("Slurm refused to release job: Job has already finished", 2020)
        await release(job_id)

    monkeypatch.setattr(world.slurm, "release_job", scancelled_first)
    await world.reconcile(KEY)
    assert deleted(world) and world.kube.reasons()[-1] == "CancelledInSlurm"
    assert world.slurm.submitted() == [100, 101] and world.slurm.cancelled() == []


async def test_issue53_a_users_scancel_of_the_new_job_before_it_starts_ends_the_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: the new job's end, before it started for the Pod, taken for a failure to
    re-adopt (PlaceholderJobEnded) or for the scheduler's own cancel: a user ended it."""
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)
    world.slurm.taken.add("sn-1")  # released, it waits a moment for Resources
    read = world.slurm.job

    async def scancelled_while_pending(job_id: int) -> SlurmJob | None:
        if job_id == 101:
            world.slurm.end(101, "CANCELLED")
        return await read(job_id)

    monkeypatch.setattr(world.slurm, "job", scancelled_while_pending)
    await world.reconcile(KEY)
    assert deleted(world) and world.kube.reasons()[-1] == "CancelledInSlurm"
    assert "new job 101 on sn-1 was cancelled in Slurm" in world.kube.notes("CancelledInSlurm")[0]
    await world.reconcile(KEY)
    assert world.slurm.submitted() == [100, 101]


async def test_issue53_a_users_scancel_of_a_held_job_with_a_reused_id_ends_the_pod() -> None:
    """Catches the fault run's case (where the scheduler cannot ask for an ID): a user
    cancelled the Pod's new job at the moment the scheduler judged its ID handed out before;
    the scheduler took the cancel for its own, gave the Pod yet another job, and the Pod
    outlived its scancel."""
    world = two_nodes(ids_chosen=False)
    await bound(world)
    world.slurm.restart_without(100)
    submit = world.slurm.submit

    async def scancelled_at_once(held: Submission) -> FakeSubmitResult:
        answer = await submit(held)
        world.slurm.end(answer.job_id, "CANCELLED")  # the user's scancel of job 100, again
        return answer

    world.slurm.submit = scancelled_at_once  # type: ignore[method-assign]
    await world.reconcile(KEY)
    assert deleted(world) and world.kube.reasons()[-1] == "CancelledInSlurm"
    assert world.slurm.submitted() == [100, 100] and world.slurm.cancelled() == []


async def test_issue53_a_restarted_scheduler_readopts_on_the_pods_own_record_of_its_start() -> None:
    """Catches: a Pod deleted for want of evidence because the scheduler that judged it was
    restarted since its job ran (a fault run: every deletion "for want of evidence" came
    after a scheduler kill). The Pod was bound less than MinJobAge ago, so a job Slurm had
    ended would still be listed: with no record at all, Slurm lost it."""
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)
    after = world.restarted()
    await after.reconcile(KEY)
    assert not deleted(after) and after.job_id(KEY) == 101
    assert submissions(after)[-1]["required_nodes"] == ["sn-1"]
    assert len(after.kube.notes("PlaceholderReadopted")) == 1


async def test_issue53_a_pods_record_older_than_min_job_age_is_no_evidence(clock: FakeClock) -> None:
    """Catches: re-adopting on a record too old to tell lost from ended (Slurm purges an
    ended job's record MinJobAge after its end)."""
    world = two_nodes(clock=clock)
    await bound(world)
    clock.advance(MIN_JOB_AGE_S)
    world.slurm.restart_without(100)
    after = world.restarted()
    await after.reconcile(KEY)
    assert deleted(after) and world.slurm.submitted() == [100]


async def test_issue53_a_readopted_pods_record_dates_from_its_new_jobs_start(clock: FakeClock) -> None:
    """Catches: a re-adopted Pod judged after a restart by its first binding alone, long
    past, when its new job started moments ago."""
    world = two_nodes(clock=clock)
    await bound(world)
    clock.advance(MIN_JOB_AGE_S)
    await world.list_jobs()
    world.slurm.restart_without(100)
    await world.reconcile(KEY)  # re-adopted by this process: job 101
    world.slurm.restart_without(101)
    after = world.restarted()
    await after.reconcile(KEY)
    assert not deleted(after) and after.job_id(KEY) == 102


def revert(world: World, job_id: int) -> None:
    """slurmctld restarted from state saved before `job_id` started: PENDING again, never
    requeued, its resources counted free."""
    raw = world.slurm.raw_jobs[job_id]
    raw["job_state"] = ["PENDING"]
    raw["start_time"] = {"set": True, "number": 0}


async def test_issue53_a_job_slurmctld_put_back_to_pending_is_readopted_on_the_pods_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: a running Pod deleted because a slurmctld restarted from older state lists
    its job PENDING again (before: "is PENDING again although it had started; deleting the
    Pod"): Slurm did not end that job for a reason, it lost its start."""
    monkeypatch.setattr(readopting, "START_WITHIN_S", 0.3)
    world = two_nodes()
    await bound(world)
    revert(world, 100)
    await world.reconcile(KEY)
    assert not deleted(world) and world.job_id(KEY) == 101
    assert submissions(world)[-1]["required_nodes"] == ["sn-1"]
    assert "job 101 holds its resources on sn-1 again" in world.kube.notes("PlaceholderReadopted")[0]
    await world.reconcile(KEY)  # the PENDING job is no longer its Pod's: cancelled
    assert (100, None) in world.slurm.cancelled() and active_jobs(world) == [101]


async def test_issue53_a_job_slurmctld_started_again_on_another_node_is_readopted_on_the_pods_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: a running Pod deleted ("PlaceholderJobMoved") because a slurmctld restarted
    from older state started its job again on another node before the scheduler saw it
    PENDING: Slurm did not move the job for a reason, it lost its start."""
    monkeypatch.setattr(readopting, "START_WITHIN_S", 0.3)
    world = two_nodes()
    await bound(world)
    world.slurm.raw_jobs[100]["nodes"] = "sn-2"  # never requeued: restart_cnt stays 0
    await world.reconcile(KEY)
    assert not deleted(world) and world.job_id(KEY) == 101
    assert submissions(world)[-1]["required_nodes"] == ["sn-1"]
    note = world.kube.notes("PlaceholderReadopted")[0]
    assert "started it again on sn-2" in note and "job 101 holds its resources on sn-1 again" in note
    await world.reconcile(KEY)  # the moved job is no longer its Pod's: cancelled, sn-2 freed
    assert (100, None) in world.slurm.cancelled() and active_jobs(world) == [101]
    assert world.kube.notes("PlaceholderJobMoved") == []


async def test_issue53_a_new_job_slurm_loses_too_is_tried_again_not_the_pods_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: a Pod deleted ("Slurm lost the new job N too") because slurmctld restarted
    again before it saved the re-adopting job: the first loss is still proven, the node
    still free, so the pass is tried again with another job (a fault run lost four Pods so)."""
    monkeypatch.setattr(readopting, "START_WITHIN_S", 0.3)
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)
    release = world.slurm.release_job

    async def released_then_lost(job_id: int) -> None:
        await release(job_id)
        world.slurm.restart_without(job_id)
        world.slurm.release_job = release  # type: ignore[method-assign]

    world.slurm.release_job = released_then_lost  # type: ignore[method-assign]
    with pytest.raises(SlurmUnavailable):
        await world.reconcile(KEY)
    assert not deleted(world)
    await world.reconcile(KEY)
    new = world.job_id(KEY)
    assert not deleted(world) and new not in (None, 100, 101)
    assert world.slurm.raw_jobs[new]["job_state"] == ["RUNNING"]


async def test_issue53_a_new_job_held_again_by_a_restarted_slurmctld_is_released_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: a Pod deleted ("did not start a new job on N at once (JobHeldUser)")
    because slurmctld came back from state saved before the new job's release."""
    monkeypatch.setattr(readopting, "START_WITHIN_S", 0.5)
    world = two_nodes()
    await bound(world)
    world.slurm.restart_without(100)
    release = world.slurm.release_job

    async def release_lost(job_id: int) -> None:
        world.slurm.calls.append(("release_job", job_id))  # answered, then forgotten
        world.slurm.release_job = release  # type: ignore[method-assign]

    world.slurm.release_job = release_lost  # type: ignore[method-assign]
    await world.reconcile(KEY)
    assert not deleted(world) and world.job_id(KEY) == 101
    assert [call for call in world.slurm.calls if call[0] == "release_job"] == [("release_job", 101)] * 2


async def test_issue53_an_unbound_pods_job_pending_again_after_its_script_started_is_replaced() -> None:
    """Catches: a Duplicate jobid drain (a fault run, seed 141421): slurmctld lost the start
    of a job whose Pod was not bound yet, listed it PENDING (its placeholder then marked it
    started), and started it again on the node where the first run still ran. The scheduler
    now submits a new job for the Pod and cancels that one first."""
    world = two_nodes()
    await world.reconcile(world.create(pod()))
    world.slurm.start(100, "sn-1")
    revert(world, 100)  # the started mark stays: the script wrote it after the restart
    await world.reconcile(KEY)
    assert not deleted(world) and world.job_id(KEY) == 101
    assert (100, None) in world.slurm.cancelled()
    assert "PENDING again although its placeholder had started" in world.kube.notes("PlacementRejected")[0]
    assert world.pod(KEY)["spec"].get("nodeName") is None


async def test_issue53_a_job_put_back_to_pending_whose_node_another_job_took_ends_the_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: a Pod kept on a node whose resources Slurm handed to another job after it
    forgot the Pod's job had started."""
    monkeypatch.setattr(readopting, "START_WITHIN_S", 0.3)
    world = two_nodes()
    await bound(world)
    revert(world, 100)
    world.slurm.taken.add("sn-1")
    await world.reconcile(KEY)
    assert deleted(world)
    note = world.kube.notes("PlaceholderJobEnded")[0]
    assert "PENDING again" in note and "at once (Resources)" in note


async def test_issue53_a_job_put_back_to_pending_is_readopted_when_its_script_says_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Catches: the placeholder's `terminating` call (slurmd kills the processes of a job
    slurmctld no longer knows started) taking the Pod down the old way before its next pass:
    a fault run still deleted two such Pods ("is PENDING again ... deleting the Pod")."""
    monkeypatch.setattr(readopting, "START_WITHIN_S", 0.3)
    world = two_nodes()
    await bound(world)
    revert(world, 100)
    world.pod_controller.report_ending(WEB, 100)
    await world.reconcile(KEY, listing=False)  # before any listing shows it PENDING
    assert not deleted(world) and world.job_id(KEY) == 101
    assert world.kube.notes("PlaceholderJobEnded") == []
