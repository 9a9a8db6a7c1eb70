"""The Slurm chart installed on the dev cluster's real Nodes: `sunk dev platform`.

The chart goes in unchanged; only values differ from a real cluster's: the images built
here (never pulled), every Pod kept to the real Nodes (kwok Nodes run no containers), small
requests for a 2-core machine, and a NodeSet over the real Nodes applied once the CRD is
in. The e2e tests install it the same way.
"""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sunk.scheduler.policy import PERMISSIVE_YAML
from sunk_dev import procs
from sunk_dev.cluster import DevCluster
from sunk_dev.errors import DevClusterError
from sunk_dev.images import Built, read_manifest
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import cache_dir
from sunk_dev.prereqs import PLATFORM_TOOLS, ensure_go_tools, repo_root
from sunk_dev.realnode import REAL_NODE_LABEL

Json = dict[str, Any]
NODESETS = "/apis/sunk.coreweave.com/v1alpha1/namespaces/{ns}/nodesets"
NODESET_CRD = "nodesets.sunk.coreweave.com"
REAL = {REAL_NODE_LABEL: "true"}
# A klog line kubectl writes about itself, e.g. on a dropped exec stream:
# "E1129 08:29:25.802339   10389 websocket.go:297] Unknown stream id 1, discarding message".
KUBECTL_LOG = re.compile(r"^[EWI]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w.-]+:\d+\] .*\n?", re.M)
# Each slurmd Pod asks its Node for one CPU and may use two: Slurm gets 2 CPUs (a job and a
# Pod placed by sunk fit side by side) and 1 GiB less the reserve.
MEMBER_RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}


def chart_dir() -> Path:
    root = repo_root()
    if root is None:
        raise DevClusterError("the Slurm chart is read from a checkout of the sunk repository; run from one")
    return root / "charts" / "slurm"


def helm_binary() -> Path:
    """~/.cache/sunk/bin/helm, built from its pinned Go module (`sunk dev up --real-nodes`
    builds it too, so a user can run `helm install` by hand)."""
    return ensure_go_tools(cache_dir() / "helm-build.log", PLATFORM_TOOLS)["helm"]


def build_chart_dependencies(helm: Path, chart: Path | None = None) -> None:
    """Pack the chart's sub-charts into its charts/ directory (kept out of git), one process
    at a time: the Slurm chart takes sunk-scheduler from ../sunk-scheduler."""
    chart = chart or chart_dir()
    lock = Path(tempfile.gettempdir()) / f"sunk-helm-dependency-{chart.name}.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        subprocess.run(
            [str(helm), "dependency", "build", str(chart)], capture_output=True, text=True, check=True
        )


def _image(built: Built) -> Json:
    repository, _, tag = built.ref.rpartition(":")
    return {"repository": repository, "tag": tag, "pullPolicy": "Never"}


# The shared /home of every release on the dev cluster.
HOME_VOLUME = {"name": "home", "mountPath": "/home", "size": "1Gi"}


def dev_values(
    images: dict[str, Built], *, scheduler: bool = True, tenants: str = "apps", strangers: str = ""
) -> Json:
    """Values for the dev cluster: only what differs from a real cluster's. The scheduler
    places Pods of `tenants`, a namespace apart from the release's (which holds the keys),
    which the policy lets run as root, as the tests' Pods do; and of `strangers`, an ordinary
    tenant's namespace the policy grants nothing (what the attack script attacks from)."""
    small = {"requests": {"cpu": "20m", "memory": "64Mi"}}
    permissive = yaml.safe_load(PERMISSIVE_YAML)
    policy = {**permissive, "default": {}, "namespaces": {tenants: permissive["default"]}}
    slurmd = _image(images["slurmd"])
    return {
        "defaults": {"nodeSelector": REAL},
        "slurm": {
            "gresConf": "# no GPUs on the dev cluster's Nodes\n",
            "maxNodeCount": 64,
            # Three members: a run every 20 s costs little, and a member the operator hands
            # back to the checks returns within 20 s rather than a minute.
            "healthChecks": {"interval": "20s"},
        },
        "controller": {"image": _image(images["slurmctld"]), "resources": small},
        "restapi": {"image": _image(images["slurmrestd"]), "resources": small},
        "accounting": {
            "image": _image(images["slurmdbd"]),
            "resources": small,
            "mariadb": {
                "image": _image(images["mariadb"]),
                "resources": small,
                "args": ["--innodb-buffer-pool-size=32M"],
            },
        },
        "login": {"image": _image(images["login"]), "resources": small},
        # People's homes on a shared volume (issue #49): the login Pod makes each home there,
        # and every slurmd Pod mounts it, so a home follows its person to every node. The dev
        # cluster's default StorageClass serves ReadWriteMany from GlusterFS.
        "sharedVolumes": [dict(HOME_VOLUME)],
        "operator": {"image": _image(images["sunk"]), "resources": small},
        "slurmd": {"image": {"repository": slurmd["repository"], "tag": slurmd["tag"]}},
        "scheduler": {
            "enabled": scheduler,
            "scheduler": {
                "image": _image(images["sunk"]),
                "scope": {"namespaces": ",".join(n for n in (tenants, strangers) if n)},
                # The tests' Pods run as root, as the reference system's do: said out loud.
                "policy": policy,
                "replicas": 1,
                "nodeSelector": REAL,
                "resources": small,
            },
        },
    }


def nodeset(name: str, partitions: list[str], **spec: Any) -> Json:
    return {
        "apiVersion": "sunk.coreweave.com/v1alpha1",
        "kind": "NodeSet",
        "metadata": {"name": name},
        "spec": {"partitions": partitions, "nodeSelector": REAL, "resources": MEMBER_RESOURCES, **spec},
    }


@dataclass
class Platform:
    """One release of the Slurm chart on the dev cluster."""

    cluster: DevCluster
    namespace: str = "slurm"
    release: str = "slurm"

    def __post_init__(self) -> None:
        self.helm = helm_binary()
        spec = self.cluster.require_running()
        if not spec.real_nodes:
            raise DevClusterError("the Slurm chart needs real Nodes: `sunk dev up --real-nodes 3` first")
        self.real_nodes = spec.real_nodes
        # The builds the Nodes hold: a fresh ensure_images would rebuild the sunk image after
        # any source change, and that build is in no Node.
        self.images = read_manifest(self.cluster.layout.images_file)

    @property
    def tenants(self) -> str:
        """The namespace whose Pods the chart's scheduler places (never the release's own)."""
        return f"{self.namespace}-apps"

    @property
    def strangers(self) -> str:
        """A tenant's namespace the scheduler also watches and the policy grants nothing."""
        return f"{self.namespace}-tenant"

    @property
    def values_file(self) -> Path:
        return self.cluster.layout.root / f"platform-{self.namespace}-{self.release}.yaml"

    def helm_run(
        self, *argv: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        env = {
            "KUBECONFIG": str(self.cluster.layout.kubeconfig),
            "HOME": str(self.cluster.layout.root),
            "PATH": "/usr/bin:/bin",
        }
        result = subprocess.run(
            [str(self.helm), *argv], capture_output=True, text=True, env=env, timeout=timeout
        )
        if check and result.returncode != 0:
            raise DevClusterError(f"helm {argv[0]} failed: {result.stderr.strip() or result.stdout.strip()}")
        return result

    def install(self, values: Json | None = None, *, scheduler: bool = True) -> float:
        """`helm upgrade --install` with the dev values (plus `values`), waiting until every
        Deployment and StatefulSet is ready; returns the seconds it took."""
        build_chart_dependencies(self.helm)
        if scheduler:  # the chart's Role for the scheduler goes into it: it must exist first
            kube = AdminKube(self.cluster.layout)
            try:
                # Tenants' Pods under the Pod Security level docs/security.md asks of them.
                for tenant in (self.tenants, self.strangers):
                    kube.create_namespace(tenant, {"pod-security.kubernetes.io/enforce": "baseline"})
            finally:
                kube.close()
        base = dev_values(self.images, scheduler=scheduler, tenants=self.tenants, strangers=self.strangers)
        merged = merge_values(base, values or {})
        owner = self._nodeset_crd_owner()
        if owner not in ("", self.namespace):  # another release on this cluster installed it
            merged = merge_values(merged, {"nodeSetCRD": {"install": False}})
        self.values_file.write_text(yaml.safe_dump(merged))
        started = time.monotonic()
        self.upgrade(wait=True)
        return time.monotonic() - started

    def _nodeset_crd_owner(self) -> str:
        """The namespace of the release that installed the NodeSet CRD ("": none has). Two
        releases share one cluster this way (tests side by side); the CRD then goes with the
        release that made it."""
        kube = AdminKube(self.cluster.layout)
        try:
            crd = kube.find(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{NODESET_CRD}")
        finally:
            kube.close()
        annotations = ((crd or {}).get("metadata") or {}).get("annotations") or {}
        return str(annotations.get("meta.helm.sh/release-namespace", ""))

    def upgrade(
        self, values: Json | None = None, *, wait: bool = True, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """`helm upgrade --install` with the stored values, plus `values` on top when given."""
        argv = [
            "upgrade",
            "--install",
            self.release,
            str(chart_dir()),
            "--namespace",
            self.namespace,
            "--create-namespace",
            "-f",
            str(self.values_file),
        ]
        if values:
            extra = self.values_file.with_suffix(".extra.yaml")
            extra.write_text(yaml.safe_dump(values))
            argv += ["-f", str(extra)]
        if wait:
            argv += ["--wait", "--timeout", "8m"]
        return self.helm_run(*argv, check=check)

    def uninstall(self) -> None:
        """The release goes, and the tenants' namespace install made (with its Pods)."""
        self.helm_run(
            "uninstall", self.release, "--namespace", self.namespace, "--wait", "--timeout", "3m", check=False
        )
        kube = AdminKube(self.cluster.layout)
        try:
            for tenant in (self.tenants, self.strangers):
                kube.delete(f"/api/v1/namespaces/{tenant}")
        finally:
            kube.close()

    def apply_nodeset(self, kube: AdminKube, obj: Json) -> None:
        path = NODESETS.format(ns=self.namespace)
        existing = kube.find(f"{path}/{obj['metadata']['name']}")
        if existing is None:
            kube.create(path, obj)
        else:
            kube.patch(f"{path}/{obj['metadata']['name']}", {"spec": obj["spec"]})

    def nodeset(self, kube: AdminKube, name: str) -> Json:
        return kube.get(f"{NODESETS.format(ns=self.namespace)}/{name}")

    def kubectl(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        kubectl = cache_dir() / "bin" / "kubectl"
        # HOME: kubectl keeps its discovery cache there (the working directory without one).
        env = {
            "KUBECONFIG": str(self.cluster.layout.kubeconfig),
            "HOME": str(self.cluster.layout.root),
            "PATH": "/usr/bin:/bin",
        }
        done = subprocess.run(
            [str(kubectl), "-n", self.namespace, *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        # kubectl's own log lines are about kubectl, never about the command it ran.
        done.stderr = KUBECTL_LOG.sub("", done.stderr)
        return done

    def login(self, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A shell command in the login Pod, as a user who logged in would run it."""
        return self.kubectl(
            "exec",
            f"deploy/{self.release}-login",
            "-c",
            "sshd",
            "--",
            "bash",
            "-lc",
            command,
            timeout=timeout,
        )


def merge_values(base: Json, extra: Json) -> Json:
    merged: Json = json.loads(json.dumps(base))
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def demo(cluster: DevCluster, say: Callable[[str], None] = print) -> None:
    """`sunk dev platform`: install the chart on the real Nodes and show it working, each
    step with the command a user would type."""
    kube = AdminKube(cluster.layout)
    try:
        plat = Platform(cluster)
        say(f"helm upgrade --install {plat.release} charts/slurm -n {plat.namespace} -f {plat.values_file}")
        seconds = plat.install({"slurm": {"partitions": [{"name": "main", "default": True}]}})
        say(f"  installed in {seconds:.0f} s")
        say("kubectl apply NodeSet compute (partition main, every real Node)")
        started = time.monotonic()
        plat.apply_nodeset(kube, nodeset("compute", ["main"]))
        count = plat.real_nodes
        procs.wait_until(
            lambda: (
                ((plat.nodeset(kube, "compute").get("status") or {}).get("slurm") or {}).get("idle") == count
            ),
            timeout=240,
            what=f"{count} idle Slurm nodes (see `kubectl -n {plat.namespace} get pods,nodesets`)",
        )
        say(f"  {count} Slurm nodes idle {time.monotonic() - started:.0f} s later")
        shown: list[tuple[str, Callable[[], subprocess.CompletedProcess[str]]]] = [
            ("kubectl get nodesets", lambda: plat.kubectl("get", "nodesets")),
            ("sinfo (login Pod)", lambda: plat.login("sinfo")),
            (f"srun -N{count} hostname (login Pod)", lambda: plat.login(f"srun -N{count} hostname")),
            (
                "sbatch --wait --wrap true; sacct (login Pod)",
                lambda: plat.login("sbatch -Q --wait --wrap true; sacct -X"),
            ),
        ]
        for title, run in shown:
            result = run()
            say(f"$ {title}\n{(result.stdout or result.stderr).rstrip()}")
        say(
            "\nnext: export KUBECONFIG="
            + str(cluster.layout.kubeconfig)
            + f"; kubectl -n {plat.namespace} get pods,nodesets"
            f"\n      kubectl -n {plat.namespace} exec -it deploy/{plat.release}-login -c sshd -- bash -l"
            f"\n      Pods in namespace {plat.tenants} naming schedulerName {plat.namespace}-{plat.release} "
            "are placed through Slurm"
        )
    finally:
        kube.close()
