"""The train-and-serve example's serving volume (issue #52): a tenant Pod picks its own UID,
so the serving namespace's claim on the shared storage holds the checkpoints' directory
alone and is read-only where the Pod cannot undo it. These tests read the example's files
and what the demo makes of them; the policy itself was tried against kube-apiserver 1.33
(server-side dry runs: a writable mount refused, a read-only one and serve.yaml's Pods
admitted), and the real-Node suite runs the README (tests/e2e/test_train_and_serve.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sunk_dev import story

Json = dict[str, Any]


def docs(name: str) -> dict[str, Json]:
    return {d["kind"]: d for d in story.example(name)}


def test_issue52_the_serving_volume_is_the_checkpoints_directory_not_the_shared_volume() -> None:
    """Catches a volume on the claim's root, where a tenant Pod running as alice would read
    and change whatever people keep on /shared."""
    readme = (story.EXAMPLE / "README.md").read_text()
    assert "s|@CHECKPOINTS_DIR@|$DIR/train-and-serve/checkpoints|" in readme
    assert f"{story.WORKDIR}/checkpoints" == "/shared/train-and-serve/checkpoints"  # train.sbatch's $PWD
    assert "CHECKPOINTS=${CHECKPOINTS:-$PWD/checkpoints}" in (story.EXAMPLE / "train.sbatch").read_text()
    [mount] = [
        m
        for m in docs("serve.yaml")["Deployment"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        if m["name"] == "checkpoints"
    ]
    assert mount == {"name": "checkpoints", "mountPath": "/checkpoints", "readOnly": True}


def test_issue52_pods_in_the_serving_namespace_may_mount_the_claim_read_only_only() -> None:
    found = docs("storage.yaml")
    assert found["PersistentVolume"]["spec"]["accessModes"] == ["ReadOnlyMany"]
    policy, binding = found["ValidatingAdmissionPolicy"], found["ValidatingAdmissionPolicyBinding"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "tns-apps"}
    }
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    [rule] = spec["validations"]
    assert "v.persistentVolumeClaim.claimName != 'checkpoints'" in rule["expression"]
    assert "v.persistentVolumeClaim.readOnly" in rule["expression"]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    pod = docs("serve.yaml")["Deployment"]["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "checkpoints"]
    assert volume["persistentVolumeClaim"] == {"claimName": "checkpoints", "readOnly": True}


class FakeKube:
    """What serving_volume reads (the chart's claim and its volume) and what it creates."""

    def __init__(self) -> None:
        self.created: list[tuple[str, Json]] = []

    def get(self, path: str) -> Json:
        if path.endswith("/persistentvolumeclaims/slurm-checkpoints"):
            return {"spec": {"volumeName": "pvc-1"}}
        assert path == "/api/v1/persistentvolumes/pvc-1", path
        return {"spec": {"hostPath": {"path": "/srv/gluster/pvc-1"}}}

    def find(self, path: str) -> Json | None:
        return None

    def create(self, path: str, body: Json) -> Json:
        self.created.append((path, body))
        return body


def test_issue52_the_demo_makes_the_same_narrow_read_only_volume_for_its_own_namespace() -> None:
    plat = SimpleNamespace(namespace="demo", tenants="demo-apps")  # what serving_volume reads of a Platform
    kube = FakeKube()
    story.serving_volume(plat, kube)  # type: ignore[arg-type]
    made = {body["kind"]: (path, body) for path, body in kube.created}
    volume = made["PersistentVolume"][1]
    assert volume["spec"]["hostPath"]["path"] == "/srv/gluster/pvc-1/train-and-serve/checkpoints"
    assert volume["spec"]["claimRef"] == {"namespace": "demo-apps", "name": "checkpoints"}
    path, policy = made["ValidatingAdmissionPolicy"]
    assert path == f"{story.ADMISSION}/validatingadmissionpolicies"
    assert policy["metadata"]["name"] == "demo-apps-checkpoints-read-only"
    selector = policy["spec"]["matchConstraints"]["namespaceSelector"]["matchLabels"]
    assert selector == {"kubernetes.io/metadata.name": "demo-apps"}
    assert (
        made["ValidatingAdmissionPolicyBinding"][1]["spec"]["policyName"] == "demo-apps-checkpoints-read-only"
    )
    # the policy is in place before the claim a Pod could mount
    kinds = [body["kind"] for _, body in kube.created]
    assert kinds.index("ValidatingAdmissionPolicyBinding") < kinds.index("PersistentVolumeClaim")
