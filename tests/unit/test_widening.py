"""A pending job never keeps leaving out nodes that can host its Pod now (R9.4): the Pod
controller widens it, whatever the placement policy."""

from __future__ import annotations

from tests.fakes.scheduler_world import World, pod


async def submitted_while_cordoned(world: World) -> str:
    world.add_node("n1", slurm_node="sn-1", cordoned=True)
    world.add_node("n2", slurm_node="sn-2", cordoned=True)
    world.add_node("n3", slurm_node="sn-3")
    key = world.create(pod())
    await world.reconcile(key)
    assert world.slurm.raw_jobs[100]["excluded_nodes"] == "sn-1,sn-2"
    world.slurm.wait(100, "Resources")
    return key


async def test_r9_4_a_pending_job_gets_back_nodes_uncordoned_after_its_submission() -> None:
    world = World()
    key = await submitted_while_cordoned(world)
    world.cordon("n1", False)
    world.cordon("n2", False)
    await world.reconcile(key)
    assert ("set_excluded_nodes", 100, ()) in world.slurm.calls
    assert world.slurm.raw_jobs[100]["excluded_nodes"] == ""
    note = world.kube.notes("PlacementWidened")[-1]
    assert "Slurm job 100 may now use 2 node(s) it had left out (sn-1, sn-2)" in note


async def test_r9_4_only_the_nodes_usable_again_are_given_back() -> None:
    world = World()
    key = await submitted_while_cordoned(world)
    world.cordon("n2", False)
    await world.reconcile(key)
    assert world.slurm.raw_jobs[100]["excluded_nodes"] == "sn-1"


async def test_r9_4_a_job_whose_exclusions_still_hold_is_not_updated() -> None:
    world = World()
    key = await submitted_while_cordoned(world)
    await world.reconcile(key)
    await world.reconcile(key)
    assert not [call for call in world.slurm.calls if call[0] == "set_excluded_nodes"]
    assert "PlacementWidened" not in world.kube.reasons()


async def test_r4_3_a_node_cordoned_after_submission_is_still_refused_at_bind_time() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    key = world.create(pod())
    await world.reconcile(key)
    world.cordon("n1")
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert "nodeName" not in world.pod(key)["spec"]
    assert "PlacementRejected" in world.kube.reasons()
    assert (100, None) in world.slurm.cancelled()


async def test_r9_4_a_widen_refused_because_the_job_started_is_tried_on_the_next_pass() -> None:
    from sunk.slurm.errors import SlurmError

    world = World()
    key = await submitted_while_cordoned(world)
    world.cordon("n1", False)
    world.slurm.fail("set_excluded_nodes", SlurmError("Job is no longer pending execution"))
    outcome = await world.reconcile(key)
    assert outcome.requeue_after == 1
    assert "PlacementWidened" not in world.kube.reasons()


def test_r9_4_a_cordon_or_a_slurmd_pod_moving_is_a_change_placement_sees_a_heartbeat_is_not() -> None:
    from sunk.scheduler.app import node_inputs, slurmd_inputs
    from tests.fakes.scheduler_world import node, slurmd_pod

    ready = node("n1")
    heartbeat = {**ready, "status": {**ready["status"], "heartbeatTime": "later"}}
    assert node_inputs(heartbeat) == node_inputs(ready)
    assert node_inputs(node("n1", cordoned=True)) != node_inputs(ready)
    assert node_inputs(node("n1", ready=False)) != node_inputs(ready)
    assert slurmd_inputs(slurmd_pod("sn-1", "n1")) != slurmd_inputs(slurmd_pod("sn-1", "n2"))
