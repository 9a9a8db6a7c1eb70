"""Issue #51 end to end on the dev cluster's real Nodes: node health checks as the chart
installs them by default, Node conditions both ways, and a machine that goes down.

A check made to fail drains its member with the check's words (an Event on the member's Pod,
the NodeSet's unhealthy count); the member returns only after the same check passes again;
a check that hangs is killed and counts as failed; an administrator's drain is never lifted.
A Node fault condition drains its member and clearing it returns the member; a stopped
machine has its member DOWN in Slurm within a minute, and idle again once it is back.

Runs with `SUNK_TEST_CLUSTER=real` (part of `make test`): one install in namespace `health`,
its control plane kept off real-3 (the machine the last test stops), NodeSet `compute` on
real-1..3, and two site checks from a ConfigMap driven by flag files in a member's spool
(`10-flag` fails while `hc-fail` is there, `20-hang` sleeps past its limit while `hc-hang`
is). The dev platform runs the checks every 20 s. The tests run in file order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sunk.operator.nodeset.members import SLURM_NODE_LABEL
from sunk_dev import DevCluster, realcluster
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.platform import Platform, nodeset
from tests.e2e.slurm_in_pods import delete_namespace
from tests.support import events_for, holds_for, wait_for

pytestmark = pytest.mark.real_nodes
NAMESPACE = "health"
LOST = "real-3"  # the machine the last test stops: nothing of the control plane runs there
FAULTY = "real-2"  # the Node given a fault condition
HOSTNAME = "kubernetes.io/hostname"
FIGURES: dict[str, float] = {}
SPOOL = "/var/spool/slurmd"
CHECKS = {
    "10-flag": f'#!/bin/sh\nif [ -e {SPOOL}/hc-fail ]; then echo "flag present"; exit 1; fi\n',
    "20-hang": f"#!/bin/sh\nif [ -e {SPOOL}/hc-hang ]; then sleep 100; fi\n",
}
TIMEOUT_S = 4
# Replacement: long enough that the first tests' short drains never reach it, even under load.
REPLACE_AFTER_S = 60
# One interval (20 s) plus the run's own time and slurmctld's view catching up.
WITHIN = 75


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


def state(platform: Platform, name: str) -> str:
    """`<state>|<reason>` of one Slurm node, as sinfo prints them."""
    found = state_and_reason(platform, name)
    return "|".join(found) if found else ""


def flag(platform: Platform, member: str, name: str, *, present: bool) -> None:
    change = f"touch {SPOOL}/{name}" if present else f"rm -f {SPOOL}/{name}"
    done = platform.kubectl("exec", member, "-c", "slurmd", "--", "sh", "-c", change)
    assert done.returncode == 0, done.stderr


def nodeset_status(platform: Platform, kube: AdminKube) -> dict[str, Any]:
    return platform.nodeset(kube, "compute").get("status") or {}


@pytest.fixture(scope="module")
def platform(dev_cluster: DevCluster, kube: AdminKube) -> Iterator[Platform]:
    plat = Platform(dev_cluster, namespace=NAMESPACE, release="slurm")
    # The site checks exist before the members, so the kubelet mounts them from the start.
    kube.create_namespace(NAMESPACE)
    configmaps = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    if kube.find(f"{configmaps}/site-checks") is None:
        kube.create(configmaps, {"metadata": {"name": "site-checks"}, "data": CHECKS})
    else:  # left by a run that was stopped
        kube.patch(f"{configmaps}/site-checks", {"data": CHECKS})
    off_lost = {"key": HOSTNAME, "operator": "NotIn", "values": [LOST]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [off_lost]}]}
    keep_off = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    checks = {
        "timeoutSeconds": TIMEOUT_S,
        "scripts": {"configMap": "site-checks"},
        "replace": {"after": f"{REPLACE_AFTER_S}s", "maxUnavailable": 1},
    }
    # slurmctld, slurmdbd, MariaDB, slurmrestd, login and the operator all stay up when real-3 stops.
    values = {"defaults": {"affinity": keep_off}, "slurm": {"healthChecks": checks}}
    FIGURES["helm install (s)"] = plat.install(values, scheduler=False)
    started = time.monotonic()
    plat.apply_nodeset(kube, nodeset("compute", ["main"]))
    wait_for(
        lambda: plat.login("sinfo -h -t idle -o %D").stdout.strip() == "3" or None,
        timeout=240,
        what="the three members idle",
        every=1,
    )
    FIGURES["NodeSet applied -> 3 members idle (s)"] = time.monotonic() - started
    yield plat
    print("\nnode health figures:", {k: round(v, 1) for k, v in FIGURES.items()})
    plat.uninstall()
    delete_namespace(kube, NAMESPACE, timeout=180)


def test_issue51_a_failing_check_drains_its_member_and_only_it_lifts_that_drain_never_an_admins(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches: a failing check that drains nothing (or with no reason, or unseen by
    Kubernetes), a drain lifted while the check still fails or never lifted once it passes,
    and a check lifting an administrator's drain on a node whose checks pass."""
    sick_pod, kept_pod = member_on(kube, "real-1"), member_on(kube, "real-2")
    sick, kept = slurm_name(sick_pod), slurm_name(kept_pod)
    platform.login(f"scontrol update nodename={kept} state=drain reason='admin: bad fan'")
    flag(platform, sick_pod["metadata"]["name"], "hc-fail", present=True)
    flag(
        platform, kept_pod["metadata"]["name"], "hc-fail", present=True
    )  # fails too: the admin's reason stays
    started = time.monotonic()
    wait_for(
        lambda: state(platform, sick) == "drained|sunk-hc: 10-flag: flag present" or None,
        timeout=WITHIN,
        what=f"{sick} drained by the failing check",
        every=1,
    )
    FIGURES["check fails -> drained (s)"] = time.monotonic() - started
    wait_for(
        lambda: nodeset_status(platform, kube).get("unhealthy") == 1 or None,
        timeout=30,
        what="the NodeSet's status counting one unhealthy member",
        every=1,
    )
    notes = [
        e.get("note", "")
        for e in events_for(kube, NAMESPACE, sick_pod["metadata"]["name"])
        if e.get("reason") == "HealthCheckFailed"
    ]
    assert len(notes) == 1 and "10-flag: flag present" in notes[0], notes
    flag(platform, sick_pod["metadata"]["name"], "hc-fail", present=False)
    flag(platform, kept_pod["metadata"]["name"], "hc-fail", present=False)
    started = time.monotonic()
    wait_for(
        lambda: state(platform, sick) == "idle|none" or None, timeout=WITHIN, what=f"{sick} back", every=1
    )
    FIGURES["check passes -> idle (s)"] = time.monotonic() - started
    # A whole interval more of clean runs on the admin's node: its drain is still the admin's.
    holds_for(
        lambda: state(platform, kept) == "drained|admin: bad fan",
        seconds=25,
        what=f"the administrator's drain on {kept}",
        every=2,
    )
    platform.login(f"scontrol update nodename={kept} state=resume")


def test_issue51_a_check_that_hangs_is_killed_and_counts_as_failed(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches: a hanging check taken for healthy (or one that makes slurmd kill the whole
    run at 60 s, so nothing is drained)."""
    pod = member_on(kube, "real-1")
    sick = slurm_name(pod)
    flag(platform, pod["metadata"]["name"], "hc-hang", present=True)
    started = time.monotonic()
    reason = f"drained|sunk-hc: 20-hang: timed out after {TIMEOUT_S}s"
    try:
        wait_for(
            lambda: state(platform, sick) == reason or None, timeout=WITHIN, what="the hang drained", every=1
        )
        FIGURES["check hangs -> drained (s)"] = time.monotonic() - started
    finally:
        flag(platform, pod["metadata"]["name"], "hc-hang", present=False)
    wait_for(
        lambda: state(platform, sick) == "idle|none" or None, timeout=WITHIN, what=f"{sick} back", every=1
    )


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


def members_named(kube: AdminKube, name: str) -> list[dict[str, Any]]:
    """The live Pods (not terminating) that hold Slurm node `name`."""
    pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"{SLURM_NODE_LABEL}={name}")
    return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]


def healthy_message(platform: Platform, kube: AdminKube) -> str:
    conditions = nodeset_status(platform, kube).get("conditions") or []
    return next((str(c.get("message", "")) for c in conditions if c.get("type") == "Healthy"), "")


def job_state(platform: Platform, job: str) -> str:
    said = platform.login(f"scontrol show job {job} -o")
    found = [word for word in said.stdout.split() if word.startswith("JobState=")]
    return found[0].removeprefix("JobState=") if found else ""


def test_issue51_a_member_kept_failing_is_replaced_once_its_running_job_ends_and_the_job_completes(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches: a member its checks keep drained that stays drained for ever, one replaced
    under a running job (the job killed or requeued instead of COMPLETED), or a replacement
    that comes back drained."""
    pod = member_on(kube, "real-1")
    name, uid, member = slurm_name(pod), pod["metadata"]["uid"], pod["metadata"]["name"]
    go = f"{SPOOL}/job-go"  # the job runs until this file is there (slurmd's spool, this Pod's own)
    said = platform.login(
        f"sbatch --parsable -w {name} -N1 -t 10 --wrap 'while [ ! -e {go} ]; do sleep 1; done'"
    )
    assert said.returncode == 0, said.stdout + said.stderr
    job = said.stdout.strip().split(";")[0]
    wait_for(lambda: job_state(platform, job) == "RUNNING" or None, timeout=60, what=f"job {job} running")
    flag(platform, member, "hc-fail", present=True)
    started = time.monotonic()
    # Due for replacement, and waiting for the job: the NodeSet says so, and nothing is replaced.
    wait_for(
        lambda: f"{name} is replaced once its jobs end" in healthy_message(platform, kube) or None,
        timeout=WITHIN + REPLACE_AFTER_S,
        what=f"{name} due for replacement and waiting for job {job}",
        every=2,
    )
    assert [p["metadata"]["uid"] for p in members_named(kube, name)] == [uid]
    assert job_state(platform, job) == "RUNNING"
    flag(platform, member, "job-go", present=True)
    ended = time.monotonic()
    replaced = wait_for(
        lambda: [p for p in members_named(kube, name) if p["metadata"]["uid"] != uid] or None,
        timeout=90,
        what=f"a new Pod for {name}",
        every=1,
    )
    FIGURES["job ends -> new member Pod (s)"] = time.monotonic() - ended
    assert job_state(platform, job) == "COMPLETED"
    # The Event is the NodeSet's (it names the member and the checks' words).
    notes = [
        e.get("note", "")
        for e in events_for(kube, NAMESPACE, "compute")
        if e.get("reason") == "ReplacingUnhealthyMember"
    ]
    assert len(notes) == 1 and name in notes[0] and "10-flag: flag present" in notes[0], notes
    # The new Pod has a spool of its own (no flag): verified, then back in service.
    wait_for(
        lambda: state(platform, name) == "idle|none" or None,
        timeout=180,
        what=f"{name} idle on its new Pod {replaced[0]['metadata']['name']}",
        every=2,
    )
    FIGURES["check fails -> replacement idle (s)"] = time.monotonic() - started


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
