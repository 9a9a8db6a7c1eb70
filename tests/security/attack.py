"""The attack script of issue #38: an ordinary tenant tries each way in that the Slurm
chart closes, and the report says which got through. None may.

The tenant is a ServiceAccount with full rights over the workloads of its own namespace,
which the release's scheduler watches and its trust policy grants nothing. It tries the
Kubernetes API (the release's keys, its Pods, NodeSets and policy), the scheduler (a job as
root, whole nodes held for weeks), and the network: from the host (SSH as root, a forged
hooks call, slurmrestd in clear) and from a Pod of its own (MariaDB, slurmctld, slurmd, the
hooks port).

A network path from the tenant's Pod that connects although a NetworkPolicy selects its
target is reported `unproven`: the policy is there and the network plugin ignores it.

    python -m tests.security.attack --namespace plat --release slurm --tenant plat-tenant

runs it against a release on the dev cluster (`sunk dev platform` makes one); the e2e test
`test_issue38_the_attack_script_finds_no_way_in` runs it in `make test`.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sunk_dev.cluster import DevCluster
from sunk_dev.images import read_manifest
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.realnode import REAL_NODE_LABEL

Json = dict[str, Any]
REFUSED, OPEN, UNPROVEN = "refused", "OPEN", "unproven"
PROBE_POD = "attack-probe"


@dataclass(frozen=True)
class Attempt:
    path: str
    outcome: str  # refused, OPEN or unproven
    detail: str


@dataclass(frozen=True)
class Target:
    namespace: str  # the release's
    release: str
    tenant: str  # the attacker's namespace


class Attacker:
    def __init__(self, cluster: DevCluster, admin: AdminKube, target: Target) -> None:
        self.cluster = cluster
        self.admin = admin
        self.target = target
        self.tenant = AdminKube(cluster.layout, token=self._tenant_token())

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
        return [p for p in self.admin.get(path, labelSelector=selector)["items"] if p["status"].get("podIP")]

    # -- the Kubernetes API, as the tenant --------------------------------------------------
    def api(self) -> Iterator[Attempt]:
        ns, f = self.target.namespace, self.target.release
        slurmd = self._pods("slurmd")
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
                yield Attempt(what, outcome, f"HTTP {err.status}")
            else:
                yield Attempt(what, OPEN, "the API server let it through")

    # -- the scheduler, as the tenant -------------------------------------------------------
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
                yield Attempt(what, OPEN, "no refusal within 60 s")
            elif condition.get("reason") == "ForbiddenByPolicy":
                yield Attempt(what, REFUSED, str(condition.get("message", ""))[:120])
            else:
                yield Attempt(what, OPEN, f"PodScheduled {condition}")
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

    # -- the network, from the host ----------------------------------------------------------
    def from_host(self) -> Iterator[Attempt]:
        for login in self._pods("login")[:1]:
            yield self._ssh_as_root(login["status"]["podIP"])
        for scheduler in self._pods("sunk-scheduler")[:1]:
            address = scheduler["status"]["podIP"]
            url = f"https://{address}:8000/v1/pods/00000000-0000-0000-0000-000000000000/jobs/1/started"
            try:
                answer = httpx.post(url, headers={"X-Sunk-Token": "forged"}, verify=False, timeout=10)
            except httpx.HTTPError as err:
                yield Attempt("call the hooks API with a forged token", REFUSED, type(err).__name__)
            else:
                outcome = REFUSED if answer.status_code == 401 else OPEN
                yield Attempt("call the hooks API with a forged token", outcome, f"HTTP {answer.status_code}")
        for restapi in self._pods("slurmrestd")[:1]:
            address = restapi["status"]["podIP"]
            try:
                answer = httpx.get(f"http://{address}:6820/openapi/v3", timeout=10)
            except httpx.HTTPError as err:
                yield Attempt("talk to slurmrestd in clear", REFUSED, type(err).__name__)
            else:
                yield Attempt("talk to slurmrestd in clear", OPEN, f"HTTP {answer.status_code}")

    def _ssh_as_root(self, address: str) -> Attempt:
        with tempfile.TemporaryDirectory() as scratch:
            key = Path(scratch) / "key"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
            argv = ["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
            argv += ["-o", f"UserKnownHostsFile={scratch}/known", "-o", "ConnectTimeout=10"]
            done = subprocess.run(
                [*argv, f"root@{address}", "id"], capture_output=True, text=True, timeout=30
            )
        if done.returncode == 0:
            return Attempt("log in as root over SSH", OPEN, done.stdout.strip())
        return Attempt("log in as root over SSH", REFUSED, done.stderr.strip().splitlines()[-1][:120])

    # -- the network, from the tenant's own Pod ----------------------------------------------
    def from_pod(self) -> Iterator[Attempt]:
        targets = {
            "MariaDB": ("mariadb", 3306),
            "slurmctld": ("slurmctld", 6817),
            "slurmd": ("slurmd", 6818),
            "the hooks API": ("sunk-scheduler", 8000),
        }
        addresses = {
            what: (pods[0]["status"]["podIP"], port, name)
            for what, (name, port) in targets.items()
            if (pods := self._pods(name))
        }
        # bash opens the TCP connection itself; `timeout` bounds a dropped (not refused) SYN.
        probe = (
            "if timeout 5 bash -c '</dev/tcp/{ip}/{port}' 2>/dev/null; "
            "then echo {port} open; else echo {port} shut; fi"
        )
        script = " ; ".join(probe.format(ip=ip, port=port) for ip, port, _ in addresses.values())
        path = f"/api/v1/namespaces/{self.target.tenant}/pods"
        pod = _pod(PROBE_POD, {}, command=["bash", "-c", script], image=self._image())
        pod["spec"]["nodeName"] = self.admin.get("/api/v1/nodes", labelSelector=f"{REAL_NODE_LABEL}=true")[
            "items"
        ][0]["metadata"]["name"]
        self.tenant.create(path, pod)
        try:
            log = _wait(lambda: self._finished_log(path), 120) or ""
        finally:
            self.admin.delete(f"{path}/{PROBE_POD}", gracePeriodSeconds=0)
        policies = self._policy_targets()
        for what, (_, port, name) in addresses.items():
            path_name = f"connect to {what} from a tenant Pod"
            if f"{port} shut" in log:
                yield Attempt(path_name, REFUSED, "the connection did not open")
            elif f"{port} open" in log and name in policies:
                yield Attempt(
                    path_name, UNPROVEN, "a NetworkPolicy selects it; the network plugin does not enforce it"
                )
            else:
                yield Attempt(path_name, OPEN, log.strip()[:120] or "no answer from the probe Pod")

    def _image(self) -> str:
        return read_manifest(self.cluster.layout.images_file)["slurmd"].ref

    def _finished_log(self, path: str) -> str | None:
        pod = self.admin.find(f"{path}/{PROBE_POD}")
        if pod is None or pod["status"].get("phase") not in ("Succeeded", "Failed"):
            return None
        return self.admin.http.get(f"{path}/{PROBE_POD}/log").text

    def _policy_targets(self) -> set[str]:
        """The components some NetworkPolicy of the release's namespace selects."""
        path = f"/apis/networking.k8s.io/v1/namespaces/{self.target.namespace}/networkpolicies"
        found = set()
        for policy in self.admin.get(path)["items"]:
            labels = policy["spec"]["podSelector"].get("matchLabels") or {}
            if labels.get("app.kubernetes.io/instance") == self.target.release:
                found.add(labels.get("app.kubernetes.io/name", ""))
        return found

    def run(self) -> list[Attempt]:
        return [*self.api(), *self.scheduler(), *self.from_host(), *self.from_pod()]


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
    width = max(len(a.path) for a in attempts)
    return "\n".join(f"{a.outcome:<9} {a.path:<{width}}  {a.detail}" for a in attempts)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--namespace", required=True, help="the release's namespace")
    parser.add_argument("--release", required=True)
    parser.add_argument(
        "--tenant", required=True, help="a namespace the scheduler watches and grants nothing"
    )
    args = parser.parse_args()
    cluster = DevCluster()
    admin = AdminKube(cluster.layout)
    attacker = Attacker(cluster, admin, Target(args.namespace, args.release, args.tenant))
    try:
        attempts = attacker.run()
    finally:
        attacker.close()
        admin.close()
    print(report(attempts))
    return 1 if any(a.outcome == OPEN for a in attempts) else 0


if __name__ == "__main__":
    sys.exit(main())
