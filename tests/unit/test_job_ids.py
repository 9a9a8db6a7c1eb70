"""Every job the scheduler submits asks for a job ID never handed out before (issue #53
point 2): a slurmctld restarted without its last state rolls its job-ID counter back and
hands out again the IDs of jobs it lost, whose processes may still run on their nodes;
a new job launched under such an ID is refused by slurmd ("Duplicate jobid") and Slurm
drains the node. Through the Pod controller on in-memory Kubernetes and Slurm."""

from __future__ import annotations

import pytest

from sunk.scheduler.config import parse_job_id_range
from sunk.scheduler.jobs import DEFAULT_JOB_ID_RANGE, JobIndex
from sunk.scheduler.pod.job_ids import TRIES, FreshIds
from sunk.scheduler.translate import gang
from sunk.slurm.dialect import Submission
from sunk.slurm.errors import SlurmUnavailable
from sunk.slurm.models import SlurmJob
from tests.fakes.clock import FakeClock
from tests.fakes.scheduler_world import World, pod
from tests.fakes.slurm import FakeSlurm


def two_nodes() -> World:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    world.add_node("n2", slurm_node="sn-2")
    return world


def asked_for(world: World) -> list[int | None]:
    """The job ID each submission asked for (None: Slurm's counter chose)."""
    bodies = [call[2].body for call in world.slurm.calls if call[0] == "submit"]
    return [(body.get("jobs") or [body["job"]])[0].get("job_id") for body in bodies]


async def running(world: World, name: str, node: str) -> int:
    """Pod `name` submitted, its job started on `node` and seen so; its job ID."""
    key = world.create(pod(name))
    await world.reconcile(key)
    job_id = world.job_id(key)
    assert job_id is not None
    world.slurm.start(job_id, node)
    await world.reconcile(key)
    return job_id


async def test_issue53_a_pod_submitted_after_slurmctld_lost_jobs_gets_an_id_never_handed_out() -> None:
    """Catches: ordinary submissions taking Slurm's rolled-back counter, so a new Pod's job
    got the ID of a lost job still running on a node (11 nodes drained for "Duplicate
    jobid" in one fault run)."""
    world = two_nodes()
    await running(world, "a", "sn-1")  # job 100
    await running(world, "b", "sn-2")  # job 101
    world.slurm.restart_without(101)  # lost; its counter hands 101 out again
    key = world.create(pod("c"))
    await world.reconcile(key)
    assert world.job_id(key) == 102
    assert asked_for(world)[-1] == 102


async def test_issue53_the_first_job_where_the_scheduler_knows_no_id_takes_slurms_counter() -> None:
    """Catches: asking for job ID 1 on a cluster whose counter is far beyond it (its jobs all
    purged): with nothing seen, Slurm's counter knows best."""
    world = two_nodes()
    key = world.create(pod("a"))
    await world.reconcile(key)
    assert (world.job_id(key), asked_for(world)) == (100, [None])


async def test_issue53_jobs_submitted_together_never_ask_for_the_same_id() -> None:
    """Catches: two workers given the same "highest seen + 1" (the second one refused as a
    duplicate, or worse, both sent)."""
    world = two_nodes()
    await running(world, "a", "sn-1")  # job 100
    for name in ("b", "c", "d"):
        await world.reconcile(world.create(pod(name)), listing=False)  # no listing in between
    assert asked_for(world)[1:] == [101, 102, 103]


async def test_issue53_an_id_a_users_job_took_since_the_last_listing_is_passed_over() -> None:
    """Catches: a Pod refused, or its submission given up, because the ID asked for is held
    by a job submitted meanwhile from Slurm's counter (slurmctld: "Duplicate job id")."""
    world = two_nodes()
    await running(world, "a", "sn-1")  # job 100
    await world.slurm.submit(Submission({"job": {"name": "a user's job"}}))  # job 101, unlisted yet
    key = world.create(pod("b"))
    await world.reconcile(key, listing=False)
    assert world.job_id(key) == 102
    assert world.kube.notes("FailedScheduling") == []


async def test_issue53_ids_held_by_records_many_times_in_a_row_give_the_pass_up_for_later() -> None:
    """Catches: a loop of refused submissions within one pass."""
    world = two_nodes()
    await running(world, "a", "sn-1")  # job 100
    for _ in range(TRIES):
        await world.slurm.submit(Submission({"job": {"name": "a user's job"}}))  # 101-105, unlisted
    key = world.create(pod("b"))
    try:
        await world.reconcile(key, listing=False)
    except SlurmUnavailable as err:  # the queue tries the pass again later
        assert "new job IDs in a row" in str(err)
    else:
        raise AssertionError("the pass should have been given up for now")
    assert world.job_id(key) is None and world.kube.notes("FailedScheduling") == []
    await world.reconcile(key)  # the next listing shows them: the ID above them
    assert world.job_id(key) == 106


async def test_issue53_a_token_slurm_does_not_let_choose_ids_still_places_pods_on_slurms_counter() -> None:
    """Catches: every Pod refused where slurmctld lets only root and SlurmUser choose IDs
    ("Invalid job id specified"): the scheduler learns it once and takes Slurm's counter."""
    world = two_nodes()
    world.slurm.ids_may_be_chosen = False
    await running(world, "a", "sn-1")
    for name in ("b", "c"):
        key = world.create(pod(name))
        await world.reconcile(key)
        assert world.job_id(key) is not None
    assert asked_for(world) == [None, None, None]
    assert world.kube.notes("FailedScheduling") == []


async def test_issue53_a_gangs_job_asks_for_one_new_id_per_member() -> None:
    """Catches: a PodGroup's heterogeneous job taking the rolled-back counter (its
    components land on lost jobs' IDs) or asking for one ID for all its components."""
    world = two_nodes()
    await running(world, "solo", "sn-1")  # job 100
    world.slurm.restart_without(100)
    world.add_podgroup("g", 2)
    for name in ("m1", "m2"):
        world.create(pod(name, labels={gang.GROUP_LABEL: "g"}))
    await world.reconcile("ns/m1")
    body = [call[2].body for call in world.slurm.calls if call[0] == "submit"][-1]
    assert [spec["job_id"] for spec in body["jobs"]] == [101, 102]
    assert (world.job_id("ns/m1"), world.job_id("ns/m2")) == (101, 102)


async def test_issue53_a_restarted_scheduler_never_asks_for_an_id_its_pods_name() -> None:
    """Catches: a restarted scheduler that knows only what Slurm lists: slurmctld lost the
    newest job too, so the listing's highest ID is below the one a running Pod names, and
    the next job would get it."""
    world = two_nodes()
    await running(world, "a", "sn-1")  # job 100
    await running(world, "b", "sn-2")  # job 101
    world.slurm.restart_without(101)
    after = world.restarted()
    key = after.create(pod("c"))
    await after.reconcile(key)
    assert after.job_id(key) == 102


# -- a range of their own (issue #53 point 2): IDs Slurm's counter never reaches ------------------
# The Slurm chart sets MaxJobId to the range's start: slurmctld's counter wraps back to
# FirstJobId before MaxJobId and lets root or SlurmUser ask for any ID above it (shown on a
# real slurmctld, 24.11 and 26.05). The tests use small ranges so that a wrap is quick.


def ranged(first: int, last: int) -> World:
    world = two_nodes()
    world.index.id_range = (first, last)
    return world


def others(*job_ids: int) -> list[SlurmJob]:
    """Jobs a listing shows that are not this scheduler's (people's, or an earlier round's)."""
    return [SlurmJob(i, f"j{i}", "RUNNING", "None", (), "", 0, 0, "batch", None, None) for i in job_ids]


CLOCK = FakeClock()  # the job indexes' below, never moved on


def index_of(first: int, last: int, *listed: int) -> JobIndex:
    index = JobIndex(lambda _job: None, CLOCK, (first, last))
    index.replace(others(*listed), CLOCK.monotonic())
    return index


async def test_issue53_the_first_job_asks_for_the_start_of_the_range_not_slurms_counter() -> None:
    """Catches: a fresh cluster's first Pod taking Slurm's counter, an ID the counter walks
    past again and that a rolled-back counter hands a person's job."""
    world = ranged(1000, 1999)
    key = world.create(pod("a"))
    await world.reconcile(key)
    assert (world.job_id(key), asked_for(world)) == (1000, [1000])


async def test_issue53_ids_slurms_counter_gave_outside_the_range_do_not_push_the_next_one() -> None:
    """Catches: people's jobs from Slurm's counter (below the range) and an ID chosen above
    it pulling the scheduler's next ID out of its range."""
    world = ranged(1000, 1999)
    await running(world, "a", "sn-1")  # job 1000
    await world.slurm.submit(Submission({"job": {"name": "a user's job"}}))  # the counter: 100
    await world.slurm.submit(Submission({"job": {"name": "chosen", "job_id": 5000}}))
    key = world.create(pod("b"))
    await world.reconcile(key)  # the listing shows 100 and 5000
    assert world.job_id(key) == 1001


def test_issue53_at_the_top_of_the_range_ids_start_again_from_its_start_passing_over_held_ones() -> None:
    """Catches: claims running past the range's top (into IDs Slurm reads as a federation's
    cluster, or the counter's), or, wrapped, asking for IDs a job still holds."""
    index = index_of(10, 13, 11, 13)
    assert [index.claim_ids(), index.claim_ids()] == [10, 12]


def test_issue53_a_gang_is_given_a_run_of_free_ids_after_a_wrap() -> None:
    """Catches: a heterogeneous job's components asked for across a held ID (its second
    component refused as a duplicate each time) or across the range's top."""
    index = index_of(10, 15, 12, 15)
    assert index.claim_ids(2) == 10
    assert index.claim_ids(2) == 13


def test_issue53_once_wrapped_the_last_rounds_ids_listed_above_do_not_make_new_ones_look_used() -> None:
    """Catches: a listing still showing the last round's IDs near the top lifting the mark a
    new job's ID must exceed (what re-adoption checks), so that every job submitted after a
    wrap looked like one handed out before and was cancelled."""
    index = index_of(10, 13, 13)
    assert index.claim_ids() == 10
    index.replace(others(10, 13), CLOCK.monotonic())
    highest = index.highest_id
    assert index.claim_ids() == 11 > highest


def test_issue53_an_id_a_pod_names_is_passed_over_after_a_wrap() -> None:
    """Catches: after a wrap, asking for the ID of a job Slurm lost (no listing shows it)
    while the Pod naming it, and maybe its processes, still run."""
    index = index_of(10, 13, 13)
    index.note_id(10)
    assert index.claim_ids() == 11


def test_issue53_where_slurm_lets_not_choose_the_counters_ids_still_set_the_mark_new_ones_must_pass() -> None:
    """Catches: with a range, a scheduler taking Slurm's counter (its token may not choose)
    no longer tracking the counter's IDs, so a re-adopted job given a lost job's ID again
    by a rolled-back counter looked new."""
    index = index_of(1000, 1999, 100, 101)
    assert index.highest_id == 101


async def test_issue53_a_range_held_through_says_what_to_do_and_is_tried_again_later() -> None:
    """Catches: a full range looping for ever, or the submission falling back to Slurm's
    counter (an ID a rolled-back counter hands out again)."""
    index = index_of(10, 11, 10, 11)
    slurm = FakeSlurm()
    with pytest.raises(SlurmUnavailable, match="--job-id-range"):
        FreshIds(slurm, index).next()
    assert slurm.calls == []


def test_issue53_the_job_id_range_flag_defaults_to_what_the_slurm_chart_leaves_free() -> None:
    """Catches: the scheduler's range and the Slurm chart's MaxJobId drifting apart, and a
    range reaching the federation bits."""
    assert parse_job_id_range("50000000-67108863") == DEFAULT_JOB_ID_RANGE
    assert parse_job_id_range("shared") is None
    with pytest.raises(ValueError, match="MaxJobId=50000000"):
        parse_job_id_range("50000000-67108864")
