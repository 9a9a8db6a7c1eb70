"""The Pod controller through in-memory Kubernetes and Slurm: each step of a Pod's life,
and each failure of either side on each write. Named after the requirement checked."""

from __future__ import annotations

from sunk.testing.scheduler import World, pod


async def test_r4_1_a_valid_pod_gets_one_job_and_its_id() -> None:
    world = World()
    world.add_node("n1")
    key = world.create(pod())
    await world.reconcile(key)
    assert world.slurm.submitted() == [100]
    assert world.job_id(key) == 100
    assert "PlaceholderSubmitted" in world.kube.reasons("web")


async def test_r4_3_a_started_job_binds_its_pod_to_the_node_hosting_its_slurm_node() -> None:
    world = World()
    world.add_node("n1", slurm_node="sn-1")
    key = world.create(pod())
    await world.reconcile(key)
    world.slurm.start(100, "sn-1")
    await world.reconcile(key)
    assert world.pod(key)["spec"]["nodeName"] == "n1"
    assert world.kube.reasons("web")[-1] == "Scheduled"
