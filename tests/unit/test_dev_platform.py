"""What the dev cluster gives charts on real Nodes: kube-scheduler restricted to real Nodes,
its own port, and PersistentVolumeClaims served by the `sunk-dev-local` provisioner."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from sunk_dev import hostnet, kubecluster, realcluster, slurmroot, storage
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import KubeError
from sunk_dev.layout import Layout, Ports
from sunk_dev.platform import KUBECTL_LOG
from sunk_dev.realnode import REAL_NODE_LABEL, RealNode

Json = dict[str, Any]


def claim(name: str = "data-db-0", uid: str = "u1", **spec: Any) -> Json:
    """A claim as the API server holds it once the binder handed it to our provisioner."""
    base: Json = {
        "storageClassName": storage.STORAGE_CLASS,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    base.update(spec)
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "annotations": {"volume.kubernetes.io/storage-provisioner": storage.PROVISIONER},
        },
        "spec": base,
        "status": {"phase": "Pending"},
    }


# -- kube-scheduler ---------------------------------------------------------------------------------
def test_the_default_scheduler_may_only_choose_real_nodes(tmp_path: Path) -> None:
    """Catches kube-scheduler placing a Deployment's Pod on a kwok Node, where it would show
    Running with no container at all."""
    config = realcluster.scheduler_config(Layout(tmp_path))
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "default-scheduler"
    (plugin,) = [p for p in profile["pluginConfig"] if p["name"] == "NodeAffinity"]
    terms = plugin["args"]["addedAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [{"matchExpressions": [{"key": REAL_NODE_LABEL, "operator": "In", "values": ["true"]}]}]
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["clientConnection"]["kubeconfig"] == str(tmp_path / "kube" / "admin.kubeconfig")


@pytest.mark.parametrize("offset", [0, 1000, 2000, 3000, 5000, 9000])
def test_kube_scheduler_has_a_port_of_its_own(tmp_path: Path, offset: int) -> None:
    """Catches kube-scheduler sharing a port with CoreDNS, kube-proxy, a kubelet or the
    control plane, or taking the port bench/baselines.py's own kube-scheduler binds (29259)."""
    layout = Layout(tmp_path, Ports().shifted(offset))
    ports = layout.ports
    others = set(ports.fixed(accounting=True).values()) | {
        ports.coredns,
        ports.kube_proxy,
        ports.kube_proxy + 1,
    }
    for node in (RealNode(layout, n) for n in range(1, hostnet.MAX_REAL_NODES + 1)):
        others |= {node.kubelet_port, node.kubelet_port + 1}
    assert ports.kube_scheduler not in others
    assert ports.kube_scheduler != 29259
    assert ports.kube_scheduler == Ports().kube_scheduler + offset


def test_volume_binding_controllers_run() -> None:
    """Catches claims that never bind (no binder) and claims or namespaces whose deletion
    hangs on the protection finalizers the API server adds (no protection controllers)."""
    assert {"persistentvolume-binder", "pvc-protection", "pv-protection"} <= set(kubecluster.CONTROLLERS)
    assert "node-lifecycle" not in kubecluster.CONTROLLERS  # kwok keeps Nodes Ready; see kubecluster


# -- the provisioner's decisions -------------------------------------------------------------------
def test_the_storage_class_is_the_default_one() -> None:
    """Catches claims with no storageClassName (charts leave it blank) staying Pending."""
    sc = storage.storage_class()
    assert sc["metadata"]["annotations"][storage.DEFAULT_CLASS_ANNOTATION] == "true"
    assert sc["provisioner"] == storage.PROVISIONER
    assert sc["reclaimPolicy"] == "Delete"


def test_a_claim_handed_to_us_gets_a_volume_bound_to_it(tmp_path: Path) -> None:
    """Catches a volume the binder would not pair with the claim (no claimRef uid), that
    lies outside the cluster's directory, lacks the claim's size or modes, or could be used
    on a kwok Node."""
    todo = storage.plan([claim()], [])
    assert [c["metadata"]["uid"] for c in todo.create] == ["u1"]
    path = tmp_path / "volumes" / "pvc-u1"
    pv = storage.volume_for(todo.create[0], path)
    assert pv["metadata"]["name"] == "pvc-u1"
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == storage.PROVISIONER
    spec = pv["spec"]
    assert spec["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "ns",
        "name": "data-db-0",
        "uid": "u1",
    }
    assert spec["hostPath"] == {"path": str(path), "type": "Directory"}
    assert spec["capacity"] == {"storage": "1Gi"} and spec["accessModes"] == ["ReadWriteOnce"]
    assert spec["storageClassName"] == storage.STORAGE_CLASS
    (term,) = spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": REAL_NODE_LABEL, "operator": "In", "values": ["true"]}]


@pytest.mark.parametrize(
    "change",
    [
        {"spec": {"storageClassName": "other"}},
        {"spec": {"storageClassName": ""}},  # explicitly no class: static binding only
        {"spec": {"volumeName": "pv-x"}},
        {"status": {"phase": "Bound"}},
        {"metadata": {"annotations": {}}},  # the binder has not handed it to us (yet)
        {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}},
    ],
)
def test_claims_that_are_not_ours_to_serve_get_nothing(change: Json) -> None:
    """Catches provisioning for another class, for a claim the binder may still pair with an
    existing volume, or for one that is bound or going away."""
    found = claim()
    for part, values in change.items():
        found[part].update(values)
    assert storage.plan([found], []) == storage.Plan()


def test_a_claim_is_provisioned_once(tmp_path: Path) -> None:
    """Catches a second volume for the same claim (the first one not bound yet)."""
    first = storage.volume_for(claim(), tmp_path / "v")
    assert storage.plan([claim()], [first]).create == []
    renamed = storage.volume_for(claim(), tmp_path / "v")
    renamed["metadata"]["name"] = "made-by-hand"
    assert storage.plan([claim()], [renamed]).create == []


@pytest.mark.parametrize(
    "spec, reason",
    [
        ({"volumeMode": "Block"}, "volumeMode"),
        ({"selector": {"matchLabels": {"a": "b"}}}, "selector"),
        ({"dataSource": {"kind": "VolumeSnapshot", "name": "s"}}, "data source"),
        ({"resources": {}}, "size"),
    ],
)
def test_claims_this_provisioner_cannot_serve_are_refused_with_a_reason(spec: Json, reason: str) -> None:
    """Catches a hostPath directory handed out as a block device, or a selector ignored."""
    todo = storage.plan([claim(**spec)], [])
    assert todo.create == [] and len(todo.refuse) == 1
    assert reason in todo.refuse[0][1]


def _volume(phase: str, policy: str = "Delete", ours: bool = True) -> Json:
    pv = storage.volume_for(claim(), Path("/nowhere"))
    pv["status"] = {"phase": phase}
    pv["spec"]["persistentVolumeReclaimPolicy"] = policy
    if not ours:
        pv["metadata"]["annotations"] = {}
    return pv


def test_only_released_volumes_of_ours_with_delete_policy_are_deleted() -> None:
    """Catches data deleted while its claim still exists, on Retain, or for another
    provisioner's volume."""
    assert storage.plan([], [_volume("Released")]).delete
    for pv in (_volume("Bound"), _volume("Released", "Retain"), _volume("Released", ours=False)):
        assert not storage.plan([], [pv]).delete


# -- the provisioner against a fake API server ------------------------------------------------------
class FakeKube:
    def __init__(self, claims: list[Json], volumes: list[Json]) -> None:
        self.claims, self.volumes = claims, volumes
        self.created: list[Json] = []
        self.deleted: list[str] = []

    def get(self, path: str) -> Json:
        items = self.claims if path.endswith("persistentvolumeclaims") else self.volumes
        return {"metadata": {"resourceVersion": "7"}, "items": items}

    def create(self, path: str, body: Json) -> Json:
        if any(v["metadata"]["name"] == body["metadata"]["name"] for v in self.volumes):
            raise KubeError(409, "exists")
        self.created.append(body)
        self.volumes.append(body)
        return body

    def delete(self, path: str) -> None:
        self.deleted.append(path.rsplit("/", 1)[-1])


def test_a_new_claims_directory_is_made_writable_for_any_user(tmp_path: Path) -> None:
    """Catches a volume a non-root container cannot write (root-owned, mode 0755), or a
    directory made outside the cluster's run directory."""
    layout = Layout(tmp_path / "run")
    fake = FakeKube([claim()], [])
    assert storage.Provisioner(layout, fake).sync() == "7"
    path = layout.volumes / "pvc-u1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o777
    assert [pv["spec"]["hostPath"]["path"] for pv in fake.created] == [str(path)]
    storage.Provisioner(layout, fake).sync()
    assert len(fake.created) == 1


def test_a_released_volume_loses_its_data_then_its_object(tmp_path: Path) -> None:
    """Catches a deleted claim's data left on disk (it would pile up across tests)."""
    layout = Layout(tmp_path / "run")
    fake = FakeKube([claim()], [])
    storage.Provisioner(layout, fake).sync()
    (layout.volumes / "pvc-u1" / "file").write_text("data\n")
    fake.claims.clear()
    fake.volumes[0]["status"] = {"phase": "Released"}
    storage.Provisioner(layout, fake).sync()
    assert fake.deleted == ["pvc-u1"]
    assert not (layout.volumes / "pvc-u1").exists()


def test_data_outside_the_volume_directory_is_never_removed(tmp_path: Path) -> None:
    """Catches a volume whose hostPath was edited to point elsewhere (or a bug) deleting
    files that are not the cluster's volumes."""
    layout = Layout(tmp_path / "run")
    precious = tmp_path / "precious"
    precious.mkdir()
    with pytest.raises(DevClusterError, match="not under"):
        storage.remove_data(layout, precious)
    with pytest.raises(DevClusterError, match="not under"):
        storage.remove_data(layout, layout.volumes / ".." / ".." / "precious")
    assert precious.exists()


def test_nothing_with_a_mount_below_it_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches `rm -rf` through a mount point into whatever is mounted there."""
    layout = Layout(tmp_path / "run")
    (layout.volumes / "pvc-u1").mkdir(parents=True)
    mounted = str(layout.volumes / "pvc-u1")
    monkeypatch.setattr(slurmroot, "mounts_under", lambda path: [mounted])
    with pytest.raises(DevClusterError, match="mounted"):
        storage.remove_data(layout, layout.volumes)
    assert (layout.volumes / "pvc-u1").is_dir()


def test_kubectl_own_log_lines_are_taken_out_of_what_a_command_said() -> None:
    """Catches a test reading `idle` from sinfo as `idle` plus kubectl's complaint about a
    dropped exec stream (a CI run failed on exactly this)."""
    said = "idle\nE1129 08:29:25.802339   10389 websocket.go:297] Unknown stream id 1, discarding message\n"
    assert KUBECTL_LOG.sub("", said) == "idle\n"
    assert KUBECTL_LOG.sub("", "E1129 is a job name\n") == "E1129 is a job name\n"
