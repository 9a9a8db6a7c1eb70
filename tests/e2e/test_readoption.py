"""A running Pod outlives Slurm's own state loss (R8.2, issue #34), for real: slurmctld is
SIGKILLed and started again from a copy of its StateSaveLocation taken before the Pod's
job existed, so it comes back without that job and hands its ID out again. The Pod must
stay, with a new job on its node, and no node may be drained ("Duplicate jobid")."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import httpx
import pytest

from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from tests.e2e.conftest import SCHEDULER
from tests.e2e.test_schedule_flow import P, create, get, job_of, slurm_nodes, wait_bound
from tests.faults.chaos import Daemons
from tests.support import SchedulerProcess, SlurmRest, events_for, make_pod, wait_for

pytestmark = pytest.mark.e2e


def listings(scheduler: SchedulerProcess) -> float:
    """How many job listings the scheduler has asked slurmrestd for."""
    text = httpx.get(f"http://127.0.0.1:{scheduler.metrics_port}/metrics", timeout=5).text
    found = re.search(r'^sunk_slurm_api_request_seconds_count\{endpoint="GET /jobs"\} (\S+)$', text, re.M)
    return float(found[1]) if found else 0.0


def restart_slurmctld_from(dev_cluster: DevCluster, saved: Path) -> None:
    """SIGKILL slurmctld, put `saved` back as its StateSaveLocation, start it again."""
    state = dev_cluster.layout.slurm / "state" / "ctld"

    def restore() -> None:
        shutil.rmtree(state)
        shutil.copytree(saved, state, symlinks=True)

    daemons = Daemons(dev_cluster.layout)
    try:
        daemons.kill_and_restart("slurmctld", 0.0, while_down=restore)
    finally:
        daemons.close()


def test_r8_2_a_pod_whose_job_slurmctld_lost_keeps_running_on_a_new_job(
    kube: AdminKube,
    slurm: SlurmRest,
    namespace: str,
    scheduler: SchedulerProcess,
    dev_cluster: DevCluster,
    tmp_path: Path,
) -> None:
    saved = tmp_path / "ctld"
    shutil.copytree(dev_cluster.layout.slurm / "state" / "ctld", saved, symlinks=True)
    node = slurm_nodes(kube)[0]
    create(kube, namespace, make_pod("kept", SCHEDULER, annotations={P + "required-nodes": node}))
    old = int(job_of(wait_bound(kube, namespace, "kept"), slurm)["job_id"])
    seen = listings(scheduler)
    wait_for(lambda: listings(scheduler) >= seen + 2, timeout=15, what="a job listing showing it running")

    started = time.monotonic()
    restart_slurmctld_from(dev_cluster, saved)
    wait_for(
        lambda: (
            (pod := get(kube, namespace, "kept")) is None
            or pod["metadata"]["annotations"].get(P + "job-id") != str(old)
        ),
        timeout=60,
        what="the Pod to be re-adopted or deleted",
    )
    pod = get(kube, namespace, "kept")
    notes = {e["reason"]: e.get("note", "") for e in events_for(kube, namespace, "kept")}
    assert pod is not None and not pod["metadata"].get("deletionTimestamp"), notes
    new = int(pod["metadata"]["annotations"][P + "job-id"])
    took = time.monotonic() - started
    print(f"\nR8.2 slurmctld restarted without job {old} → the Pod runs on job {new}: {took:.1f} s")
    assert f"job {old}" in notes["PlaceholderReadopted"] and f"job {new}" in notes["PlaceholderReadopted"]
    job = slurm.job(new)
    assert job["job_state"] == "RUNNING" and job["nodes"] == node, job
