"""R9.2, --placement=pack: a GPU Pod fills a partly used node before an idle one, and a
packed job that still waits gets the idle nodes back."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import run_cli
from tests.e2e.test_lifecycle import reasons
from tests.e2e.test_schedule_flow import create, host_of, slurm_nodes, wait_bound
from tests.support import SchedulerProcess, SlurmRest, make_pod, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture
def one_gpu_used_on_the_last_node(slurm: SlurmRest, kube: AdminKube) -> Iterator[str]:
    """A Slurm job (not a Pod: a training job, say) holding one GPU of the last Slurm node.
    Left to itself, Slurm would start a new job on the first idle node."""
    last = slurm_nodes(kube)[-1]
    gpu = {"tres_per_node": "gres/gpu:1"} if slurm.modern else {"gres": "gpu:1"}
    job_id = slurm.submit("#!/bin/sh\nsleep 600\n", name="occupant", nodelist=last, **gpu)
    try:
        wait_for(lambda: slurm.job(job_id)["job_state"] == "RUNNING", timeout=20, what="the occupant to run")
        yield last
    finally:
        slurm.cancel(job_id)


def test_r9_2_with_pack_a_gpu_pod_joins_the_partly_used_node(
    kube: AdminKube,
    namespace: str,
    own_scheduler: Callable[..., SchedulerProcess],
    one_gpu_used_on_the_last_node: str,
) -> None:
    proc = own_scheduler("--placement=pack")
    create(kube, namespace, make_pod("one-gpu", proc.name, gpus=1))
    pod = wait_bound(kube, namespace, "one-gpu")
    assert pod["spec"]["nodeName"] == host_of(kube, one_gpu_used_on_the_last_node)
    submitted = reasons(kube, namespace, "one-gpu")["PlaceholderSubmitted"]
    assert f"packed towards the partly used {one_gpu_used_on_the_last_node}" in submitted


def test_r9_2_a_packed_job_that_cannot_start_gets_the_idle_nodes_back(
    kube: AdminKube,
    namespace: str,
    own_scheduler: Callable[..., SchedulerProcess],
    one_gpu_used_on_the_last_node: str,
    dev_cluster: DevCluster,
) -> None:
    """A reservation keeps other jobs off the partly used node; the scheduler's listing
    still shows room there, so the job leaves the idle nodes out and cannot start. After
    its patience it is widened and runs on an idle node."""
    last = one_gpu_used_on_the_last_node
    run_cli(
        dev_cluster.layout,
        "scontrol",
        "create",
        "reservation",
        f"reservationname=keep-{namespace[-5:]}",
        f"nodes={last}",
        "starttime=now",
        "duration=10",
        "users=daemon",
        "flags=ignore_jobs",
    )
    try:
        proc = own_scheduler("--placement=pack")
        create(kube, namespace, make_pod("widened", proc.name, gpus=1))
        pod = wait_bound(kube, namespace, "widened", timeout=30)
        assert pod["spec"]["nodeName"] != host_of(kube, last)
        assert "--placement=pack" in reasons(kube, namespace, "widened")["PlacementWidened"]
    finally:
        run_cli(dev_cluster.layout, "scontrol", "delete", f"reservationname=keep-{namespace[-5:]}")
