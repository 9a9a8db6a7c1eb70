"""Members that must go take one job-safe path (R10.5): drain with a reason naming the
NodeSet and the cause, wait until Slurm shows no job there, delete the Pod, delete the
record. Scale-in, a cordoned Node, a roll-out and the NodeSet's deletion all take it; every
"is it safe?" read fails closed, and nobody else's drain is touched."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time

from sunk.kube.client import KubeError
from sunk.operator.nodeset import plan as p
from tests.fakes.operator_world import NAMESPACE, NOW_S, OperatorWorld

MEMBERS = ["a-001-011", "a-002-012", "a-003-013"]


async def three_members(max_time_min: int | None = None, **spec: object) -> OperatorWorld:
    world = OperatorWorld()
    if max_time_min is not None:
        world.slurm.max_time_min["batch"] = max_time_min
    for i in range(1, 4):
        world.add_node(f"node-{i}", f"10.64.{i}.{i + 10}")
    world.add_nodeset("a", replicas=3, **spec)
    await world.settle("a")
    assert sorted(world.members("a")) == MEMBERS
    return world


def drains(world: OperatorWorld) -> list[tuple[str, ...]]:
    return [c[1:] for c in world.slurm.calls if c[0] == "drain"]


def pod_deletes(world: OperatorWorld) -> list[str]:
    return [c[1].split("/", 1)[1] for c in world.kube.calls if c[0] == "delete_pod"]


def bump_image(world: OperatorWorld, image: str = "registry.example/slurmd:24.11.1") -> None:
    world.spec("a")["image"] = image


def hashes(world: OperatorWorld) -> dict[str, str]:
    return {
        n: pod["metadata"]["annotations"]["sunk.coreweave.com/template-hash"]
        for n, pod in world.members("a").items()
    }


# -- scale-in ---------------------------------------------------------------------------------
async def test_r10_5_scaling_three_to_one_removes_the_idle_two_and_keeps_the_busy_one_undrained() -> None:
    world = await three_members()
    world.slurm.run_job("a-002-012")
    world.spec("a")["replicas"] = 1
    await world.settle("a")
    assert list(world.members("a")) == ["a-002-012"]
    assert {d[0] for d in drains(world)} == {"a-001-011", "a-003-013"}
    assert set(world.slurm.raw_nodes) == {"a-002-012"}  # the removed members' records went too
    assert not world.slurm.record("a-002-012").drained


async def test_r10_5_a_busy_member_that_must_go_is_drained_and_goes_only_after_its_job() -> None:
    world = await three_members()
    job = world.slurm.run_job("a-001-011")
    world.spec("a")["replicas"] = 2
    for _ in range(3):
        world.slurm.run_job("a-002-012")  # the others are busier: a-001-011 is the cheapest
        world.slurm.run_job("a-003-013")
    await world.settle("a")
    assert drains(world) == [("a-001-011", "sunk: NodeSet a scales in")]
    assert "a-001-011" in world.members("a") and not pod_deletes(world)
    [removal] = world.status("a")["removals"]
    assert removal["jobs"] == [job] and removal["phase"] == "Draining"
    assert removal["drainingSince"] == "2026-11-24T12:00:00Z"
    world.slurm.end_jobs("a-001-011")
    await world.settle("a")
    assert pod_deletes(world) == ["a-001-011"] and "a-001-011" not in world.slurm.raw_nodes
    assert world.status("a")["removals"] == []


async def test_r10_5_among_busy_members_the_one_whose_jobs_end_soonest_goes() -> None:
    world = await three_members()
    world.slurm.run_job("a-001-011", end_time=NOW_S + 7200)
    world.slurm.run_job("a-002-012", end_time=NOW_S + 60)
    world.slurm.run_job("a-003-013", end_time=NOW_S + 3600)
    world.spec("a")["replicas"] = 2
    await world.settle("a")
    assert [d[0] for d in drains(world)] == ["a-002-012"]


async def test_r10_5_a_busy_removal_in_progress_is_not_moved_to_another_busy_member() -> None:
    world = await three_members()
    world.slurm.run_job("a-001-011")
    world.slurm.run_job("a-002-012")
    world.slurm.run_job("a-003-013", end_time=NOW_S + 10)
    world.spec("a")["replicas"] = 2
    await world.reconcile("a")
    assert [d[0] for d in drains(world)] == ["a-003-013"]
    world.slurm.run_job("a-003-013")  # now the busiest, but already draining
    await world.settle("a")
    assert [d[0] for d in drains(world)] == ["a-003-013"]
    assert not [c for c in world.slurm.calls if c[0] == "resume"]


async def test_r10_5_victims_are_chosen_on_a_listing_newer_than_the_pass_not_the_pollers_last() -> None:
    """Issue #32: jobs started on two members just before a scale to 1; the poller's last
    listing still shows all three idle. The pass lists again before it drains: the idle one
    and the busy one ending soonest go, and nothing is drained twice or lifted."""
    world = await three_members()
    await world.poll()  # the poller's listing, from before the jobs
    world.slurm.run_job("a-001-011", end_time=NOW_S + 3600)
    world.slurm.run_job("a-002-012", end_time=NOW_S + 60)
    world.spec("a")["replicas"] = 1
    await world.controller.reconcile(f"{NAMESPACE}/a")  # on the poller's stale view
    assert sorted(d[0] for d in drains(world)) == ["a-002-012", "a-003-013"]
    assert world.refreshes == 1
    await world.settle("a")
    assert list(world.members("a")) == ["a-001-011", "a-002-012"]  # the idle one went
    world.slurm.end_jobs("a-002-012")
    await world.settle("a")
    assert list(world.members("a")) == ["a-001-011"]
    assert sorted(d[0] for d in drains(world)) == ["a-002-012", "a-003-013"]
    assert not [c for c in world.slurm.calls if c[0] == "resume"]
    assert not world.slurm.record("a-001-011").drained


async def test_r10_5_a_busy_removal_under_way_is_finished_when_another_member_becomes_idle() -> None:
    """3 -> 1 with two busy: the idle member and one busy member drain. When the other busy
    member's job ends first, the drain under way is not lifted to take the newly idle one."""
    world = await three_members()
    world.slurm.run_job("a-001-011", end_time=NOW_S + 60)
    world.slurm.run_job("a-002-012", end_time=NOW_S + 3600)
    world.spec("a")["replicas"] = 1
    await world.settle("a")
    assert sorted(d[0] for d in drains(world)) == ["a-001-011", "a-003-013"]
    world.slurm.end_jobs("a-002-012")  # the member that stays is idle first
    await world.settle("a")
    assert sorted(world.members("a")) == ["a-001-011", "a-002-012"]
    assert not [c for c in world.slurm.calls if c[0] == "resume"]
    world.slurm.end_jobs("a-001-011")
    await world.settle("a")
    assert list(world.members("a")) == ["a-002-012"]
    assert len(drains(world)) == 2


async def test_r10_5_a_member_drained_as_a_job_started_there_is_finished_not_switched() -> None:
    """A job Slurm started between the listing and the drain: the member is kept draining
    (a removal under way is finished) rather than lifted for an idle one."""
    world = await three_members()
    world.spec("a")["replicas"] = 2
    await world.reconcile("a")
    [(first, _)] = drains(world)
    job = world.slurm.run_job(first)
    await world.settle("a")
    assert not [c for c in world.slurm.calls if c[0] == "resume"]
    assert world.slurm.record(first).drained and first in world.members("a")
    assert world.status("a")["removals"][0]["jobs"] == [job]
    world.slurm.end_jobs(first)
    await world.settle("a")
    assert first not in world.members("a") and len(world.members("a")) == 2
    assert len(drains(world)) == 1


async def test_r10_5_a_job_slurm_lists_on_a_node_counts_even_if_the_record_looks_idle() -> None:
    world = await three_members()
    world.slurm.run_job("a-001-011")
    # The node listing lags behind the job listing.
    world.slurm.update_node("a-001-011", state="idle", flags=(), reason="", alloc_cpus=0)
    world.spec("a")["replicas"] = 0
    await world.settle("a")
    assert "a-001-011" in world.members("a")
    assert "waits for job" in world.condition("a", "Ready")["message"]


async def test_r10_5_a_stale_listing_removes_nothing() -> None:
    world = await three_members()
    world.spec("a")["replicas"] = 0
    await world.poll()
    world.view = dataclasses.replace(world.view, listed_at=time.monotonic() - 61)  # a poller stuck for 61 s
    await world.controller.reconcile("slurm/a")
    assert not drains(world) and not pod_deletes(world)
    assert "old" in world.condition("a", "SlurmReachable")["message"]


async def test_r10_5_a_failed_job_listing_removes_nothing() -> None:
    world = await three_members()
    world.spec("a")["replicas"] = 0
    world.slurm.fail("jobs", times=10)
    await world.reconcile("a")
    assert not drains(world) and not pod_deletes(world)
    assert world.condition("a", "SlurmReachable")["status"] == "False"


async def test_r10_5_an_administrators_drain_on_a_leaving_member_is_kept_and_it_goes_once_idle() -> None:
    world = await three_members()
    world.slurm.drain_as_admin("a-001-011", "bad GPU")
    world.slurm.drain_as_admin("a-002-012", "bad DIMM")
    world.slurm.drain_as_admin("a-003-013", "bad NIC")
    job = world.slurm.run_job("a-001-011")
    world.spec("a")["replicas"] = 0
    await world.settle("a")
    assert not drains(world)  # their drains stay as the administrator wrote them
    assert list(world.members("a")) == ["a-001-011"]
    assert world.slurm.record("a-001-011").reason == "bad GPU"
    assert (
        f"waits for job {job} (drained by someone else: bad GPU)" in world.condition("a", "Ready")["message"]
    )


# -- a Node's maintenance --------------------------------------------------------------------
async def test_r10_5_a_cordoned_nodes_member_is_drained_replaced_and_removed_only_when_idle() -> None:
    world = await three_members()
    world.add_node("node-4", "10.64.4.14")
    job = world.slurm.run_job("a-001-011")
    world.nodes.get("node-1")["spec"]["unschedulable"] = True  # type: ignore[index]
    await world.settle("a")
    assert drains(world) == [
        ("a-001-011", "sunk: NodeSet a moves off a Node that no longer qualifies (Node node-1 is cordoned)")
    ]
    assert sorted(world.members("a")) == ["a-001-011", *MEMBERS[1:], "a-004-014"]  # replaced at once
    assert world.status("a")["removals"][0]["jobs"] == [job]
    world.slurm.end_jobs("a-001-011")
    await world.settle("a")
    assert sorted(world.members("a")) == [*MEMBERS[1:], "a-004-014"]
    assert "a-001-011" not in world.slurm.raw_nodes


async def test_r10_5_a_cordon_seen_with_its_taint_is_named_as_a_cordon() -> None:
    """The node lifecycle controller adds the unschedulable taint a moment after the cordon;
    an operator that sees both at once names the cordon, not a taint (CI, 2026-11-30)."""
    world = await three_members()
    node = world.nodes.get("node-1")
    node["spec"]["unschedulable"] = True  # type: ignore[index]
    node["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]  # type: ignore[index]
    await world.settle("a")
    assert drains(world) == [
        ("a-001-011", "sunk: NodeSet a moves off a Node that no longer qualifies (Node node-1 is cordoned)")
    ]


async def test_r10_5_an_uncordon_before_the_member_went_lifts_our_drain() -> None:
    world = await three_members()
    world.slurm.run_job("a-001-011")
    node = world.nodes.get("node-1")
    node["spec"]["unschedulable"] = True  # type: ignore[index]
    await world.settle("a")
    node["spec"]["unschedulable"] = False  # type: ignore[index]
    await world.settle("a")
    assert [c[1] for c in world.slurm.calls if c[0] == "resume"] == ["a-001-011"]
    assert not world.slurm.record("a-001-011").drained


async def test_r10_5_a_scale_back_up_never_lifts_the_drain_of_a_member_already_deleted() -> None:
    """The watch has not yet brought the Pod's deletion: lifting its drain would let Slurm start
    a job on a member that is going (the operator fault run's violation, seed 482643)."""
    world = await three_members()
    world.kube.hide_deletes = True
    world.spec("a")["replicas"] = 2
    while not pod_deletes(world):  # drain, then delete the idle member
        await world.reconcile("a")
    (gone,) = pod_deletes(world)
    world.spec("a")["replicas"] = 3
    await world.reconcile("a")
    assert [c for c in world.slurm.calls if c[0] == "resume"] == []
    assert world.slurm.record(gone).drained


async def test_r10_5_a_listing_from_before_a_resume_deletes_no_member() -> None:
    """Scale in, back up, in again: the listing taken before the drain was lifted still shows
    it drained and idle, though Slurm has started a job there since."""
    world = await three_members()
    world.spec("a")["replicas"] = 2
    await world.reconcile("a")
    (drained,) = [d[0] for d in drains(world)]
    world.spec("a")["replicas"] = 3
    await world.reconcile("a")
    assert [c[1] for c in world.slurm.calls if c[0] == "resume"] == [drained]
    world.slurm.run_job(drained)
    world.spec("a")["replicas"] = 2
    await world.controller.reconcile(f"{NAMESPACE}/a")  # on the listing from before the resume
    assert pod_deletes(world) == []
    await world.settle("a")
    assert drained in world.members("a") and len(world.members("a")) == 2


# -- roll-outs --------------------------------------------------------------------------------
async def test_r10_5_an_image_change_replaces_members_one_at_a_time() -> None:
    world = await three_members()
    before = hashes(world)
    bump_image(world)
    replaced: list[list[str]] = []
    for _ in range(12):
        await world.reconcile("a")
        in_flight = [d[0] for d in drains(world) if d[0] not in [x for xs in replaced for x in xs]]
        replaced.append(in_flight)
        assert len({x for x in in_flight}) <= 1  # maxUnavailable 1: one member out at a time
        world.kubelet()
        world.slurmd()
    after = hashes(world)
    assert sorted(after) == MEMBERS and all(after[n] != before[n] for n in MEMBERS)
    assert [d[1] for d in drains(world)] == ["sunk: NodeSet a replaces members with an outdated template"] * 3
    assert world.condition("a", "UpToDate")["status"] == "True"
    assert world.status("a")["updated"] == 3


async def test_r10_5_max_unavailable_two_replaces_two_at_once() -> None:
    world = await three_members(updateStrategy={"rollingUpdate": {"maxUnavailable": 2}})
    bump_image(world)
    await world.reconcile("a")
    assert len(drains(world)) == 2
    assert "1 wait for maxUnavailable 2" in world.condition("a", "UpToDate")["message"]


async def test_r10_5_a_busy_outdated_member_holds_its_slot_until_its_jobs_end() -> None:
    world = await three_members()
    for name in MEMBERS:
        world.slurm.run_job(name)
    bump_image(world)
    await world.settle("a")
    assert len(drains(world)) == 1 and not pod_deletes(world)  # the others keep working
    [removal] = world.status("a")["removals"]
    assert removal["cause"] == "replaces members with an outdated template"


async def test_r10_5_a_member_that_cannot_be_drained_is_skipped_and_reported() -> None:
    world = await three_members()
    world.slurm.drain_as_admin("a-001-011", "bad GPU")
    bump_image(world)
    await world.settle("a", rounds=8)
    assert "a-001-011" not in {d[0] for d in drains(world)}
    assert hashes(world)["a-001-011"] != hashes(world)["a-002-012"]  # the others rolled on
    assert (
        "skipped until they can be drained: a-001-011 (bad GPU)"
        in world.condition("a", "UpToDate")["message"]
    )


async def test_r10_5_on_delete_replaces_nothing_by_itself() -> None:
    world = await three_members(updateStrategy={"type": "OnDelete"})
    bump_image(world)
    await world.settle("a")
    assert not drains(world) and not pod_deletes(world)
    assert "OnDelete" in world.condition("a", "UpToDate")["message"]


async def test_r10_5_a_roll_out_undone_lifts_its_drain() -> None:
    world = await three_members()
    world.slurm.run_job("a-001-011")
    world.slurm.run_job("a-002-012")
    world.slurm.run_job("a-003-013")
    image = world.spec("a").get("image")
    bump_image(world)
    await world.settle("a")
    [(drained, _)] = drains(world)
    world.spec("a")["image"] = image
    await world.settle("a")
    assert [c[1] for c in world.slurm.calls if c[0] == "resume"] == [drained]


# -- the drain timeout ------------------------------------------------------------------------
async def test_r10_5_by_default_a_drain_waits_for_ever() -> None:
    world = await three_members()
    world.slurm.run_job("a-001-011")
    world.spec("a")["replicas"] = 0
    await world.settle("a")
    world.now = "2027-11-24T12:00:00Z"  # a year later
    await world.settle("a")
    assert "a-001-011" in world.members("a") and not world.kube.notes("DrainTimedOut")
    assert not [c for c in world.slurm.calls if c[0] == "cancel"]


async def test_r10_5_a_drain_timeout_reports_and_keeps_the_jobs() -> None:
    world = await three_members(drain={"timeout": "2h"})
    world.slurm.run_job("a-001-011")
    world.spec("a")["replicas"] = 0
    await world.settle("a")
    world.now = "2026-11-24T14:00:01Z"
    await world.settle("a")
    assert len(world.kube.notes("DrainTimedOut")) == 1
    assert not [c for c in world.slurm.calls if c[0] == "cancel"]
    assert world.status("a")["removals"][0]["phase"] == "DrainTimedOut"


async def test_r10_5_a_drain_timeout_with_cancel_jobs_cancels_each_job_with_an_event() -> None:
    world = await three_members(max_time_min=60, drain={"timeout": "2h", "onTimeout": "CancelJobs"})
    jobs = [world.slurm.run_job("a-001-011"), world.slurm.run_job("a-001-011")]
    world.spec("a")["replicas"] = 0
    await world.settle("a")
    world.now = "2026-11-24T13:59:00Z"
    await world.settle("a")
    assert not [c for c in world.slurm.calls if c[0] == "cancel"]  # not yet
    world.now = "2026-11-24T14:00:01Z"
    await world.settle("a")
    assert sorted(int(c[1]) for c in world.slurm.calls if c[0] == "cancel") == jobs
    assert len(world.kube.notes("JobCancelledAfterDrainTimeout")) == 2
    assert "a-001-011" not in world.members("a")


async def test_r10_5_a_cancelling_drain_timeout_shorter_than_a_partitions_max_time_is_refused() -> None:
    """Jobs still within their time limit must never be cancelled by the platform."""
    world = OperatorWorld()
    world.slurm.max_time_min["batch"] = 24 * 60
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a", replicas=1, drain={"timeout": "2h", "onTimeout": "CancelJobs"})
    await world.settle("a")
    assert world.members("a") == {}  # nothing changes
    valid = world.condition("a", "Valid")
    assert valid["status"] == "False"
    assert "spec.drain.timeout" in valid["message"] and "MaxTime (1440 min)" in valid["message"]
    assert world.kube.reasons().count("InvalidNodeSet") == 1


async def test_r10_5_an_unlimited_partition_refuses_any_cancelling_drain_timeout_but_not_a_report() -> None:
    world = OperatorWorld()
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a", replicas=1, drain={"timeout": "30d", "onTimeout": "CancelJobs"})
    await world.settle("a")
    assert "UNLIMITED" in world.condition("a", "Valid")["message"]
    world.spec("a")["drain"] = {"timeout": "2h", "onTimeout": "Report"}
    await world.settle("a")
    assert world.condition("a", "Valid")["status"] == "True"
    assert list(world.members("a")) == ["a-001-011"]


# -- deleting the NodeSet ---------------------------------------------------------------------
async def test_r10_5_a_deleted_nodeset_removes_its_members_job_safely_then_goes() -> None:
    world = await three_members()
    assert world.nodesets.get("slurm/a")["metadata"]["finalizers"] == [p.FINALIZER]  # type: ignore[index]
    world.slurm.run_job("a-002-012")
    world.delete_nodeset("a")
    await world.settle("a")
    assert list(world.members("a")) == ["a-002-012"]
    assert set(world.slurm.raw_nodes) == {"a-002-012"}
    assert world.status("a")["summary"].startswith("Deleting: ")
    assert world.nodesets.get("slurm/a") is not None
    world.slurm.end_jobs("a-002-012")
    await world.settle("a")
    assert not world.members("a") and not world.slurm.raw_nodes
    assert world.nodesets.get("slurm/a") is None  # the finalizer went last


async def test_r10_5_a_deleted_nodeset_removes_nothing_while_slurm_cannot_be_read() -> None:
    world = await three_members()
    world.delete_nodeset("a")
    world.slurm.fail("nodes", times=10)
    await world.settle("a")
    assert len(world.members("a")) == 3 and world.nodesets.get("slurm/a") is not None


async def test_r10_5_a_deleted_invalid_nodeset_still_removes_its_members_safely() -> None:
    world = await three_members()
    world.spec("a")["replicas"] = "many"
    world.delete_nodeset("a")
    await world.settle("a")
    assert not world.members("a") and world.nodesets.get("slurm/a") is None
    assert len(drains(world)) == 3


# -- bad input --------------------------------------------------------------------------------
async def test_r10_5_bad_removal_settings_are_refused_naming_the_field_and_nothing_changes() -> None:
    for spec, field in [
        ({"drain": {"timeout": "soon"}}, "spec.drain.timeout"),
        ({"drain": {"timeout": "1h", "onTimeout": "Kill"}}, "spec.drain.onTimeout"),
        ({"drain": {"onTimeout": "CancelJobs"}}, "spec.drain.onTimeout"),
        ({"updateStrategy": {"type": "Recreate"}}, "spec.updateStrategy.type"),
        ({"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}}}, "maxUnavailable"),
        ({"updateStrategy": {"rollingUpdate": {"maxUnavailable": "150%"}}}, "maxUnavailable"),
    ]:
        world = await three_members()
        world.spec("a").update(spec)
        world.spec("a")["replicas"] = 0
        await world.settle("a")
        assert len(world.members("a")) == 3 and not drains(world), spec
        assert field in world.condition("a", "Valid")["message"], spec


async def test_r10_5_a_finalizer_write_on_a_lagging_cache_does_not_hold_up_the_pass() -> None:
    world = OperatorWorld()
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a")
    obj = world.nodesets.get("slurm/a")
    assert obj is not None
    obj["metadata"]["resourceVersion"] = "7"
    world.kube.fail("patch_merge", KubeError(409, "the object has been modified"))
    await world.reconcile("a")
    assert list(world.members("a")) == ["a-001-011"]  # created all the same
    await world.reconcile("a")
    assert obj["metadata"]["finalizers"] == [p.FINALIZER]


# -- evictions and deletions from outside ------------------------------------------------------
async def test_r10_5_members_are_labelled_busy_while_slurm_lists_work_there_for_the_pdb() -> None:
    world = await three_members()
    assert {
        pod["metadata"]["labels"]["sunk.coreweave.com/slurm-busy"] for pod in world.members("a").values()
    } == {"false"}
    world.slurm.run_job("a-002-012")
    await world.reconcile("a")
    busy = {
        n: pod["metadata"]["labels"]["sunk.coreweave.com/slurm-busy"] for n, pod in world.members("a").items()
    }
    assert busy == {"a-001-011": "false", "a-002-012": "true", "a-003-013": "false"}
    world.slurm.end_jobs("a-002-012")
    await world.reconcile("a")
    assert world.members("a")["a-002-012"]["metadata"]["labels"]["sunk.coreweave.com/slurm-busy"] == "false"


async def test_r10_5_a_member_without_a_record_keeps_its_busy_label() -> None:
    world = await three_members()
    world.slurm.run_job("a-002-012")
    await world.reconcile("a")
    del world.slurm.raw_nodes["a-002-012"]  # a listing that lost it says nothing of its jobs
    world.slurm.raw_jobs.clear()
    await world.reconcile("a")
    assert world.members("a")["a-002-012"]["metadata"]["labels"]["sunk.coreweave.com/slurm-busy"] == "true"


async def test_r10_5_a_deleted_member_drains_itself_and_waits_for_its_jobs_before_slurmd_stops() -> None:
    world = await three_members()
    [slurmd] = world.members("a")["a-001-011"]["spec"]["containers"]
    pre_stop = slurmd["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[:2] == ["sh", "-c"] and pre_stop[-1] == "a-001-011"
    assert "state=drain" in pre_stop[2] and "until" in pre_stop[2]
    assert world.members("a")["a-001-011"]["spec"]["terminationGracePeriodSeconds"] == 3600


async def rolled_member_left_terminating() -> tuple[OperatorWorld, str]:
    """A roll-out deleted one idle member, and its Pod stays (its preStop hook has not
    returned): the kubelet keeps a deleted Pod until then."""
    world = await three_members()
    world.kube.graceful_deletes = True
    bump_image(world)
    for _ in range(4):
        await world.reconcile("a")
        deleted = [n for n, pod in world.members("a").items() if pod["metadata"].get("deletionTimestamp")]
        if deleted:
            [going] = deleted
            meta = world.members("a")[going]["metadata"]
            # As the API server writes it: the end of the grace period, and the period.
            meta["deletionTimestamp"], meta["deletionGracePeriodSeconds"] = shifted(world.now, 3600), 3600
            return world, going
    raise AssertionError("the roll-out deleted no member")


def shifted(stamp: str, seconds: int) -> str:
    at = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) + dt.timedelta(seconds=seconds)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def later(world: OperatorWorld, seconds: int) -> None:
    world.now = shifted(world.now, seconds)


async def test_r10_5_a_member_still_terminating_while_its_node_is_drained_and_idle_goes_without_grace() -> (
    None
):
    world, going = await rolled_member_left_terminating()
    later(world, 100)
    await world.reconcile("a")
    assert going in world.members("a")  # its hook may still be about to return
    later(world, 30)
    await world.reconcile("a")
    assert ("delete_pod", f"{NAMESPACE}/{going} grace 0") in world.kube.calls
    assert going not in world.members("a")
    [event] = [e for e in world.kube.events if e["reason"] == "MemberStuckTerminating"]
    assert event["type"] == "Warning" and "without grace" in event["note"]


async def test_r10_5_a_member_still_terminating_with_a_job_slurm_lists_there_is_left_to_its_hook() -> None:
    world, going = await rolled_member_left_terminating()
    world.slurm.run_job(going)  # a job Slurm still lists there (its end not yet seen)
    later(world, 600)
    for _ in range(2):
        await world.reconcile("a")
    assert going in world.members("a")
    assert not [c for c in world.kube.calls if c[0] == "delete_pod" and c[1].endswith("grace 0")]
    [removal] = world.status("a")["removals"]
    assert removal["message"] == f"member {going} is terminating"


# -- hardware -----------------------------------------------------------------------------------
async def gpu_member(gpus: str = "8") -> OperatorWorld:
    world = OperatorWorld()
    world.add_node(
        "gpu-1",
        "10.0.0.1",
        labels={"nvidia.com/gpu.product": "H100"},
        cpu="64",
        memory="64Gi",
        extra={"nvidia.com/gpu": gpus},
    )
    world.add_nodeset("h", resources={"limits": {"cpu": "8", "memory": "8Gi"}})
    await world.settle("h")
    return world


def registered_with(world: OperatorWorld, name: str, gres: tuple[tuple[str, int], ...]) -> None:
    world.slurm.update_node(name, gres=gres)


async def test_r10_4_a_node_that_lost_a_gpu_gets_its_member_replaced_with_the_new_count() -> None:
    world = await gpu_member()
    world.nodes.get("gpu-1")["status"]["allocatable"]["nvidia.com/gpu"] = "7"  # type: ignore[index]
    world.slurm.run_job("h-000-001")
    await world.settle("h")
    assert drains(world) == [("h-000-001", "sunk: NodeSet h replaces members whose Node's resources changed")]
    assert not pod_deletes(world)  # its job first
    world.slurm.end_jobs("h-000-001")
    await world.settle("h")
    conf = world.members("h")["h-000-001"]["metadata"]["annotations"]["sunk.coreweave.com/slurmd-conf"]
    assert "Gres=gpu:h100:7" in conf


async def test_r10_4_a_slurm_record_with_other_gpus_than_the_node_gives_is_reported() -> None:
    world = await gpu_member()
    await world.reconcile("h")
    assert not world.kube.notes("GresMismatch")
    registered_with(world, "h-000-001", (("gpu", 4),))  # e.g. slurmd detected fewer, untyped
    await world.reconcile("h")
    [note] = world.kube.notes("GresMismatch")
    assert note == "Slurm node h-000-001 lists GPUs gpu:4 but its Node gives gpu:h100:8"
    assert note in world.condition("h", "Ready")["message"]


# -- the maintenance window ---------------------------------------------------------------------
NIGHTLY = {"rollingUpdate": {"window": {"start": "22:00", "duration": "6h"}}}


async def test_r10_5_outside_its_maintenance_window_a_roll_out_waits_and_says_so() -> None:
    world = await three_members(updateStrategy=NIGHTLY)  # the world's clock says Tuesday 12:00 UTC
    bump_image(world)
    await world.settle("a")
    assert not drains(world)
    message = world.condition("a", "UpToDate")["message"]
    assert "wait for the maintenance window (daily 22:00 UTC for 360 min)" in message


async def test_r10_5_inside_the_window_past_midnight_the_roll_out_proceeds() -> None:
    world = await three_members(updateStrategy=NIGHTLY)
    bump_image(world)
    world.now = "2026-11-25T01:30:00Z"
    await world.reconcile("a")
    assert len(drains(world)) == 1


async def test_r10_5_a_replacement_under_way_when_the_window_closes_is_finished() -> None:
    world = await three_members(updateStrategy=NIGHTLY)
    world.slurm.run_job("a-001-011")
    world.slurm.run_job("a-002-012")
    world.slurm.run_job("a-003-013")
    bump_image(world)
    world.now = "2026-11-25T03:59:00Z"
    await world.reconcile("a")
    [(started, _)] = drains(world)
    world.now = "2026-11-25T04:01:00Z"
    world.slurm.end_jobs(started)
    await world.settle("a")
    assert started in pod_deletes(world) and len(drains(world)) == 1  # no new one after 04:00
    assert not [c for c in world.slurm.calls if c[0] == "resume"]


async def test_r10_5_a_window_on_given_days_only_opens_on_those_days() -> None:
    weekend = {"rollingUpdate": {"window": {"start": "22:00", "duration": "6h", "days": ["Sat"]}}}
    world = await three_members(updateStrategy=weekend)
    bump_image(world)
    world.now = "2026-11-25T23:00:00Z"  # a Wednesday night
    await world.reconcile("a")
    assert not drains(world)
    world.now = "2026-11-29T02:00:00Z"  # Sunday 02:00: Saturday's window still open
    await world.reconcile("a")
    assert len(drains(world)) == 1


async def test_r10_5_a_bad_window_is_refused_naming_the_field() -> None:
    for window, field in [
        ({"start": "25:00", "duration": "1h"}, "window.start"),
        ({"start": "22:00", "duration": "forever"}, "window.duration"),
        ({"start": "22:00", "duration": "1h", "days": ["Someday"]}, "window.days"),
    ]:
        world = await three_members()
        world.spec("a")["updateStrategy"] = {"rollingUpdate": {"window": window}}
        bump_image(world)
        await world.settle("a")
        assert not drains(world) and field in world.condition("a", "Valid")["message"], window


# -- a roll-out that would strand pending jobs ---------------------------------------------------
async def test_r10_3_a_roll_out_dropping_a_feature_pending_jobs_ask_for_is_held_naming_them() -> None:
    world = await three_members(features=["fast", "ib"])
    asking = world.slurm.queue_job(constraint="fast&ib")
    world.spec("a")["features"] = ["ib"]  # "fast" would be gone from every node
    for _ in range(3):
        await world.reconcile("a")
        world.kubelet()
        world.slurmd()
    assert drains(world) == [] and pod_deletes(world) == []
    condition = world.condition("a", "UpToDate")
    assert condition["status"] == "False"
    assert f"feature fast is asked for by pending jobs {asking}" in condition["message"]
    assert world.kube.reasons().count("FeatureInUse") == 1
    # Once the job is gone, the roll-out goes on.
    del world.slurm.raw_jobs[asking]
    await world.reconcile("a")
    assert len(drains(world)) == 1


async def test_r10_3_a_feature_another_node_still_offers_does_not_hold_the_roll_out() -> None:
    world = await three_members(features=["fast"])
    world.slurm.add_node("other-001", features=("fast",))
    world.slurm.queue_job(constraint="fast")
    world.spec("a")["features"] = []
    await world.reconcile("a")
    assert len(drains(world)) == 1
    assert world.kube.reasons().count("FeatureInUse") == 0
