"""Pods made by Kubernetes' workload controllers (Deployment, Job, StatefulSet) are placed
through Slurm and their placeholder jobs follow them: scale-down, roll-out and completion
end the jobs; nothing is left behind."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sunk.slurm.models import ACTIVE_STATES
from sunk_dev.kubeapi import AdminKube
from tests.e2e.conftest import SCHEDULER
from tests.e2e.test_schedule_flow import P, host_of
from tests.support import SchedulerProcess, SlurmRest, wait_for

pytestmark = pytest.mark.e2e


def template(app: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}, "annotations": {}},
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}},
                }
            ],
            **spec,
        },
    }


def pods_of(kube: AdminKube, namespace: str, app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.get(
        f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"app={app}"
    )["items"]
    return items


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def active_jobs(slurm: SlurmRest, namespace: str) -> dict[str, dict[str, Any]]:
    """Active placeholder jobs of the namespace, by Pod UID."""
    return {
        j["name"].rsplit(":", 1)[1]: j
        for j in slurm.jobs()
        if f":{namespace}/" in j["name"] and j["job_state"] in ACTIVE_STATES
    }


def all_bound(kube: AdminKube, namespace: str, app: str, count: int) -> list[dict[str, Any]] | None:
    pods = live(pods_of(kube, namespace, app))
    if len(pods) == count and all(p["spec"].get("nodeName") for p in pods):
        return pods
    return None


def assert_each_pod_on_its_jobs_node(
    kube: AdminKube, slurm: SlurmRest, namespace: str, pods: list[dict[str, Any]]
) -> None:
    jobs = active_jobs(slurm, namespace)
    for pod in pods:
        job = jobs.get(pod["metadata"]["uid"])
        assert job is not None and job["job_state"] == "RUNNING", (pod["metadata"]["name"], job)
        assert str(job["job_id"]) == pod["metadata"]["annotations"][P + "job-id"]
        assert pod["spec"]["nodeName"] == host_of(kube, job["nodes"])


def only_live_pods_hold_jobs(kube: AdminKube, slurm: SlurmRest, namespace: str, app: str) -> bool:
    uids = {p["metadata"]["uid"] for p in live(pods_of(kube, namespace, app))}
    return set(active_jobs(slurm, namespace)) == uids


def test_a_deployment_is_placed_scaled_down_and_rolled_through_slurm(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "infer"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "infer"}},
            "template": template("infer"),
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
        },
    }
    kube.create(path, deployment)
    pods = wait_for(lambda: all_bound(kube, namespace, "infer", 3), timeout=60, what="3 replicas bound")
    assert_each_pod_on_its_jobs_node(kube, slurm, namespace, pods)

    # Scale down: the Pods the ReplicaSet deletes take their jobs with them.
    kube.patch(f"{path}/infer", {"spec": {"replicas": 1}})
    wait_for(lambda: all_bound(kube, namespace, "infer", 1), timeout=60, what="one replica left")
    wait_for(
        lambda: only_live_pods_hold_jobs(kube, slurm, namespace, "infer"),
        timeout=60,
        what="the scaled-down replicas' jobs to end",
    )

    # Roll to a new template: new Pods are placed, the old Pod's job ends.
    kube.patch(f"{path}/infer", {"spec": {"replicas": 2}})
    wait_for(lambda: all_bound(kube, namespace, "infer", 2), timeout=60, what="two replicas")
    before = {p["metadata"]["uid"] for p in live(pods_of(kube, namespace, "infer"))}
    rolled = copy.deepcopy(deployment["spec"]["template"])
    rolled["metadata"]["annotations"]["rollout"] = "2"
    kube.patch(f"{path}/infer", {"spec": {"template": rolled}})

    def rolled_out() -> list[dict[str, Any]] | None:
        pods = all_bound(kube, namespace, "infer", 2)
        if pods and not ({p["metadata"]["uid"] for p in pods} & before):
            return pods
        return None

    pods = wait_for(rolled_out, timeout=90, what="the roll-out to replace both replicas")
    wait_for(
        lambda: only_live_pods_hold_jobs(kube, slurm, namespace, "infer"),
        timeout=60,
        what="the old replicas' jobs to end",
    )
    assert_each_pod_on_its_jobs_node(kube, slurm, namespace, pods)


def test_a_batch_jobs_pods_complete_and_their_placeholders_end(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    pod = template("batch", restartPolicy="Never")
    pod["metadata"]["annotations"]["sunk.dev/complete-after"] = "3s"  # kwok ends the container then
    kube.create(
        f"/apis/batch/v1/namespaces/{namespace}/jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train-step"},
            "spec": {"completions": 3, "parallelism": 3, "backoffLimit": 0, "template": pod},
        },
    )
    wait_for(
        lambda: (
            (kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/train-step").get("status") or {}).get(
                "succeeded"
            )
            == 3
        ),
        timeout=90,
        what="the Job to complete",
    )
    pods = pods_of(kube, namespace, "batch")
    assert len(pods) == 3 and all(p["status"]["phase"] == "Succeeded" for p in pods)
    assert all(p["spec"].get("nodeName") for p in pods)
    # Every placeholder ends with its Pod; the finished Pods stay for the Job to report.
    wait_for(lambda: not active_jobs(slurm, namespace), timeout=60, what="the placeholders to end")
    assert all(p["status"]["phase"] == "Succeeded" for p in pods_of(kube, namespace, "batch"))


def test_a_statefulset_is_placed_in_order_and_its_jobs_end_with_it(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/statefulsets"
    kube.create(
        path,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "shard"},
            "spec": {
                "replicas": 2,
                "serviceName": "shard",
                "selector": {"matchLabels": {"app": "shard"}},
                "template": template("shard"),
            },
        },
    )
    pods = wait_for(lambda: all_bound(kube, namespace, "shard", 2), timeout=60, what="2 replicas bound")
    assert sorted(p["metadata"]["name"] for p in pods) == ["shard-0", "shard-1"]
    assert_each_pod_on_its_jobs_node(kube, slurm, namespace, pods)
    kube.patch(f"{path}/shard", {"spec": {"replicas": 0}})
    wait_for(lambda: not active_jobs(slurm, namespace), timeout=60, what="the replicas' jobs to end")
