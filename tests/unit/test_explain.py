"""R9.5 `sunk explain`: the body a Pod would get from each REST version, offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sunk.cli import main
from sunk.scheduler.explain import explain_group, manifests
from sunk.scheduler.translate import Settings

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "annotations": {"sunk.coreweave.com/exclusive": "topo"}},
    "spec": {
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
    },
}


def explain(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(POD))
    code = main(["explain", "-f", str(manifest), *args])
    return code, capsys.readouterr().out


def test_r9_5_the_newest_version_is_explained_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = explain(tmp_path, capsys, "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["api_version"] == "v0.0.45"
    assert report["job"]["job"]["shared"] == ["topo"]
    assert report["job"]["job"]["admin_comment"].endswith(" runas=0")


def test_r3_5_what_an_older_slurm_cannot_express_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = explain(tmp_path, capsys, "--slurm-api-version", "v0.0.38")
    assert code == 1 and "exclusive=topo needs Slurm 23.02" in out


def test_an_unknown_version_is_named_with_the_ones_sunk_speaks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(POD))
    assert main(["explain", "-f", str(manifest), "--slurm-api-version", "v0.0.39"]) == 2
    assert "v0.0.39 is not one sunk speaks (v0.0.45," in capsys.readouterr().err


GROUP_FILE = """
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: train}
spec: {minMember: 3}
---
apiVersion: v1
kind: Pod
metadata: {name: train-1, labels: {scheduling.x-k8s.io/pod-group: train}}
spec:
  terminationGracePeriodSeconds: 5
  containers: [{name: c, resources: {requests: {cpu: "2", memory: 1Gi}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: train-0, labels: {scheduling.x-k8s.io/pod-group: train}}
spec:
  terminationGracePeriodSeconds: 5
  containers: [{name: c, resources: {requests: {cpu: "8", memory: 8Gi}}}]
"""


def test_r9_1_explain_shows_one_heterogeneous_job_for_a_podgroup() -> None:
    pods, groups = manifests([GROUP_FILE])
    report = explain_group("train", pods, groups, Settings())
    assert report["valid"], report["errors"]
    assert [j["cpus_per_task"] for j in report["job"]["jobs"]] == [8, 2]  # members by name
    assert report["sbatch"].count(" : ") == 1
    assert any("needs 3 members" in note and "2 waiting" in note for note in report["notes"])


def test_r9_1_explain_names_the_member_that_would_be_refused() -> None:
    pods, groups = manifests([GROUP_FILE.replace("memory: 1Gi", "memory: lots")])
    report = explain_group("train", pods, groups, Settings())
    assert not report["valid"] and report["errors"][0].startswith("train-1: ")
