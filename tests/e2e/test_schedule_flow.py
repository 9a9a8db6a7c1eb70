"""The schedule flow on the real dev cluster (R1.3, R2, R3, R4, R6.3)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from sunk_dev import topology
from sunk_dev.kubeapi import AdminKube
from tests.e2e.conftest import SCHEDULER
from tests.support import (
    SchedulerProcess,
    SlurmRest,
    condition,
    events_for,
    holds_for,
    make_pod,
    wait_for,
)

pytestmark = pytest.mark.e2e
P = "sunk.coreweave.com/"


def create(kube: AdminKube, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    return kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)


def get(kube: AdminKube, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.find(f"/api/v1/namespaces/{namespace}/pods/{name}")


def wait_bound(kube: AdminKube, namespace: str, name: str, timeout: float = 30) -> dict[str, Any]:
    def bound() -> dict[str, Any] | None:
        pod = get(kube, namespace, name)
        if pod and condition(pod).get("reason") in ("InvalidForSlurm", "RejectedBySlurm"):
            raise AssertionError(f"Pod {name} was refused: {condition(pod)['message']}")
        return pod if pod and pod["spec"].get("nodeName") else None

    try:
        return wait_for(bound, timeout=timeout, what=f"Pod {name} to be bound")
    except AssertionError as err:
        pod = get(kube, namespace, name)
        why = condition(pod) if pod else "the Pod is gone"
        raise AssertionError(f"{err}; its condition: {why}") from None


def job_of(pod: dict[str, Any], slurm: SlurmRest) -> dict[str, Any]:
    return slurm.job(int(pod["metadata"]["annotations"][P + "job-id"]))


def gpus_allocated(job: dict[str, Any]) -> int:
    """GPUs Slurm gave the job, from its per-node GRES detail ("gpu:1(IDX:0)")."""
    counts = [re.match(r"gpu(?::[^:(]+)?:(\d+)", d) for d in job.get("gres_detail") or []]
    return sum(int(m.group(1)) for m in counts if m)


def host_of(kube: AdminKube, slurm_node: str) -> str:
    pod = kube.get(f"/api/v1/namespaces/{topology.SLURMD_NAMESPACE}/pods/slurmd-{slurm_node}")
    return str(pod["spec"]["nodeName"])


def slurm_nodes(kube: AdminKube, gpu_class: str | None = None) -> list[str]:
    nodes = {n["metadata"]["name"]: n for n in kube.get("/api/v1/nodes")["items"]}
    pods = kube.get(f"/api/v1/namespaces/{topology.SLURMD_NAMESPACE}/pods")["items"]
    return sorted(
        p["metadata"]["labels"][topology.SLURM_NODE_LABEL]
        for p in pods
        if gpu_class is None
        or nodes[p["spec"]["nodeName"]]["metadata"]["labels"]["gpu.nvidia.com/class"] == gpu_class
    )


def test_r4_cpu_pod_lands_on_the_node_hosting_its_jobs_slurm_node(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    started = time.monotonic()
    create(kube, namespace, make_pod("cpu", SCHEDULER, cpu="500m", memory="300Mi"))
    pod = wait_bound(kube, namespace, "cpu")
    took = time.monotonic() - started
    job = job_of(pod, slurm)
    assert job["job_state"] == "RUNNING"
    assert pod["spec"]["nodeName"] == host_of(kube, job["nodes"])
    assert job["name"] == f"sunk:{SCHEDULER}:{namespace}/cpu:{pod['metadata']['uid']}"
    assert job["cpus"] == 1 and job["memory_per_node"] == 300
    assert condition(pod)["status"] == "True"
    notes = {e["reason"]: e.get("note", "") for e in events_for(kube, namespace, "cpu")}
    assert f"(Slurm job {job['job_id']} on node {job['nodes']}" in notes["Scheduled"]
    print(f"\ncreate→bound: {took:.2f} s")


def test_r3_2_gpu_pod_with_required_affinity_lands_only_on_that_gpu_class(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    h100 = "H100_NVLINK_80GB"
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "gpu.nvidia.com/class", "operator": "In", "values": [h100]}
                        ]
                    }
                ]
            }
        }
    }
    names = [f"gpu-{i}" for i in range(4)]
    for name in names:
        create(kube, namespace, make_pod(name, SCHEDULER, gpus=1, affinity=affinity))
    allowed_hosts = {host_of(kube, n) for n in slurm_nodes(kube, h100)}
    for name in names:
        pod = wait_bound(kube, namespace, name)
        assert pod["spec"]["nodeName"] in allowed_hosts
        job = job_of(pod, slurm)
        assert job["nodes"] in slurm_nodes(kube, h100)
        assert gpus_allocated(job) == 1, job.get("gres_detail")


def test_r3_2_node_selector_restricts_the_slurm_nodes(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    selector = {"topology.kubernetes.io/zone": "zone-a"}
    create(kube, namespace, make_pod("zoned", SCHEDULER, nodeSelector=selector))
    pod = wait_bound(kube, namespace, "zoned")
    node = kube.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")
    assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-a"


@pytest.mark.parametrize(
    ("mode", "first_user", "second_user", "share", "node"),
    [
        ("ok", "0", str(topology.JOB_UID), True, 0),  # anyone may share
        ("user", str(topology.JOB_UID), str(topology.JOB_UID), True, 1),  # the same user shares
        ("user", str(topology.JOB_UID), "0", False, 2),  # another user does not
        ("none", "0", "0", False, 3),  # nobody shares, not even the same user
    ],
)
def test_r3_exclusive_decides_whether_two_pods_share_a_node(
    kube: AdminKube,
    slurm: SlurmRest,
    namespace: str,
    scheduler: SchedulerProcess,
    mode: str,
    first_user: str,
    second_user: str,
    share: bool,
    node: int,
) -> None:
    # Each case on a node of its own: what one case's jobs leave on a node (a user-exclusive
    # owner while they complete) is not what the next case tests.
    target = slurm_nodes(kube)[node]

    def annotations(user: str) -> dict[str, str]:
        return {P + "exclusive": mode, P + "required-nodes": target, P + "user-id": user}

    create(kube, namespace, make_pod("first", SCHEDULER, annotations=annotations(first_user)))
    first = wait_bound(kube, namespace, "first")
    create(kube, namespace, make_pod("second", SCHEDULER, annotations=annotations(second_user)))
    if share:
        second = wait_bound(kube, namespace, "second")
        assert second["spec"]["nodeName"] == first["spec"]["nodeName"]
        return
    pending = wait_for(
        lambda: (p := get(kube, namespace, "second")) and "pending" in condition(p).get("message", "") and p,
        timeout=15,
        what="the second Pod to wait in Slurm",
    )
    assert not pending["spec"].get("nodeName")
    assert condition(pending)["reason"] == "PendingInSlurm"
    assert job_of(pending, slurm)["user_id"] == int(second_user)


def test_r3_required_nodes_are_used(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    target = slurm_nodes(kube)[-1]
    create(kube, namespace, make_pod("pinned", SCHEDULER, annotations={P + "required-nodes": target}))
    pod = wait_bound(kube, namespace, "pinned")
    assert job_of(pod, slurm)["nodes"] == target
    assert pod["spec"]["nodeName"] == host_of(kube, target)


def test_r3_excluded_nodes_are_avoided(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    *others, last = slurm_nodes(kube)
    create(
        kube, namespace, make_pod("avoid", SCHEDULER, annotations={P + "excluded-nodes": ",".join(others)})
    )
    pod = wait_bound(kube, namespace, "avoid")
    assert job_of(pod, slurm)["nodes"] == last


def test_r3_partition_timeout_priority_comment_reach_the_job(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    annotations = {
        P + "partition": "high",
        P + "timeout": "7",
        P + "priority": "5000",
        P + "comment": "inference replica",
    }
    create(kube, namespace, make_pod("opts", SCHEDULER, annotations=annotations))
    job = job_of(wait_bound(kube, namespace, "opts"), slurm)
    assert job["partition"] == "high"
    assert job["time_limit"] == 7
    assert job["priority"] == 5000
    # The comment is the Pod's; the started mark lives in `extra` where Slurm has it (R4.2).
    if slurm.modern:
        assert (job["comment"], job["extra"]) == ("inference replica", ": started")
    else:
        assert job["comment"] == "inference replica: started"


def test_r3_3_changing_annotations_after_submission_changes_nothing(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    create(kube, namespace, make_pod("fixed", SCHEDULER, annotations={P + "timeout": "30"}))
    pod = wait_bound(kube, namespace, "fixed")
    kube.patch(
        f"/api/v1/namespaces/{namespace}/pods/fixed", {"metadata": {"annotations": {P + "timeout": "60"}}}
    )
    holds_for(lambda: job_of(pod, slurm)["time_limit"] == 30, seconds=1.5, what="the original time limit")
    assert len(slurm.jobs_of_pod(pod["metadata"]["uid"])) == 1


def test_r6_3_job_identity_defaults_to_root(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    create(kube, namespace, make_pod("root", SCHEDULER))
    job = job_of(wait_bound(kube, namespace, "root"), slurm)
    assert (job["user_id"], job["group_id"]) == (0, 0)


def test_r3_user_id_runs_the_job_as_that_user_and_group(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    uid = str(topology.JOB_UID)
    create(kube, namespace, make_pod("user", SCHEDULER, annotations={P + "user-id": uid}))
    job = job_of(wait_bound(kube, namespace, "user"), slurm)
    assert (job["user_id"], job["group_id"]) == (topology.JOB_UID, topology.JOB_UID)


def test_r3_5_a_group_other_than_the_users_own(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    """Current Slurm takes the group as a field: the job runs with it. Slurm 22.05's REST
    API can only run a job as a user with that user's own group: the Pod is refused."""
    annotations = {P + "user-id": str(topology.JOB_UID), P + "group-id": "0"}
    pod = create(kube, namespace, make_pod("group", SCHEDULER, annotations=annotations))
    if slurm.modern:
        job = job_of(wait_bound(kube, namespace, "group"), slurm)
        assert (job["user_id"], job["group_id"]) == (topology.JOB_UID, 0)
        return
    refused = wait_for(
        lambda: (
            condition(get(kube, namespace, "group") or {}).get("reason") == "InvalidForSlurm"
            and get(kube, namespace, "group")
        ),
        timeout=15,
        what="the refusal",
    )
    assert "group-id 0 cannot be honoured" in condition(refused)["message"]
    assert slurm.jobs_of_pod(pod["metadata"]["uid"]) == []


@pytest.mark.parametrize(
    ("annotations", "grace", "expected"),
    [
        ({}, 25, "terminationGracePeriodSeconds is 25"),
        ({P + "priority": "urgent"}, 5, "priority must be an integer"),
        ({P + "exclusive": "maybe"}, 5, "exclusive must be one of"),
    ],
)
def test_r2_4_invalid_pod_gets_event_and_condition_and_never_a_job(
    kube: AdminKube,
    slurm: SlurmRest,
    namespace: str,
    scheduler: SchedulerProcess,
    annotations: dict[str, str],
    grace: int,
    expected: str,
) -> None:
    pod = create(kube, namespace, make_pod("bad", SCHEDULER, annotations=annotations, grace=grace))
    refused = wait_for(
        lambda: (p := get(kube, namespace, "bad")) and condition(p).get("reason") == "InvalidForSlurm" and p,
        timeout=15,
        what="the Pod to be refused",
    )
    assert expected in condition(refused)["message"]
    assert condition(refused)["status"] == "False"
    warnings = [e for e in events_for(kube, namespace, "bad") if e["reason"] == "FailedScheduling"]
    assert warnings and expected in warnings[0]["note"]
    # Fixing the annotations later does not help (R2.4): still no job, still unbound.
    kube.patch(
        f"/api/v1/namespaces/{namespace}/pods/bad",
        {"metadata": {"annotations": {P + "priority": "1", P + "exclusive": "ok"}}},
    )
    holds_for(
        lambda: not slurm.jobs_of_pod(pod["metadata"]["uid"]), seconds=2, what="no job for the invalid Pod"
    )
    assert not (get(kube, namespace, "bad") or {})["spec"].get("nodeName")
    assert len([e for e in events_for(kube, namespace, "bad") if e["reason"] == "FailedScheduling"]) == 1


def test_r3_5_exclusive_topo_is_refused_only_where_slurm_cannot_express_it(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    pod = create(kube, namespace, make_pod("topo", SCHEDULER, annotations={P + "exclusive": "topo"}))
    if slurm.modern:
        wait_bound(kube, namespace, "topo")
        return
    refused = wait_for(
        lambda: (p := get(kube, namespace, "topo")) and condition(p).get("reason") == "InvalidForSlurm" and p,
        timeout=15,
        what="the Pod to be refused",
    )
    assert "exclusive=topo needs Slurm 23.02" in condition(refused)["message"]
    assert slurm.jobs_of_pod(pod["metadata"]["uid"]) == []


def test_r2_1_pod_without_requests_is_refused(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    manifest = make_pod("norequests", SCHEDULER)
    manifest["spec"]["containers"][0]["resources"] = {}
    pod = create(kube, namespace, manifest)
    refused = wait_for(
        lambda: (p := get(kube, namespace, "norequests")) and condition(p).get("reason") and p,
        timeout=15,
        what="the refusal",
    )
    assert "cpu request is missing" in condition(refused)["message"]
    assert slurm.jobs_of_pod(pod["metadata"]["uid"]) == []


def test_slurm_rejection_is_reported_and_not_retried(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    pod = create(kube, namespace, make_pod("nopart", SCHEDULER, annotations={P + "partition": "nope"}))
    refused = wait_for(
        lambda: (
            (p := get(kube, namespace, "nopart")) and condition(p).get("reason") == "RejectedBySlurm" and p
        ),
        timeout=15,
        what="Slurm's refusal",
    )
    assert "Invalid partition name" in condition(refused)["message"]
    assert slurm.jobs_of_pod(pod["metadata"]["uid"]) == []


def test_r1_3_pods_of_other_schedulers_are_untouched(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    pod = create(kube, namespace, make_pod("theirs", "default-scheduler"))
    holds_for(
        lambda: not (get(kube, namespace, "theirs") or {})["spec"].get("nodeName"),
        seconds=1.5,
        what="unbound",
    )
    assert slurm.jobs_of_pod(pod["metadata"]["uid"]) == []
    assert events_for(kube, namespace, "theirs") == []


def test_r1_3_pods_in_unwatched_namespaces_are_untouched(
    kube: AdminKube, slurm: SlurmRest, namespace: str, own_scheduler: Any
) -> None:
    proc = own_scheduler("--watch-namespace=some-other-namespace")
    pod = create(kube, namespace, make_pod("elsewhere", proc.name))
    holds_for(
        lambda: not (get(kube, namespace, "elsewhere") or {})["spec"].get("nodeName"),
        seconds=1.5,
        what="unbound",
    )
    assert slurm.jobs_of_pod(pod["metadata"]["uid"]) == []


def test_r4_3_a_pod_no_node_has_room_for_waits_unschedulable_and_never_reaches_slurm(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    """1000 CPUs fit no Node in the kubelet's count: the Pod waits, saying what each Node
    lacks, and no job is submitted (Slurm, counting its own way, must not be asked for a
    place the kubelet would refuse)."""
    create(kube, namespace, make_pod("huger", SCHEDULER, cpu="1000"))
    waiting = wait_for(
        lambda: (p := get(kube, namespace, "huger")) and condition(p).get("reason") == "Unschedulable" and p,
        timeout=20,
        what="the Pod to wait, Unschedulable",
    )
    message = condition(waiting)["message"]
    assert message.startswith("no Slurm node can host this Pod: "), message
    assert "has no room for the Pod in the kubelet's count: it asks cpu 1000, " in message
    assert slurm.jobs_of_pod(waiting["metadata"]["uid"]) == []
    assert P + "job-id" not in (waiting["metadata"].get("annotations") or {})


def test_r11_3_a_pod_slurm_cannot_fit_is_refused_or_waits_but_never_both(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    """More memory than any Slurm node's RealMemory, though the kubelet would admit it (a
    NodeSet keeps memoryReserve out of RealMemory; a Pod no Node has room for never reaches
    Slurm, see below). 24.11 and later refuse the submission (the job record it makes ends
    at once); 22.05 queues the job and says so with an error. Either the Pod is refused and
    no job of it is left, or it waits on its one job: never a refusal beside a live job."""
    memory = f"{topology.MEMORY_MIB_PER_NODE + topology.SLURMD_MEMORY_REQUEST_MIB}Mi"
    pod = create(kube, namespace, make_pod("huge", SCHEDULER, cpu="1", memory=memory))
    uid = pod["metadata"]["uid"]
    settled = wait_for(
        lambda: (
            (p := get(kube, namespace, "huge"))
            and condition(p).get("reason") in ("RejectedBySlurm", "PendingInSlurm")
            and p
        ),
        timeout=20,
        what="Slurm's answer to reach the Pod",
    )

    def active() -> list[dict[str, Any]]:
        return [j for j in slurm.jobs_of_pod(uid) if j["job_state"] in ("PENDING", "RUNNING", "CONFIGURING")]

    if condition(settled)["reason"] == "RejectedBySlurm":
        assert "Slurm error" in condition(settled)["message"]
        # A job Slurm made all the same is cancelled by the next look at the Pod.
        wait_for(lambda: not active(), timeout=10, what="no job left beside the refusal")
    else:
        assert [j["job_id"] for j in active()] == [int(settled["metadata"]["annotations"][P + "job-id"])]
        holds_for(
            lambda: condition(get(kube, namespace, "huge") or {}).get("reason") == "PendingInSlurm",
            seconds=2,
            what="the Pod waiting on its job",
        )
