"""A member is deleted only on what Slurm says at that moment (R10.5): the races the
operator fault run found (CI, seed 523764: a member deleted while job 8 ran, then a
record without a Pod that kept the NodeSet wedged). Each test plays one way the old
evidence could be stale."""

from __future__ import annotations

import dataclasses

import pytest

from sunk.kube.client import KubeError
from sunk.operator.nodeset import plan as p
from sunk.slurm.errors import SlurmError
from tests.fakes.operator_world import CONFIG, NAMESPACE, OperatorWorld
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_nodeset_removal import drains, pod_deletes, three_members


def resumes(world: OperatorWorld) -> list[str]:
    return [c[1] for c in world.slurm.calls if c[0] == "resume"]


async def test_r10_5_a_drain_lifted_while_the_pass_runs_keeps_the_member(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two drained, idle members go in one pass. The first deletion is slow (the API server
    frozen); meanwhile Slurm lost the second one's drain (slurmctld restarted from older
    state) and started a job there. The second deletion must not go out on the pass's
    listing."""
    world = await three_members()
    world.spec("a")["replicas"] = 1
    await world.reconcile("a")
    leaving = sorted(d[0] for d in drains(world))
    assert len(leaving) == 2
    delete = world.kube.delete_pod
    started: list[int] = []

    async def slow_delete(namespace: str, name: str, uid: str, *, grace_s: int | None = None) -> None:
        await delete(namespace, name, uid, grace_s=grace_s)
        if started or name not in leaving:
            return
        (other,) = [n for n in leaving if n != name]
        if world.slurm.record(other).drained:
            world.slurm.update_node(other, flags=(), reason="")
            started.append(world.slurm.run_job(other))

    monkeypatch.setattr(world.kube, "delete_pod", slow_delete)
    await world.reconcile("a")
    assert started, "the first deletion went out"
    (first,) = pod_deletes(world)
    (other,) = [n for n in leaving if n != first]
    assert other in world.members("a")
    await world.settle("a")  # busy now: the idle third member goes instead
    assert list(world.members("a")) == [other] and other not in pod_deletes(world)
    assert world.slurm.raw_jobs[started[0]]["job_state"] == ["RUNNING"]


async def test_r10_5_a_deletion_whose_answer_was_lost_never_gets_its_drain_lifted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API server deleted the Pod but the answer never came (a timeout, an operator
    frozen past it), and the watch has not brought the deletion yet. A scale back up must
    not lift the drain: its preStop may already have seen the node idle and let slurmd go,
    so a job Slurm started there would die with it."""
    world = await three_members()
    world.kube.hide_deletes = True
    world.spec("a")["replicas"] = 2
    await world.reconcile("a")
    (going,) = [d[0] for d in drains(world)]
    delete = world.kube.delete_pod

    async def answer_lost(namespace: str, name: str, uid: str, *, grace_s: int | None = None) -> None:
        await delete(namespace, name, uid, grace_s=grace_s)
        raise KubeError(0, "ServerTimeoutError: timeout on reading data from socket")

    monkeypatch.setattr(world.kube, "delete_pod", answer_lost)
    with pytest.raises(KubeError):
        await world.reconcile("a")
    assert pod_deletes(world) == [going]
    monkeypatch.setattr(world.kube, "delete_pod", delete)
    world.spec("a")["replicas"] = 3
    await world.reconcile("a")
    assert resumes(world) == []
    assert world.slurm.record(going).drained


async def test_r10_5_a_resume_whose_answer_was_lost_deletes_no_member_on_a_later_listing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scale in, back up, in again: the resume timed out but slurmctld carries it out later.
    A listing begun after the timeout still shows the node drained and idle; deleting the
    member on it would lose the job Slurm starts once the resume lands."""
    world = await three_members()
    world.spec("a")["replicas"] = 2
    await world.reconcile("a")
    (drained,) = [d[0] for d in drains(world)]

    async def timed_out(node: str) -> str | None:
        world.slurm.calls.append(("resume", node))
        return f"could not resume {node}: timed out"  # slurmctld still has it queued

    monkeypatch.setattr(world.slurm, "resume", timed_out)
    world.spec("a")["replicas"] = 3
    with pytest.raises(SlurmError):
        await world.reconcile("a")
    assert resumes(world) == [drained]
    monkeypatch.undo()
    world.spec("a")["replicas"] = 2
    await world.reconcile("a")  # a listing begun after the failed resume
    assert pod_deletes(world) == []
    await FakeSlurm.resume(world.slurm, drained)  # it lands
    world.slurm.run_job(drained)
    await world.settle("a")  # the busy member stays; an idle one goes instead
    assert drained in world.members("a") and drained not in pod_deletes(world)
    assert len(world.members("a")) == 2


async def test_r10_5_a_member_handed_to_the_health_checks_gets_our_drain_before_it_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scale in, back up (with the checks on, our drain is handed over as `sunk-hc: verify:`,
    which the runner inside the member lifts after its next clean run), in again: the
    member must carry the NodeSet's own drain when its Pod is deleted, or the runner can
    lift the drain under it and Slurm start a job there as slurmd stops."""
    world = OperatorWorld(config=dataclasses.replace(CONFIG, health_checks_configmap="r1-health-checks"))
    for i in range(1, 4):
        world.add_node(f"node-{i}", f"10.64.{i}.{i + 10}")
    world.add_nodeset("a", replicas=3)
    await world.settle("a")
    world.spec("a")["replicas"] = 2
    await world.reconcile("a")
    (going,) = [d[0] for d in drains(world)]
    world.spec("a")["replicas"] = 3
    await world.reconcile("a")
    assert world.slurm.record(going).reason.startswith("sunk-hc: verify: ")  # handed over
    delete = world.kube.delete_pod
    reasons: list[str] = []

    async def noting_the_drain(namespace: str, name: str, uid: str, *, grace_s: int | None = None) -> None:
        reasons.append(world.slurm.record(name).reason)
        await delete(namespace, name, uid, grace_s=grace_s)

    monkeypatch.setattr(world.kube, "delete_pod", noting_the_drain)
    for other in [n for n in world.members("a") if n != going]:
        world.slurm.run_job(other)  # so the handed-over member is the one to go
    world.spec("a")["replicas"] = 2
    for _ in range(4):
        await world.reconcile("a")
    assert pod_deletes(world) == [going]
    assert reasons == ["sunk: NodeSet a scales in"]


async def test_r10_5_a_record_left_busy_by_a_pod_that_is_gone_is_marked_down_and_replaced() -> None:
    """The Pod went while Slurm still counted work on its node (a completing job whose end
    no slurmd is left to report). The NodeSet wants a member on that Node again: the record
    is marked DOWN (Slurm lets go of the work), deleted, and a new member made; before, the
    new member waited for ever and the record outlived its Pod."""
    world = await three_members()
    gone = "a-003-013"
    world.pods.store.pop(f"{NAMESPACE}/{gone}")
    world.slurm.update_node(gone, flags=("COMPLETING", "DRAIN"), reason="x")
    await world.settle("a")
    downs = [c for c in world.slurm.calls if c[0] == "mark_down"]
    assert [c[1] for c in downs] == [gone]
    assert "the Pod of a-003-013 is gone" in downs[0][2]
    assert gone in world.members("a")
    assert not world.slurm.record(gone).drained and world.slurm.record(gone).state == "idle"
    assert world.condition("a", "Ready")["status"] == "True"
    assert any(e["reason"] == p.ORPHAN_DOWN for e in world.kube.events)


async def test_r10_5_a_record_whose_pod_is_gone_but_a_job_still_runs_is_left_to_slurm() -> None:
    """A job Slurm lists running on a record without a Pod is not ended by the operator:
    Slurm's own SlurmdTimeout decides (the record is kept, nothing is marked DOWN)."""
    world = await three_members()
    gone = "a-003-013"
    world.slurm.run_job(gone)
    world.pods.store.pop(f"{NAMESPACE}/{gone}")
    await world.settle("a")
    assert not [c for c in world.slurm.calls if c[0] == "mark_down"]
    assert gone not in world.members("a") and gone in world.slurm.raw_nodes
