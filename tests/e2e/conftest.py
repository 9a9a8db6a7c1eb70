"""A scheduler shared by the end-to-end tests; tests that kill or restart one start their own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sunk.slurm.models import ACTIVE_STATES
from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import run_cli
from tests.support import SchedulerProcess, SlurmRest, wait_for

SCHEDULER = "sunk-e2e"


@pytest.fixture(scope="session")
def scheduler(dev_cluster: DevCluster) -> Iterator[SchedulerProcess]:
    proc = SchedulerProcess(dev_cluster, SCHEDULER).start()
    yield proc
    proc.stop()


def delete_pods_and_wait_for_their_jobs(kube: AdminKube, slurm: SlurmRest, namespace: str) -> None:
    """The namespace's Pods go, and so must every placeholder job they had (R5.1). Their
    controllers go first, or they would make new Pods."""
    for kind in (
        "apps/v1/namespaces/{}/deployments",
        "apps/v1/namespaces/{}/replicasets",
        "apps/v1/namespaces/{}/statefulsets",
        "batch/v1/namespaces/{}/jobs",
    ):
        kube.request("DELETE", f"/apis/{kind.format(namespace)}", propagationPolicy="Background")
    kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods")

    def left() -> list[dict[str, Any]]:
        return [j for j in slurm.jobs() if f":{namespace}/" in j["name"] and j["job_state"] in ACTIVE_STATES]

    try:
        wait_for(lambda: not left(), timeout=30, what=f"the placeholder jobs of namespace {namespace} to end")
    except AssertionError as err:
        # Fail this test with what was left, and cancel it, so that the jobs do not hold
        # nodes and fail every test after this one too.
        jobs = left()
        for job in jobs:
            slurm.cancel(job["job_id"])
        summary = ", ".join(f"{j['job_id']} {j['name']} {j['job_state']}" for j in jobs)
        raise AssertionError(f"{err}; left (now cancelled): {summary}") from None


@pytest.fixture
def own_scheduler(
    dev_cluster: DevCluster, namespace: str, kube: AdminKube, slurm: SlurmRest
) -> Iterator[Callable[..., SchedulerProcess]]:
    """A factory for schedulers private to one test (named after its namespace)."""
    started: list[SchedulerProcess] = []

    def start(*args: str) -> SchedulerProcess:
        proc = SchedulerProcess(dev_cluster, f"sched-{namespace}", *args).start()
        started.append(proc)
        return proc

    yield start
    if started and started[-1].proc and started[-1].proc.poll() is None:
        delete_pods_and_wait_for_their_jobs(kube, slurm, namespace)
    for proc in started:
        proc.stop()


@pytest.fixture(autouse=True)
def no_jobs_left_behind(
    namespace: str, kube: AdminKube, slurm: SlurmRest, dev_cluster: DevCluster
) -> Iterator[None]:
    """After each test its Pods are deleted; the scheduler must end their jobs, and no
    node may be left drained (a drain is a call for a person, never a side effect)."""
    yield
    delete_pods_and_wait_for_their_jobs(kube, slurm, namespace)
    drained = run_cli(dev_cluster.layout, "sinfo", "-h", "-N", "-t", "drain,draining,drained", "-o", "%N|%E")
    nodes = dict(line.split("|", 1) for line in set(drained.splitlines()))
    for node in nodes:
        run_cli(dev_cluster.layout, "scontrol", "update", f"nodename={node}", "state=resume")
    if nodes:
        pytest.fail(f"the test left nodes drained: {nodes}")
