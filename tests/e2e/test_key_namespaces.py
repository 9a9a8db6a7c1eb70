"""Issue #38, point 1, on the real dev cluster: a scheduler watching every namespace still
never places a Pod of a namespace it is told to ignore (the one holding the keys)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sunk_dev.kubeapi import AdminKube
from tests.e2e.test_schedule_flow import P, create, get, wait_bound
from tests.support import SchedulerProcess, SlurmRest, make_pod

pytestmark = pytest.mark.e2e


def test_issue38_a_pod_in_an_ignored_namespace_gets_no_job_while_others_are_placed(
    kube: AdminKube, slurm: SlurmRest, namespace: str, own_scheduler: Callable[..., SchedulerProcess]
) -> None:
    """Catches the ignore list not reaching the Pod watch: the Pod beside the keys, made
    first, would get a job and be bound before the tenant's Pod."""
    keys = f"{namespace}-k"
    kube.create_namespace(keys)
    scheduler = own_scheduler(f"--ignore-namespace={keys}")  # and no --watch-namespace: all
    inside = create(kube, keys, make_pod("inside", scheduler.name))
    try:
        create(kube, namespace, make_pod("tenant", scheduler.name))
        wait_bound(kube, namespace, "tenant")
        left = get(kube, keys, "inside") or {}
        assert not left["spec"].get("nodeName")
        assert P + "job-id" not in (left["metadata"].get("annotations") or {})
        assert slurm.jobs_of_pod(inside["metadata"]["uid"]) == []
    finally:
        # A scheduler with the bug gave the Pod a job no cleanup knows of: end it, or it
        # holds its node for every test after this one.
        for job in slurm.jobs_of_pod(inside["metadata"]["uid"]):
            slurm.cancel(job["job_id"])
        kube.delete(f"/api/v1/namespaces/{keys}")
