"""The Slurm-node controller through in-memory Kubernetes and Slurm: drains that follow
cordons (R9.4) and one Event per drain (R5.3), with every write failing once."""

from __future__ import annotations

from sunk.decide import cordon_drain_reason, kill_wait_drain_reason
from sunk.kube.client import KubeError
from sunk.slurm.errors import SlurmUnavailable
from sunk.testing.scheduler import World, pod
from sunk.translate import PodRef


def drained_by_admin(world: World, slurm_node: str = "sn-1") -> None:
    raw = world.slurm.raw_nodes[slurm_node]
    raw["state"] = ["IDLE", "DRAIN"]
    raw["reason"] = "bad DIMM"
    raw["reason_changed_at"] = 1_800_000_000


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
