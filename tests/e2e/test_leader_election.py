"""R8.1: two replicas, one Lease: only the leader acts, and the other takes over when it dies."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from sunk_dev import DevCluster, procs
from sunk_dev.kubeapi import AdminKube
from tests.e2e.conftest import delete_pods_and_wait_for_their_jobs
from tests.e2e.test_schedule_flow import create, wait_bound
from tests.support import SchedulerProcess, SlurmRest, events_for, free_port, make_pod, wait_for

pytestmark = pytest.mark.e2e
LEASE_S = 15


@pytest.fixture
def replicas(
    dev_cluster: DevCluster, namespace: str, kube: AdminKube, slurm: SlurmRest
) -> Iterator[list[SchedulerProcess]]:
    name = f"ha-{namespace}"
    port = free_port()  # one hooks address for both, as a Service would give them
    procs = [
        SchedulerProcess(
            dev_cluster,
            name,
            "--leader-elect=true",
            f"--leader-election-namespace={namespace}",
            instance=instance,
            hooks_port=port,
            env={"POD_NAME": f"replica-{instance}"},  # the start of its Lease identity
        )
        for instance in ("a", "b")
    ]
    for proc in procs:
        proc.start()
    yield procs
    if any(p.alive() for p in procs):
        delete_pods_and_wait_for_their_jobs(kube, slurm, namespace)
    for proc in procs:
        proc.stop()


def holder(kube: AdminKube, namespace: str, name: str) -> str:
    lease = kube.find(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def leader_of(kube: AdminKube, namespace: str, procs: list[SchedulerProcess]) -> SchedulerProcess | None:
    """The live replica whose identity holds the Lease."""
    identity = holder(kube, namespace, procs[0].name)
    leading = [p for p in procs if p.alive() and identity.startswith(p.extra_env["POD_NAME"] + "_")]
    return leading[0] if leading else None


def acted_for(kube: AdminKube, namespace: str, pod: str) -> set[str]:
    """Which replicas (by identity) recorded the Pod's Scheduled Event.

    The Event is written just after the binding, so a test that saw the Pod bound waits
    for it rather than reading too early."""

    def instances() -> set[str]:
        return {
            e["reportingInstance"] for e in events_for(kube, namespace, pod) if e["reason"] == "Scheduled"
        }

    return wait_for(instances, timeout=10, what=f"the Scheduled Event of {pod}")


def test_r8_1_only_the_leader_acts_and_the_other_takes_over_within_the_lease(
    kube: AdminKube, slurm: SlurmRest, namespace: str, replicas: list[SchedulerProcess]
) -> None:
    leader = wait_for(lambda: leader_of(kube, namespace, replicas), timeout=20, what="a leader")
    follower = next(p for p in replicas if p is not leader)
    first = holder(kube, namespace, leader.name)
    uids = []
    for i in range(4):
        uids.append(create(kube, namespace, make_pod(f"before-{i}", leader.name))["metadata"]["uid"])
    for i in range(4):
        wait_bound(kube, namespace, f"before-{i}")
        assert acted_for(kube, namespace, f"before-{i}") == {first}, "a replica acted without the Lease"

    leader.kill()
    killed = time.monotonic()
    for i in range(4):
        uids.append(create(kube, namespace, make_pod(f"after-{i}", leader.name))["metadata"]["uid"])
    second = wait_for(
        lambda: (h := holder(kube, namespace, leader.name)) != first and h,
        timeout=LEASE_S + 10,
        what="the follower to take the Lease",
    )
    took_over = time.monotonic() - killed
    assert second.startswith(follower.extra_env["POD_NAME"] + "_")
    for i in range(4):
        wait_bound(kube, namespace, f"after-{i}")
        assert acted_for(kube, namespace, f"after-{i}") == {second}
    assert took_over <= LEASE_S + 3, f"takeover took {took_over:.1f} s"
    for uid in uids:
        assert len(slurm.jobs_of_pod(uid)) == 1, f"Pod {uid} has {len(slurm.jobs_of_pod(uid))} jobs"
    print(f"\nR8.1 leader killed → follower leads after {took_over:.1f} s (Lease {LEASE_S} s)")


def test_r8_1_a_leader_stopped_by_sigterm_hands_over_at_once(
    kube: AdminKube, slurm: SlurmRest, namespace: str, replicas: list[SchedulerProcess]
) -> None:
    """A rollout stops the leader with SIGTERM: it releases the Lease, so the follower
    places new Pods within seconds, not after the Lease has run out."""
    leader = wait_for(lambda: leader_of(kube, namespace, replicas), timeout=20, what="a leader")
    follower = next(p for p in replicas if p is not leader)
    leader.stop()  # SIGTERM
    stopped = time.monotonic()
    assert leader.proc is not None and leader.proc.returncode == 0
    create(kube, namespace, make_pod("handed-over", follower.name))
    wait_bound(kube, namespace, "handed-over", timeout=LEASE_S)
    took = time.monotonic() - stopped
    assert holder(kube, namespace, follower.name).startswith(follower.extra_env["POD_NAME"] + "_")
    assert acted_for(kube, namespace, "handed-over") == {holder(kube, namespace, follower.name)}
    assert took < LEASE_S / 2, f"the follower placed a Pod only {took:.1f} s after the SIGTERM"
    print(f"\nR8.1 leader SIGTERMed → follower placed a Pod {took:.1f} s later (Lease {LEASE_S} s)")


def test_r8_1_a_leader_that_cannot_renew_stops_acting_in_time_and_stays_up(
    kube: AdminKube,
    slurm: SlurmRest,
    namespace: str,
    replicas: list[SchedulerProcess],
    dev_cluster: DevCluster,
) -> None:
    """The API server freezes longer than the renew deadline: the leader stops acting
    before its Lease could expire (so no two replicas act at once), and neither replica
    exits; once the API server is back, one of them leads and places Pods."""
    leader = wait_for(lambda: leader_of(kube, namespace, replicas), timeout=20, what="a leader")
    apiserver = procs.load(dev_cluster.layout.pids, "kube-apiserver")
    assert apiserver is not None and apiserver.alive()
    frozen_at = time.monotonic()
    os.kill(apiserver.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: "stopped acting" in leader.output(), timeout=LEASE_S + 5, what="the leader to stop")
        stopped = time.monotonic() - frozen_at
    finally:
        os.kill(apiserver.pid, signal.SIGCONT)
    assert stopped < LEASE_S, f"the leader acted {stopped:.1f} s into a freeze, past its Lease"
    assert all(p.alive() for p in replicas), "a replica exited on its own"
    wait_for(kube.ready, timeout=30, what="the API server")
    create(kube, namespace, make_pod("after-freeze", leader.name))
    wait_bound(kube, namespace, "after-freeze", timeout=60)
    assert acted_for(kube, namespace, "after-freeze") == {holder(kube, namespace, leader.name)}
    print(f"\nR8.1 API server frozen → leader stopped acting after {stopped:.1f} s (Lease {LEASE_S} s)")
