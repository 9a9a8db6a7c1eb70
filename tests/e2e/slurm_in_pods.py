"""Slurm itself as Pods on the dev cluster's real Nodes, from plain manifests.

slurmctld and slurmrestd in one Pod each, and one dynamic, configless slurmd Pod per real
Node (`slurmd -Z --conf-server`), all from the repository's images. auth/slurm with a key
from a Secret (no munge), JWT for slurmrestd. The Slurm chart and NodeSets come later; this
is the premise they rest on, checked on real containers.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
from dataclasses import dataclass
from typing import Any

from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import cache_dir
from tests.support import wait_for

SLURMD_CPUS = 1
SLURMD_MEMORY_MIB = 512
SLURM_UID, RESTD_UID = 64030, 991


def slurm_conf(namespace: str) -> str:
    controller = f"slurmctld.{namespace}.svc.cluster.local"
    return "\n".join(
        [
            "ClusterName=pods",
            f"SlurmctldHost=slurmctld({controller})",
            "SlurmUser=slurm",
            "SlurmdUser=root",
            "AuthType=auth/slurm",
            "CredType=cred/slurm",
            "AuthAltTypes=auth/jwt",
            "AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key",
            "SlurmctldParameters=enable_configless",
            "StateSaveLocation=/var/spool/slurmctld",
            "SlurmdSpoolDir=/var/spool/slurmd",
            "SlurmctldPidFile=/run/slurm/slurmctld.pid",
            "SlurmdPidFile=/run/slurm/slurmd.pid",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "ReturnToService=2",
            "MaxNodeCount=16",
            "KillWait=30",
            "MailProg=/bin/true",
            # Dynamic nodes join the partition by the feature they register with.
            "Nodeset=dyn Feature=dyn",
            "PartitionName=all Nodes=dyn Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def _config_volume(mode: int) -> dict[str, Any]:
    """slurm.conf, cgroup.conf and the keys in /etc/slurm, readable by the Pod's fsGroup."""
    return {
        "name": "etc-slurm",
        "projected": {
            "defaultMode": mode,
            "sources": [
                {"configMap": {"name": "slurm-conf"}},
                {"secret": {"name": "slurm-keys"}},
            ],
        },
    }


def _pod(
    name: str, node: str, image: str, args: list[str], *, labels: dict[str, str], fs_group: int | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": node,
        "hostname": name,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 5,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": name.split("-")[0],
                "image": image,
                "imagePullPolicy": "Never",
                "args": args,
                "volumeMounts": [{"name": "etc-slurm", "mountPath": "/etc/slurm"}],
            }
        ],
        "volumes": [_config_volume(0o440 if fs_group else 0o400)],
    }
    if fs_group:
        spec["securityContext"] = {"fsGroup": fs_group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def containers_running(pod: dict[str, Any]) -> bool:
    """Every container of the Pod runs (the kubelet says so), not just the Pod bound."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in (s.get("state") or {}) for s in statuses)


def delete_namespace(kube: AdminKube, namespace: str, timeout: float = 120) -> None:
    """Delete and wait until it is gone: a kubelet counts the requests of its Pods while
    they terminate, and a Pod bound by name that does not fit fails for good (OutOfcpu)."""
    kube.delete(f"/api/v1/namespaces/{namespace}")
    wait_for(
        lambda: kube.find(f"/api/v1/namespaces/{namespace}") is None or None,
        timeout=timeout,
        what=f"namespace {namespace} to be gone",
    )


@dataclass
class SlurmInPods:
    cluster: DevCluster
    kube: AdminKube
    namespace: str
    nodes: list[str]
    images: dict[str, str]

    # -- bring-up ------------------------------------------------------------------------------
    def create(self) -> None:
        ns, kube = self.namespace, self.kube
        kube.create(
            f"/api/v1/namespaces/{ns}/configmaps",
            {
                "metadata": {"name": "slurm-conf"},
                "data": {"slurm.conf": slurm_conf(ns), "cgroup.conf": "CgroupPlugin=disabled\n"},
            },
        )
        keys = {"slurm.key": secrets.token_bytes(1024), "jwt_hs256.key": secrets.token_bytes(32)}
        kube.create(
            f"/api/v1/namespaces/{ns}/secrets",
            {
                "metadata": {"name": "slurm-keys"},
                "data": {k: base64.b64encode(v).decode() for k, v in keys.items()},
            },
        )
        for name in ("slurmctld", "slurmrestd"):
            kube.create(
                f"/api/v1/namespaces/{ns}/services",
                {
                    "metadata": {"name": name},
                    "spec": {
                        "selector": {"app.kubernetes.io/name": name},
                        "ports": [{"port": 6817 if name == "slurmctld" else 6820}],
                        **({"clusterIP": "None"} if name == "slurmctld" else {}),
                    },
                },
            )
        pods = f"/api/v1/namespaces/{ns}/pods"
        controller = _pod(
            "slurmctld",
            self.nodes[0],
            self.images["slurmctld"],
            ["slurmctld", "-D", "-i"],
            labels={"app.kubernetes.io/name": "slurmctld"},
            fs_group=SLURM_UID,
        )
        kube.create(pods, controller)
        for number, node in enumerate(self.nodes, start=1):
            self.add_slurmd(f"compute-{number}", node)
        kube.create(
            pods,
            _pod(
                "slurmrestd",
                self.nodes[-1],
                self.images["slurmrestd"],
                ["slurmrestd", "-a", "rest_auth/jwt", "-s", "openapi/slurmctld", "0.0.0.0:6820"],
                labels={"app.kubernetes.io/name": "slurmrestd"},
                fs_group=RESTD_UID,
            ),
        )

    def add_slurmd(self, name: str, node: str) -> None:
        """A dynamic slurmd Pod on `node`; it registers as Slurm node `name`."""
        conf = f"CPUs={SLURMD_CPUS} RealMemory={SLURMD_MEMORY_MIB} Feature=dyn"
        server = f"slurmctld.{self.namespace}.svc.cluster.local:6817"
        pod = _pod(
            name,
            node,
            self.images["slurmd"],
            ["slurmd", "-D", "-Z", "--conf-server", server, "--conf", conf],
            labels={"app.kubernetes.io/name": "slurmd", "sunk.coreweave.com/slurm-node": name},
        )
        size = {"cpu": str(SLURMD_CPUS), "memory": f"{SLURMD_MEMORY_MIB + 128}Mi"}
        pod["spec"]["containers"][0]["resources"] = {"requests": size, "limits": size}
        self.kube.create(f"/api/v1/namespaces/{self.namespace}/pods", pod)

    # -- reading it back ------------------------------------------------------------------------
    def pod(self, name: str) -> dict[str, Any]:
        return self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods/{name}")

    def run(self, pod: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`kubectl exec`: through the API server and the kubelet into the container."""
        kubectl = [str(cache_dir() / "bin" / "kubectl"), f"--kubeconfig={self.cluster.layout.kubeconfig}"]
        return subprocess.run(
            [*kubectl, "-n", self.namespace, "exec", pod, "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def exec(self, pod: str, *argv: str, timeout: float = 60) -> str:
        done = self.run(pod, *argv, timeout=timeout)
        assert done.returncode == 0, f"exec {argv} in {pod} failed: {done.stderr.strip()}"
        return done.stdout

    def nodes_by_state(self) -> dict[str, str]:
        out = self.exec("slurmctld", "sinfo", "-h", "-N", "-o", "%N %t")
        return dict(line.split() for line in out.splitlines() if line.strip())

    def _idle(self) -> int:
        try:
            return sum(1 for s in self.nodes_by_state().values() if s == "idle")
        except AssertionError:
            return 0  # slurmctld's container is not there yet, or not answering yet

    def wait_idle(self, count: int, timeout: float = 90) -> None:
        wait_for(
            lambda: self._idle() >= count or None,
            timeout=timeout,
            what=f"{count} slurmd Pods to register idle",
        )

    def token(self) -> str:
        out = self.exec("slurmctld", "scontrol", "token", "username=root", "lifespan=7200")
        return out.strip().removeprefix("SLURM_JWT=")
