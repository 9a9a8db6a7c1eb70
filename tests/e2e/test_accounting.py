"""Preemption by QoS (with slurmdbd) in both directions, and PreemptMode=REQUEUE (R6.1)."""

from __future__ import annotations

import pytest

from sunk_dev.kubeapi import AdminKube
from tests.e2e.conftest import SCHEDULER
from tests.e2e.test_lifecycle import exclusive_on, job_state, reasons
from tests.e2e.test_schedule_flow import P, create, get, job_of, slurm_nodes, wait_bound
from tests.support import SchedulerProcess, SlurmRest, make_pod, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.accounting]


def test_r6_1_a_slurm_job_with_a_higher_qos_preempts_a_pod(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    node = slurm_nodes(kube)[0]
    create(
        kube, namespace, make_pod("low-pod", SCHEDULER, annotations=exclusive_on(node, **{P + "qos": "low"}))
    )
    job_id = job_of(wait_bound(kube, namespace, "low-pod"), slurm)["job_id"]
    preemptor = slurm.submit(
        "#!/bin/sh\nsleep 300\n", name="qos-high", qos="high", nodelist=node, exclusive=True
    )
    try:
        wait_for(lambda: get(kube, namespace, "low-pod") is None, timeout=30, what="the Pod to be preempted")
        assert "was preempted" in reasons(kube, namespace, "low-pod").get("Preempted", "")
        wait_for(lambda: job_state(slurm, preemptor) == "RUNNING", timeout=30, what="the preemptor to run")
        assert job_state(slurm, job_id) in ("PREEMPTED", "CANCELLED")
    finally:
        slurm.cancel(preemptor)


def test_r6_1_a_pod_with_a_higher_qos_preempts_a_slurm_job(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    node = slurm_nodes(kube)[1]
    batch = slurm.submit("#!/bin/sh\nsleep 300\n", name="qos-low", qos="low", nodelist=node, exclusive=True)
    try:
        wait_for(lambda: job_state(slurm, batch) == "RUNNING", timeout=15, what="the low-QoS job to run")
        create(
            kube,
            namespace,
            make_pod("high-pod", SCHEDULER, annotations=exclusive_on(node, **{P + "qos": "high"})),
        )
        pod = wait_bound(kube, namespace, "high-pod", timeout=45)
        assert job_of(pod, slurm)["qos"] == "high"
        # Under PreemptMode=REQUEUE an ordinary batch job goes back to the queue.
        assert job_state(slurm, batch) in ("PREEMPTED", "CANCELLED", "PENDING")
    finally:
        slurm.cancel(batch)


def test_r6_1_requeue_preemption_deletes_the_pod_and_its_job_never_comes_back(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    """PreemptMode=REQUEUE: placeholder jobs are submitted non-requeueable; the Pod goes, and
    no placeholder job for it is left waiting to start on its own later."""
    node = slurm_nodes(kube)[2]
    pod = create(
        kube, namespace, make_pod("requeued", SCHEDULER, annotations=exclusive_on(node, **{P + "qos": "low"}))
    )
    wait_bound(kube, namespace, "requeued")
    preemptor = slurm.submit(
        "#!/bin/sh\nsleep 300\n", name="qos-urgent", qos="urgent", nodelist=node, exclusive=True
    )
    try:
        wait_for(lambda: get(kube, namespace, "requeued") is None, timeout=30, what="the Pod to be preempted")
        wait_for(lambda: job_state(slurm, preemptor) == "RUNNING", timeout=30, what="the preemptor to run")
        jobs = slurm.jobs_of_pod(pod["metadata"]["uid"])
        assert jobs and all(j["job_state"] not in ("PENDING", "RUNNING", "REQUEUED") for j in jobs), jobs
    finally:
        slurm.cancel(preemptor)


def test_r6_1_bad_account_and_qos_are_reported_by_slurm(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    for name, annotation in (("bad-account", {P + "account": "nope"}), ("bad-qos", {P + "qos": "nope"})):
        create(kube, namespace, make_pod(name, SCHEDULER, annotations=annotation))
    for name in ("bad-account", "bad-qos"):
        refused = wait_for(
            lambda n=name: (
                (p := get(kube, namespace, n))
                and any(c.get("reason") == "RejectedBySlurm" for c in p["status"].get("conditions", []))
                and p
            ),
            timeout=15,
            what=f"{name} to be refused by Slurm",
        )
        assert refused["spec"].get("nodeName") is None
