"""PersistentVolumeClaims on the dev cluster's real Nodes: a default StorageClass and a
small provisioner for it.

`sunk dev up --real-nodes N` creates the StorageClass `sunk-dev-local`, marked as the
cluster's default, and starts this module's `main` as one of the cluster's processes
(`volume-provisioner`). The provisioner follows Kubernetes' external-provisioner protocol: when
kube-controller-manager's persistentvolume-binder finds a claim of that class with no volume
to bind, it annotates the claim with our provisioner's name; we then make a directory under
the cluster's run directory (`volumes/pvc-<claim uid>`, mode 0777 so that any non-root
container can write it) and a hostPath PersistentVolume already bound to the claim, which the
binder completes. When a claim is deleted, its volume is Released; we delete the directory
and then the volume.

The directory is on the cluster's network file system (`fileserver`): every real Node
mounts its GlusterFS volume over the run directory's `volumes/`, in the Node's own mount
namespace, and the provisioner works in a mount namespace of its own with the same volume
there. So a volume's path names the same network directory on every Node, and a
StatefulSet's Pod finds its data wherever it is restarted. The volumes require the
real-Node label (kwok's Nodes run no containers). The host's own `volumes/` stays an empty
directory; nothing is removed while anything is mounted below it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sunk_dev import fileserver, procs, slurmroot
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.layout import Layout
from sunk_dev.realnode import REAL_NODE_LABEL

Json = dict[str, Any]

STORAGE_CLASS = "sunk-dev-local"
PROVISIONER = "sunk.dev/local"
PROCESS = "volume-provisioner"
CLIENT = "provisioner"  # its file client: fileclient-provisioner
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
# Set by the persistentvolume-binder on a claim it wants an external provisioner to serve
# (the beta name is still written next to the GA one).
PROVISIONER_ANNOTATIONS = (
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
)
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
STORAGE_CLASS_PATH = "/apis/storage.k8s.io/v1/storageclasses"


def storage_class() -> Json:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {DEFAULT_CLASS_ANNOTATION: "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        # Any real Node reaches every volume, so nothing is gained by waiting for the Pod.
        "volumeBindingMode": "Immediate",
    }


# -- deciding (pure) -----------------------------------------------------------------------------
def volume_name(claim: Json) -> str:
    return f"pvc-{claim['metadata']['uid']}"


def wants_volume(claim: Json) -> bool:
    """A claim the binder handed to us that has no volume yet."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    annotations = meta.get("annotations") or {}
    return (
        spec.get("storageClassName") == STORAGE_CLASS
        and any(annotations.get(key) == PROVISIONER for key in PROVISIONER_ANNOTATIONS)
        and not spec.get("volumeName")
        and not meta.get("deletionTimestamp")
        and (claim.get("status") or {}).get("phase", "Pending") == "Pending"
    )


def refusal(claim: Json) -> str | None:
    """Why this provisioner cannot serve a claim it was handed, or None."""
    spec = claim.get("spec") or {}
    if spec.get("volumeMode", "Filesystem") != "Filesystem":
        return f"volumeMode {spec['volumeMode']} is not supported, only Filesystem"
    if spec.get("selector"):
        return "a claim with a selector cannot be provisioned"
    if spec.get("dataSource") or spec.get("dataSourceRef"):
        return "claims with a data source (snapshots, clones) are not supported"
    if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
        return "the claim requests no storage size"
    return None


def volume_for(claim: Json, path: Path) -> Json:
    """A hostPath volume at `path`, pre-bound to `claim`, usable on real Nodes only."""
    meta, spec = claim["metadata"], claim["spec"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": volume_name(claim),
            "annotations": {PROVISIONED_BY: PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": STORAGE_CLASS,
            "volumeMode": "Filesystem",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "hostPath": {"path": str(path), "type": "Directory"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": REAL_NODE_LABEL, "operator": "In", "values": ["true"]}]}
                    ]
                }
            },
        },
    }


def is_ours(volume: Json) -> bool:
    return ((volume["metadata"].get("annotations") or {}).get(PROVISIONED_BY)) == PROVISIONER


def to_delete(volume: Json) -> bool:
    """A volume of ours whose claim is gone and whose class says to delete it."""
    spec = volume.get("spec") or {}
    return (
        is_ours(volume)
        and (volume.get("status") or {}).get("phase") == "Released"
        and spec.get("persistentVolumeReclaimPolicy") == "Delete"
        and not volume["metadata"].get("deletionTimestamp")
    )


@dataclass
class Plan:
    create: list[Json] = field(default_factory=list)  # claims to make a volume for
    refuse: list[tuple[Json, str]] = field(default_factory=list)
    delete: list[Json] = field(default_factory=list)  # Released volumes of ours


def plan(claims: Iterable[Json], volumes: Iterable[Json]) -> Plan:
    volumes = list(volumes)
    named = {v["metadata"]["name"] for v in volumes}
    claimed = {((v.get("spec") or {}).get("claimRef") or {}).get("uid") for v in volumes}
    result = Plan(delete=[v for v in volumes if to_delete(v)])
    for claim in claims:
        if not wants_volume(claim) or volume_name(claim) in named or claim["metadata"]["uid"] in claimed:
            continue
        reason = refusal(claim)
        if reason:
            result.refuse.append((claim, reason))
        else:
            result.create.append(claim)
    return result


# -- acting --------------------------------------------------------------------------------------
def volume_dir(layout: Layout, name: str) -> Path:
    return layout.volumes / name


def remove_data(layout: Layout, path: Path) -> None:
    """Delete one volume's directory (or all of them: `layout.volumes`), refusing anything
    outside the cluster's volume directory and anything with a mount below it."""
    base = layout.volumes.resolve()
    target = path.resolve()
    if target != base and not target.is_relative_to(base):
        raise DevClusterError(f"not removing {path}: it is not under {base}")
    if not path.exists():
        return
    mounted = slurmroot.mounts_under(path)
    if mounted:
        raise DevClusterError(
            f"not removing {path}: {', '.join(mounted[:3])} is mounted there (a container still running?)"
        )
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=True)


class Provisioner:
    def __init__(self, layout: Layout, admin: AdminKube) -> None:
        self.layout = layout
        self.admin = admin
        self.refused: set[str] = set()

    def say(self, message: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)

    def sync(self) -> str:
        """One pass: volumes for new claims, Released volumes removed. Returns the claims'
        resourceVersion, to watch from."""
        claims = self.admin.get("/api/v1/persistentvolumeclaims")
        volumes = self.admin.get("/api/v1/persistentvolumes")["items"]
        todo = plan(claims["items"], volumes)
        for claim in todo.create:
            self.provision(claim)
        for claim, reason in todo.refuse:
            self.refuse(claim, reason)
        for volume in todo.delete:
            self.delete(volume)
        return str(claims["metadata"].get("resourceVersion") or "")

    def provision(self, claim: Json) -> None:
        name = volume_name(claim)
        path = volume_dir(self.layout, name)
        self.layout.volumes.mkdir(parents=True, exist_ok=True)
        path.mkdir(exist_ok=True)
        path.chmod(0o777)  # any container user may write; mkdir's mode is cut by the umask
        try:
            self.admin.create("/api/v1/persistentvolumes", volume_for(claim, path))
        except KubeError as err:
            if err.status != 409:
                raise
        meta = claim["metadata"]
        self.say(f"provisioned {name} at {path} for claim {meta['namespace']}/{meta['name']}")

    def refuse(self, claim: Json, reason: str) -> None:
        uid = claim["metadata"]["uid"]
        if uid not in self.refused:
            self.refused.add(uid)
            meta = claim["metadata"]
            self.say(f"not provisioning claim {meta['namespace']}/{meta['name']}: {reason}")

    def delete(self, volume: Json) -> None:
        name = volume["metadata"]["name"]
        host_path = ((volume.get("spec") or {}).get("hostPath") or {}).get("path")
        path = Path(host_path) if host_path else volume_dir(self.layout, name)
        remove_data(self.layout, path)
        self.admin.delete(f"/api/v1/persistentvolumes/{name}")
        self.say(f"deleted {name} and its data {path}")

    def wait_for_change(self, resource_version: str, seconds: int) -> None:
        """Return at the first change to any claim after `resource_version`, or after
        `seconds` (Released volumes are noticed at that pace)."""
        params = {"watch": "1", "timeoutSeconds": str(seconds), "allowWatchBookmarks": "false"}
        if resource_version:
            params["resourceVersion"] = resource_version
        with self.admin.http.stream(
            "GET", "/api/v1/persistentvolumeclaims", params=params, timeout=seconds + 10
        ) as stream:
            if stream.status_code != 200:
                return  # e.g. 410 Gone: the next sync lists afresh
            for line in stream.iter_lines():
                if line.strip():
                    event = json.loads(line)
                    if event.get("type") != "BOOKMARK":
                        return

    def run(self) -> None:
        self.say(f"serving StorageClass {STORAGE_CLASS} ({PROVISIONER}); volumes under {self.layout.volumes}")
        while True:
            try:
                version = self.sync()
                self.wait_for_change(version, 2)
            except Exception as err:  # keep serving: the API server may be restarting
                self.say(f"error: {err}")
                time.sleep(1)


# -- the dev cluster's side ------------------------------------------------------------------
def start(layout: Layout) -> None:
    """Create the StorageClass and start the provisioner in a mount namespace where the
    shared volume is mounted (real-Node clusters only)."""
    admin = AdminKube(layout)
    try:
        if admin.find(f"{STORAGE_CLASS_PATH}/{STORAGE_CLASS}") is None:
            admin.create(STORAGE_CLASS_PATH, storage_class())
    finally:
        admin.close()
    layout.volumes.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        SUNK_DEV_DIR=str(layout.root),
        SUNK_DEV_PORT_OFFSET=str(layout.ports.offset),
    )
    # `-c` rather than `-m`: this module is imported by the package's __init__ already.
    client = fileserver.start_client(layout, CLIENT)
    argv = [
        "nsenter",
        f"--mount=/proc/{client.pid}/ns/mnt",
        "--",
        sys.executable,
        "-c",
        "from sunk_dev import storage; storage.main()",
    ]
    procs.spawn(PROCESS, argv, layout.pids, layout.logs, env=env)


def stop(layout: Layout) -> bool:
    """Stop the provisioner and its file client; True if it was running."""
    tracked = procs.load(layout.pids, PROCESS)
    if tracked is not None:
        procs.stop(tracked, layout.pids)
    fileserver.stop_client(layout, CLIENT)
    return tracked is not None


def main() -> None:
    layout = Layout.default()
    admin = AdminKube(layout)
    try:
        Provisioner(layout, admin).run()
    finally:
        admin.close()
