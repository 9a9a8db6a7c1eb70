"""R9.3 and R9.4: required Pod anti-affinity and topology spread, honoured before Slurm
chooses, for Pods made by a Deployment (the real controller), counting the Pods already
placed; Nodes cordoned or being removed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from sunk.slurm.hostlist import expand
from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import run_cli
from tests.e2e.conftest import SCHEDULER
from tests.e2e.test_lifecycle import job_state, reasons
from tests.e2e.test_schedule_flow import P, create, get, host_of, job_of, slurm_nodes, wait_bound
from tests.e2e.test_workloads import all_bound, assert_each_pod_on_its_jobs_node, template
from tests.support import SchedulerProcess, SlurmRest, holds_for, make_pod, wait_for

pytestmark = pytest.mark.e2e
ZONE = "topology.kubernetes.io/zone"
SELECT = {"labelSelector": {"matchLabels": {"app": "spread"}}}


def deploy(kube: AdminKube, namespace: str, app: str, replicas: int, **spec: Any) -> None:
    kube.create(
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": app},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": app}},
                "template": template(app, **spec),
            },
        },
    )


def zone_of(kube: AdminKube, node: str) -> str:
    return str(kube.get(f"/api/v1/nodes/{node}")["metadata"]["labels"][ZONE])


def test_r9_3_replicas_with_required_hostname_anti_affinity_land_on_different_nodes(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    apart = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "apart"}}}
            ]
        }
    }
    deploy(kube, namespace, "apart", 3, affinity=apart)
    pods = wait_for(lambda: all_bound(kube, namespace, "apart", 3), timeout=90, what="3 replicas bound")
    assert len({p["spec"]["nodeName"] for p in pods}) == 3
    assert_each_pod_on_its_jobs_node(kube, slurm, namespace, pods)


def test_r9_3_a_zone_spread_with_max_skew_1_holds(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", **SELECT}]
    deploy(kube, namespace, "spread", 4, topologySpreadConstraints=spread)
    pods = wait_for(lambda: all_bound(kube, namespace, "spread", 4), timeout=90, what="4 replicas bound")
    zones = Counter(zone_of(kube, p["spec"]["nodeName"]) for p in pods)
    assert sorted(zones.values()) == [2, 2], zones
    assert_each_pod_on_its_jobs_node(kube, slurm, namespace, pods)


def test_r9_3_a_rule_sunk_does_not_apply_is_said_in_an_event(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    soft = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", **SELECT}]
    deploy(kube, namespace, "soft", 1, topologySpreadConstraints=soft)
    [pod] = wait_for(lambda: all_bound(kube, namespace, "soft", 1), timeout=60, what="the replica bound")
    note = reasons(kube, namespace, pod["metadata"]["name"]).get("SchedulingRuleNotHonoured", "")
    assert "ScheduleAnyway" in note


def test_r9_4_nodes_cordoned_or_being_removed_are_never_chosen(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    """One Node cordoned, one tainted by the cluster autoscaler for removal: eight Pods that
    would fill the cluster all land on the other two Nodes; the rest wait."""
    first, second, *_ = sorted(n["metadata"]["name"] for n in kube.get("/api/v1/nodes")["items"])
    autoscaler = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1795000000", "effect": "NoSchedule"}
    kube.patch(f"/api/v1/nodes/{first}", {"spec": {"unschedulable": True}})
    kube.patch(f"/api/v1/nodes/{second}", {"spec": {"taints": [autoscaler]}})
    try:
        big = [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "4", "memory": "128Mi"}}}
        ]
        deploy(kube, namespace, "many", 8, containers=big)  # two per Node: the cluster holds eight
        wait_for(
            lambda: len([p for p in all_pods(kube, namespace, "many") if p["spec"].get("nodeName")]) >= 4,
            timeout=60,
            what="Pods bound on the usable Nodes",
        )
        holds_for(
            lambda: len([p for p in all_pods(kube, namespace, "many") if p["spec"].get("nodeName")]) == 4,
            seconds=3,
            what="the other four to wait",
        )
        placed = {
            p["spec"]["nodeName"] for p in all_pods(kube, namespace, "many") if p["spec"].get("nodeName")
        }
        assert placed.isdisjoint({first, second}), placed
    finally:
        kube.patch(f"/api/v1/nodes/{first}", {"spec": {"unschedulable": None}})
        kube.patch(f"/api/v1/nodes/{second}", {"spec": {"taints": None}})


def test_r9_4_a_pending_job_gets_back_the_nodes_uncordoned_after_its_submission(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    """The case reported in issue #18: every Node cordoned but one, which a Slurm job holds
    whole. The Pod's job leaves the cordoned nodes out and waits; once they are uncordoned
    it gets them back (PlacementWidened) and the Pod is bound on one of them while the
    blocker still holds the node it could use at first. Before, it waited for ever."""
    open_node, *others = slurm_nodes(kube)
    hosts = [host_of(kube, n) for n in others]
    blocker = slurm.submit("#!/bin/sh\nsleep 600\n", name="blocker", nodelist=open_node, exclusive=True)
    try:
        wait_for(lambda: job_state(slurm, blocker) == "RUNNING", timeout=30, what="the blocker to run")
        for host in hosts:
            kube.patch(f"/api/v1/nodes/{host}", {"spec": {"unschedulable": True}})
        create(kube, namespace, make_pod("waiting", SCHEDULER))
        pod = wait_for(
            lambda: (
                (p := get(kube, namespace, "waiting"))
                and P + "job-id" in p["metadata"].get("annotations", {})
                and p
            ),
            timeout=15,
            what="the Pod's job",
        )
        waiting = job_of(pod, slurm)
        assert waiting["job_state"] == "PENDING"
        assert set(expand(waiting.get("excluded_nodes") or "")) == set(others)
        for host in hosts:
            kube.patch(f"/api/v1/nodes/{host}", {"spec": {"unschedulable": None}})
        bound = wait_bound(kube, namespace, "waiting", timeout=20)
        assert bound["spec"]["nodeName"] in hosts
        assert "can host the Pod now" in reasons(kube, namespace, "waiting")["PlacementWidened"]
    finally:
        for host in hosts:
            kube.patch(f"/api/v1/nodes/{host}", {"spec": {"unschedulable": None}})
        slurm.cancel(blocker)


def all_pods(kube: AdminKube, namespace: str, app: str) -> list[dict[str, Any]]:
    return list(kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"app={app}")["items"])


def test_r9_4_with_the_flag_a_cordon_drains_the_slurm_node_and_an_uncordon_resumes_only_its_own_drain(
    kube: AdminKube,
    slurm: SlurmRest,
    namespace: str,
    own_scheduler: Callable[..., SchedulerProcess],
    dev_cluster: DevCluster,
) -> None:
    own_scheduler("--drain-cordoned-nodes=true")
    cordoned, other = slurm_nodes(kube)[:2]
    host, other_host = host_of(kube, cordoned), host_of(kube, other)

    def state(slurm_node: str) -> str:
        return run_cli(dev_cluster.layout, "sinfo", "-h", "-n", slurm_node, "-o", "%T|%E").strip()

    run_cli(
        dev_cluster.layout, "scontrol", "update", f"nodename={other}", "state=drain", "reason=admin check"
    )
    try:
        kube.patch(f"/api/v1/nodes/{host}", {"spec": {"unschedulable": True}})
        kube.patch(f"/api/v1/nodes/{other_host}", {"spec": {"unschedulable": True}})
        drained = wait_for(
            lambda: (s := state(cordoned)).startswith("drain") and s,
            timeout=20,
            what="the cordoned Node's drain",
        )
        assert f"Node {host} is cordoned in Kubernetes" in drained
        kube.patch(f"/api/v1/nodes/{host}", {"spec": {"unschedulable": None}})
        kube.patch(f"/api/v1/nodes/{other_host}", {"spec": {"unschedulable": None}})
        wait_for(
            lambda: not state(cordoned).startswith("drain"), timeout=20, what="the uncordoned Node's resume"
        )
        holds_for(lambda: "admin check" in state(other), seconds=6, what="the admin's drain to stay")
    finally:
        for name in (host, other_host):
            kube.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": None}})
        for slurm_node in (cordoned, other):
            if state(slurm_node).startswith("drain"):
                run_cli(dev_cluster.layout, "scontrol", "update", f"nodename={slurm_node}", "state=resume")
