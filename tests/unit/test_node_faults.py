"""Issue #51 points 5 and 6: a member's Node and its Slurm node, both ways.

A lost machine (its Node not Ready) has its member marked DOWN under the Node's Ready
condition, a Node fault condition (Node Problem Detector's) drains it, and both come back
when the Node is well again (through the health checks when they are on); a health
check's drain shows on the Node as the SlurmHealthCheck condition. Only `sunk-node: `
reasons are the operator's to set or lift (sunk.operator.nodeset.node_faults)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sunk.operator.config import node_conditions
from sunk.operator.nodeset import health_checks as hc
from sunk.operator.nodeset import node_faults as nf
from sunk.operator.nodeset.selection import member_nodeset
from tests.fakes.operator_world import CONFIG, OperatorWorld

Json = dict[str, Any]
MEMBER = "a-001-011"  # NodeSet a's member on node-1 (10.64.1.11)
LOST = {
    "type": "Ready",
    "status": "Unknown",
    "reason": "NodeStatusUnknown",
    "message": "Kubelet stopped posting node status.",
}
DEADLOCK = {
    "type": "KernelDeadlock",
    "status": "True",
    "reason": "DockerHung",
    "message": "task docker:7 blocked",
}


async def world(*, checks: bool = False, runner: bool = True) -> OperatorWorld:
    """One member on node-1, settled; the checks on (and mounted in it) when asked."""
    config = replace(CONFIG, node_conditions=nf.DEFAULT_CONDITIONS)
    if checks and runner:
        config = replace(config, health_checks_configmap="r1-health-checks")
    w = OperatorWorld(config=config)
    w.add_node("node-1", "10.64.1.11")
    w.add_nodeset("a", replicas=1)
    if checks and not runner:
        w.spec("a")["updateStrategy"] = {"type": "OnDelete"}  # the member made before stays
    await w.settle("a")
    if checks and not runner:
        w = w.restarted_with(replace(config, health_checks_configmap="r1-health-checks"))
    assert w.slurm.record(MEMBER).state == "idle"
    return w


def node(w: OperatorWorld) -> Json:
    found = w.nodes.get("node-1")
    assert found is not None
    return found


def set_condition(w: OperatorWorld, condition: Json) -> None:
    conditions = node(w)["status"]["conditions"]
    conditions[:] = [c for c in conditions if c["type"] != condition["type"]] + [condition]


def well_again(w: OperatorWorld) -> None:
    set_condition(w, {"type": "Ready", "status": "True", "reason": "KubeletReady"})
    set_condition(w, {**DEADLOCK, "status": "False", "reason": "KernelHasNoDeadlock", "message": ""})


def calls(w: OperatorWorld, kind: str) -> list[tuple[str, ...]]:
    return [c for c in w.slurm.calls if c[0] == kind]


async def test_issue51_a_lost_machines_member_is_marked_down_with_the_nodes_condition() -> None:
    """Catches: a member of a machine gone left up in Slurm until SlurmdTimeout, its jobs
    hanging, or marked without saying why."""
    w = await world()
    set_condition(w, LOST)
    await w.reconcile("a")
    reason = "sunk-node: Ready=Unknown (NodeStatusUnknown): Kubelet stopped posting node status."
    assert calls(w, "mark_down") == [("mark_down", MEMBER, reason)]
    assert w.slurm.record(MEMBER).state == "down"
    assert nf.NODE_LOST in w.kube.reasons()


async def test_issue51_a_lost_member_counts_as_down_in_the_nodesets_status() -> None:
    """Catches: the NodeSet's status counting a lost member as idle."""
    w = await world()
    set_condition(w, LOST)
    await w.reconcile("a")
    await w.reconcile("a")
    assert w.status("a")["slurm"]["down"] == 1
    assert len(calls(w, "mark_down")) == 1  # once, not every pass


async def test_issue51_the_unreachable_taint_does_not_move_a_member_off() -> None:
    """Catches: the node lifecycle controller's taint read as "the Node no longer
    qualifies", so a lost member is drained and deleted instead of coming back with its
    machine."""
    w = await world()
    set_condition(w, LOST)
    node(w)["spec"]["taints"] = [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
    ]
    await w.settle("a")
    assert calls(w, "drain") == [] and ("delete_pod", f"slurm/{MEMBER}") not in w.kube.calls
    assert [member_nodeset(p) for p in w.members().values()] == ["a"]


async def test_issue51_a_member_is_resumed_when_its_machine_is_back() -> None:
    """Catches: a member left DOWN after its Node is Ready again."""
    w = await world()
    set_condition(w, LOST)
    await w.reconcile("a")
    well_again(w)
    await w.reconcile("a")
    assert calls(w, "resume") == [("resume", MEMBER)]
    assert w.slurm.record(MEMBER).state == "idle"
    assert nf.NODE_BACK in w.kube.reasons()


async def test_issue51_with_checks_on_a_member_back_from_a_lost_machine_waits_for_them() -> None:
    """Catches: a machine back from the dead returned to jobs without one clean check."""
    w = await world(checks=True)
    set_condition(w, LOST)
    await w.reconcile("a")
    well_again(w)
    await w.reconcile("a")
    assert calls(w, "resume") == []
    assert w.slurm.record(MEMBER).reason == hc.verify_reason("a")


async def test_issue51_a_member_made_before_the_checks_is_resumed_after_a_lost_machine() -> None:
    """Catches: a hand-over to a member with no runner, which would stay drained for ever."""
    w = await world(checks=True, runner=False)
    set_condition(w, LOST)
    await w.reconcile("a")
    well_again(w)
    await w.reconcile("a")
    assert calls(w, "resume") == [("resume", MEMBER)]


@pytest.mark.parametrize(
    "reason", ["bad DIMM, ticket 42", "sunk-hc: gpus: sees 7 of 8 GPUs", "sunk: NodeSet b scales in"]
)
async def test_issue51_someone_elses_drain_is_not_replaced_by_a_down(reason: str) -> None:
    """Catches: a DOWN written over an administrator's, the checks' or the removal path's
    reason (Slurm keeps one reason per node), or lifted when the machine is back."""
    w = await world()
    w.slurm.drain_as_admin(MEMBER, reason)
    set_condition(w, LOST)
    await w.reconcile("a")
    well_again(w)
    await w.reconcile("a")
    assert calls(w, "mark_down") == [] and calls(w, "resume") == []
    assert w.slurm.record(MEMBER).reason == reason


async def test_issue51_slurms_own_down_is_left_to_slurm() -> None:
    """Catches: the operator rewriting or lifting Slurm's "Not responding" DOWN."""
    w = await world()
    w.slurm.update_node(MEMBER, state="down", reason="Not responding")
    set_condition(w, LOST)
    await w.reconcile("a")
    well_again(w)
    await w.reconcile("a")
    assert calls(w, "mark_down") == [] and calls(w, "resume") == []


async def test_issue51_a_fault_condition_drains_the_member_with_its_type_and_message() -> None:
    """Catches: a Node Problem Detector fault that leaves the member taking jobs."""
    w = await world()
    set_condition(w, DEADLOCK)
    await w.reconcile("a")
    assert calls(w, "drain") == [("drain", MEMBER, "sunk-node: KernelDeadlock: task docker:7 blocked")]
    await w.reconcile("a")
    assert len(calls(w, "drain")) == 1  # once, not every pass
    assert nf.NODE_FAULT in w.kube.reasons()


async def test_issue51_a_condition_not_listed_drains_nothing() -> None:
    """Catches: every True condition (a vendor's informational one) read as a fault."""
    w = await world()
    set_condition(w, {"type": "GPUDriverUpdated", "status": "True", "message": "570.1"})
    await w.reconcile("a")
    assert calls(w, "drain") == []


async def test_issue51_a_cleared_fault_returns_the_member() -> None:
    """Catches: a member left drained once its Node's fault cleared."""
    w = await world()
    set_condition(w, DEADLOCK)
    await w.reconcile("a")
    well_again(w)
    await w.reconcile("a")
    assert calls(w, "resume") == [("resume", MEMBER)]
    assert not w.slurm.record(MEMBER).drained


async def test_issue51_with_checks_on_a_cleared_fault_is_handed_to_them() -> None:
    """Catches: a cleared fault resumed without a clean check run."""
    w = await world(checks=True)
    set_condition(w, DEADLOCK)
    await w.reconcile("a")
    well_again(w)
    await w.reconcile("a")
    assert calls(w, "resume") == []
    assert w.slurm.record(MEMBER).reason == hc.verify_reason("a")


async def test_issue51_a_fault_leaves_an_administrators_drain_alone() -> None:
    """Catches: an administrator's reason replaced by the fault's, then lifted with it."""
    w = await world()
    w.slurm.drain_as_admin(MEMBER, "bad DIMM")
    set_condition(w, DEADLOCK)
    await w.reconcile("a")
    well_again(w)
    await w.reconcile("a")
    assert calls(w, "drain") == [] and calls(w, "resume") == []
    assert w.slurm.record(MEMBER).reason == "bad DIMM"


async def test_issue51_a_checks_drain_shows_on_the_node_as_a_condition() -> None:
    """Catches: a failing health check that Kubernetes never hears of."""
    w = await world()
    w.slurm.drain_as_admin(MEMBER, "sunk-hc: disk-space: /var/spool/slurmd has 12 MiB free")
    await w.reconcile("a")
    [condition] = [c for c in node(w)["status"]["conditions"] if c["type"] == nf.CONDITION]
    assert condition["status"] == "True" and condition["reason"] == "DiskSpace"
    assert condition["message"] == "sunk-hc: disk-space: /var/spool/slurmd has 12 MiB free"
    await w.reconcile("a")
    assert [c for c in w.kube.calls if c[0] == "patch_node_status"] == [("patch_node_status", "node-1")]


async def test_issue51_the_condition_turns_false_when_the_checks_lift_their_drain() -> None:
    """Catches: a Node still marked unhealthy after its checks passed again."""
    w = await world()
    w.slurm.drain_as_admin(MEMBER, "sunk-hc: mounts: /shared is missing")
    await w.reconcile("a")
    await w.slurm.resume(MEMBER)  # the runner's clean run
    await w.reconcile("a")
    [condition] = [c for c in node(w)["status"]["conditions"] if c["type"] == nf.CONDITION]
    assert condition["status"] == "False"


async def test_issue51_no_condition_is_written_for_a_hand_over_or_a_healthy_member() -> None:
    """Catches: the operator's own verify hand-over shown as a failed check, or a False
    condition written on every Node that never had one."""
    w = await world()
    await w.reconcile("a")
    w.slurm.drain_as_admin(MEMBER, hc.verify_reason("a"))
    await w.reconcile("a")
    assert [c for c in w.kube.calls if c[0] == "patch_node_status"] == []


def test_issue51_the_node_conditions_flag_refuses_ready_and_our_own_condition() -> None:
    """Catches: Ready listed as a fault (every healthy member drained) or the mirror of a
    check's drain read back as a fault of its own."""
    assert node_conditions(" KernelDeadlock,ReadonlyFilesystem ,") == ("KernelDeadlock", "ReadonlyFilesystem")
    for bad in ("Ready", "SlurmHealthCheck", "bad type"):
        with pytest.raises(ValueError, match="--node-conditions"):
            node_conditions(bad)
