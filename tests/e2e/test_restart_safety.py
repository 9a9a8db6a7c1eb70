"""R8.2: the scheduler can die at any moment; no Pod is lost and no job is duplicated."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.scheduler.hooks import placeholder_script
from sunk.scheduler.hooks.auth import pod_key, pod_token
from sunk.scheduler.translate import Settings, translate
from sunk.slurm.client import make_dialect
from sunk.slurm.dialect import mark_environment
from sunk_dev.kubeapi import AdminKube
from tests.e2e.test_schedule_flow import P, create, get, job_of, slurm_nodes, wait_bound
from tests.support import SlurmRest, make_pod, wait_for

pytestmark = pytest.mark.e2e


def active(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [j for j in jobs if j["job_state"] in ("PENDING", "RUNNING", "CONFIGURING")]


def test_r8_2_killed_between_submit_and_bind_leaves_one_job_and_binds_after_restart(
    kube: AdminKube, slurm: SlurmRest, namespace: str, own_scheduler: Any
) -> None:
    target = slurm_nodes(kube)[0]
    # A plain Slurm job holds the whole node, so the Pod's job waits in Slurm (pass 1 done).
    blocker = slurm.submit("#!/bin/sh\nsleep 600\n", name="blocker", nodelist=target, exclusive=True)
    try:
        proc = own_scheduler()
        pod = create(
            kube, namespace, make_pod("survivor", proc.name, annotations={P + "required-nodes": target})
        )
        wait_for(
            lambda: (
                P + "job-id"
                in ((get(kube, namespace, "survivor") or {})["metadata"].get("annotations") or {})
            ),
            timeout=20,
            what="pass 1 (job ID written back)",
        )
        proc.kill()
    finally:
        slurm.cancel(blocker)
    proc.start()
    bound = wait_bound(kube, namespace, "survivor")
    jobs = slurm.jobs_of_pod(pod["metadata"]["uid"])
    assert len(jobs) == 1, jobs
    assert job_of(bound, slurm)["job_id"] == jobs[0]["job_id"]


def test_r8_2_a_job_submitted_just_before_a_crash_is_adopted_not_duplicated(
    kube: AdminKube, slurm: SlurmRest, namespace: str, own_scheduler: Any, dev_cluster: Any
) -> None:
    """The crash fell after the submit and before the job ID reached the Pod."""
    proc = own_scheduler()
    proc.kill()
    pod = create(kube, namespace, make_pod("adoptee", proc.name))
    uid = pod["metadata"]["uid"]
    secret = dev_cluster.layout.hooks_secret.read_bytes().strip()
    # What the scheduler would have submitted just before it crashed, in this version's shape.
    placeholder = translate(pod, Settings(scheduler_name=proc.name)).job
    assert placeholder is not None
    env = {
        "PATH": "/usr/bin:/bin",
        "SLURM_CONF": str(dev_cluster.layout.slurm_conf),
        "SUNK_POD": f"{namespace}/adoptee",
        "SUNK_POD_UID": uid,
        "SUNK_HOOK_URL": f"http://127.0.0.1:{proc.hooks_port}",
        "SUNK_HOOK_TOKEN": pod_token(secret, uid),
        "SUNK_HOOK_KEY": pod_key(secret, uid),
        "SUNK_KILL_WAIT": "30",
    }
    dialect = make_dialect(slurm.version)
    env.update(mark_environment(dialect, placeholder.request))
    reply = slurm.post_job(dialect.submission(placeholder.request, placeholder_script(), env).body)
    orphan_id = reply["job_id"]
    proc.start()
    bound = wait_bound(kube, namespace, "adoptee")
    assert job_of(bound, slurm)["job_id"] == orphan_id
    assert len(slurm.jobs_of_pod(uid)) == 1


def test_r8_2_jobs_whose_pod_is_gone_are_cancelled_at_start(
    kube: AdminKube, slurm: SlurmRest, namespace: str, own_scheduler: Any
) -> None:
    proc = own_scheduler()
    create(kube, namespace, make_pod("ghost", proc.name))
    pod = wait_bound(kube, namespace, "ghost")
    proc.kill()
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/ghost")
    wait_for(lambda: get(kube, namespace, "ghost") is None, timeout=15, what="the Pod to go")
    assert active(slurm.jobs_of_pod(pod["metadata"]["uid"])), "the job should outlive the dead scheduler"
    proc.start()
    wait_for(
        lambda: not active(slurm.jobs_of_pod(pod["metadata"]["uid"])),
        timeout=15,
        what="the orphaned job to be cancelled",
    )
