"""Smoke tests: every part of the dev cluster is the real thing and behaves like it."""

from __future__ import annotations

import time

import pytest

from sunk_dev import DevCluster, topology
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.slurmrun import run_cli
from tests.support import SlurmRest, holds_for, wait_for

pytestmark = pytest.mark.integration


def pod_manifest(name: str, **extra: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **extra.pop("metadata", {})},  # type: ignore[dict-item]
        "spec": {
            "schedulerName": "nobody-schedules-this",
            "terminationGracePeriodSeconds": extra.pop("grace", 5),
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


def bind(kube: AdminKube, namespace: str, pod: str, node: str) -> None:
    kube.create(
        f"/api/v1/namespaces/{namespace}/pods/{pod}/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
    )


def phase(kube: AdminKube, namespace: str, pod: str) -> str | None:
    found = kube.find(f"/api/v1/namespaces/{namespace}/pods/{pod}")
    return None if found is None else str(found.get("status", {}).get("phase"))


def test_every_node_is_ready_with_distinct_labels(kube: AdminKube, dev_cluster: DevCluster) -> None:
    spec = dev_cluster.spec()
    assert spec is not None
    assert len(kube.ready_nodes()) == spec.nodes
    nodes = kube.get("/api/v1/nodes")["items"]
    classes = {n["metadata"]["labels"]["gpu.nvidia.com/class"] for n in nodes}
    assert classes == set(topology.GPU_CLASSES)
    assert all(n["status"]["capacity"]["nvidia.com/gpu"] == "4" for n in nodes)


def test_each_slurm_node_has_one_running_slurmd_pod_on_its_node(
    kube: AdminKube, dev_cluster: DevCluster
) -> None:
    slurm_nodes = run_cli(dev_cluster.layout, "sinfo", "-h", "-N", "-o", "%N").split()
    pods = kube.get(f"/api/v1/namespaces/{topology.SLURMD_NAMESPACE}/pods")["items"]
    by_slurm_node = {p["metadata"]["labels"][topology.SLURM_NODE_LABEL]: p for p in pods}
    assert set(by_slurm_node) == set(slurm_nodes)
    hosts = [p["spec"]["nodeName"] for p in pods]
    assert len(set(hosts)) == len(hosts), "two slurmd Pods share a Node"
    assert all(p["status"]["phase"] == "Running" for p in pods)


def test_pod_bound_by_hand_runs_and_is_gone_after_deletion(kube: AdminKube, namespace: str) -> None:
    node = kube.ready_nodes()[0]
    kube.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest("hand-bound"))
    bind(kube, namespace, "hand-bound", node)
    wait_for(lambda: phase(kube, namespace, "hand-bound") == "Running", timeout=30, what="Running")
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/hand-bound")
    assert pod["spec"]["nodeName"] == node

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/hand-bound")
    wait_for(lambda: phase(kube, namespace, "hand-bound") is None, timeout=10, what="the Pod to go")


def test_pod_ignoring_sigterm_lives_until_its_grace_period_ends(kube: AdminKube, namespace: str) -> None:
    manifest = pod_manifest(
        "stubborn", grace=3, metadata={"annotations": {"sunk.dev/ignore-sigterm": "true"}}
    )
    kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
    bind(kube, namespace, "stubborn", kube.ready_nodes()[0])
    wait_for(lambda: phase(kube, namespace, "stubborn") == "Running", timeout=30, what="Running")

    deleted_at = time.monotonic()
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/stubborn")
    wait_for(lambda: phase(kube, namespace, "stubborn") is None, timeout=15, what="the Pod to go")
    # deletionTimestamp has whole-second precision, so the grace can end up to 1 s early.
    assert time.monotonic() - deleted_at >= 2.0


def test_pod_with_a_finalizer_stays_terminating_until_it_is_removed(kube: AdminKube, namespace: str) -> None:
    manifest = pod_manifest("held", metadata={"finalizers": ["sunk.dev/test-hold"]})
    path = f"/api/v1/namespaces/{namespace}/pods/held"
    kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
    bind(kube, namespace, "held", kube.ready_nodes()[0])
    wait_for(lambda: phase(kube, namespace, "held") == "Running", timeout=30, what="Running")
    kube.delete(path)
    wait_for(lambda: kube.get(path)["metadata"].get("deletionTimestamp"), timeout=5, what="Terminating")
    holds_for(lambda: kube.find(path) is not None, seconds=1.0, what="the finalizer's hold")
    kube.patch(path, {"metadata": {"finalizers": None}})
    wait_for(lambda: kube.find(path) is None, timeout=10, what="the Pod to go")


def test_job_submitted_through_slurmrestd_runs_on_a_node(slurm: SlurmRest, dev_cluster: DevCluster) -> None:
    job_id = slurm.submit("#!/bin/sh\nsleep 300\n", name="smoke", cpus_per_task=1)
    try:
        job = wait_for(
            lambda: (j := slurm.job(job_id))["job_state"] == "RUNNING" and j,
            timeout=30,
            what="the job to run",
        )
        node = job["nodes"]
        assert node in run_cli(dev_cluster.layout, "sinfo", "-h", "-N", "-o", "%N").split()
        squeue = run_cli(dev_cluster.layout, "squeue", "-h", "-j", str(job_id), "-o", "%T %N")
        assert squeue.split() == ["RUNNING", node]
    finally:
        slurm.cancel(job_id)


def test_cancelled_job_ends(slurm: SlurmRest) -> None:
    job_id = slurm.submit("#!/bin/sh\nsleep 300\n", name="smoke-cancel", cpus_per_task=1)
    wait_for(lambda: slurm.job(job_id)["job_state"] == "RUNNING", timeout=30, what="running")
    slurm.cancel(job_id)
    wait_for(lambda: slurm.job(job_id)["job_state"] == "CANCELLED", timeout=30, what="CANCELLED")


def test_serviceaccount_without_a_role_is_denied_by_rbac(
    kube: AdminKube, namespace: str, dev_cluster: DevCluster
) -> None:
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "nobody"}})
    token = kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/nobody/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    as_sa = AdminKube(dev_cluster.layout, token=token)
    try:
        with pytest.raises(KubeError) as denied:
            as_sa.get(f"/api/v1/namespaces/{namespace}/pods")
        assert denied.value.status == 403

        kube.create(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
            {
                "metadata": {"name": "read-pods"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
            },
        )
        kube.create(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
            {
                "metadata": {"name": "read-pods"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "read-pods",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": namespace}],
            },
        )
        wait_for(
            lambda: _allowed(as_sa, f"/api/v1/namespaces/{namespace}/pods"),
            timeout=10,
            what="the RoleBinding to take effect",
        )
    finally:
        as_sa.close()


def _allowed(client: AdminKube, path: str) -> bool:
    try:
        client.get(path)
        return True
    except KubeError:
        return False
