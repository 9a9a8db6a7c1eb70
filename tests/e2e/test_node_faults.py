"""Issue #51 points 5 and 6 end to end, on real Nodes: a Node fault condition drains its
member and clearing it returns the member; a machine that stops has its member marked DOWN
in Slurm within a minute, and it is idle again once the machine is back.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`, which `make test` runs):
one install with its control plane kept off real-3 (the machine phase 2 stops), NodeSet
`compute` on real-1..3. Health checks are on (the chart's default; 20 s in the dev values),
so a member comes back through a clean check run. The tests run in file order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sunk.operator.members import SLURM_NODE_LABEL
from sunk_dev import DevCluster, realcluster
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.platform import Platform, nodeset
from tests.e2e.slurm_in_pods import delete_namespace
from tests.support import wait_for

pytestmark = pytest.mark.real_nodes
NAMESPACE = "faults"
LOST = "real-3"  # the machine phase 2 stops: nothing of the control plane runs there
FAULTY = "real-2"  # the Node phase 1 gives a fault condition
HOSTNAME = "kubernetes.io/hostname"
FIGURES: dict[str, float] = {}


def member_on(kube: AdminKube, node: str) -> dict[str, Any]:
    pods = kube.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="sunk.coreweave.com/nodeset=compute"
    )["items"]
    [pod] = [
        p for p in pods if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")
    ]
    return pod


def slurm_name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"][SLURM_NODE_LABEL])


def state_and_reason(platform: Platform, name: str) -> tuple[str, str] | None:
    """Slurm's long state (e.g. idle, drained, down*) and reason of one node, or None when
    the login Pod could not ask."""
    said = platform.login(f"sinfo -h -N -n {name} -o '%T|%E'")
    lines = [line for line in said.stdout.splitlines() if "|" in line]
    if said.returncode != 0 or not lines:
        return None
    state, _, reason = lines[0].partition("|")
    return state.strip().lower(), reason.strip()


def once_in(platform: Platform, name: str, *states: str) -> tuple[str, str] | None:
    """(state, reason) once Slurm lists `name` in a state starting with one of `states`."""
    found = state_and_reason(platform, name)
    return found if found is not None and found[0].startswith(states) else None


def set_node_condition(kube: AdminKube, node: str, condition: dict[str, Any]) -> None:
    """As Node Problem Detector does: a strategic merge, so the kubelet's conditions stay (a
    merge patch would replace the whole list, Ready with it)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = {"status": {"conditions": [{**condition, "lastHeartbeatTime": now, "lastTransitionTime": now}]}}
    resp = kube.http.request(
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        content=json.dumps(body),
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    if resp.status_code >= 300:
        raise KubeError(resp.status_code, resp.text)


@pytest.fixture(scope="module")
def platform(dev_cluster: DevCluster, kube: AdminKube) -> Iterator[Platform]:
    plat = Platform(dev_cluster, namespace=NAMESPACE, release="slurm")
    off_lost = {"key": HOSTNAME, "operator": "NotIn", "values": [LOST]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [off_lost]}]}
    keep_off = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    # slurmctld, slurmdbd, MariaDB, slurmrestd, login and the operator all stay up in phase 2.
    FIGURES["helm install (s)"] = plat.install({"defaults": {"affinity": keep_off}}, scheduler=False)
    plat.apply_nodeset(kube, nodeset("compute", ["main"]))
    wait_for(
        lambda: plat.login("sinfo -h -t idle -o %D").stdout.strip() == "3" or None,
        timeout=240,
        what="the three members idle",
        every=1,
    )
    yield plat
    print("\nnode fault figures:", {k: round(v, 1) for k, v in FIGURES.items()})
    plat.uninstall()
    delete_namespace(kube, NAMESPACE, timeout=180)


def test_issue51_a_node_condition_drains_its_member_and_clearing_it_returns_it(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches: a fault Node Problem Detector reports that leaves the member taking jobs, a
    drain without the condition's words, or a member left drained once it cleared."""
    name = slurm_name(member_on(kube, FAULTY))
    fault = {
        "type": "KernelDeadlock",
        "status": "True",
        "reason": "DockerHung",
        "message": "task docker:7 blocked",
    }
    started = time.monotonic()
    set_node_condition(kube, FAULTY, fault)
    try:
        state, reason = wait_for(
            lambda: once_in(platform, name, "drain"),
            timeout=60,
            what=f"{name} drained for its Node's KernelDeadlock",
            every=1,
        )
        FIGURES["condition set -> drained (s)"] = time.monotonic() - started
        assert reason == "sunk-node: KernelDeadlock: task docker:7 blocked", (state, reason)
    finally:
        set_node_condition(
            kube, FAULTY, {**fault, "status": "False", "reason": "KernelHasNoDeadlock", "message": "ok"}
        )
    started = time.monotonic()
    wait_for(
        lambda: once_in(platform, name, "idle"),
        timeout=120,  # the hand-over to the checks, then their next clean run (every 20 s)
        what=f"{name} idle again once the condition cleared",
        every=1,
    )
    FIGURES["condition cleared -> idle (s)"] = time.monotonic() - started


def test_issue51_a_stopped_machines_member_is_down_within_a_minute_and_back_after(
    dev_cluster: DevCluster, platform: Platform, kube: AdminKube
) -> None:
    """Catches: a lost machine's member left up in Slurm until SlurmdTimeout (jobs sent to
    it), marked without the Node's reason, moved off for the unreachable taint (a new Pod
    instead of the old one back), or left DOWN once the machine is back."""
    pod = member_on(kube, LOST)
    name, uid = slurm_name(pod), pod["metadata"]["uid"]
    started = time.monotonic()
    dev_cluster.stop_node(LOST)
    try:
        state, reason = wait_for(
            lambda: once_in(platform, name, "down"),
            timeout=60,  # node lifecycle: Unknown after 30 s without a Lease renewal
            what=f"{name} DOWN in Slurm after {LOST} stopped",
            every=1,
        )
        FIGURES["machine stopped -> DOWN (s)"] = time.monotonic() - started
        assert reason.startswith("sunk-node: Ready=Unknown"), (state, reason)
        counts = wait_for(
            lambda: (
                (platform.nodeset(kube, "compute").get("status") or {}).get("slurm", {}).get("down") or None
            ),
            timeout=30,
            what="the NodeSet's status to count the member down",
            every=1,
        )
        assert counts == 1
    finally:
        dev_cluster.start_node(LOST)
    started = time.monotonic()
    wait_for(
        lambda: realcluster.node_states(kube, dev_cluster.layout)[LOST] == "Ready" or None,
        timeout=90,
        what=f"{LOST} Ready again",
        every=1,
    )
    wait_for(
        lambda: once_in(platform, name, "idle"),
        timeout=240,  # the kubelet restarts slurmd, it registers, then a clean check run
        what=f"{name} idle again once {LOST} is back",
        every=1,
    )
    FIGURES["machine started -> idle (s)"] = time.monotonic() - started
    assert member_on(kube, LOST)["metadata"]["uid"] == uid  # the same member came back
    ran = platform.login(f"srun -w {name} -N1 -t 1 hostname", timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr  # Slurm reaches it: really back
