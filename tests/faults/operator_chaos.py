"""Fault injection for the NodeSet promise: the platform never kills a job.

The run installs the Slurm chart on the dev cluster's real Nodes, keeps a stream of short
Slurm jobs going through a NodeSet, and makes the operator work all the while (scale-ins
and scale-outs, roll-outs of a changed template, cordons and uncordons) while it restarts
or freezes the operator, slurmctld, slurmrestd and freezes kube-apiserver, one fault at a
time. Then it lets everything settle and checks five rules (docs/reliability.md):

- every job ran to COMPLETED (a job the platform killed ends otherwise);
- no member Pod was deleted while Slurm ran a job on it;
- no Slurm node record is left without its member;
- the NodeSet is not wedged: Ready and UpToDate, with as many members as it should have;
- no node is left drained.

    .venv/bin/python -m tests.faults.operator_chaos --faults 100 [--seed N]

It needs `sunk dev up --real-nodes 3` (SUNK_DEV_DIR / SUNK_DEV_PORT_OFFSET as usual).
Processes are only signalled after matching both their command and the cgroup of the Pod
they belong to (or, for kube-apiserver, the dev cluster's own PID file).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import random
import re
import signal
import ssl
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sunk.slurm.hostlist import expand
from sunk.slurm.jwt import mint
from sunk_dev import DevCluster, procs
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.platform import Platform, nodeset
from tests.e2e.slurm_in_pods import delete_namespace
from tests.support import wait_for

Json = dict[str, Any]
NAMESPACE = "opchaos"
RELEASE = "slurm"
POOL = "pool"
REAL_NODES = ("real-1", "real-2", "real-3")
# Every process of a container, with ps or, where the image has none, from /proc.
PROCESSES = (
    "ps -eo pid,ppid,stat,etime,args 2>/dev/null || "
    "for p in /proc/[0-9]*; do echo \"${p#/proc/} $(tr '\\0' ' ' < $p/cmdline)\"; done"
)
NODESETS = f"/apis/sunk.coreweave.com/v1alpha1/namespaces/{NAMESPACE}/nodesets"
REST_VERSION = "v0.0.42"  # Slurm 24.11, the platform images' default
# Final job states: only COMPLETED means the job ran its course.
ENDED = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
FAULTS = (
    "operator-restart",
    "operator-freeze",
    "slurmctld-restart",
    "slurmctld-freeze",
    "slurmrestd-restart",
    "slurmrestd-freeze",
    "apiserver-freeze",
)


@dataclass
class Record:
    faults: Counter[str] = field(default_factory=Counter)
    changes: Counter[str] = field(default_factory=Counter)
    jobs: dict[int, str] = field(default_factory=dict)  # job ID → final state ("" until known)
    refused: int = 0  # submissions Slurm refused (a partition with no node at that moment)
    violations: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)  # what was seen when a violation was found
    notes: list[str] = field(default_factory=list)  # what is worth saying without being a violation

    def violate(self, text: str) -> None:
        self.violations.append(text)
        print(f"VIOLATION: {text}", flush=True)


class Rest:
    """slurmrestd of the platform, reached at its Pod's address over TLS (verified with the
    release's CA, by the Service's name) with a token we sign."""

    def __init__(self, kube: AdminKube) -> None:
        secrets = f"/api/v1/namespaces/{NAMESPACE}/secrets"
        key = base64.b64decode(kube.get(f"{secrets}/{RELEASE}-auth")["data"]["jwt_hs256.key"])
        self.token = mint(key, "root", 4 * 3600)
        ca = base64.b64decode(kube.get(f"{secrets}/{RELEASE}-restapi-tls")["data"]["ca.crt"]).decode()
        self.tls = ssl.create_default_context(cadata=ca)
        self.kube = kube

    def _client(self) -> httpx.Client:
        pods = self.kube.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="app.kubernetes.io/name=slurmrestd"
        )
        ip = next(p["status"]["podIP"] for p in pods["items"] if (p.get("status") or {}).get("podIP"))
        return httpx.Client(
            base_url=f"https://{ip}:6820",
            headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": self.token},
            timeout=10,
            verify=self.tls,
        )

    def call(self, method: str, path: str, body: Json | None = None) -> Json:
        with self._client() as http:
            # The certificate names the restapi Service, not the Pod's address.
            sni = {"sni_hostname": f"{RELEASE}-restapi"}
            response = http.request(method, path, json=body, extensions=sni)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def submit(self, seconds: int) -> int:
        job = {
            "script": f"#!/bin/sh\nsleep {seconds}\n",
            "partition": "main",
            "name": "chaos",
            "current_working_directory": "/tmp",
            "environment": ["PATH=/usr/bin:/bin"],
        }
        return int(self.call("POST", f"/slurm/{REST_VERSION}/job/submit", {"job": job})["job_id"])

    def active(self, ours: set[int]) -> int:
        """How many of `ours` Slurm still lists as waiting or running."""
        jobs = self.call("GET", f"/slurm/{REST_VERSION}/jobs")["jobs"]
        return sum(1 for job in jobs if int(job["job_id"]) in ours and not set(job["job_state"]) & ENDED)

    def running_by_node(self) -> dict[str, list[int]]:
        jobs = self.call("GET", f"/slurm/{REST_VERSION}/jobs")["jobs"]
        running: dict[str, list[int]] = {}
        for job in jobs:
            if "RUNNING" in job["job_state"] or "COMPLETING" in job["job_state"]:
                for node in expand(job.get("nodes") or ""):
                    running.setdefault(node, []).append(int(job["job_id"]))
        return running

    def final_state(self, job_id: int) -> str:
        answer = self.call("GET", f"/slurmdb/{REST_VERSION}/job/{job_id}")
        states = [j["state"]["current"] for j in answer.get("jobs") or []]
        words = [w for state in states for w in state]
        return next((w for w in words if w in ENDED), "")

    def nodes(self) -> dict[str, Json]:
        return {n["name"]: n for n in self.call("GET", f"/slurm/{REST_VERSION}/nodes")["nodes"]}


class OperatorLog:
    """Every operator Pod's log lines, read every 2 s while the run lasts (with their
    timestamps, so a line read twice is kept once): a restarted operator's lines would
    otherwise go with its Pod, and a violation's evidence with them."""

    KEPT = 20_000  # lines, all Pods together

    def __init__(self, kube: AdminKube) -> None:
        self.kube = kube
        self.lines: dict[str, str] = {}  # "<timestamp> <line>" → the Pod that logged it
        self.lock = threading.Lock()

    def read(self) -> None:
        pods = self.kube.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="app.kubernetes.io/name=sunk-operator"
        )["items"]
        for pod in pods:
            name = pod["metadata"]["name"]
            with contextlib.suppress(httpx.HTTPError):
                text = self.kube.http.get(  # the log endpoint answers text, not JSON
                    f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/log",
                    params={"timestamps": "true", "sinceSeconds": 60},
                ).text
                with self.lock:
                    for line in text.splitlines():
                        if line[:4].isdigit():  # not an error answer
                            self.lines.setdefault(line, name)
                    if len(self.lines) > self.KEPT:
                        self.lines = dict(sorted(self.lines.items())[-self.KEPT :])

    def about(self, member: str, last: int = 25) -> list[str]:
        """The last `last` lines, of any operator Pod, that name `member`."""
        with self.lock:
            found = sorted((line, pod) for line, pod in self.lines.items() if member in line)
        return [f"{pod[-5:]} {line}" for line, pod in found[-last:]]


def pod_processes(pod_uid: str, command: str) -> list[int]:
    """Host PIDs of `command` running in the Pod with this UID (by its cgroup): its own
    process and a wrapper that names it (tini -- sunk ...), not a shell that mentions it."""
    marks = (pod_uid, pod_uid.replace("-", "_"))
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroup = (proc / "cgroup").read_text()
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        names = [Path(part.decode(errors="replace")).name for part in argv[:3]]
        if any(mark in cgroup for mark in marks) and command in names:
            found.append(int(proc.name))
    return found


class Run:
    def __init__(self, cluster: DevCluster, seed: int, faults: int) -> None:
        self.cluster = cluster
        self.kube = AdminKube(cluster.layout)
        self.platform = Platform(cluster, namespace=NAMESPACE, release=RELEASE)
        self.random = random.Random(seed)
        self.seed = seed
        self.fault_goal = faults
        self.record = Record()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.replicas = 3
        self.revision = 0
        self.operator_log = OperatorLog(self.kube)

    # -- the platform -------------------------------------------------------------------------
    def install(self) -> None:
        print(f"installing the Slurm chart in {NAMESPACE} (seed {self.seed})", flush=True)
        self.platform.install({"slurm": {"partitions": [{"name": "main", "default": True}]}})
        self.platform.apply_nodeset(self.kube, nodeset(POOL, ["main"], replicas=3))
        self.wait(lambda: self.settled(3), 240, "the NodeSet's 3 members idle")
        self.rest = Rest(self.kube)

    def pool(self) -> Json:
        return self.kube.get(f"{NODESETS}/{POOL}")

    def members(self) -> dict[str, Json]:
        pods = self.kube.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"sunk.coreweave.com/nodeset={POOL}"
        )
        return {p["metadata"]["name"]: p for p in pods["items"]}

    def settled(self, replicas: int) -> bool:
        status = self.pool().get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        live = [m for m in self.members().values() if not m["metadata"].get("deletionTimestamp")]
        wanted = min(replicas, status.get("feasible", 0))
        return (
            conditions.get("Ready") == "True"
            and conditions.get("UpToDate") == "True"
            and len(live) == wanted
            and (status.get("slurm") or {}).get("idle") == wanted
        )

    @staticmethod
    def wait(probe: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(KubeError, httpx.HTTPError, KeyError, StopIteration):
                if probe():
                    return
            time.sleep(1)
        raise TimeoutError(f"timed out after {timeout} s waiting for {what}")

    def evidence(self, member: str) -> list[str]:
        """Who deleted `member` and why, as far as the cluster tells: its Pod's state, the
        last Events naming it, the last operator log lines naming it (of every operator Pod
        of the run, restarted ones too)."""
        lines: list[str] = []
        # Diagnostics only: whatever goes wrong gathering them must not stop the run.
        with contextlib.suppress(Exception):
            self.operator_log.read()
        lines += [f"operator log: {line}" for line in self.operator_log.about(member)]
        with contextlib.suppress(Exception):
            pod = self.kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{member}")
            status = pod.get("status") or {}
            containers = [
                f"{c['name']} ready={c.get('ready')} restarts={c.get('restartCount')} "
                f"state={list(c.get('state') or {})}"
                for c in status.get("containerStatuses") or []
            ]
            lines.append(
                f"{member}: phase {status.get('phase')}, deletionTimestamp "
                f"{pod['metadata'].get('deletionTimestamp')}, {'; '.join(containers)}"
            )
            events = self.kube.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]
            about = [
                f"event {event.get('eventTime')} {event.get('reason')}: {event.get('note')}"
                for event in sorted(events, key=lambda e: e.get("eventTime") or "")
                if member in str(event.get("note")) or (event.get("regarding") or {}).get("name") == member
            ]
            lines += about[-15:]
            ip = (pod.get("status") or {}).get("podIP")
            if ip:
                # Connections to or from it the NetworkPolicy enforcer dropped (the dev
                # cluster's, sunk_dev.netpol), the last of them.
                enforcer = _tail(self.cluster.layout.logs / "sunk-netpol.log")
                dropped = [line.strip()[:200] for line in enforcer if f'"{ip}"' in line]
                lines += [f"sunk-netpol: {line}" for line in dropped[-15:]]
            node = (pod.get("spec") or {}).get("nodeName")
            if node and pod["metadata"].get("deletionTimestamp"):
                # A member that will not go: what its kubelet did about it (preStop, kill).
                kubelet_log = self.cluster.layout.logs / f"kubelet-{node}.log"
                said = [line.strip()[:300] for line in _tail(kubelet_log) if member in line]
                lines += [f"kubelet-{node}: {line}" for line in said[-12:]]
                where = ("exec", member, "-c", "slurmd", "--")
                ps = self.platform.kubectl(*where, "sh", "-c", PROCESSES, timeout=30)
                lines += [f"{member} ps: {line}" for line in (ps.stdout + ps.stderr).splitlines()[:40]]
                log = self.platform.kubectl("logs", member, "-c", "slurmd", "--tail=25", timeout=30)
                lines += [f"{member} log: {line[:300]}" for line in (log.stdout + log.stderr).splitlines()]
        with contextlib.suppress(Exception):
            # slurmctld's word on the member, this run of it and the one before a restart.
            for previous in ("", "--previous"):
                said = self.platform.kubectl(
                    "logs", "slurm-controller-0", "-c", "slurmctld", *[a for a in [previous] if a], timeout=30
                )
                about = [line[:300] for line in said.stdout.splitlines() if member in line]
                lines += [f"slurmctld{previous and ' (previous)'}: {line}" for line in about[-15:]]
        with contextlib.suppress(Exception):
            record = self.rest.nodes().get(member)
            if record is not None:
                lines.append(f"{member} in Slurm: {record.get('state')} reason {record.get('reason')!r}")
        return lines

    def keep_operator_log(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(httpx.HTTPError, KubeError, KeyError):
                self.operator_log.read()
            self.stop.wait(2)

    # -- load, changes and faults ---------------------------------------------------------------
    def workload(self) -> None:
        """Short jobs, a few at a time, whatever the NodeSet's size."""
        while not self.stop.is_set():
            with contextlib.suppress(httpx.HTTPError, KubeError, StopIteration, KeyError):
                if self.rest.active(set(self.record.jobs)) < 6:
                    try:
                        job = self.rest.submit(self.random.randint(3, 25))
                    except httpx.HTTPStatusError:
                        self.record.refused += 1
                    else:
                        with self.lock:
                            self.record.jobs[job] = ""
            self.stop.wait(2)

    def watch(self) -> None:
        """A member whose deletion is seen while Slurm still runs a job on it is a violation."""
        blamed: set[str] = set()
        while not self.stop.is_set():
            with contextlib.suppress(httpx.HTTPError, KubeError, StopIteration, KeyError):
                going = [n for n, p in self.members().items() if p["metadata"].get("deletionTimestamp")]
                if going:
                    running = self.rest.running_by_node()  # listed after the deletion was seen
                    for name in going:
                        if running.get(name) and name not in blamed:
                            blamed.add(name)
                            self.record.violate(f"member {name} deleted while jobs {running[name]} ran on it")
                            self.record.evidence += self.evidence(name)
            self.stop.wait(1)

    def change(self) -> None:
        kind = self.random.choice(["scale", "scale", "roll", "cordon"])
        self.record.changes[kind] += 1
        if kind == "scale":
            self.replicas = self.random.choice([1, 2, 3, 3])
            self.kube.patch(f"{NODESETS}/{POOL}", {"spec": {"replicas": self.replicas}})
        elif kind == "roll":
            self.revision += 1
            template = {"metadata": {"annotations": {"sunk.dev/revision": str(self.revision)}}}
            self.kube.patch(f"{NODESETS}/{POOL}", {"spec": {"template": template}})
        else:
            node = self.random.choice(REAL_NODES)
            cordoned = bool((self.kube.get(f"/api/v1/nodes/{node}").get("spec") or {}).get("unschedulable"))
            self.kube.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": not cordoned}})

    def fault(self) -> None:
        kind = self.random.choice(FAULTS)
        self.record.faults[kind] += 1
        seconds = self.random.uniform(2, 10)
        target, _, how = kind.partition("-")
        print(f"fault {sum(self.record.faults.values())}: {kind} ({seconds:.0f} s)", flush=True)
        if target == "apiserver":
            proc = next(p for p in procs.tracked(self.cluster.layout.pids) if p.name == "kube-apiserver")
            self.freeze([proc.pid], seconds, check=proc.alive)
            return
        label, command = {
            "operator": ("sunk-operator", "sunk"),
            "slurmctld": ("slurmctld", "slurmctld"),
            "slurmrestd": ("slurmrestd", "slurmrestd"),
        }[target]
        pods = self.kube.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"app.kubernetes.io/name={label}"
        )
        pod = next(p for p in pods["items"] if not p["metadata"].get("deletionTimestamp"))
        if how == "restart":
            self.kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}")
        else:
            self.freeze(pod_processes(pod["metadata"]["uid"], command), seconds)

    @staticmethod
    def freeze(pids: list[int], seconds: float, check: Any = None) -> None:
        """SIGSTOP for `seconds`, then SIGCONT, whatever happens in between."""
        stopped = []
        try:
            for pid in pids:
                if check is None or check():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                        stopped.append(pid)
            time.sleep(seconds)
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> Record:
        self.install()
        loops = (self.workload, self.watch, self.keep_operator_log)
        threads = [threading.Thread(target=t, daemon=True) for t in loops]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        try:
            while sum(self.record.faults.values()) < self.fault_goal:
                with contextlib.suppress(httpx.HTTPError, KubeError, StopIteration, KeyError):
                    if self.random.random() < 0.4:
                        self.change()
                    self.fault()
                time.sleep(self.random.uniform(1, 4))
        finally:
            self.stop.set()
            for thread in threads:
                thread.join(timeout=30)
        print(f"{self.fault_goal} faults in {time.monotonic() - started:.0f} s; settling", flush=True)
        self.settle()
        return self.record

    def settle(self) -> None:
        for node in REAL_NODES:
            self.kube.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": False}})
        self.kube.patch(f"{NODESETS}/{POOL}", {"spec": {"replicas": 3}})

        def unfinished() -> list[int]:
            return [j for j, s in self.record.jobs.items() if not s]

        deadline = time.monotonic() + 300
        while unfinished() and time.monotonic() < deadline:
            for job in unfinished():
                with contextlib.suppress(httpx.HTTPError, KubeError, StopIteration):
                    self.record.jobs[job] = self.rest.final_state(job)
            time.sleep(2)
        for job, state in sorted(self.record.jobs.items()):
            if state != "COMPLETED":
                self.record.violate(f"job {job} ended {state or 'never (still unfinished after 300 s)'}")
        try:
            self.wait(lambda: self.settled(3), 300, "the NodeSet to settle: Ready, UpToDate, 3 idle members")
        except TimeoutError as err:
            status = self.pool().get("status") or {}
            self.record.violate(
                f"wedged: {err}; it says {status.get('summary')!r}, removals {status.get('removals')}"
            )
            for name, pod in sorted(self.members().items()):
                if pod["metadata"].get("deletionTimestamp"):
                    self.record.evidence += self.evidence(name)
        members = {n for n, p in self.members().items() if not p["metadata"].get("deletionTimestamp")}
        records = set(self.rest.nodes())
        if records != members:
            self.record.violate(f"Slurm records {sorted(records)} but members {sorted(members)}")
            for name in sorted(records ^ members):
                self.record.evidence += self.evidence(name)
        drained = {
            n: r.get("reason", "") for n, r in self.rest.nodes().items() if "DRAIN" in r.get("state", [])
        }
        if drained:
            self.record.violate(f"nodes left drained: {drained}")
        # Not a violation (nothing was killed), but a sign that a member could not reach
        # slurmctld: the run says how often the operator had to end a preStop hook's wait.
        with contextlib.suppress(httpx.HTTPError, KubeError):
            events = self.kube.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]
            for event in events:
                if event.get("reason") == "MemberStuckTerminating":
                    self.record.notes.append(f"{event.get('eventTime')} {event.get('note')}")
                    named = re.search(r"Pod (\S+) on Node", str(event.get("note")))
                    if named:
                        self.record.evidence += self.evidence(named[1])

    def cleanup(self) -> None:
        self.platform.uninstall()
        try:
            delete_namespace(self.kube, NAMESPACE, timeout=240)
        except AssertionError:
            # A member wedged in its preStop hook (the run reported it) would hold the
            # namespace for its grace period; the next suite needs the real Nodes now.
            pods = self.kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
            for pod in pods:
                name = pod["metadata"]["name"]
                print(f"cleanup: {name} still there after 240 s; deleting it without grace", flush=True)
                with contextlib.suppress(KubeError):
                    self.kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", gracePeriodSeconds=0)
            wait_for(
                lambda: self.kube.find(f"/api/v1/namespaces/{NAMESPACE}") is None or None,
                timeout=120,
                what=f"namespace {NAMESPACE} to be gone",
            )


def _tail(path: Path, size: int = 4 << 20) -> list[str]:
    """The last `size` bytes of a log, as lines (empty when it cannot be read)."""
    try:
        with path.open("rb") as log:
            log.seek(max(0, path.stat().st_size - size))
            return log.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def report(record: Record, seed: int) -> str:
    lines = [f"operator fault run, seed {seed}", "faults:"]
    lines += [f"  {kind:20} {count}" for kind, count in sorted(record.faults.items())]
    lines += [f"  {'total':20} {sum(record.faults.values())}", "changes the operator carried out meanwhile:"]
    lines += [f"  {kind:20} {count}" for kind, count in sorted(record.changes.items())]
    states = Counter(record.jobs.values())
    lines += [
        f"jobs: {len(record.jobs)} submitted, {states.get('COMPLETED', 0)} COMPLETED, "
        f"{len(record.jobs) - states.get('COMPLETED', 0)} killed or unfinished; "
        f"{record.refused} refused at submission",
        f"violations: {len(record.violations)}",
    ]
    lines += [f"  {v}" for v in record.violations]
    if record.notes:
        lines += ["notes:"] + [f"  {line}" for line in record.notes]
    if record.evidence:
        lines += ["evidence:"] + [f"  {line}" for line in record.evidence]
    return "\n".join(lines)


@contextlib.contextmanager
def platform_run(cluster: DevCluster, seed: int, faults: int) -> Iterator[Run]:
    """A run on `cluster`; the chart is uninstalled and its namespace deleted afterwards."""
    run = Run(cluster, seed, faults)
    try:
        yield run
    finally:
        run.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--faults", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    with platform_run(DevCluster(), seed, args.faults) as run:
        record = run.run()
    print(report(record, seed), flush=True)
    return 1 if record.violations else 0


if __name__ == "__main__":
    sys.exit(main())
