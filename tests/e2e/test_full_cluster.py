"""Issue #53: a Pod that arrives while every Node is full in the kubelet's count still gets
a Slurm job, waits in Slurm's queue (and may preempt), and is bound once room is back on
the node Slurm chose."""

from __future__ import annotations

from typing import Any

import pytest

from sunk_dev import topology
from sunk_dev.kubeapi import AdminKube
from tests.e2e.conftest import SCHEDULER
from tests.e2e.test_lifecycle import reasons
from tests.e2e.test_schedule_flow import P, create, get, host_of, job_of, slurm_nodes, wait_bound
from tests.support import SchedulerProcess, SlurmRest, condition, make_pod, wait_for

pytestmark = pytest.mark.e2e

# Two such Pods fill a Node: the slurmd Pod's request leaves 8 of its 8100m allocatable CPUs.
CPU = str(topology.CPUS_PER_NODE // 2)


def fill(kube: AdminKube, namespace: str, prefix: str, **annotations: str) -> list[dict[str, Any]]:
    """Two Pods of half a node each on every node, all bound."""
    names = [f"{prefix}-{i}" for i in range(2 * len(slurm_nodes(kube)))]
    for name in names:
        create(kube, namespace, make_pod(name, SCHEDULER, cpu=CPU, annotations=dict(annotations)))
    return [wait_bound(kube, namespace, name, timeout=60) for name in names]


def queued_job(kube: AdminKube, slurm: SlurmRest, namespace: str, name: str) -> dict[str, Any]:
    """The Pod's job once Slurm holds it pending for want of resources; the Pod unbound."""

    def pending() -> dict[str, Any] | None:
        pod = get(kube, namespace, name)
        job_id = ((pod or {}).get("metadata", {}).get("annotations") or {}).get(P + "job-id")
        if pod is None or job_id is None:
            return None
        assert not pod["spec"].get("nodeName"), "bound on a full cluster"
        job = slurm.job(int(job_id))
        return job if job["job_state"] == "PENDING" and job.get("state_reason") == "Resources" else None

    return wait_for(pending, timeout=30, what=f"Pod {name}'s job to be pending (Resources)")


def test_issue53_a_pod_arriving_on_a_full_cluster_queues_in_slurm_and_runs_when_a_pod_leaves(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    """Catches the late Pod waiting Unschedulable with no job ("no room for the Pod in the
    kubelet's count"): outside Slurm's queue it has no place in line."""
    full = fill(kube, namespace, "full")
    create(kube, namespace, make_pod("late", SCHEDULER, cpu=CPU))
    job = queued_job(kube, slurm, namespace, "late")
    assert "FailedScheduling" not in reasons(kube, namespace, "late")
    leaving = full[0]["metadata"]["name"]
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/{leaving}")
    pod = wait_bound(kube, namespace, "late", timeout=60)
    assert job_of(pod, slurm)["job_id"] == job["job_id"]
    assert pod["spec"]["nodeName"] == full[0]["spec"]["nodeName"]


def test_issue53_a_high_priority_pod_on_a_full_cluster_preempts_a_low_one_and_takes_its_place(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    """Catches a Pod of a preempting partition waiting for ever on a cluster full of
    lower-priority Pods: its job must reach Slurm for Slurm to preempt one of them."""
    low = fill(kube, namespace, "low")
    create(kube, namespace, make_pod("urgent", SCHEDULER, cpu=CPU, annotations={P + "partition": "high"}))
    pod = wait_bound(kube, namespace, "urgent", timeout=90)
    assert job_of(pod, slurm)["partition"] == "high"
    gone = [p["metadata"]["name"] for p in low if get(kube, namespace, p["metadata"]["name"]) is None]
    assert len(gone) == 1, gone
    assert "was preempted" in reasons(kube, namespace, gone[0]).get("Preempted", "")
    victim = next(p for p in low if p["metadata"]["name"] == gone[0])
    assert pod["spec"]["nodeName"] == victim["spec"]["nodeName"]


def test_issue53_a_started_job_whose_node_a_leaving_pod_still_holds_binds_once_it_is_gone(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    """The OutOfcpu case the kubelet's count guards against, kept: Slurm starts a job on a
    node the kubelet still counts a terminating Pod on (here one Slurm never knew of, as a
    preempted Pod may outlive its job). The Pod is not bound there while it would not fit,
    says so, keeps its job, and is bound once the other Pod is gone."""
    node = slurm_nodes(kube)[0]
    host = host_of(kube, node)
    leaving = make_pod("leaving", SCHEDULER, cpu=CPU, grace=15, nodeName=host)
    leaving["metadata"]["annotations"]["sunk.dev/ignore-sigterm"] = "true"  # lives its full grace
    create(kube, namespace, leaving)
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/leaving")
    whole = make_pod(
        "whole", SCHEDULER, cpu=str(topology.CPUS_PER_NODE), annotations={P + "required-nodes": node}
    )
    create(kube, namespace, whole)
    waiting = wait_for(
        lambda: (
            (p := get(kube, namespace, "whole")) and condition(p).get("reason") == "WaitingForNodeRoom" and p
        ),
        timeout=20,
        what="the Pod to wait for the kubelet's room",
    )
    assert not waiting["spec"].get("nodeName")
    assert f"waiting for the kubelet's room on Node {host}" in condition(waiting)["message"]
    job_id = int(waiting["metadata"]["annotations"][P + "job-id"])
    assert slurm.job(job_id)["job_state"] == "RUNNING"
    assert (
        "no room for the Pod in the kubelet's count"
        in reasons(kube, namespace, "whole")["WaitingForNodeRoom"]
    )
    assert get(kube, namespace, "leaving") is not None
    pod = wait_bound(kube, namespace, "whole", timeout=40)
    assert get(kube, namespace, "leaving") is None
    assert (pod["spec"]["nodeName"], job_of(pod, slurm)["job_id"]) == (host, job_id)
