"""Demand mode (R10.5): a NodeSet that grows while jobs in its partitions wait for
resources and shrinks members idle for longer than a delay, from Slurm's own queue, through
the same creation and job-safe removal paths as a `kubectl scale`."""

from __future__ import annotations

from tests.fakes.operator_world import OperatorWorld

DEMAND = {"minReplicas": 1, "maxReplicas": 3, "idleAfter": "10m"}


async def burst() -> OperatorWorld:
    world = OperatorWorld()
    for i in range(1, 5):
        world.add_node(f"node-{i}", f"10.64.{i}.{i + 10}")
    world.add_nodeset("b", demand=dict(DEMAND))
    await world.settle("b")
    assert list(world.members("b")) == ["b-001-011"]  # minReplicas to start with
    return world


def demand_status(world: OperatorWorld) -> dict[str, object]:
    return dict(world.status("b")["demand"])


async def test_r10_5_demand_grows_by_the_jobs_waiting_in_its_partitions_up_to_the_maximum() -> None:
    world = await burst()
    world.slurm.run_job("b-001-011")
    for _ in range(4):
        world.slurm.queue_job("batch")
    await world.settle("b")
    assert len(world.members("b")) == 3  # 1 + 4 waiting, bounded by maxReplicas 3
    assert demand_status(world)["replicas"] == 3 and demand_status(world)["waitingJobs"] == 4
    [note] = world.kube.notes("ScalingUp")
    assert note == "4 jobs wait for resources in batch: growing from 1 to 3 members (maxReplicas 3)"


async def test_r10_5_demand_does_not_grow_again_while_new_members_register() -> None:
    world = await burst()
    world.slurm.run_job("b-001-011")
    world.slurm.queue_job("batch")
    await world.reconcile("b")  # decides 2
    await world.reconcile("b")  # creates the second member, which has not registered yet
    await world.reconcile("b")
    assert demand_status(world)["replicas"] == 2 and len(world.members("b")) == 2


async def test_r10_5_demand_does_not_grow_while_a_member_is_idle() -> None:
    world = await burst()
    world.slurm.queue_job("batch")  # b-001-011 is idle: Slurm will start it there
    await world.settle("b")
    assert len(world.members("b")) == 1 and not world.kube.notes("ScalingUp")


async def test_r10_5_jobs_waiting_in_other_partitions_do_not_grow_it() -> None:
    world = await burst()
    world.slurm.run_job("b-001-011")
    world.slurm.queue_job("other")
    world.slurm.queue_job("batch", reason="Dependency")  # more nodes would not start it
    await world.settle("b")
    assert len(world.members("b")) == 1


async def test_r10_5_demand_shrinks_members_idle_longer_than_the_delay_job_safely() -> None:
    world = await burst()
    world.slurm.run_job("b-001-011")
    world.slurm.queue_job("batch")
    world.slurm.queue_job("batch")
    await world.settle("b")
    assert len(world.members("b")) == 3
    world.slurm.raw_jobs.clear()
    world.slurm.end_jobs("b-001-011")
    world.slurm.run_job("b-002-012")  # still busy: it stays
    await world.settle("b")
    assert len(world.members("b")) == 3  # idle, but not for 10 minutes yet
    assert (await world.reconcile("b")).requeue_after is not None  # looked at again as time passes
    world.now = "2026-11-24T12:10:01Z"
    await world.settle("b")
    assert sorted(world.members("b")) == ["b-002-012"]  # two idle ones went; the busy one stays
    assert demand_status(world)["replicas"] == 1
    [note] = world.kube.notes("ScalingDown")
    assert note.startswith("2 members idle for 600 s or more and no job waits: shrinking from 3 to 1")


async def test_r10_5_demand_never_shrinks_below_the_minimum_or_while_jobs_wait() -> None:
    world = await burst()
    world.now = "2026-11-24T13:00:00Z"
    await world.settle("b")
    assert len(world.members("b")) == 1  # idle for an hour, but the minimum is 1
    world.spec("b")["demand"]["minReplicas"] = 0
    world.slurm.queue_job("other-partition-only")
    world.slurm.queue_job("batch", reason="Priority")
    world.now = "2026-11-24T14:00:00Z"
    await world.settle("b")
    assert len(world.members("b")) == 1  # a job waits in its partition


async def test_r10_5_a_restarted_operator_keeps_the_size_demand_decided() -> None:
    world = await burst()
    world.slurm.run_job("b-001-011")
    world.slurm.queue_job("batch")
    await world.settle("b")
    world.controller = world.new_controller()
    world.slurm.raw_jobs.clear()
    world.slurm.run_job("b-001-011")
    world.slurm.run_job("b-002-012")
    await world.settle("b")
    assert len(world.members("b")) == 2 and demand_status(world)["replicas"] == 2


async def test_r10_5_a_demand_maximum_below_the_minimum_is_refused_naming_the_field() -> None:
    world = await burst()
    world.spec("b")["demand"] = {"minReplicas": 3, "maxReplicas": 2}
    await world.settle("b")
    assert (
        "spec.demand.maxReplicas: 2 is below spec.demand.minReplicas (3)"
        in world.condition("b", "Valid")["message"]
    )
    assert len(world.members("b")) == 1
