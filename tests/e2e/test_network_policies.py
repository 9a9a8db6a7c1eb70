"""Issue #52: NetworkPolicies hold on the dev cluster's real Nodes. A canary: a TCP
connection between two Pods on different real Nodes is allowed, refused (it times out)
under a deny-all ingress policy, and allowed again once the policy is deleted.

Enforcement is `sunk-netpol` (dev/src/sunk_dev/netpol.py), which `sunk dev up --real-nodes`
starts right after kube-proxy. Runs on the dev cluster with real Nodes
(`SUNK_TEST_CLUSTER=real`, which `make test` runs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from sunk_dev import DevCluster, images, netpol
from sunk_dev.kubeapi import AdminKube
from tests.conftest import SLURM
from tests.e2e.slurm_in_pods import SlurmInPods, containers_running, delete_namespace
from tests.support import make_pod, wait_for

pytestmark = pytest.mark.real_nodes

PORT = 8080
# A refused connection is a SYN dropped by the enforcer: the client sees a timeout.
CONNECT_TIMEOUT_S = 3


@dataclass
class Canary:
    pods: SlurmInPods
    server_ip: str

    def connects(self) -> bool:
        """Whether the client Pod opens a TCP connection to the server Pod's port."""
        address, limit = (self.server_ip, PORT), CONNECT_TIMEOUT_S
        script = (
            "import socket,sys\n"
            f"try: socket.create_connection({address!r}, timeout={limit}).close()\n"
            "except OSError as e: sys.exit(f'{type(e).__name__}: {e}')\n"
        )
        return self.pods.run("client", "python3", "-c", script, timeout=30).returncode == 0

    def connects_allowing_one_retry(self) -> bool:
        """A positive connection is tried twice: a Pod's first packets may reach the enforcer
        before its informer has the Pod's address (kube-network-policies closes that race
        with NRI, which the dev cluster's containerd lacks), and are judged as an unknown peer."""
        return self.connects() or self.connects()


@pytest.fixture(scope="module")
def canary(dev_cluster: DevCluster, kube: AdminKube) -> Iterator[Canary]:
    spec = dev_cluster.require_running()
    assert spec.real_nodes >= 2, "the canary needs two real Nodes"
    status = dev_cluster.status()
    assert status.network_policies.startswith("enforced"), f"NetworkPolicies: {status.network_policies}"
    built = images.ensure_images(SLURM, dev_cluster.layout.logs / "images.log")
    namespace = kube.create_namespace(f"netpol-canary-{int(time.time()) % 100000}")
    image = built["slurmd"].tag  # holds python3; every real Node has it loaded
    commands = {"server": ["python3", "-m", "http.server", str(PORT)], "client": ["sleep", "infinity"]}
    for number, (name, command) in enumerate(commands.items(), start=1):
        pod = make_pod(name, "none", cpu="50m", memory="64Mi", nodeName=f"real-{number}", grace=1)
        pod["metadata"]["labels"] = {"app.kubernetes.io/name": f"canary-{name}"}
        main = pod["spec"]["containers"][0]
        main.update(image=image, imagePullPolicy="Never", command=command)
        del pod["spec"]["schedulerName"]
        kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    pods = SlurmInPods(dev_cluster, kube, namespace, ["real-1", "real-2"], {"slurmd": image})
    for name in commands:
        wait_for(_running(pods, name), timeout=60, what=f"{name} to run")
    server_ip = pods.pod("server")["status"]["podIP"]
    canary = Canary(pods, server_ip)
    wait_for(canary.connects, timeout=30, what="the canary server to listen")
    yield canary
    delete_namespace(kube, namespace)


def _running(pods: SlurmInPods, name: str) -> Callable[[], bool]:
    return lambda: containers_running(pods.pod(name))


def test_a_deny_all_ingress_policy_refuses_a_connection_its_deletion_allows_again(
    canary: Canary, kube: AdminKube
) -> None:
    """Catches: policies rendered but not enforced (the state issue #52 found), or an
    enforcer that keeps refusing after the policy is gone."""
    ns = canary.pods.namespace
    assert canary.connects_allowing_one_retry(), "no policy yet: the connection must pass"
    policies = f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
    kube.create(
        policies,
        {"metadata": {"name": "deny-all"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
    )
    # The enforcer's informer learns of the policy within moments; each try that still
    # connects is repeated until the deadline.
    wait_for(lambda: not canary.connects(), timeout=30, what="deny-all to refuse the connection")
    assert not canary.connects(), "deny-all refused once, then let the connection through"
    kube.delete(f"{policies}/deny-all")
    wait_for(canary.connects, timeout=30, what="the connection to pass once deny-all is deleted")


def test_status_names_the_enforcer_and_its_queue(dev_cluster: DevCluster) -> None:
    status = dev_cluster.status()
    assert status.processes.get(netpol.PROCESS) is True
    assert status.network_policies == f"enforced ({netpol.PROCESS} reads NFQUEUE {netpol.QUEUE})"
