"""Devices and allocations (issue #12): Kubernetes must never hand out what Slurm does not
know is taken, and a Pod is bound only to an allocation that holds what it asked for."""

from __future__ import annotations

import pytest

from sunk.slurm.models import ACTIVE_STATES
from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import run_cli
from tests.e2e.conftest import SCHEDULER
from tests.e2e.test_lifecycle import job_state, reasons
from tests.e2e.test_schedule_flow import P, create, get, job_of, slurm_nodes, wait_bound
from tests.support import SchedulerProcess, SlurmRest, condition, make_pod, wait_for

pytestmark = pytest.mark.e2e


def test_r12_3_an_unknown_extended_resource_is_refused_and_no_job_is_submitted(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    manifest = make_pod("fpga", SCHEDULER)
    container = manifest["spec"]["containers"][0]["resources"]
    container["requests"]["example.com/fpga"] = container.setdefault("limits", {})["example.com/fpga"] = "1"
    created = create(kube, namespace, manifest)
    wait_for(
        lambda: condition(get(kube, namespace, "fpga") or {}).get("reason") == "InvalidForSlurm",
        timeout=20,
        what="the Pod to be refused",
    )
    assert "example.com/fpga" in reasons(kube, namespace, "fpga")["FailedScheduling"]
    assert slurm.jobs_of_pod(created["metadata"]["uid"]) == []


def test_r12_3_a_job_shrunk_by_its_owner_is_not_bound(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess, dev_cluster: DevCluster
) -> None:
    """The Pod's job waits; its owner lowers its memory with `scontrol update`; when it
    starts, the scheduler sees the allocation cannot hold the Pod, rejects the placement
    and submits a new job of the right size."""
    node = slurm_nodes(kube)[1]
    blocker = slurm.submit("#!/bin/sh\nsleep 600\n", name="blocker", nodelist=node, exclusive=True)
    try:
        wait_for(lambda: job_state(slurm, blocker) == "RUNNING", timeout=30, what="the blocker to run")
        create(
            kube,
            namespace,
            make_pod("shrunk", SCHEDULER, memory="512Mi", annotations={P + "required-nodes": node}),
        )
        pod = wait_for(
            lambda: (
                (p := get(kube, namespace, "shrunk")) and P + "job-id" in p["metadata"]["annotations"] and p
            ),
            timeout=15,
            what="the Pod's job",
        )
        first = int(pod["metadata"]["annotations"][P + "job-id"])
        assert job_state(slurm, first) == "PENDING"
        run_cli(dev_cluster.layout, "scontrol", "update", f"jobid={first}", "MinMemoryNode=256")
        slurm.cancel(blocker)
        rejected = wait_for(
            lambda: reasons(kube, namespace, "shrunk").get("PlacementRejected"),
            timeout=30,
            what="the rejection",
        )
        assert f"job {first}" in rejected and "256M of memory for 512 MiB" in rejected
        bound = wait_bound(kube, namespace, "shrunk", timeout=30)
        job = job_of(bound, slurm)
        assert job["job_id"] != first and "mem=512M" in job["tres_alloc_str"]
        wait_for(
            lambda: job_state(slurm, first) not in ACTIVE_STATES, timeout=15, what="the shrunk job to end"
        )
    finally:
        slurm.cancel(blocker)
