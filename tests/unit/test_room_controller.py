"""Room in the kubelet's count (R4.3) through the Pod controller on in-memory Kubernetes and
Slurm. The bug these catch, seen on real kubelet Nodes: a slurmd Pod requests 1 CPU of a
2-CPU Node but Slurm counts its 2-CPU limit, so Slurm starts two 500m Pods' jobs on that
node; sunk bound both, the kubelet failed the second (`OutOfcpu`), its ReplicaSet made
another, Slurm chose the same node again: a storm of refused Pods."""

from __future__ import annotations

import copy
import random

from sunk.kube import noderoom
from sunk.scheduler.app import frees_room, node_inputs, slurmd_inputs
from sunk.scheduler.pod.room import NodeSums
from sunk.scheduler.translate import gang
from tests.fakes.ports import MemoryCache
from tests.fakes.scheduler_world import PREFIX, World, node, pod, slurmd_pod

TWO_CPUS = {"cpu": "2", "memory": "4Gi", "pods": "110"}


def cluster() -> World:
    """n1 (Slurm node sn-1) and n2 (sn-2), 2 CPUs each; each slurmd Pod requests 1 CPU."""
    world = World()
    for name, slurm_node in (("n1", "sn-1"), ("n2", "sn-2")):
        world.add_node(name, slurm_node=slurm_node, allocatable=TWO_CPUS, slurmd_requests={"cpu": "1"})
    return world


def running_on(world: World, name: str, node_name: str, cpu: str = "550m", **status: str) -> str:
    """A Pod of this scheduler already bound to `node_name` and running there."""
    manifest = pod(name, cpu=cpu, memory="256Mi")
    manifest["spec"]["nodeName"] = node_name
    manifest["status"] = {"phase": "Running", **status}
    return world.create(manifest)


def web() -> dict:
    return pod("web", cpu="500m", memory="256Mi")


def annotation(world: World, key: str, name: str) -> str | None:
    return (world.pod(key)["metadata"].get("annotations") or {}).get(PREFIX + name)


async def test_r4_3_a_pod_whose_node_has_no_room_in_the_kubelets_count_is_not_bound_there() -> None:
    """Catches the OutOfcpu storm: the Node filled up after the job was submitted and Slurm,
    which counts the slurmd Pod's limit, started the job there anyway; sunk must not bind.
    The job keeps its node (issue #53): the Pod waits for the kubelet's room, saying so."""
    world = cluster()
    key = world.create(web())
    await world.reconcile(key)
    assert world.job_id(key) == 100
    running_on(world, "other", "n1")  # 1 CPU (slurmd) + 550m: 450m left of 2
    world.slurm.start(100, "sn-1")
    outcome = await world.reconcile(key)
    assert "nodeName" not in world.pod(key)["spec"]
    assert ("bind", key, "n1") not in world.kube.calls
    assert world.slurm.cancelled() == [] and world.job_id(key) == 100
    condition = world.condition(key) or {}
    assert condition["reason"] == "WaitingForNodeRoom"
    assert condition["message"] == (
        "Slurm job 100 runs on sn-1; waiting for the kubelet's room on Node n1, "
        "which other Pods hold until they are gone"
    )
    [note] = world.kube.notes("WaitingForNodeRoom")
    assert note.startswith(
        "Slurm job 100 runs on sn-1, but Node n1 has no room for the Pod in the kubelet's count"
    )
    assert (
        "it asks cpu 500m, 450m is free of 2 allocatable (1550m requested by the slurmd and placed Pods)"
        in note
    )
    assert outcome.requeue_after is not None and outcome.requeue_after > 0
    await world.reconcile(key)
    assert len(world.kube.notes("WaitingForNodeRoom")) == 1  # said once


async def test_issue53_a_job_started_where_the_kubelet_has_no_room_yet_binds_once_the_room_is_back() -> None:
    """Catches a Pod whose job Slurm started on a node still held by other Pods (a
    preempted one terminating) never being bound there, or being bound too soon."""
    world = cluster()
    going = running_on(world, "victim", "n1")
    key = world.create(web())
    await world.reconcile(key)
    world.slurm.start(100, "sn-1")
    world.kube.delete_by_user("ns", "victim")  # terminating: the kubelet still counts it
    await world.reconcile(key)
    assert "nodeName" not in world.pod(key)["spec"]
    assert (world.condition(key) or {})["reason"] == "WaitingForNodeRoom"
    world.remove(going)
    await world.reconcile(key)
    assert world.pod(key)["spec"]["nodeName"] == "n1"
    assert world.slurm.submitted() == [100] and world.slurm.cancelled() == []
    assert "to n1 (Slurm job 100 on node sn-1" in world.kube.notes("Scheduled")[-1]


async def test_issue53_a_busy_node_does_not_keep_a_new_pod_out_of_slurms_queue() -> None:
    """Catches a Pod that arrives while every Node is full in the kubelet's count getting no
    job at all (no place in Slurm's queue, no preemption): it gets a job that may use them."""
    world = cluster()
    running_on(world, "other-1", "n1")
    running_on(world, "other-2", "n2", cpu="900m")
    key = world.create(web())
    await world.reconcile(key)
    assert world.slurm.submitted() == [100] and world.job_id(key) == 100
    assert world.slurm.raw_jobs[100]["excluded_nodes"] == ""
    assert world.kube.notes("FailedScheduling") == [] and world.condition(key) is None


async def test_issue53_a_node_whose_allocatable_never_holds_the_pod_still_refuses_it_saying_why() -> None:
    """Catches the protection lost: a Pod that can never fit beside the slurmd Pod on any
    Node waits without a job, with the reason on its condition and an Event."""
    world = cluster()
    key = world.create(pod("big", cpu="1500m", memory="256Mi"))  # 1 of 2 CPUs is the slurmd Pod's
    outcome = await world.reconcile(key)
    assert world.slurm.submitted() == []
    condition = world.condition(key) or {}
    assert (condition.get("reason"), outcome.requeue_after) == ("Unschedulable", 5)
    assert condition["message"].startswith("no Slurm node can host this Pod: ")
    assert (
        "Node n1 has no room for the Pod in the kubelet's count: it asks cpu 1500m, 1 is free"
        in condition["message"]
    )
    assert "Node n2 has no room" in condition["message"]
    assert "lower the NodeSet's requests" in condition["message"]
    assert world.kube.notes("FailedScheduling") == [condition["message"]]


async def test_issue53_a_node_the_slurmd_pod_alone_leaves_no_room_on_is_left_out_not_waited_for() -> None:
    """Catches a Pod waiting for ever for room that never comes: the slurmd Pod grew after
    the job was submitted, so only a new job that leaves the node out can place the Pod."""
    world = cluster()
    key = world.create(web())
    await world.reconcile(key)
    world.slurmd.put(slurmd_pod("sn-1", "n1", requests={"cpu": "1900m"}))
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert "nodeName" not in world.pod(key)["spec"]
    assert world.kube.notes("WaitingForNodeRoom") == []
    assert (
        "Slurm started job 100 on sn-1 but Node n1 has no room" in world.kube.notes("PlacementRejected")[-1]
    )
    assert (100, None) in world.slurm.cancelled()
    assert world.slurm.raw_jobs[101]["excluded_nodes"] == "sn-1"
    assert annotation(world, key, "avoid-nodes") is None  # left out only while the slurmd Pod is so big


async def test_issue53_a_pod_too_big_for_every_node_is_told_what_the_largest_lacks_first() -> None:
    world = cluster()
    world.add_node("n3", slurm_node="sn-3", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    key = world.create(pod("huge", cpu="6", memory="256Mi"))
    await world.reconcile(key)
    assert world.slurm.submitted() == []
    message = (world.condition(key) or {})["message"]
    assert message.startswith(
        "no Slurm node can host this Pod: Node n3 has no room for the Pod in the kubelet's count: it asks "
        "cpu 6, 4 is free of 4 allocatable"
    )
    assert "(the largest Node); Node n1 has no room" in message


async def test_r4_3_the_second_of_two_jobs_slurm_starts_on_one_node_is_not_bound_beside_the_first() -> None:
    """Catches the storm's start: both jobs were submitted while the node had room for one,
    Slurm started both there, and the second binding must count the first."""
    world = cluster()
    first, second = world.create(pod("a", cpu="600m")), world.create(pod("b", cpu="600m"))
    await world.reconcile(first)
    await world.reconcile(second)
    world.slurm.start(100, "sn-1")
    world.slurm.start(101, "sn-1")
    await world.reconcile(first)
    await world.reconcile(second)
    assert world.pod(first)["spec"]["nodeName"] == "n1"
    assert "nodeName" not in world.pod(second)["spec"]
    assert "Node n1 has no room" in world.kube.notes("WaitingForNodeRoom")[-1]
    world.finish(first)
    await world.reconcile(second)
    assert world.pod(second)["spec"]["nodeName"] == "n1"


async def test_r4_3_a_pod_being_bound_counts_before_the_informer_shows_it() -> None:
    """Catches two bindings in one burst both fitting in the room of one: the first is not
    in the cache yet when the second is checked."""
    world = cluster()
    key = world.create(web())
    await world.reconcile(key)
    elsewhere = pod("elsewhere", cpu="600m", memory="256Mi")
    world.create(elsewhere)  # the cache shows it unbound still
    world.pod_controller.places.placing(elsewhere, "n1")  # bound a moment ago
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert "nodeName" not in world.pod(key)["spec"]
    assert "(1600m requested by the slurmd and placed Pods)" in world.kube.notes("WaitingForNodeRoom")[-1]


async def test_issue53_a_pod_bound_and_gone_before_the_next_look_holds_no_room() -> None:
    """Catches a phantom on a Node: a Pod this process bound, deleted before any room check
    looked again, was counted there until PLACING_TTL_S (30 s) had passed, so the next Pod
    Slurm started on that node waited that long for room that was free."""
    world = cluster()
    key = world.create(web())
    await world.reconcile(key)
    gone = world.create(pod("gone", cpu="600m", memory="256Mi"))
    world.pod_controller.places.placing(world.pod(gone), "n1")
    world.remove(gone)
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert world.pod(key)["spec"]["nodeName"] == "n1"


async def test_r4_3_terminating_pods_still_take_room_and_finished_ones_do_not() -> None:
    """Catches counting as the API server lists instead of as the kubelet admits: a Pod
    being deleted still runs there; one that has ended holds nothing."""
    world = cluster()
    other = running_on(world, "other", "n1")
    world.kube.delete_by_user("ns", "other")
    key = world.create(web())
    await world.reconcile(key)
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert world.pod(other)["metadata"].get("deletionTimestamp")
    assert "nodeName" not in world.pod(key)["spec"]
    world.finish(other, "Failed")
    await world.reconcile(key)
    assert world.pod(key)["spec"]["nodeName"] == "n1"


async def test_r4_3_a_slurmd_pod_requesting_the_whole_node_leaves_no_room() -> None:
    """Catches trusting Slurm's count where the kubelet's differs: the slurmd Pod's own
    request is what the kubelet holds for it."""
    world = World()
    world.add_node("n1", slurm_node="sn-1", allocatable=TWO_CPUS, slurmd_requests={"cpu": "2"})
    world.add_node("n2", slurm_node="sn-2", allocatable=TWO_CPUS)
    key = world.create(web())
    await world.reconcile(key)
    assert world.slurm.raw_jobs[100]["excluded_nodes"] == "sn-1"


async def test_r4_3_a_node_that_reports_no_allocatable_is_not_judged() -> None:
    """Catches ruling out every Node whose status is not known: only what a Node reports is
    checked (`sunk.kube.noderoom`)."""
    world = World()
    world.add_node("n1", slurm_node="sn-1", slurmd_requests={"cpu": "64"})
    key = world.create(web())
    await world.reconcile(key)
    assert world.slurm.raw_jobs[100]["excluded_nodes"] == ""


def test_r4_3_a_pod_leaving_a_node_or_ending_frees_room_one_running_or_terminating_does_not() -> None:
    """Catches pending jobs keeping a node left out for want of room after the room is back
    (the scheduler looks at them again when one of its Pods leaves a Node)."""
    bound = pod("a")
    bound["spec"]["nodeName"] = "n1"
    bound["status"]["phase"] = "Running"
    ended = copy.deepcopy(bound)
    ended["status"]["phase"] = "Succeeded"
    terminating = copy.deepcopy(bound)
    terminating["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    assert frees_room("DELETED", bound) and frees_room("MODIFIED", ended)
    assert not frees_room("MODIFIED", bound) and not frees_room("MODIFIED", terminating)
    assert not frees_room("DELETED", pod("unbound"))


def test_r4_3_allocatable_and_a_slurmd_pods_requests_are_what_placement_reads() -> None:
    """Catches a Node growing (a device plugin registering GPUs) or a slurmd Pod asking less
    without the pending jobs that left it out being looked at again."""
    assert node_inputs(node("n1", allocatable=TWO_CPUS)) != node_inputs(node("n1", allocatable={"cpu": "4"}))
    small, big = (
        slurmd_pod("sn-1", "n1", requests={"cpu": "1"}),
        slurmd_pod("sn-1", "n1", requests={"cpu": "2"}),
    )
    assert slurmd_inputs(small) != slurmd_inputs(big)
    assert slurmd_inputs(small) == slurmd_inputs(copy.deepcopy(small))


async def test_r9_1_a_group_refused_for_want_of_room_leaves_no_member_counted_as_placed() -> None:
    """Catches a released group's members still counted on their Nodes (for room, affinity
    and spread) for PLACING_TTL_S after none of them was bound: the first member passed its
    check, the second found no room beside it."""
    world = cluster()
    world.add_podgroup("g", 2)
    for name in ("a", "b"):
        world.create(pod(name, cpu="600m", labels={gang.GROUP_LABEL: "g"}))
    await world.reconcile("ns/a")
    world.slurm.start(100, "sn-1")
    world.slurm.start(101, "sn-1", started=False)
    await world.reconcile("ns/a")
    assert [world.pod(k)["spec"].get("nodeName") for k in ("ns/a", "ns/b")] == [None, None]
    assert "Node n1 has no room" in world.kube.notes("PlacementRejected")[-1]
    assert world.pod_controller.places.placed(pod("someone-else")) == []


def test_r4_3_the_sums_per_node_follow_the_cache_as_pods_come_change_and_go() -> None:
    """Catches sums that drift from the cache (a Pod gone, moved, finished or resized still
    counted where it was), which would rule a Node out for good or let it overfill."""
    cache = MemoryCache()
    sums = NodeSums(lambda: cache.store.items())
    chance = random.Random(7)
    for step in range(400):
        name = f"p{chance.randrange(12)}"
        if chance.random() < 0.2:
            cache.store.pop(f"ns/{name}", None)
        else:
            manifest = pod(name, cpu=f"{chance.randrange(1, 9) * 100}m")
            manifest["spec"]["nodeName"] = chance.choice(["n1", "n2", "n3", None])
            manifest["status"]["phase"] = chance.choice(
                ["Pending", "Running", "Running", "Succeeded", "Failed"]
            )
            cache.put(manifest)
        if step % 3 == 0:
            expected = {
                n: noderoom.tally(p for p in cache.store.values() if p["spec"].get("nodeName") == n)
                for n in ("n1", "n2", "n3")
            }
            assert sums.look() == {n: t for n, t in expected.items() if t.pods}, step


async def test_r9_1_a_groups_job_does_not_leave_out_a_node_that_its_own_pods_fill_for_now() -> None:
    """Catches a PodGroup that could never start once another Pod on a node ends: its job
    left that node out (no room beside the other Pod) and, never widened, waited for its
    timeout while Slurm, which counts that Pod's job too, would have started it there."""
    world = cluster()
    running_on(world, "blocker", "n1", cpu="900m")
    world.add_podgroup("g", 2)
    for name in ("a", "b"):
        world.create(pod(name, cpu="900m", labels={gang.GROUP_LABEL: "g"}))
    await world.reconcile("ns/a")
    jobs = list(world.slurm.raw_jobs.values())
    assert len(jobs) == 2 and all(job["excluded_nodes"] == "" for job in jobs)


async def test_r9_1_a_groups_job_leaves_out_a_node_whose_slurmd_pod_leaves_no_room() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1", allocatable=TWO_CPUS, slurmd_requests={"cpu": "1900m"})
    world.add_node("n2", slurm_node="sn-2", allocatable=TWO_CPUS, slurmd_requests={"cpu": "1"})
    world.add_podgroup("g", 1)
    world.create(pod("a", cpu="500m", labels={gang.GROUP_LABEL: "g"}))
    await world.reconcile("ns/a")
    [job] = world.slurm.raw_jobs.values()
    assert job["excluded_nodes"] == "sn-1"


async def test_r9_1_a_member_kept_out_by_a_terminating_pod_waits_for_it_with_the_group() -> None:
    """Catches a group whose members were told to avoid, for good, each node where a Pod of
    an earlier test or job was still terminating when Slurm started the group: node by
    node, the group ran out of nodes and never bound. Nor is the group's job given up for
    room that comes back once that Pod is gone (issue #53): no member is bound until then."""
    world = cluster()
    going = running_on(world, "going", "n1", cpu="900m")
    world.kube.delete_by_user("ns", "going")
    world.add_podgroup("g", 2)
    member, other = (world.create(pod(n, cpu="600m", labels={gang.GROUP_LABEL: "g"})) for n in ("a", "b"))
    await world.reconcile(member)
    world.slurm.start(100, "sn-1")
    world.slurm.start(101, "sn-2")
    await world.reconcile(member)
    assert [world.pod(k)["spec"].get("nodeName") for k in (member, other)] == [None, None]
    assert world.kube.notes("PlacementRejected") == [] and world.slurm.cancelled() == []
    assert "Node n1 has no room" in world.kube.notes("WaitingForNodeRoom")[-1]
    assert (world.condition(member) or {})["reason"] == "WaitingForNodeRoom"
    assert annotation(world, member, "avoid-nodes") is None
    world.remove(going)
    await world.reconcile(member)
    assert [world.pod(k)["spec"].get("nodeName") for k in (member, other)] == ["n1", "n2"]


async def test_r9_1_a_member_without_room_beside_its_own_group_avoids_the_node() -> None:
    """Catches the storm again for groups: Slurm, counting the slurmd Pod's limit, puts two
    members where the kubelet has room for one, and would do so for every new job."""
    world = cluster()
    world.add_podgroup("g", 2)
    first, second = (world.create(pod(n, cpu="600m", labels={gang.GROUP_LABEL: "g"})) for n in ("a", "b"))
    await world.reconcile(first)
    world.slurm.start(100, "sn-1")
    world.slurm.start(101, "sn-1")
    await world.reconcile(first)
    assert [world.pod(k)["spec"].get("nodeName") for k in (first, second)] == [None, None]
    assert world.kube.notes("PlacementRejected")[-1].endswith("the group gets a new job avoiding it")
    assert annotation(world, second, "avoid-nodes") == "sn-1"
