"""R9.1: a PodGroup (scheduling.x-k8s.io/v1alpha1) is placed as one heterogeneous Slurm
job, all members or none, and its members live and die with that job."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.slurm.models import ACTIVE_STATES
from sunk_dev.kubeapi import AdminKube
from tests.e2e.conftest import SCHEDULER
from tests.e2e.test_lifecycle import reasons
from tests.e2e.test_schedule_flow import create, get, host_of
from tests.e2e.test_workloads import active_jobs
from tests.support import SchedulerProcess, SlurmRest, condition, holds_for, make_pod, wait_for

pytestmark = pytest.mark.e2e
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
API = "scheduling.x-k8s.io/v1alpha1"


def podgroup(kube: AdminKube, namespace: str, name: str, min_member: int, timeout: int | None = None) -> None:
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    kube.create(
        f"/apis/{API}/namespaces/{namespace}/podgroups",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def member(kube: AdminKube, namespace: str, name: str, group: str, cpu: str = "1") -> None:
    pod = make_pod(name, SCHEDULER, cpu=cpu)
    pod["metadata"]["labels"] = {GROUP_LABEL: group}
    create(kube, namespace, pod)


def pods(kube: AdminKube, namespace: str, names: list[str]) -> list[dict[str, Any]]:
    return [p for n in names if (p := get(kube, namespace, n)) is not None]


def all_bound(kube: AdminKube, namespace: str, names: list[str]) -> list[dict[str, Any]] | None:
    found = pods(kube, namespace, names)
    return found if len(found) == len(names) and all(p["spec"].get("nodeName") for p in found) else None


def none_bound(kube: AdminKube, namespace: str, names: list[str]) -> bool:
    return not any(p["spec"].get("nodeName") for p in pods(kube, namespace, names))


def group_jobs(slurm: SlurmRest, namespace: str) -> list[dict[str, Any]]:
    return sorted(active_jobs(slurm, namespace).values(), key=lambda j: j.get("het_job_offset") or 0)


def group_that_cannot_fit(
    kube: AdminKube, namespace: str, name: str, timeout: int | None = None
) -> list[str]:
    """An ordinary Pod on one node, then a PodGroup of 4 whole-node members: it cannot fit
    until that Pod goes. Returns the members' names."""
    create(kube, namespace, make_pod("blocker", SCHEDULER, cpu="2"))
    wait_for(lambda: all_bound(kube, namespace, ["blocker"]), timeout=30, what="the blocker bound")
    podgroup(kube, namespace, name, 4, timeout)
    names = [f"{name}-{i}" for i in range(4)]
    for each in names:
        member(kube, namespace, each, name, cpu="8")
    return names


def test_r9_1_a_podgroup_of_4_that_fits_is_bound_together_with_one_slurm_job(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    podgroup(kube, namespace, "train", 4)
    names = [f"train-{i}" for i in range(4)]
    for i, name in enumerate(names):
        member(kube, namespace, name, "train", cpu=str(1 + i % 2))  # two shapes: a heterogeneous job
    bound = wait_for(lambda: all_bound(kube, namespace, names), timeout=60, what="all 4 members bound")
    jobs = group_jobs(slurm, namespace)
    assert len(jobs) == 4 and len({j["het_job_id"] for j in jobs}) == 1, jobs
    leader = jobs[0]["het_job_id"]
    by_uid = {j["name"].rsplit(":", 1)[1]: j for j in jobs}
    for pod in bound:
        job = by_uid[pod["metadata"]["uid"]]
        assert pod["metadata"]["annotations"]["sunk.coreweave.com/job-id"] == str(job["job_id"])
        assert pod["spec"]["nodeName"] == host_of(kube, job["nodes"])
        assert (
            f"of job {leader} for the 4 members"
            in reasons(kube, namespace, pod["metadata"]["name"])["PlaceholderSubmitted"]
        )
    assert len({p["spec"]["nodeName"] for p in bound}) == 4


def test_r9_1_fewer_than_min_member_submit_nothing_and_the_pods_say_why(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    podgroup(kube, namespace, "trio", 3)
    member(kube, namespace, "trio-0", "trio")
    member(kube, namespace, "trio-1", "trio")
    said = wait_for(
        lambda: (c := condition(get(kube, namespace, "trio-1") or {})) and "2 waiting" in c["message"] and c,
        timeout=30,
        what="a condition counting both members",
    )
    assert said["reason"] == "WaitingForPodGroup" and "needs 3 members" in said["message"], said
    holds_for(
        lambda: not active_jobs(slurm, namespace), seconds=3, what="no job for a group short of members"
    )
    member(kube, namespace, "trio-2", "trio")
    wait_for(lambda: all_bound(kube, namespace, ["trio-0", "trio-1", "trio-2"]), timeout=60, what="all bound")


def test_r9_1_a_group_that_cannot_fit_binds_none_and_holds_only_its_pending_job(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    names = group_that_cannot_fit(kube, namespace, "wide")
    wait_for(
        lambda: condition(get(kube, namespace, "wide-0") or {}).get("reason") == "PendingInSlurm",
        timeout=30,
        what="the members to say their job waits",
    )
    holds_for(lambda: none_bound(kube, namespace, names), seconds=5, what="no member bound")
    jobs = [j for j in group_jobs(slurm, namespace) if j.get("het_job_id")]
    assert len(jobs) == 4 and {j["job_state"] for j in jobs} == {"PENDING"}, jobs
    assert len({j["het_job_id"] for j in jobs}) == 1
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/blocker")
    wait_for(lambda: all_bound(kube, namespace, names), timeout=90, what="the group bound once it fits")


def running_pair(kube: AdminKube, slurm: SlurmRest, namespace: str) -> tuple[list[str], int]:
    """A PodGroup of two, bound: (member names, the group job's leader ID)."""
    podgroup(kube, namespace, "pair", 2)
    names = ["pair-0", "pair-1"]
    for name in names:
        member(kube, namespace, name, "pair")
    wait_for(lambda: all_bound(kube, namespace, names), timeout=60, what="both bound")
    return names, int(group_jobs(slurm, namespace)[0]["het_job_id"])


def test_r9_1_scancel_of_the_groups_job_deletes_every_member(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    names, leader = running_pair(kube, slurm, namespace)
    slurm.cancel(leader)
    wait_for(lambda: not pods(kube, namespace, names), timeout=40, what="every member deleted")


def test_r9_1_one_member_deleted_ends_the_groups_job_and_the_other_members(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    names, leader = running_pair(kube, slurm, namespace)
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/pair-1")
    wait_for(lambda: not pods(kube, namespace, names), timeout=40, what="the other member deleted too")
    wait_for(
        lambda: slurm.job(leader)["job_state"] not in ACTIVE_STATES, timeout=40, what="the group's job to end"
    )


def test_r9_1_a_group_past_its_timeout_has_its_job_cancelled_and_says_why(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    names = group_that_cannot_fit(kube, namespace, "late", timeout=5)
    first = wait_for(
        lambda: [j for j in group_jobs(slurm, namespace) if j.get("het_job_id")],
        timeout=30,
        what="the group's job",
    )
    leader = first[0]["het_job_id"]
    note = wait_for(
        lambda: reasons(kube, namespace, "late-0").get("PodGroupTimedOut"),
        timeout=30,
        what="the timeout Event",
    )
    assert f"Slurm job {leader}" in note and "did not start within 5s" in note, note
    wait_for(
        lambda: slurm.job(leader)["job_state"] not in ACTIVE_STATES, timeout=30, what="the job cancelled"
    )
    assert len(pods(kube, namespace, names)) == 4 and none_bound(kube, namespace, names)
    assert condition(get(kube, namespace, "late-0") or {})["reason"] in (
        "WaitingForPodGroup",
        "PendingInSlurm",
    )
