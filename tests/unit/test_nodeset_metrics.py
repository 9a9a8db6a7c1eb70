"""The NodeSets' metrics (sunk.operator.nodeset.nodeset_metrics), read from what the controller's
passes computed, driven through the in-memory fakes (tests.fakes.operator_world)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from sunk.operator.nodeset.nodeset_metrics import NodeSetMetrics
from tests.fakes.operator_world import NOW_S, OperatorWorld


def world_with_nodes(count: int) -> OperatorWorld:
    world = OperatorWorld()
    for i in range(1, count + 1):
        world.add_node(f"node-{i}", f"10.64.{i}.{i + 10}")
    return world


class Scrape:
    def __init__(self, world: OperatorWorld, now: float = NOW_S) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(
            NodeSetMetrics(world.controller.observed, lambda: world.nodesets.store.keys(), clock=lambda: now)
        )

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)


async def test_a_settled_nodeset_is_all_desired_ready_and_up_to_date() -> None:
    world = world_with_nodes(2)
    world.add_nodeset("a", replicas=2, partitions=["batch"])
    await world.settle("a")
    scrape = Scrape(world)
    assert scrape.value("sunk_nodeset_replicas_desired", nodeset="a") == 2
    assert scrape.value("sunk_nodeset_replicas_ready", nodeset="a") == 2
    assert scrape.value("sunk_nodeset_replicas_up_to_date", nodeset="a") == 2
    assert scrape.value("sunk_nodeset_members", nodeset="a", state="idle") == 2
    assert scrape.value("sunk_nodeset_members", nodeset="a", state="down") == 0
    assert scrape.value("sunk_nodeset_not_ready_seconds", nodeset="a") == 0
    assert scrape.value("sunk_nodeset_not_up_to_date_seconds", nodeset="a") == 0
    assert scrape.value("sunk_nodeset_partition", nodeset="a", partition="batch") == 1
    assert scrape.value("sunk_nodeset_replicas_max", nodeset="a") is None  # not in demand mode


async def test_members_are_counted_by_slurm_state() -> None:
    """Catches members counted by Pod phase alone (a drained member would look fine)."""
    world = world_with_nodes(2)
    world.add_nodeset("a", replicas=2)
    await world.settle("a")
    world.slurm.run_job("a-001-011")
    world.slurm.drain_as_admin("a-002-012")
    await world.reconcile("a")
    scrape = Scrape(world)
    assert scrape.value("sunk_nodeset_members", nodeset="a", state="allocated") == 1
    assert scrape.value("sunk_nodeset_members", nodeset="a", state="drained") == 1
    assert scrape.value("sunk_nodeset_members", nodeset="a", state="idle") == 0


async def test_a_drain_held_by_a_running_job_shows_in_progress_and_the_nodeset_not_ready() -> None:
    """Catches a scale-in wedged behind a job looking like a settled NodeSet."""
    world = world_with_nodes(2)
    world.add_nodeset("a", replicas=2)
    await world.settle("a")
    world.slurm.run_job("a-001-011")
    world.slurm.run_job("a-002-012")
    world.spec("a")["replicas"] = 1
    await world.settle("a")
    scrape = Scrape(world, now=NOW_S + 600)
    assert scrape.value("sunk_nodeset_replicas_desired", nodeset="a") == 1
    assert scrape.value("sunk_nodeset_drains_in_progress", nodeset="a") == 1
    assert scrape.value("sunk_nodeset_replacements_in_progress", nodeset="a") == 1
    assert scrape.value("sunk_nodeset_not_ready_seconds", nodeset="a") == 600


async def test_a_roll_out_shows_members_not_up_to_date_and_for_how_long() -> None:
    """Catches a roll-out that never finishes reading as 0 seconds behind."""
    world = world_with_nodes(1)
    world.add_nodeset("a", replicas=1)
    await world.settle("a")
    world.slurm.run_job("a-001-011")  # holds the roll-out
    world.spec("a")["image"] = "registry.example/slurmd:24.11.1"
    await world.settle("a")
    scrape = Scrape(world, now=NOW_S + 90)
    assert scrape.value("sunk_nodeset_replicas_up_to_date", nodeset="a") == 0
    assert scrape.value("sunk_nodeset_not_up_to_date_seconds", nodeset="a") == 90


async def test_a_demand_nodeset_says_its_maximum() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("b", demand={"minReplicas": 1, "maxReplicas": 3, "idleAfter": "10m"})
    await world.settle("b")
    assert Scrape(world).value("sunk_nodeset_replicas_max", nodeset="b") == 3


async def test_a_deleted_nodesets_series_go_with_it() -> None:
    """Catches series of a NodeSet that no longer exists served for ever (stale alerts)."""
    world = world_with_nodes(1)
    world.add_nodeset("a", replicas=1)
    await world.settle("a")
    world.nodesets.store.clear()  # gone from the cache, before its last pass
    assert Scrape(world).value("sunk_nodeset_replicas_desired", nodeset="a") is None
    await world.reconcile("a")
    assert "slurm/a" not in world.controller.observed


async def test_an_invalid_nodeset_is_still_counted() -> None:
    """Catches an invalid NodeSet's members vanishing from the metrics."""
    world = world_with_nodes(1)
    world.add_nodeset("a", replicas=-1)
    await world.reconcile("a")
    scrape = Scrape(world)
    assert scrape.value("sunk_nodeset_replicas_ready", nodeset="a") == 0
    assert scrape.value("sunk_nodeset_partition", nodeset="a", partition="batch") is None
