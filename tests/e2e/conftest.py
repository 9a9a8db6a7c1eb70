"""A scheduler shared by the end-to-end tests; tests that kill or restart one start their own."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from sunk.devcluster import DevCluster
from sunk.devcluster.kubeapi import AdminKube
from sunk.slurm.models import ACTIVE_STATES
from tests.support import SchedulerProcess, SlurmRest, wait_for

SCHEDULER = "sunk-e2e"


@pytest.fixture(scope="session")
def scheduler(dev_cluster: DevCluster) -> Iterator[SchedulerProcess]:
    proc = SchedulerProcess(dev_cluster, SCHEDULER).start()
    yield proc
    proc.stop()


def delete_pods_and_wait_for_their_jobs(kube: AdminKube, slurm: SlurmRest, namespace: str) -> None:
    """The namespace's Pods go, and so must every placeholder job they had (R5.1)."""
    kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods")
    wait_for(
        lambda: (
            not [j for j in slurm.jobs() if f":{namespace}/" in j["name"] and j["job_state"] in ACTIVE_STATES]
        ),
        timeout=30,
        what=f"the placeholder jobs of namespace {namespace} to end",
    )


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
def no_jobs_left_behind(namespace: str, kube: AdminKube, slurm: SlurmRest) -> Iterator[None]:
    """After each test its Pods are deleted; the scheduler must end their jobs."""
    yield
    delete_pods_and_wait_for_their_jobs(kube, slurm, namespace)
