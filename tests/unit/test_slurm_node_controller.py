"""The Slurm-node controller through in-memory Kubernetes and Slurm: drains that follow
cordons (R9.4) and one Event per drain (R5.3), with every write failing once."""

from __future__ import annotations

import time
from typing import Any

from sunk.kube.client import KubeError
from sunk.scheduler.decide.drains import cordon_drain_reason, kill_wait_drain_reason
from sunk.scheduler.translate import PodRef
from sunk.slurm.errors import SlurmUnavailable
from tests.fakes.scheduler_world import PREFIX, World, pod


def drained_by_admin(world: World, slurm_node: str = "sn-1") -> None:
    raw = world.slurm.raw_nodes[slurm_node]
    raw["state"] = ["IDLE", "DRAIN"]
    raw["reason"] = "bad DIMM"
    raw["reason_changed_at"] = 1_800_000_000


def taken_out_by_slurm(
    world: World, reason: str = "Duplicate jobid", state: tuple[str, ...] = ("IDLE", "DRAIN")
) -> None:
    """Slurm itself takes sn-1 out of use, now, with `reason`."""
    raw = world.slurm.raw_nodes["sn-1"]
    raw["state"] = list(state)
    raw["reason"] = reason
    raw["reason_changed_at"] = int(time.time())


async def running_on_sn_1() -> tuple[World, str]:
    """A Pod bound to n1, its job 100 running on Slurm node sn-1."""
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    key = world.create(pod())
    await world.reconcile(key)
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert world.pod(key)["spec"]["nodeName"] == "n1"
    return world, key


def pod_drain_events(world: World) -> list[dict[str, Any]]:
    return [e for e in world.kube.events if e["reason"] == "NodeDrained" and e["regarding"]["kind"] == "Pod"]


async def test_r9_4_a_cordoned_node_is_drained_with_a_reason_naming_it() -> None:
    world = World(drain_cordoned=True)
    world.add_node("n1", slurm_node="sn-1", cordoned=True)
    await world.reconcile_nodes()
    assert ("drain", "sn-1", "sunk: Node n1 is cordoned in Kubernetes") in world.slurm.calls


async def test_r9_4_cordons_are_left_alone_without_drain_cordoned_nodes() -> None:
    world = World(drain_cordoned=False)
    world.add_node("n1", slurm_node="sn-1", cordoned=True)
    await world.reconcile_nodes()
    assert not [c for c in world.slurm.calls if c[0] == "drain"]


async def test_r9_4_an_uncordoned_node_sunk_drained_is_resumed() -> None:
    world = World(drain_cordoned=True)
    world.add_node("n1", slurm_node="sn-1", cordoned=True)
    await world.reconcile_nodes()
    world.cordon("n1", False)
    await world.reconcile_nodes()
    assert ("resume", "sn-1") in world.slurm.calls


async def test_r9_4_an_administrators_drain_is_never_resumed() -> None:
    world = World(drain_cordoned=True)
    world.add_node("n1", slurm_node="sn-1")
    drained_by_admin(world)
    await world.reconcile_nodes()
    assert not [c for c in world.slurm.calls if c[0] == "resume"]


async def test_r9_4_a_drain_slurm_refuses_is_tried_again_later() -> None:
    world = World(drain_cordoned=True)
    world.add_node("n1", slurm_node="sn-1", cordoned=True)
    world.slurm.fail("drain", SlurmUnavailable("slurmctld is not answering"))
    outcomes = await world.reconcile_nodes()
    assert outcomes["sn-1"].requeue_after is not None
    await world.reconcile_nodes()
    assert ("drain", "sn-1", cordon_drain_reason("n1")) in world.slurm.calls


async def test_r5_3_a_drain_is_explained_once_on_the_node_hosting_it() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    drained_by_admin(world)
    await world.reconcile_nodes()
    await world.reconcile_nodes()
    events = [e for e in world.kube.events if e["reason"] == "NodeDrained"]
    assert len(events) == 1
    assert events[0]["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1"}
    assert "bad DIMM" in events[0]["note"]


async def test_r5_3_a_kill_wait_drain_is_explained_on_the_pod_that_outlived_its_job() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    world.create(pod("late"))
    raw = world.slurm.raw_nodes["sn-1"]
    raw["state"] = ["MIXED", "DRAIN"]
    raw["reason"] = kill_wait_drain_reason(PodRef("ns", "late", "uid-late"), 7)
    await world.reconcile_nodes()
    (event,) = [e for e in world.kube.events if e["reason"] == "NodeDrained"]
    assert event["regarding"]["kind"] == "Pod"
    assert event["regarding"]["name"] == "late"
    assert event["regarding"]["uid"] == "uid-late"


async def test_r5_3_another_schedulers_pod_drain_is_left_to_it() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    raw = world.slurm.raw_nodes["sn-1"]
    raw["state"] = ["MIXED", "DRAIN"]
    raw["reason"] = kill_wait_drain_reason(PodRef("elsewhere", "late", "u"), 7)
    await world.reconcile_nodes()
    assert "NodeDrained" not in world.kube.reasons()


async def test_r8_2_the_api_server_down_while_a_drain_is_explained_delays_the_event() -> None:
    """Was: aiohttp's connection error escaped the poller and the scheduler exited."""
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    drained_by_admin(world)
    world.kube.fail("create_event", KubeError(0, "ClientConnectorError: connection refused"))
    outcomes = await world.reconcile_nodes()
    assert outcomes["sn-1"].requeue_after is not None
    assert "NodeDrained" not in world.kube.reasons()
    await world.reconcile_nodes()
    assert world.kube.reasons() == ["NodeDrained"]


async def test_r5_3_a_drain_recorded_before_a_restart_is_not_recorded_again() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    drained_by_admin(world)
    await world.reconcile_nodes()
    restarted = World(kube=world.kube, slurm=world.slurm, nodes=world.nodes, slurmd=world.slurmd)
    outcomes = await restarted.reconcile_nodes()
    assert outcomes["sn-1"].requeue_after is None
    assert world.kube.reasons() == ["NodeDrained"]


async def test_r5_3_a_node_drained_again_later_gets_a_new_event() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    drained_by_admin(world)
    await world.reconcile_nodes()
    world.slurm.raw_nodes["sn-1"]["reason_changed_at"] = 1_800_000_100
    await world.reconcile_nodes()
    assert world.kube.reasons() == ["NodeDrained", "NodeDrained"]


async def test_r9_4_a_node_slurm_no_longer_lists_is_left_alone() -> None:
    world = World(drain_cordoned=True)
    world.add_node("n1", slurm_node="sn-1", cordoned=True)
    del world.slurm.raw_nodes["sn-1"]
    await world.reconcile_nodes()
    outcome = await world.node_controller.reconcile("sn-1")
    assert outcome.requeue_after is None
    assert not [c for c in world.slurm.calls if c[0] == "drain"]


async def test_r9_4_a_drain_an_administrator_made_since_the_listing_is_never_overridden() -> None:
    """Was: a listing taken just before the admin's drain made sunk drain the node again
    with its own reason, and resume it (the admin's drain lost) once the Node was uncordoned."""
    world = World(drain_cordoned=True)
    world.add_node("n1", slurm_node="sn-1")
    await world.list_nodes()  # Slurm's listing: sn-1 in use, not drained
    drained_by_admin(world)  # then the administrator drains it…
    world.cordon("n1")  # …and the Node is cordoned
    await world.node_controller.reconcile("sn-1")
    assert not [c for c in world.slurm.calls if c[0] == "drain"]
    assert world.slurm.raw_nodes["sn-1"]["reason"] == "bad DIMM"


async def test_r5_3_a_drain_slurm_made_while_the_scheduler_was_down_is_explained_once_on_its_pod() -> None:
    """Was: Slurm's own drains were told only on the Node, so the Pod whose job Slurm killed
    for a "Duplicate jobid" said only that its job was cancelled."""
    world, _ = await running_on_sn_1()
    world.slurm.end(100)  # while the scheduler is down, Slurm kills job 100 and drains sn-1
    taken_out_by_slurm(world)
    restarted = world.restarted()
    await restarted.list_jobs()
    await restarted.reconcile_nodes()
    await restarted.reconcile_nodes()
    (event,) = pod_drain_events(world)
    assert event["regarding"]["name"] == "web" and event["regarding"]["uid"] == "uid-web"
    assert "Duplicate jobid" in event["note"] and "job 100" in event["note"] and "sn-1" in event["note"]


async def test_r5_3_a_pod_whose_job_still_runs_on_a_node_slurm_drained_is_told() -> None:
    world, _ = await running_on_sn_1()
    taken_out_by_slurm(world, "Kill task failed")
    await world.list_jobs()
    await world.reconcile_nodes()
    (event,) = pod_drain_events(world)
    assert "Kill task failed" in event["note"] and "job 100 runs" in event["note"]


async def test_r5_3_a_pod_whose_job_ended_before_the_drain_is_not_told() -> None:
    world, _ = await running_on_sn_1()
    world.slurm.end(100)
    world.slurm.raw_jobs[100]["end_time"] = {"set": True, "number": int(time.time()) - 60}
    taken_out_by_slurm(world)
    await world.list_jobs()
    await world.reconcile_nodes()
    assert pod_drain_events(world) == []


async def test_r5_3_a_restarted_scheduler_does_not_tell_a_pod_again_of_a_drain_told_before() -> None:
    """Even once the API server has dropped that Event (Events last an hour, drains may last
    days), so its name alone can no longer refuse a second one: the Pod says it was told."""
    world, key = await running_on_sn_1()
    taken_out_by_slurm(world, "Prolog error")
    await world.list_jobs()
    await world.reconcile_nodes()
    assert len(pod_drain_events(world)) == 1
    world.kube.events.clear()
    restarted = world.restarted()
    await restarted.list_jobs()
    await restarted.reconcile_nodes()
    assert pod_drain_events(world) == []
    assert world.pod(key)["metadata"]["annotations"][PREFIX + "drain-explained"].startswith("web.drained.")


async def test_r5_3_a_pod_that_cannot_be_marked_yet_is_marked_later_with_one_event() -> None:
    world, key = await running_on_sn_1()
    taken_out_by_slurm(world)
    await world.list_jobs()
    world.kube.fail("patch_pod")
    outcomes = await world.reconcile_nodes()
    assert outcomes["sn-1"].requeue_after is not None
    await world.reconcile_nodes()
    assert len(pod_drain_events(world)) == 1
    assert PREFIX + "drain-explained" in world.pod(key)["metadata"]["annotations"]


async def test_r5_3_a_node_slurm_set_down_as_not_responding_is_explained_on_the_node_and_its_pods() -> None:
    """Was: only drains were explained; a node Slurm set DOWN got no Event at all."""
    world, _ = await running_on_sn_1()
    world.slurm.end(100, "NODE_FAIL")
    taken_out_by_slurm(world, "Not responding", state=("DOWN", "NOT_RESPONDING"))
    await world.list_jobs()
    await world.reconcile_nodes()
    notes = {e["regarding"]["kind"]: e["note"] for e in world.kube.events if e["reason"] == "NodeDrained"}
    assert "sn-1 is down (Not responding)" in notes["Node"]
    assert "job 100 ran" in notes["Pod"]


async def test_r5_3_a_pod_told_before_a_restart_is_not_told_again_once_it_is_gone() -> None:
    """Its annotation goes with it; the restarted scheduler remembers what it read there, so
    no second Event is even tried (the first is cleared here to see one)."""
    world, key = await running_on_sn_1()
    taken_out_by_slurm(world)
    await world.list_jobs()
    await world.reconcile_nodes()
    restarted = world.restarted()
    await restarted.list_jobs()
    await restarted.reconcile_nodes()
    world.remove(key)
    world.kube.events.clear()
    await restarted.reconcile_nodes()
    assert pod_drain_events(world) == []
