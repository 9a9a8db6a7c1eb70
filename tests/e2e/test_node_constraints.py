"""Beyond the reference: taints and cordoned Nodes are honoured before Slurm chooses (R9.3, R9.4)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import run_cli
from tests.e2e.conftest import SCHEDULER
from tests.e2e.test_schedule_flow import P, create, get, host_of, job_of, slurm_nodes, wait_bound
from tests.support import SchedulerProcess, SlurmRest, condition, make_pod, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def restore_nodes(kube: AdminKube) -> Iterator[None]:
    yield
    for node in kube.get("/api/v1/nodes")["items"]:
        kube.patch(
            f"/api/v1/nodes/{node['metadata']['name']}", {"spec": {"taints": None, "unschedulable": None}}
        )


def taint(kube: AdminKube, node: str) -> None:
    kube.patch(
        f"/api/v1/nodes/{node}",
        {"spec": {"taints": [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]}},
    )


def test_r9_3_nodes_with_untolerated_taints_are_excluded(
    kube: AdminKube,
    slurm: SlurmRest,
    namespace: str,
    scheduler: SchedulerProcess,
    restore_nodes: Any,
    dev_cluster: DevCluster,
) -> None:
    *tainted, free = slurm_nodes(kube)
    for slurm_node in tainted:
        taint(kube, host_of(kube, slurm_node))
    create(kube, namespace, make_pod("picky", SCHEDULER))
    pod = wait_bound(kube, namespace, "picky")
    assert pod["spec"]["nodeName"] == host_of(kube, free)
    excluded = run_cli(
        dev_cluster.layout, "scontrol", "show", "hostnames", job_of(pod, slurm)["excluded_nodes"]
    )
    assert set(tainted) <= set(excluded.split())


def test_r9_3_a_toleration_lets_the_pod_use_tainted_nodes(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess, restore_nodes: Any
) -> None:
    for slurm_node in slurm_nodes(kube):
        taint(kube, host_of(kube, slurm_node))
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}]
    create(kube, namespace, make_pod("tolerant", SCHEDULER, tolerations=tolerations))
    wait_bound(kube, namespace, "tolerant")


def test_r9_4_a_cordoned_required_node_waits_until_uncordoned(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess, restore_nodes: Any
) -> None:
    target = slurm_nodes(kube)[1]
    host = host_of(kube, target)
    kube.patch(f"/api/v1/nodes/{host}", {"spec": {"unschedulable": True}})
    pod = create(kube, namespace, make_pod("patient", SCHEDULER, annotations={P + "required-nodes": target}))
    waiting = wait_for(
        lambda: (
            (p := get(kube, namespace, "patient")) and condition(p).get("reason") == "Unschedulable" and p
        ),
        timeout=15,
        what="the Pod to wait for its node",
    )
    assert f"Node {host} is cordoned" in condition(waiting)["message"]
    assert slurm.jobs_of_pod(pod["metadata"]["uid"]) == []
    kube.patch(f"/api/v1/nodes/{host}", {"spec": {"unschedulable": None}})
    assert wait_bound(kube, namespace, "patient")["spec"]["nodeName"] == host
