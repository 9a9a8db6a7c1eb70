"""The attack script of issues #38 and #52: an attacker tries, from each position a real one
could hold, each way in that the Slurm chart closes, and the report says which got through.
None may.

The positions:

- a Kubernetes tenant: a ServiceAccount with full rights over the workloads of its own
  namespace, which the release's scheduler watches and its trust policy grants nothing. It
  tries the Kubernetes API (the release's keys, its Pods, NodeSets and policy) and the
  scheduler (a job as root, whole nodes held for weeks);
- the host's network: SSH as root with a key that *is* authorized for root (`--root-key`),
  a forged hooks call, slurmrestd in clear, and slurmrestd over TLS with no token or a forged one;
- a tenant's Pod, and an unlabelled Pod in the release's own namespace: MariaDB, slurmdbd,
  slurmctld, slurmd, slurmrestd and the hooks port must time out, while login:22 answers
  (the control: a probe that reaches nothing proves nothing);
- a person on the login Pod (bob, from the directory, over SSH): the /run/slurm rename,
  alice's home, another's home made first, group tricks, root;
- a job of that person on a slurmd Pod: MariaDB, slurmd's keys, the Node.

Each attempt is `refused`, `OPEN` (it got through) or `unproven` (nothing shows it was
stopped: a network path that opened where NetworkPolicies are not enforced, or a probe
whose control failed). On a cluster that enforces NetworkPolicy, a network path that
opens is OPEN. The script exits 1 on anything but `refused`.

    python -m tests.security.attack --namespace plat --release slurm --tenant plat-tenant \\
        --person bob --victim alice --root-key <private key authorized for root>

runs it against a release on the dev cluster; the e2e test
`test_issue38_the_attack_script_finds_no_way_in` runs it in `make test` against the
platform suite's release (directory people, password login, a shared /home).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sunk.slurm.jwt import mint
from sunk_dev import netpol
from sunk_dev.cluster import DevCluster
from sunk_dev.images import read_manifest
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.people import as_user, ssh
from sunk_dev.realnode import REAL_NODE_LABEL

Json = dict[str, Any]
REFUSED, OPEN, UNPROVEN = "refused", "OPEN", "unproven"
TENANT, HOST, TENANT_POD, RELEASE_POD, PERSON, JOB = (
    "a Kubernetes tenant",
    "the host's network",
    "a tenant's Pod",
    "an unlabelled Pod in the release's namespace",
    "a person on the login Pod",
    "a job on a slurmd Pod",
)
POSITIONS = (TENANT, HOST, TENANT_POD, RELEASE_POD, PERSON, JOB)
PROBE_POD = "attack-probe"
# The daemons nobody outside their peers may reach (port, the component's name label).
GUARDED = {
    "MariaDB": ("mariadb", 3306),
    "slurmdbd": ("slurmdbd", 6819),
    "slurmctld": ("slurmctld", 6817),
    "slurmd": ("slurmd", 6818),
    "slurmrestd": ("slurmrestd", 6820),
    "the hooks API": ("sunk-scheduler", 8000),
}
# slurmrestd's API versions, newest first (24.11 serves v0.0.40 to v0.0.42).
REST_VERSIONS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40")
CONTROL = ("login", 22)  # open to everyone: a probe that cannot reach it proves nothing
# bash opens the TCP connection itself; `timeout` bounds a dropped (not refused) SYN. All
# at once, so a probe takes 5 s however many targets it has.
PROBE = (
    "(if timeout 5 bash -c '</dev/tcp/{ip}/{port}' 2>/dev/null; "
    "then echo {port} open; else echo {port} shut; fi) &"
)
# One line per try: its name, `ok` or `no`, and the last line it said.
TRY = (
    'try() { n=$1; shift; if o=$("$@" 2>&1 </dev/null); then r=ok; else r=no; fi; '
    'printf "%s %s %s\\n" "$n" "$r" "$(printf "%s" "$o" | tail -n1 | cut -c1-100)"; }'
)


@dataclass(frozen=True)
class Attempt:
    position: str
    path: str
    outcome: str  # refused, OPEN or unproven
    detail: str


@dataclass(frozen=True)
class Target:
    namespace: str  # the release's
    release: str
    tenant: str  # the attacker's namespace
    person: str | None = None  # a directory person who logs in (bob)
    victim: str | None = None  # another (alice)
    root_key: Path | None = None  # a private key the login Pods authorize for root


def _tries(log: str) -> dict[str, tuple[bool, str]]:
    """A TRY script's lines as name -> (succeeded, last line said)."""
    found = {}
    for line in log.splitlines():
        name, _, rest = line.partition(" ")
        result, _, said = rest.partition(" ")
        if result in ("ok", "no"):
            found[name] = (result == "ok", said)
    return found


class Attacker:
    def __init__(self, cluster: DevCluster, admin: AdminKube, target: Target) -> None:
        self.cluster = cluster
        self.admin = admin
        self.target = target
        self.tenant = AdminKube(cluster.layout, token=self._tenant_token())
        self.enforced = netpol.state(cluster.layout).startswith("enforced")

    def close(self) -> None:
        self.tenant.close()

    def _tenant_token(self) -> str:
        """A ServiceAccount of the tenant's namespace with what a tenant gets there (the
        workloads, Services, ConfigMaps and Secrets of its own namespace), and a token."""
        ns = self.target.tenant
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
        role = {
            "metadata": {"name": "tenant"},
            "rules": [
                {
                    "apiGroups": ["", "apps", "batch"],
                    "resources": [
                        "pods",
                        "pods/log",
                        "services",
                        "configmaps",
                        "secrets",
                        "deployments",
                        "jobs",
                    ],
                    "verbs": ["*"],
                }
            ],
        }
        binding = {
            "metadata": {"name": "attacker"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": "attacker", "namespace": ns}],
        }
        for path, body in (
            (f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "attacker"}}),
            (f"{rbac}/roles", role),
            (f"{rbac}/rolebindings", binding),
        ):
            try:
                self.admin.create(path, body)
            except KubeError as err:
                if err.status != 409:
                    raise
        request = {"spec": {"expirationSeconds": 600}}
        made = self.admin.create(f"/api/v1/namespaces/{ns}/serviceaccounts/attacker/token", request)
        return str(made["status"]["token"])

    def _pods(self, name: str) -> list[Json]:
        path = f"/api/v1/namespaces/{self.target.namespace}/pods"
        selector = f"app.kubernetes.io/name={name},app.kubernetes.io/instance={self.target.release}"
        return [
            p
            for p in self.admin.get(path, labelSelector=selector)["items"]
            if p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")
        ]

    def _address(self, name: str) -> str | None:
        pods = self._pods(name)
        return str(pods[0]["status"]["podIP"]) if pods else None

    def _members(self) -> list[Json]:
        path = f"/api/v1/namespaces/{self.target.namespace}/pods"
        return [
            p
            for p in self.admin.get(path, labelSelector="sunk.coreweave.com/nodeset")["items"]
            if p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")
        ]

    def _connected(self, position: str, what: str, opened: bool) -> Attempt:
        """A network path that opened: OPEN where NetworkPolicies are enforced, else unproven."""
        if not opened:
            return Attempt(position, what, REFUSED, "the connection did not open (timed out)")
        if self.enforced:
            return Attempt(position, what, OPEN, "the connection opened, NetworkPolicies enforced")
        return Attempt(
            position, what, UNPROVEN, "the connection opened; NetworkPolicies are not enforced here"
        )

    # -- a Kubernetes tenant: the API ------------------------------------------------------
    def api(self) -> Iterator[Attempt]:
        ns, f = self.target.namespace, self.target.release
        slurmd = self._members()
        tries: list[tuple[str, str, str, Json | None]] = [
            ("read the release's Slurm keys", "GET", f"/api/v1/namespaces/{ns}/secrets/{f}-auth", None),
            ("list the release's Secrets", "GET", f"/api/v1/namespaces/{ns}/secrets", None),
            ("create a Pod beside the keys", "POST", f"/api/v1/namespaces/{ns}/pods", _pod("thief", {})),
            ("edit a NodeSet", "PATCH", f"/apis/sunk.coreweave.com/v1alpha1/namespaces/{ns}/nodesets/x", {}),
            (
                "change the trust policy",
                "PATCH",
                f"/api/v1/namespaces/{ns}/configmaps/{f}-sunk-scheduler-policy",
                {},
            ),
        ]
        if slurmd:
            name = slurmd[0]["metadata"]["name"]
            tries.append(
                ("exec into a slurmd Pod", "POST", f"/api/v1/namespaces/{ns}/pods/{name}/exec", None)
            )
        for what, method, path, body in tries:
            try:
                self.tenant.request(method, path, body)
            except KubeError as err:
                outcome = REFUSED if err.status == 403 else OPEN
                yield Attempt(TENANT, what, outcome, f"HTTP {err.status}")
            else:
                yield Attempt(TENANT, what, OPEN, "the API server let it through")

    # -- a Kubernetes tenant: the scheduler ------------------------------------------------
    def scheduler(self) -> Iterator[Attempt]:
        name = f"{self.target.namespace}-{self.target.release}"
        prefix = "sunk.coreweave.com/"
        asks = {
            "a Slurm job as root": {f"{prefix}user-id": "0"},
            "whole nodes held for ten weeks": {f"{prefix}exclusive": "user", f"{prefix}timeout": "100000"},
        }
        path = f"/api/v1/namespaces/{self.target.tenant}/pods"
        for number, (what, wanted) in enumerate(asks.items()):
            pod_name = f"ask-{number}"
            self.tenant.create(path, _pod(pod_name, wanted, scheduler=name))
            condition = _wait(functools.partial(self._scheduled, path, pod_name), 60)
            if condition is None:
                yield Attempt(TENANT, what, OPEN, "no refusal within 60 s")
            elif condition.get("reason") == "ForbiddenByPolicy":
                yield Attempt(TENANT, what, REFUSED, str(condition.get("message", ""))[:120])
            else:
                yield Attempt(TENANT, what, OPEN, f"PodScheduled {condition}")
            self.admin.delete(f"{path}/{pod_name}", gracePeriodSeconds=0)

    def _scheduled(self, path: str, name: str) -> Json | None:
        pod = self.admin.find(f"{path}/{name}")
        if pod is None:
            return None
        if pod["spec"].get("nodeName"):
            return {"reason": "Bound", "node": pod["spec"]["nodeName"]}
        for c in pod["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and c.get("reason"):
                return dict(c)
        return None

    # -- the host's network ------------------------------------------------------------------
    def from_host(self) -> Iterator[Attempt]:
        if (login := self._address("login")) is not None:
            yield self._ssh_as_root(login)
        if (scheduler := self._address("sunk-scheduler")) is not None:
            url = f"https://{scheduler}:8000/v1/pods/00000000-0000-0000-0000-000000000000/jobs/1/started"
            what = "call the hooks API with a forged token"
            try:
                answer = httpx.post(url, headers={"X-Sunk-Token": "forged"}, verify=False, timeout=10)
            except httpx.HTTPError as err:
                yield Attempt(HOST, what, REFUSED, type(err).__name__)
            else:
                outcome = REFUSED if answer.status_code == 401 else OPEN
                yield Attempt(HOST, what, outcome, f"HTTP {answer.status_code}")
        if (restapi := self._address("slurmrestd")) is not None:
            yield from self._slurmrestd(restapi)

    def _slurmrestd(self, address: str) -> Iterator[Attempt]:
        try:
            answer = httpx.get(f"http://{address}:6820/openapi/v3", timeout=10)
        except httpx.HTTPError as err:
            yield Attempt(HOST, "talk to slurmrestd in clear", REFUSED, type(err).__name__)
        else:
            yield Attempt(HOST, "talk to slurmrestd in clear", OPEN, f"HTTP {answer.status_code}")
        # Over TLS (the attacker need not trust the server): slurmctld's statistics as root,
        # with no token, and with one signed by a key of the attacker's own. slurmrestd
        # passes a token on for slurmctld to verify, so only an endpoint that asks slurmctld
        # proves anything (it serves /openapi/v3 for any token: the API's description, no data).
        forged = mint(os.urandom(32), "root", 600)
        headers = {
            "slurmrestd over TLS with no token": {"X-SLURM-USER-NAME": "root"},
            "slurmrestd over TLS with a forged token": {
                "X-SLURM-USER-NAME": "root",
                "X-SLURM-USER-TOKEN": forged,
            },
        }
        for what, sent in headers.items():
            yield self._slurmrestd_diag(address, what, sent)

    def _slurmrestd_diag(self, address: str, what: str, headers: dict[str, str]) -> Attempt:
        for version in REST_VERSIONS:  # the first this slurmrestd serves
            url = f"https://{address}:6820/slurm/{version}/diag"
            try:
                answer = httpx.get(url, headers=headers, verify=False, timeout=10)
            except httpx.HTTPError as err:
                return Attempt(HOST, what, UNPROVEN, f"no TLS answer: {type(err).__name__}")
            if answer.status_code == 404:
                continue
            said = f"HTTP {answer.status_code} ({version}/diag)"
            if answer.status_code == 401 or (answer.status_code == 511 and "authentication" in answer.text):
                return Attempt(HOST, what, REFUSED, f"{said}: {_rest_error(answer)}")
            return Attempt(HOST, what, OPEN, f"{said}: {answer.text[:80]}")
        return Attempt(HOST, what, UNPROVEN, f"no diag endpoint among {', '.join(REST_VERSIONS)}")

    def _ssh_as_root(self, address: str) -> Attempt:
        """With the key the login Pods authorize for root when one is given (only sshd's
        PermitRootLogin then stands in the way), else a fresh one (which proves less)."""
        what = "log in as root over SSH"
        with tempfile.TemporaryDirectory() as scratch:
            key = self.target.root_key
            if key is None:
                key = Path(scratch) / "key"
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
                what += " (a fresh key: no key authorized for root was given)"
            argv = ["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
            argv += ["-o", f"UserKnownHostsFile={scratch}/known", "-o", "ConnectTimeout=10"]
            argv += ["-o", "IdentitiesOnly=yes"]
            done = subprocess.run(
                [*argv, f"root@{address}", "id"], capture_output=True, text=True, timeout=30
            )
        if done.returncode == 0:
            return Attempt(HOST, what, OPEN, done.stdout.strip())
        said = (done.stderr.strip().splitlines() or ["no answer"])[-1][:120]
        return Attempt(HOST, what, REFUSED if "Permission denied" in said else UNPROVEN, said)

    # -- Pods: a tenant's, and an unlabelled one in the release's namespace ------------------
    def from_pods(self) -> Iterator[Attempt]:
        """Both probes at once: each tries every guarded daemon and the login Pod's SSH port."""
        targets = {
            what: (address, port)
            for what, (name, port) in GUARDED.items()
            if (address := self._address(name))
        }
        control = self._address(CONTROL[0])
        script = " ".join(PROBE.format(ip=ip, port=port) for ip, port in targets.values())
        if control:
            script += " " + PROBE.format(ip=control, port=CONTROL[1])
        script += " wait"
        node = self.admin.get("/api/v1/nodes", labelSelector=f"{REAL_NODE_LABEL}=true")["items"][0]
        pod = _pod(PROBE_POD, {}, command=["bash", "-c", script], image=self._image())
        pod["spec"]["nodeName"] = node["metadata"]["name"]
        places = {
            TENANT_POD: (self.tenant, f"/api/v1/namespaces/{self.target.tenant}/pods"),
            RELEASE_POD: (self.admin, f"/api/v1/namespaces/{self.target.namespace}/pods"),
        }
        for kube, path in places.values():
            kube.create(path, pod)
        logs: dict[str, str] = {}
        try:
            for position, (_, path) in places.items():
                logs[position] = _wait(lambda p=path: self._finished_log(p), 120) or ""  # type: ignore[misc]
        finally:
            for _, path in places.values():
                self.admin.delete(f"{path}/{PROBE_POD}", gracePeriodSeconds=0)
        for position, log in logs.items():
            controlled = control is not None and f"{CONTROL[1]} open" in log
            for what, (_, port) in targets.items():
                path_name = f"connect to {what} (port {port})"
                if f"{port} open" in log:
                    yield self._connected(position, path_name, True)
                elif f"{port} shut" in log and controlled:
                    yield self._connected(position, path_name, False)
                elif f"{port} shut" in log:
                    yield Attempt(
                        position, path_name, UNPROVEN, "timed out, but so did login:22 (the control)"
                    )
                else:
                    yield Attempt(
                        position, path_name, UNPROVEN, log.strip()[:120] or "no answer from the probe Pod"
                    )
            yield Attempt(
                position,
                "control: login:22 answers",
                REFUSED if controlled else UNPROVEN,
                "it answered, so the timeouts above are the policies'" if controlled else "it did not answer",
            )

    def _image(self) -> str:
        return read_manifest(self.cluster.layout.images_file)["slurmd"].ref

    def _finished_log(self, path: str) -> str | None:
        pod = self.admin.find(f"{path}/{PROBE_POD}")
        if pod is None or pod["status"].get("phase") not in ("Succeeded", "Failed"):
            return None
        return self.admin.http.get(f"{path}/{PROBE_POD}/log").text

    # -- a person on the login Pod -----------------------------------------------------------
    def as_person(self) -> Iterator[Attempt]:
        person, victim = self.target.person, self.target.victim
        if not person or not victim:
            return
        ns = self.target.namespace
        # The victim logs in first: their home exists and holds a file of theirs.
        as_user(self.cluster, self.admin, ns, victim, "umask 077; echo mine > ~/secret")
        home = f"/home/{victim}"
        denied = "Permission denied"
        # What to try, and the words of the mechanism that must refuse it: a try that fails
        # for another reason (a command missing, Slurm not answering) proves nothing.
        tries = {
            "rename /run/slurm/conf (to plant a slurm.conf)": (
                "mv /run/slurm/conf /run/slurm/conf.old",
                "Read-only file system",
            ),
            "plant a file in /run/slurm": ("mkdir /run/slurm/mine", "Read-only file system"),
            f"read {victim}'s files": (f"cat {home}/secret", denied),
            f"write into {victim}'s home": (f"touch {home}/from-{person}", denied),
            f"move {victim}'s home away": (f"mv {home} {home}.gone", denied),
            "make the home of someone not yet seen": ("mkdir /home/nobody-yet", denied),
            "become group slurm (sg)": ("sg slurm -c id", "Password|Invalid password"),
            "give a file to group slurm": (
                "touch ~/.probe && chgrp slurm ~/.probe",
                "Operation not permitted",
            ),
            "read the directory's bind password": ("cat /etc/sunk/directory/password", denied),
            "read the login host's private key": ("cat /etc/ssh/ssh_host_ed25519_key", denied),
            "read slurm.key": ("cat /etc/slurm/slurm.key", f"{denied}|No such file"),
            "become root (sudo)": ("sudo -n id", "not found|not allowed|password is required"),
            "become root (su)": ("su -c id root", "Authentication failure"),
            f"submit a job as {victim}": (f"sbatch --uid={victim} --wrap true", "only permitted by root"),
        }
        for _ in range(3):  # again, a little later, while a try fails for another reason
            done = ssh(self.cluster, self.admin, ns, person, f"bash -c {shlex.quote(_script(tries))}")
            said = _tries(done.stdout)
            judged = [
                _judged(PERSON, f"{person}: {what}", said.get(f"t{i}"), refusal, done.stderr)
                for i, (what, (_, refusal)) in enumerate(tries.items())
            ]
            if all(a.outcome != UNPROVEN for a in judged):
                break
            time.sleep(5)
        yield from judged

    # -- a job of that person on a slurmd Pod ----------------------------------------------
    def as_job(self) -> Iterator[Attempt]:
        person = self.target.person
        members = self._members()
        if not person or not members:
            return
        node = self.admin.get(f"/api/v1/nodes/{members[0]['spec']['nodeName']}")
        node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        kubelet = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        tries = {
            "read slurmd's slurm.key": ("cat /etc/slurm/slurm.key", "Permission denied"),
            "read a ServiceAccount token": (
                "cat /var/run/secrets/kubernetes.io/serviceaccount/token",
                "No such file|Permission denied",
            ),
            "the Node: the kubelet's API without credentials": (
                "c=$(curl -sk -o /dev/null -w %{http_code} --max-time 5 "
                f"https://{node_ip}:{kubelet}/pods); "
                'echo "HTTP $c"; [ "$c" = 200 ]',
                "HTTP 40[13]",
            ),
            "the Node: slurmd's root (/proc/1/root)": ("ls /proc/1/root/etc/slurm", "Permission denied"),
            "the Node: its mount namespace (nsenter)": ("nsenter -t 1 -m true", "not permitted"),
            "become root (su)": ("su -c id root", "Authentication failure"),
        }
        script = _script(tries)
        mariadb = self._address("mariadb")
        if mariadb:
            script += "; " + PROBE.format(ip=mariadb, port=3306) + " wait"
        command = f"srun -N1 -t 2 --chdir=/tmp bash -c {shlex.quote(script)}"
        out = as_user(self.cluster, self.admin, self.target.namespace, person, command, within=180)
        said = _tries(out)
        for i, (what, (_, refusal)) in enumerate(tries.items()):
            yield _judged(JOB, f"{person}'s job: {what}", said.get(f"t{i}"), refusal, "")
        if mariadb:
            what = f"{person}'s job: connect to MariaDB (port 3306)"
            if "3306 open" in out or "3306 shut" in out:
                yield self._connected(JOB, what, "3306 open" in out)
            else:
                yield Attempt(JOB, what, UNPROVEN, out.strip()[-120:] or "no answer")

    def run(self, positions: tuple[str, ...] = POSITIONS) -> list[Attempt]:
        steps: dict[str, Callable[[], Iterator[Attempt]]] = {
            TENANT: lambda: iter([*self.api(), *self.scheduler()]),
            HOST: self.from_host,
            TENANT_POD: self.from_pods,  # both Pods at once
            PERSON: self.as_person,
            JOB: self.as_job,
        }
        attempts = [a for position, step in steps.items() if position in positions for a in step()]
        return sorted(attempts, key=lambda a: POSITIONS.index(a.position))


def _rest_error(answer: httpx.Response) -> str:
    """slurmrestd's own words: the first error's text, or the body."""
    try:
        errors = answer.json().get("errors") or [{}]
        return str(errors[0].get("error") or answer.text)[:80]
    except ValueError:
        return answer.text.strip()[:80]


def _script(tries: dict[str, tuple[str, str]]) -> str:
    """One bash script running every try, each in its own `bash -c`, each on one line."""
    return (
        TRY
        + "; "
        + "; ".join(f"try t{i} bash -c {shlex.quote(c)}" for i, (c, _) in enumerate(tries.values()))
    )


def _judged(position: str, what: str, said: tuple[bool, str] | None, refusal: str, stderr: str) -> Attempt:
    """OPEN if the try succeeded; refused only in the words of what must refuse it."""
    if said is None:
        return Attempt(position, what, UNPROVEN, stderr.strip()[-120:] or "the try said nothing")
    succeeded, last = said
    if succeeded:
        return Attempt(position, what, OPEN, last or "(it succeeded)")
    if re.search(refusal, last):
        return Attempt(position, what, REFUSED, last)
    return Attempt(position, what, UNPROVEN, f"failed, but not as expected ({refusal}): {last}")


def _pod(
    name: str,
    annotations: dict[str, str],
    *,
    scheduler: str | None = None,
    command: list[str] | None = None,
    image: str = "registry.invalid/none:0",
) -> Json:
    spec: Json = {
        "restartPolicy": "Never",
        # Below the scheduler's KillWait margin: else it is refused for that, not the policy.
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "command": command or ["true"],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
            }
        ],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": {"name": name, "annotations": annotations}, "spec": spec}


def _wait(probe: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (found := probe()) is not None:
            return found
        time.sleep(0.5)
    return None


def report(attempts: list[Attempt]) -> str:
    """The attempts by position, each under its position's name."""
    width = max(len(a.path) for a in attempts)
    lines: list[str] = []
    for position in POSITIONS:
        mine = [a for a in attempts if a.position == position]
        if mine:
            lines.append(f"-- as {position}")
            lines += [f"{a.outcome:<9} {a.path:<{width}}  {a.detail}" for a in mine]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--namespace", required=True, help="the release's namespace")
    parser.add_argument("--release", required=True)
    parser.add_argument(
        "--tenant", required=True, help="a namespace the scheduler watches and grants nothing"
    )
    parser.add_argument("--person", help="a directory person who logs in to the login Pod (bob)")
    parser.add_argument("--victim", help="another person, whose home and jobs are attacked (alice)")
    parser.add_argument("--root-key", type=Path, help="a private key the login Pods authorize for root")
    args = parser.parse_args()
    cluster = DevCluster()
    admin = AdminKube(cluster.layout)
    target = Target(args.namespace, args.release, args.tenant, args.person, args.victim, args.root_key)
    attacker = Attacker(cluster, admin, target)
    try:
        attempts = attacker.run()
    finally:
        attacker.close()
        admin.close()
    print(report(attempts))
    return 0 if all(a.outcome == REFUSED for a in attempts) else 1


if __name__ == "__main__":
    sys.exit(main())
