"""R10's premise on real containers: Slurm runs as Pods on real kubelet Nodes, and a Pod the
sunk scheduler places starts on the Node of the slurmd Pod whose Slurm node Slurm chose.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`, which `make test` runs).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sunk_dev import DevCluster, images, realcluster
from sunk_dev.hostnet import network_of
from sunk_dev.kubeapi import AdminKube
from tests.conftest import SLURM
from tests.e2e.slurm_in_pods import (
    SLURMD_CPUS,
    SLURMD_MEMORY_MIB,
    SlurmInPods,
    containers_running,
    delete_namespace,
)
from tests.support import SchedulerProcess, free_port, make_pod, wait_for

pytestmark = pytest.mark.real_nodes


@pytest.fixture(scope="module")
def slurm_pods(dev_cluster: DevCluster, kube: AdminKube) -> Iterator[SlurmInPods]:
    spec = dev_cluster.require_running()
    built = images.ensure_images(SLURM, dev_cluster.layout.logs / "images.log")
    namespace = f"slurm-pods-{int(time.time()) % 100000}"
    kube.create_namespace(namespace)
    nodes = [f"real-{n}" for n in range(1, spec.real_nodes + 1)]
    pods = SlurmInPods(dev_cluster, kube, namespace, nodes, {name: b.tag for name, b in built.items()})
    pods.create()
    pods.wait_idle(len(nodes))
    yield pods
    delete_namespace(kube, namespace)


def test_r10_slurmctld_and_slurmrestd_run_as_pods_on_real_nodes(slurm_pods: SlurmInPods) -> None:
    for name in ("slurmctld", "slurmrestd"):
        pod = slurm_pods.pod(name)
        assert containers_running(pod), f"{name} is not running: {pod.get('status')}"
        assert pod["spec"]["nodeName"].startswith("real-")
    address = slurm_pods.pod("slurmrestd")["status"]["podIP"]
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": slurm_pods.token()}
    answer = httpx.get(f"http://{address}:6820/slurm/v0.0.42/ping", headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.json()["pings"][0]["responding"] is True


def test_r10_containers_on_real_nodes_have_logs_tokens_services_and_cluster_dns(
    slurm_pods: SlurmInPods, kube: AdminKube
) -> None:
    """What a Pod on a real Node relies on: its log is read through the kubelet, its
    ServiceAccount token mounts and authenticates, Services and cluster names resolve, and
    names outside the cluster do not (Pods stay on the dev cluster's own network)."""
    ns = slurm_pods.namespace
    log = kube.http.get(f"/api/v1/namespaces/{ns}/pods/slurmctld/log")
    assert log.status_code == 200 and "slurmctld" in log.text, log.text[:300]
    pod = make_pod("client", "none", cpu="100m", memory="32Mi", nodeName=slurm_pods.nodes[1])
    main = pod["spec"]["containers"][0]
    main.update(image=slurm_pods.images["slurmd"], imagePullPolicy="Never", command=["sleep", "infinity"])
    del pod["spec"]["schedulerName"]
    kube.create(f"/api/v1/namespaces/{ns}/pods", pod)
    wait_for(
        lambda: containers_running(slurm_pods.pod("client")) or None, timeout=60, what="the client Pod to run"
    )
    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    call = (
        f'curl -s --cacert {account}/ca.crt -H "Authorization: Bearer $(cat {account}/token)" '
        f"https://kubernetes.default.svc/api/v1/namespaces/{ns}/secrets"
    )
    answer = slurm_pods.exec("client", "sh", "-c", call)
    assert f"system:serviceaccount:{ns}:default" in answer, answer  # authenticated, then refused
    assert slurm_pods.exec("client", "getent", "hosts", f"slurmrestd.{ns}.svc.cluster.local").strip()
    outside = slurm_pods.run("client", "getent", "hosts", "deb.debian.org")
    assert outside.returncode != 0, "an outside name resolved inside a Pod"


def test_r10_slurmd_pods_on_three_real_nodes_register_idle_with_the_cpus_and_memory_they_were_given(
    slurm_pods: SlurmInPods,
) -> None:
    assert len(slurm_pods.nodes) >= 3, "the real-Node suite runs with three real Nodes"
    out = slurm_pods.exec("slurmctld", "sinfo", "-h", "-N", "-o", "%N %t %c %m")
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert sorted(r[0] for r in rows) == [f"compute-{n}" for n in range(1, len(slurm_pods.nodes) + 1)]
    for name, state, cpus, memory in rows:
        assert (state, int(cpus), int(memory)) == ("idle", SLURMD_CPUS, SLURMD_MEMORY_MIB), name
    placed = {slurm_pods.pod(f"compute-{n}")["spec"]["nodeName"] for n in range(1, len(slurm_pods.nodes) + 1)}
    assert placed == set(slurm_pods.nodes), "one slurmd Pod per real Node"


def test_r10_srun_across_three_nodes_prints_three_pod_hostnames(slurm_pods: SlurmInPods) -> None:
    count = len(slurm_pods.nodes)
    out = slurm_pods.exec("slurmctld", "srun", f"-N{count}", "hostname")
    assert sorted(out.split()) == [f"compute-{n}" for n in range(1, count + 1)]
    # The job steps' slurmstepd processes are orphaned when they end; the image's init
    # (tini as PID 1) must reap them, or every job would leave zombies in the Pod.
    for n in range(1, count + 1):
        wait_for(
            lambda n=n: not _zombies(slurm_pods, f"compute-{n}") or None,  # type: ignore[misc]
            timeout=20,
            what=f"compute-{n} to have reaped its job steps",
        )


def _zombies(slurm_pods: SlurmInPods, pod: str) -> list[str]:
    out = slurm_pods.exec(pod, "sh", "-c", "grep -ls '^State:[[:space:]]*Z' /proc/[0-9]*/status || true")
    return out.split()


@pytest.fixture
def pod_scheduler(dev_cluster: DevCluster, slurm_pods: SlurmInPods) -> Iterator[SchedulerProcess]:
    """sunk's scheduler on the host, talking to the slurmrestd Pod; its placeholder jobs,
    which run in the slurmd Pods, call its hooks API on the host's bridge address."""
    layout = dev_cluster.layout
    token_file = layout.root / f"token-{slurm_pods.namespace}"
    token_file.write_text(slurm_pods.token() + "\n")
    token_file.chmod(0o600)
    rest = slurm_pods.pod("slurmrestd")["status"]["podIP"]
    gateway = network_of(layout).gateway
    hooks = free_port()
    proc = SchedulerProcess(
        dev_cluster,
        f"sunk-{slurm_pods.namespace}",
        f"--hooks-api-bind-address={gateway}:{hooks}",
        f"--hooks-api-url=http://{gateway}:{hooks}",
        f"--slurmd-namespace={slurm_pods.namespace}",
        f"--watch-namespace={slurm_pods.namespace}",
        env={
            "SUNK_SLURM_API_BASE": f"http://{rest}:6820",
            "SUNK_SLURM_AUTH_TOKEN_FILE": str(token_file),
        },
        hooks_port=hooks,
    ).start()
    yield proc
    proc.stop()


def test_r10_a_pod_sunk_places_runs_on_the_node_of_the_slurmd_pod_slurm_chose(
    slurm_pods: SlurmInPods, pod_scheduler: SchedulerProcess, kube: AdminKube
) -> None:
    ns = slurm_pods.namespace
    pod = make_pod("inference", pod_scheduler.name, cpu="500m", memory="64Mi")
    main = pod["spec"]["containers"][0]
    main.update(image=slurm_pods.images["slurmd"], imagePullPolicy="Never", command=["sleep", "infinity"])
    main["resources"]["limits"] = {"cpu": "500m", "memory": "64Mi"}
    kube.create(f"/api/v1/namespaces/{ns}/pods", pod)

    def running() -> dict[str, Any] | None:
        found = slurm_pods.pod("inference")
        return found if containers_running(found) else None

    placed = wait_for(running, timeout=60, what="the Pod sunk placed to run")
    jobs = slurm_pods.exec("slurmctld", "squeue", "-h", "-o", "%i %N %j")
    job_id, slurm_node, _ = next(line.split() for line in jobs.splitlines() if "inference" in line)
    slurmd_node = slurm_pods.pod(slurm_node)["spec"]["nodeName"]
    assert placed["spec"]["nodeName"] == slurmd_node, "bound to the Node of the slurmd Pod Slurm chose"
    assert slurm_pods.exec("inference", "hostname").strip() == "inference", "its container answers"

    kube.delete(f"/api/v1/namespaces/{ns}/pods/inference")
    wait_for(
        lambda: job_id not in slurm_pods.exec("slurmctld", "squeue", "-h", "-o", "%i") or None,
        timeout=60,
        what="the Pod's job to end",
    )
    wait_for(
        lambda: slurm_pods.nodes_by_state().get(slurm_node) == "idle" or None,
        timeout=60,
        what=f"{slurm_node} to be idle again",
    )


def _started_at(pod: dict[str, Any]) -> str:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return str(((statuses[0].get("state") or {}).get("running") or {}).get("startedAt") or "")


def test_r10_a_real_node_stops_and_starts_again(
    dev_cluster: DevCluster, slurm_pods: SlurmInPods, kube: AdminKube
) -> None:
    """What the node-lifecycle tests of the NodeSet issues build on: a machine going away
    and coming back, its containers started again by its kubelet."""
    node = slurm_pods.nodes[-1]
    stopped_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    dev_cluster.stop_node(node)
    try:
        assert realcluster.node_states(kube, dev_cluster.layout)[node].endswith("NOT RUNNING")
    finally:
        dev_cluster.start_node(node)
    wait_for(
        lambda: realcluster.node_states(kube, dev_cluster.layout)[node] == "Ready" or None,
        timeout=60,
        what=f"{node} to be Ready again",
    )
    wait_for(
        lambda: _started_at(slurm_pods.pod("slurmrestd")) >= stopped_at or None,
        timeout=90,
        what="the kubelet to start slurmrestd's container again",
    )
