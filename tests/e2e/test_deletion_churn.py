"""R5.1 under churn (issue #39): Pods deleted in bursts right after they were placed or
re-placed, Deployments rolled, StatefulSet Pods that come back under the same name. Every
Pod deleted really goes, its job ends without waiting for KillWait, and no node is
drained: each drain at KillWait would take a whole node from its users until an
administrator resumes it.

SUNK_CHURN_S sets how long the churn runs (default 120 s); the figures of each run are
printed (`pytest -s`)."""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

import pytest

from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import run_cli
from tests.e2e.conftest import SCHEDULER
from tests.e2e.test_schedule_flow import P
from tests.e2e.test_workloads import active_jobs, all_bound, live, pods_of, template
from tests.support import SchedulerProcess, SlurmRest, make_pod, wait_for

pytestmark = pytest.mark.e2e
FINALIZER = "sunk.dev/held-until-released"
CHURN_S = float(os.environ.get("SUNK_CHURN_S", "120"))
ZONE_SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }
]


def killwait_drains(dev_cluster: DevCluster) -> dict[str, str]:
    """Nodes drained because a Pod outlived its job's KillWait, with the reason."""
    out = run_cli(dev_cluster.layout, "sinfo", "-h", "-N", "-t", "drain,draining,drained", "-o", "%N|%E")
    drains = dict(line.split("|", 1) for line in set(out.splitlines()) if "|" in line)
    return {node: why for node, why in drains.items() if "at KillWait" in why}


def gone_with_their_jobs(kube: AdminKube, slurm: SlurmRest, namespace: str, uids: set[str]) -> bool:
    """None of these Pods is left in the API server, and none has an active job."""
    left = {p["metadata"]["uid"] for p in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]}
    return not (uids & left) and not (uids & set(active_jobs(slurm, namespace)))


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def workload(kind: str, name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template(name, **spec),
        },
    }
    if kind == "StatefulSet":
        body["spec"]["serviceName"] = name
        body["spec"]["podManagementPolicy"] = "Parallel"
    return body


def test_r5_1_a_burst_of_deletions_of_just_placed_pods_drains_no_node(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess, dev_cluster: DevCluster
) -> None:
    """Twenty-four Pods bound, then deleted at once. A finalizer keeps each one terminating
    until every job has been told so (SIGUSR1) and its script holds the node; then all go
    together: each script's "gone" answer and Slurm's cancel (SIGTERM) arrive at about the
    same moment. Every job ends at once and no node is drained; before issue #39's fix a
    SIGTERM landing inside the answer's check made the script drain at KillWait."""
    count = 24
    for i in range(count):
        manifest = make_pod(f"burst-{i}", SCHEDULER, cpu="500m")
        manifest["metadata"]["finalizers"] = [FINALIZER]
        kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)

    def all_bound() -> list[dict[str, Any]] | None:
        pods = live(kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"])
        return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for(all_bound, timeout=90, what=f"{count} Pods bound")
    log_offset = len(scheduler.output())
    kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods")
    jobs = {p["metadata"]["annotations"][P + "job-id"] for p in pods}
    wait_for(
        lambda: all(f"telling Slurm job {j} of " in scheduler.output()[log_offset:] for j in jobs),
        timeout=30,
        what="every job told its Pod is being deleted",
    )
    released_at = time.monotonic()
    for p in pods:
        kube.patch(
            f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}", {"metadata": {"finalizers": None}}
        )
    wait_for(
        lambda: gone_with_their_jobs(kube, slurm, namespace, uids(pods)),
        timeout=60,
        what="the Pods and their jobs to go",
    )
    took = time.monotonic() - released_at
    print(
        f"{count} Pods deleted at once, held by their jobs, then released: gone with their jobs "
        f"in {took:.1f} s"
    )
    assert not killwait_drains(dev_cluster)
    assert took < 20, f"the jobs took {took:.1f} s to end: some waited for KillWait"


def test_r5_1_churn_deletes_and_recreates_pods_for_minutes_without_a_killwait_drain(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess, dev_cluster: DevCluster
) -> None:
    """Rounds until SUNK_CHURN_S has passed: a Deployment rolled, a zone-spread Deployment
    rolled (its Pods are re-placed whenever a placement breaks the spread), and a
    StatefulSet's Pods deleted (they come back under the same names). After each round the
    old Pods are gone with their jobs; no round may leave a node drained at KillWait."""
    apps = "/apis/apps/v1/namespaces/" + namespace
    kube.create(f"{apps}/deployments", workload("Deployment", "roll", 6))
    kube.create(
        f"{apps}/deployments", workload("Deployment", "spread", 4, topologySpreadConstraints=ZONE_SPREAD)
    )
    kube.create(f"{apps}/statefulsets", workload("StatefulSet", "same", 4))
    sizes = {"roll": 6, "spread": 4, "same": 4}

    def settled() -> dict[str, list[dict[str, Any]]] | None:
        found = {app: all_bound(kube, namespace, app, n) for app, n in sizes.items()}
        return None if any(v is None for v in found.values()) else {k: v or [] for k, v in found.items()}

    current = wait_for(settled, timeout=120, what="every workload bound")
    rounds = deleted = 0
    drains: list[str] = []
    started = time.monotonic()
    while time.monotonic() - started < CHURN_S:
        rounds += 1
        old = set().union(*(uids(pods) for pods in current.values()))
        for app in ("roll", "spread"):
            kube.patch(
                f"{apps}/deployments/{app}",
                {"spec": {"template": {"metadata": {"annotations": {"churn/round": str(rounds)}}}}},
            )
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", labelSelector="app=same")
        wait_for(
            partial(gone_with_their_jobs, kube, slurm, namespace, old),
            timeout=120,
            what=f"round {rounds}'s deleted Pods to go with their jobs",
        )
        current = wait_for(settled, timeout=120, what=f"round {rounds}'s new Pods bound")
        deleted += len(old)
        for node, why in killwait_drains(dev_cluster).items():
            drains.append(f"round {rounds}: {node} ({why})")
            # Resumed so that the churn goes on and counts every drain; the test fails below.
            run_cli(dev_cluster.layout, "scontrol", "update", f"nodename={node}", "state=resume")
    rejected = sum(
        1
        for e in kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        if e.get("reason") == "PlacementRejected"
    )
    live_now = len(live(pods_of(kube, namespace, "roll")))
    print(
        f"churn: {rounds} rounds in {time.monotonic() - started:.0f} s, {deleted} Pods deleted and "
        f"gone with their jobs, {rejected} placements rejected and re-placed, {len(drains)} KillWait "
        f"drains ({live_now} roll Pods live at the end)"
    )
    assert not drains, f"{len(drains)} nodes drained at KillWait: {drains}"
