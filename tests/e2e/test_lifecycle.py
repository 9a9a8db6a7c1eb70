"""Pod and placeholder job live and die together (R5, R6), each test reporting its latency."""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx
import pytest

from sunk.scheduler.hooks.auth import pod_key, signature
from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import run_cli
from tests.e2e.conftest import SCHEDULER
from tests.e2e.test_schedule_flow import P, create, get, job_of, slurm_nodes, wait_bound
from tests.support import SchedulerProcess, SlurmRest, events_for, holds_for, make_pod, wait_for

pytestmark = pytest.mark.e2e


def job_state(slurm: SlurmRest, job_id: int) -> str:
    return str(slurm.job(job_id)["job_state"])


def reasons(kube: AdminKube, namespace: str, pod: str) -> dict[str, str]:
    return {e["reason"]: e.get("note", "") for e in events_for(kube, namespace, pod)}


def exclusive_on(node: str, **extra: str) -> dict[str, str]:
    return {P + "required-nodes": node, P + "exclusive": "none", **extra}


def test_r5_1_deleting_a_pod_ends_its_job_only_once_the_pod_is_gone(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    node = slurm_nodes(kube)[0]
    manifest = make_pod("slow-exit", SCHEDULER, annotations=exclusive_on(node), grace=4)
    manifest["metadata"]["annotations"]["sunk.dev/ignore-sigterm"] = "true"  # lives its full grace
    create(kube, namespace, manifest)
    job_id = job_of(wait_bound(kube, namespace, "slow-exit"), slurm)["job_id"]

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/slow-exit")
    waiting = slurm.submit("#!/bin/sh\nsleep 300\n", name="next-in-line", nodelist=node, exclusive=True)
    try:
        # While the Pod terminates, its job keeps the node and the next job waits. The states
        # are read before the Pod is looked up: a Pod seen afterwards existed when they were
        # read (the other order would blame the job for a Pod that went in between).
        while True:
            states = job_state(slurm, job_id), job_state(slurm, waiting)
            if get(kube, namespace, "slow-exit") is None:
                break
            assert states[0] == "RUNNING", "the job ended while its Pod still ran"
            assert states[1] == "PENDING", "another job started on the Pod's resources"
            time.sleep(0.05)
        gone_at = time.monotonic()
        wait_for(
            lambda: job_state(slurm, job_id) not in ("RUNNING", "COMPLETING"), timeout=10, what="job end"
        )
        ended = time.monotonic() - gone_at
        wait_for(lambda: job_state(slurm, waiting) == "RUNNING", timeout=15, what="the next job to start")
        print(f"\nR5.1 Pod gone → placeholder job ended: {ended:.2f} s")
    finally:
        slurm.cancel(waiting)


def test_r5_2_scancel_deletes_the_pod_fast(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess, dev_cluster: DevCluster
) -> None:
    count = 20
    for i in range(count):
        create(kube, namespace, make_pod(f"c{i}", SCHEDULER, cpu="1", memory="128Mi"))
    jobs = {
        f"c{i}": job_of(wait_bound(kube, namespace, f"c{i}", timeout=60), slurm)["job_id"]
        for i in range(count)
    }
    latencies = []
    for name, job_id in jobs.items():
        started = time.monotonic()
        run_cli(dev_cluster.layout, "scancel", str(job_id))
        wait_for(
            lambda n=name: (p := get(kube, namespace, n)) is None or p["metadata"].get("deletionTimestamp"),
            timeout=10,
            what=f"Pod {name} to be deleted",
            every=0.005,
        )
        latencies.append(time.monotonic() - started)
    note = reasons(kube, namespace, "c0").get("CancelledInSlurm", "")
    assert f"Slurm job {jobs['c0']}" in note and "cancelled in Slurm" in note
    p50 = statistics.median(latencies)
    p99 = sorted(latencies)[int(0.99 * (count - 1))]
    print(f"\nR5.2 scancel → Pod deleted over {count} jobs: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms")
    assert p99 < 1.0


def test_r6_1_a_higher_priority_slurm_job_preempts_a_pod(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    node = slurm_nodes(kube)[1]
    create(kube, namespace, make_pod("victim", SCHEDULER, annotations=exclusive_on(node)))
    job_id = job_of(wait_bound(kube, namespace, "victim"), slurm)["job_id"]
    started = time.monotonic()
    preemptor = slurm.submit(
        "#!/bin/sh\nsleep 300\n",
        name="urgent-training",
        partition="high",
        nodelist=node,
        exclusive=True,
    )
    try:
        wait_for(lambda: get(kube, namespace, "victim") is None, timeout=30, what="the preempted Pod to go")
        deleted = time.monotonic() - started
        note = reasons(kube, namespace, "victim").get("Preempted", "")
        assert f"Slurm job {job_id} on {node} was preempted" in note
        wait_for(lambda: job_state(slurm, preemptor) == "RUNNING", timeout=30, what="the preemptor to run")
        assert job_state(slurm, job_id) == "PREEMPTED"
        print(f"\nR6.1 preempting job submitted → Pod gone: {deleted:.2f} s")
    finally:
        slurm.cancel(preemptor)


def test_r6_1_a_pod_in_a_higher_priority_partition_preempts_a_slurm_job(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    node = slurm_nodes(kube)[2]
    batch = slurm.submit("#!/bin/sh\nsleep 300\n", name="batch-work", nodelist=node, exclusive=True)
    try:
        wait_for(lambda: job_state(slurm, batch) == "RUNNING", timeout=15, what="the batch job to run")
        started = time.monotonic()
        annotations = exclusive_on(node, **{P + "partition": "high"})
        create(kube, namespace, make_pod("urgent", SCHEDULER, annotations=annotations))
        pod = wait_bound(kube, namespace, "urgent", timeout=45)
        bound = time.monotonic() - started
        assert job_state(slurm, batch) == "PREEMPTED"
        assert job_of(pod, slurm)["partition"] == "high"
        print(f"\nR6.1 Pod preempting a batch job: created → bound {bound:.2f} s")
    finally:
        slurm.cancel(batch)


def test_r6_2_a_pod_is_deleted_when_its_job_reaches_its_time_limit(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess
) -> None:
    create(kube, namespace, make_pod("short-lived", SCHEDULER, annotations={P + "timeout": "1"}))
    job = job_of(wait_bound(kube, namespace, "short-lived"), slurm)
    assert job["time_limit"] == 1
    wait_for(
        lambda: get(kube, namespace, "short-lived") is None, timeout=150, what="the Pod to go at the limit"
    )
    note = reasons(kube, namespace, "short-lived").get("TimeLimitReached", "")
    assert "reached its time limit of 1 min" in note
    ran = time.time() - job["start_time"]
    print(f"\nR6.2 timeout 1 min: Pod gone {ran:.0f} s after the job started")


def test_r5_3_a_pod_that_cannot_terminate_gets_its_node_drained_before_killwait(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess, dev_cluster: DevCluster
) -> None:
    node = slurm_nodes(kube)[3]
    manifest = make_pod("stuck", SCHEDULER, annotations=exclusive_on(node))
    manifest["metadata"]["finalizers"] = ["sunk.dev/never-removed"]
    path = f"/api/v1/namespaces/{namespace}/pods/stuck"
    create(kube, namespace, manifest)
    job_id = job_of(wait_bound(kube, namespace, "stuck"), slurm)["job_id"]
    kill_wait = (dev_cluster.spec() or pytest.fail("no spec")).kill_wait
    cancelled = time.monotonic()
    run_cli(dev_cluster.layout, "scancel", str(job_id))
    try:
        drained = wait_for(
            lambda: (
                run_cli(dev_cluster.layout, "sinfo", "-h", "-n", node, "-o", "%T|%E").splitlines()[0]
                if "drain" in run_cli(dev_cluster.layout, "sinfo", "-h", "-n", node, "-o", "%T")
                else None
            ),
            timeout=kill_wait + 10,
            what="the node to be drained",
            every=0.25,
        )
        after = time.monotonic() - cancelled
        assert after < kill_wait, f"drained only after KillWait ({after:.1f} s)"
        assert f"Pod {namespace}/stuck still running at KillWait" in drained
        note = wait_for(
            lambda: reasons(kube, namespace, "stuck").get("NodeDrained"),
            timeout=15,
            what="the NodeDrained Event on the Pod",
        )
        assert node in note and "state=resume" in note
        # Nothing else may start there: Slurm refuses a job that needs this node.
        late = slurm.post_job(slurm.job_body("#!/bin/sh\nsleep 60\n", name="must-wait", nodelist=node))
        if late.get("job_id"):  # Slurm queues it (22.05 adds error 2068); it must not run
            holds_for(
                lambda: slurm.job(int(late["job_id"]))["job_state"] == "PENDING",
                seconds=2,
                what="the job that needs the drained node to wait",
            )
            slurm.cancel(int(late["job_id"]))
        else:
            codes = {e.get("error_code") or e.get("error_number") for e in late.get("errors", [])}
            assert 2068 in codes, late  # ESLURM_NODE_NOT_AVAIL
        print(f"\nR5.3 scancel → node drained: {after:.1f} s (KillWait {kill_wait} s)")
    finally:
        kube.patch(path, {"metadata": {"finalizers": None}})
        wait_for(lambda: get(kube, namespace, "stuck") is None, timeout=10, what="the Pod to go")
        run_cli(dev_cluster.layout, "scontrol", "update", f"nodename={node}", "state=resume")


def _signed(uid: str, job_id: int, event: str, key: str, nonce: str = "") -> tuple[str, dict[str, str]]:
    path = f"/v1/pods/{uid}/jobs/{job_id}/{event}"
    ts = str(time.time())
    nonce = nonce or f"n{time.monotonic_ns()}"
    headers = {
        "X-Sunk-Timestamp": ts,
        "X-Sunk-Nonce": nonce,
        "X-Sunk-Signature": signature(key, "POST", path, ts, nonce),
    }
    return path, headers


def _hook(scheduler: SchedulerProcess, uid: str, job_id: int, event: str, key: str | None) -> httpx.Response:
    """A hook call signed with `key`, or with no signature at all when `key` is None."""
    path, headers = _signed(uid, job_id, event, key or "00")
    if key is None:
        headers = {}
    return httpx.post(f"http://127.0.0.1:{scheduler.hooks_port}{path}", headers=headers, timeout=15)


def test_r5_5_forged_replayed_and_unauthenticated_hook_calls_change_nothing(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess, dev_cluster: DevCluster
) -> None:
    secret = dev_cluster.layout.hooks_secret.read_bytes().strip()
    create(kube, namespace, make_pod("target", SCHEDULER))
    create(kube, namespace, make_pod("bystander", SCHEDULER))
    target = wait_bound(kube, namespace, "target")
    bystander = wait_bound(kube, namespace, "bystander")
    uid, job_id = target["metadata"]["uid"], job_of(target, slurm)["job_id"]
    other_job = job_of(bystander, slurm)["job_id"]

    assert _hook(scheduler, uid, job_id, "terminating", None).status_code == 401
    assert _hook(scheduler, uid, job_id, "terminating", "ab" * 32).status_code == 401  # forged key
    own_key = pod_key(secret, uid)
    assert _hook(scheduler, uid, other_job, "terminating", own_key).status_code == 403  # not its job
    bystander_key = pod_key(secret, bystander["metadata"]["uid"])
    assert _hook(scheduler, uid, job_id, "terminating", bystander_key).status_code == 401  # wrong Pod's key
    # A replay is the very same request again, byte for byte: same time, nonce, signature.
    path, headers = _signed(uid, job_id, "started", own_key)
    url = f"http://127.0.0.1:{scheduler.hooks_port}{path}"
    assert httpx.post(url, headers=headers, timeout=15).status_code == 200
    replayed = httpx.post(url, headers=headers, timeout=15)
    assert replayed.status_code == 401 and "replayed" in replayed.text

    for pod in ("target", "bystander"):
        found = get(kube, namespace, pod)
        assert found is not None and not found["metadata"].get("deletionTimestamp"), f"{pod} was touched"
    assert job_state(slurm, job_id) == "RUNNING" and job_state(slurm, other_job) == "RUNNING"


def test_r5_5_a_terminating_call_alone_does_not_end_a_running_pod(
    kube: AdminKube, slurm: SlurmRest, namespace: str, scheduler: SchedulerProcess, dev_cluster: DevCluster
) -> None:
    """A valid `terminating` call (a placeholder's key, stolen or replayed by a buggy script)
    while Slurm still runs the job is a claim Slurm contradicts: the Pod stays."""
    secret = dev_cluster.layout.hooks_secret.read_bytes().strip()
    create(kube, namespace, make_pod("claimed", SCHEDULER))
    pod = wait_bound(kube, namespace, "claimed")
    uid, job_id = pod["metadata"]["uid"], job_of(pod, slurm)["job_id"]
    answer = _hook(scheduler, uid, job_id, "terminating", pod_key(secret, uid))
    assert answer.status_code == 202, answer.text  # "still there": the script would ask again
    holds_for(
        lambda: (
            (found := get(kube, namespace, "claimed")) is not None
            and not found["metadata"].get("deletionTimestamp")
        ),
        seconds=2,
        what="the Pod to stay",
    )
    assert job_state(slurm, job_id) == "RUNNING"


def test_r5_2_a_job_cancelled_while_the_scheduler_is_down_still_takes_its_pod(
    kube: AdminKube, slurm: SlurmRest, namespace: str, own_scheduler: Any, dev_cluster: DevCluster
) -> None:
    proc = own_scheduler()
    create(kube, namespace, make_pod("orphaned", proc.name))
    job_id = job_of(wait_bound(kube, namespace, "orphaned"), slurm)["job_id"]
    proc.kill()
    run_cli(dev_cluster.layout, "scancel", str(job_id))
    wait_for(
        lambda: job_state(slurm, job_id) == "COMPLETING", timeout=5, what="Slurm to start ending the job"
    )
    holds = get(kube, namespace, "orphaned")
    assert holds is not None and not holds["metadata"].get("deletionTimestamp")
    restarted = time.monotonic()
    proc.start()
    wait_for(lambda: get(kube, namespace, "orphaned") is None, timeout=15, what="the Pod to be deleted")
    wait_for(lambda: job_state(slurm, job_id) == "CANCELLED", timeout=15, what="the job to end")
    print(f"\nscheduler restart → Pod of the cancelled job gone: {time.monotonic() - restarted:.2f} s")
