"""R10.3 (config changes): slurmctld's sidecar applies a changed configuration only once
the kubelet has copied all of it, never while a job still uses a partition it drops, and
records what Slurm runs on the ConfigMap."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from sunk.kube.client import KubeError
from sunk.operator.chart.config_apply import (
    APPLIED_AT,
    APPLIED_HASH,
    HELD_HASH,
    WANTED_HASH,
    ConfigApplier,
    config_hash,
    partitions_in,
)
from sunk.slurm.errors import SlurmUnavailable
from tests.fakes.slurm import FakeSlurm

Json = dict[str, Any]
OLD = {"slurm.conf": "ClusterName=c\nPartitionName=main Nodes=ALL\nPartitionName=extra Nodes=ALL\n"}
NEW = {
    "slurm.conf": "ClusterName=c\nPartitionName=main Nodes=ALL\n",
    "cgroup.conf": "CgroupPlugin=disabled\n",
}


class FakeKube:
    def __init__(self, data: dict[str, str], annotations: dict[str, str] | None = None) -> None:
        self.cm: Json = {"metadata": {"name": "slurm-config", "uid": "u1", "annotations": annotations or {}}}
        self.cm["data"] = dict(data)
        self.events: list[Json] = []
        self.unreadable = False

    async def get(self, path: str) -> Json:
        if self.unreadable:
            raise KubeError(503, "unavailable")
        return self.cm

    async def patch_merge(self, path: str, patch: Json) -> Json:
        annotations = self.cm["metadata"]["annotations"]
        for key, value in patch["metadata"]["annotations"].items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        return self.cm

    async def create_event(self, namespace: str, event: Json) -> None:
        if any(e["metadata"]["name"] == event["metadata"]["name"] for e in self.events):
            raise KubeError(409, "exists")
        self.events.append(event)

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.events]


def running(slurm: FakeSlurm, jobs: dict[int, str]) -> None:
    """Slurm lists these jobs (ID → partition) as running, and no other."""
    slurm.raw_jobs.clear()
    for job_id, partition in jobs.items():
        slurm.next_id = job_id
        slurm.run_job(f"node-{job_id}", partition=partition)


def mount(directory: Path, files: dict[str, str]) -> None:
    for old in directory.iterdir():
        old.unlink()
    for name, text in files.items():
        (directory / name).write_text(text)


def applier(tmp_path: Path, kube: FakeKube, slurm: FakeSlurm) -> ConfigApplier:
    return ConfigApplier(kube, slurm, "plat", "slurm-config", tmp_path, "ctl-0")


def old_applied_new_wanted() -> tuple[FakeKube, FakeSlurm]:
    """Slurm runs OLD; the ConfigMap now holds NEW."""
    return FakeKube(NEW, {APPLIED_HASH: config_hash(OLD)}), FakeSlurm()


def step(a: ConfigApplier) -> str:
    return asyncio.run(a.step())


def test_r10_3_a_configuration_nobody_recorded_is_applied_once_and_recorded(tmp_path: Path) -> None:
    kube, slurm = FakeKube(OLD), FakeSlurm()
    mount(tmp_path, OLD)
    a = applier(tmp_path, kube, slurm)
    step(a)
    assert "up to date" in step(a)
    assert kube.cm["metadata"]["annotations"][APPLIED_HASH] == config_hash(OLD)
    assert APPLIED_AT in kube.cm["metadata"]["annotations"]
    assert slurm.reconfigures == 1


def kubelet_wrote(directory: Path, at: float) -> None:
    """The kubelet's mark of a ConfigMap volume: the `..data` link, renamed in at `at`."""
    link = directory / "..data"
    link.symlink_to("..2026_11_28_02_24_10.000000001")
    os.utime(link, (at, at), follow_symlinks=False)


def new_install(tmp_path: Path, written_at: float) -> tuple[ConfigApplier, FakeKube, FakeSlurm]:
    """Nothing recorded yet; the kubelet wrote OLD at `written_at`; the sidecar began at 1005."""
    kube, slurm = FakeKube(OLD), FakeSlurm()
    mount(tmp_path, OLD)
    kubelet_wrote(tmp_path, at=written_at)
    a = ConfigApplier(kube, slurm, "plat", "slurm-config", tmp_path, "ctl-0", process_started=1005.0)
    return a, kube, slurm


def test_r10_3_files_the_pod_started_with_are_recorded_without_a_reconfigure(tmp_path: Path) -> None:
    """Catches the reconfigure in slurmctld's first seconds that wedged Slurm 24.11 on a
    fresh install: the files were there before slurmctld started, so it has read them."""
    a, kube, slurm = new_install(tmp_path, written_at=1000.0)
    assert step(a) == f"recorded {config_hash(OLD)}"
    assert slurm.reconfigures == 0
    assert kube.cm["metadata"]["annotations"][APPLIED_HASH] == config_hash(OLD)
    assert "was in place when slurmctld started" in kube.events[0]["note"]


def test_r10_3_files_the_kubelet_swapped_in_after_the_pod_started_are_applied_with_a_reconfigure(
    tmp_path: Path,
) -> None:
    """Catches a skip that trusts any unrecorded configuration: one written after slurmctld
    started (the ConfigMap replaced meanwhile) is news to it."""
    a, _, slurm = new_install(tmp_path, written_at=1010.0)
    assert step(a) == f"applied {config_hash(OLD)}"
    assert slurm.reconfigures == 1


def test_r10_3_a_change_the_kubelet_has_not_copied_yet_is_not_applied(tmp_path: Path) -> None:
    kube, slurm = old_applied_new_wanted()
    mount(tmp_path, OLD)
    assert "waiting for the kubelet" in step(applier(tmp_path, kube, slurm))
    assert slurm.reconfigures == 0
    assert kube.cm["metadata"]["annotations"][APPLIED_HASH] == config_hash(OLD)


def test_r10_3_a_copied_change_is_applied_with_one_reconfigure_and_its_hash_and_time_recorded(
    tmp_path: Path,
) -> None:
    kube, slurm = old_applied_new_wanted()
    mount(tmp_path, NEW)
    a = applier(tmp_path, kube, slurm)
    step(a)
    step(a)
    assert slurm.reconfigures == 1
    annotations = kube.cm["metadata"]["annotations"]
    assert annotations[APPLIED_HASH] == config_hash(NEW)
    assert annotations[APPLIED_AT].endswith("Z")
    assert kube.reasons() == ["ConfigurationApplied"]


def test_r10_3_a_change_dropping_a_partition_a_job_uses_is_held_naming_the_job_until_it_ends(
    tmp_path: Path,
) -> None:
    kube, slurm = old_applied_new_wanted()
    running(slurm, {41: "extra", 42: "main"})
    mount(tmp_path, NEW)
    a = applier(tmp_path, kube, slurm)
    assert "partition extra: jobs 41" in step(a)
    step(a)
    assert slurm.reconfigures == 0
    assert kube.reasons() == ["ConfigurationHeld"]
    assert "jobs 41 still use it" in kube.events[0]["note"]
    assert kube.cm["metadata"]["annotations"][HELD_HASH] == config_hash(NEW)
    running(slurm, {42: "main"})
    step(a)
    assert slurm.reconfigures == 1
    assert HELD_HASH not in kube.cm["metadata"]["annotations"]


def test_r10_3_a_failed_job_listing_applies_nothing(tmp_path: Path) -> None:
    kube, slurm = old_applied_new_wanted()
    slurm.fail("jobs")
    mount(tmp_path, NEW)
    assert "cannot list Slurm's jobs" in step(applier(tmp_path, kube, slurm))
    assert slurm.reconfigures == 0
    assert kube.cm["metadata"]["annotations"][APPLIED_HASH] == config_hash(OLD)


def test_r10_3_a_failed_reconfigure_is_reported_and_tried_again(tmp_path: Path) -> None:
    kube, slurm = old_applied_new_wanted()
    slurm.fail("reconfigure", SlurmUnavailable("slurmctld did not answer"))
    mount(tmp_path, NEW)
    a = applier(tmp_path, kube, slurm)
    step(a)
    assert kube.cm["metadata"]["annotations"][APPLIED_HASH] == config_hash(OLD)
    assert kube.reasons() == ["ReconfigureFailed"]
    step(a)
    assert slurm.reconfigures == 1
    assert kube.cm["metadata"]["annotations"][APPLIED_HASH] == config_hash(NEW)


def test_r10_3_an_unreadable_configmap_changes_nothing(tmp_path: Path) -> None:
    kube, slurm = old_applied_new_wanted()
    kube.unreadable = True
    mount(tmp_path, NEW)
    assert "cannot read ConfigMap" in step(applier(tmp_path, kube, slurm))
    assert slurm.reconfigures == 0


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ("PartitionName=DEFAULT MaxTime=1:00:00\nPartitionName=a Nodes=ALL\n", {"a"}),
        ("partitionname=b Nodes=ALL\n  PartitionName = c Default=YES\n", {"b", "c"}),
        ("# PartitionName=old\nNodeName=x\n", set()),
    ],
)
def test_r10_3_the_partitions_a_slurm_conf_declares(conf: str, expected: set[str]) -> None:
    assert partitions_in(conf) == expected


def test_r10_4_a_topology_plugin_is_not_applied_before_its_topology_conf_exists(tmp_path: Path) -> None:
    """slurmctld stops when its topology plugin finds no topology.conf."""
    tree = {"slurm.conf": OLD["slurm.conf"] + "TopologyPlugin=topology/tree\n"}
    kube, slurm = FakeKube(tree, {APPLIED_HASH: config_hash(OLD)}), FakeSlurm()
    mount(tmp_path, tree)
    a = applier(tmp_path, kube, slurm)
    assert "waits for the operator to write topology.conf" in step(a)
    assert slurm.reconfigures == 0
    written = {**tree, "topology.conf": "SwitchName=leaf-a Nodes=n1\n"}
    kube.cm["data"] = written
    mount(tmp_path, written)
    step(a)
    assert slurm.reconfigures == 1


# -- what Prometheus reads (issue #50: the configuration wanted against the one applied) ----


def metric(a: ConfigApplier, name: str) -> float:
    value = a.metrics.registry.get_sample_value(name)
    assert value is not None, name
    return value


def test_issue50_a_change_slurm_does_not_run_yet_is_dated_from_when_it_was_first_seen(tmp_path: Path) -> None:
    """Catches: a change waiting on the kubelet (or anything) looking applied, or its wait
    restarting on every pass, so an alert on a long wait would never fire."""
    kube, slurm = old_applied_new_wanted()
    mount(tmp_path, OLD)  # the kubelet has not copied NEW yet
    now = [1000.0]
    a = ConfigApplier(kube, slurm, "plat", "slurm-config", tmp_path, "ctl-0", clock=lambda: now[0])
    step(a)
    now[0] = 1060.0
    step(a)
    assert metric(a, "sunk_slurm_config_unapplied_since_timestamp_seconds") == 1000.0
    mount(tmp_path, NEW)
    now[0] = 1120.0
    step(a)
    assert metric(a, "sunk_slurm_config_unapplied_since_timestamp_seconds") == 0
    assert metric(a, "sunk_slurm_config_last_applied_timestamp_seconds") == 1120.0


def test_issue50_a_held_change_and_a_failed_reconfigure_are_counted(tmp_path: Path) -> None:
    """Catches: a change held for a running job, or slurmctld refusing to reconfigure,
    invisible to Prometheus."""
    kube, slurm = old_applied_new_wanted()
    mount(tmp_path, NEW)
    running(slurm, {7: "extra"})
    a = applier(tmp_path, kube, slurm)
    step(a)
    assert metric(a, "sunk_slurm_config_held") == 1
    running(slurm, {})
    slurm.fail("reconfigure", SlurmUnavailable("slurmctld did not answer"))
    step(a)
    assert metric(a, "sunk_slurm_config_held") == 0
    assert metric(a, "sunk_slurm_config_reconfigure_failures_total") == 1


class PodKube(FakeKube):
    """Records patches of the sidecar's Pod apart from the ConfigMap's."""

    def __init__(self, data: dict[str, str], annotations: dict[str, str] | None = None) -> None:
        super().__init__(data, annotations)
        self.pod_patches: list[tuple[str, Json]] = []
        self.pod_patch_fails = False

    async def patch_merge(self, path: str, patch: Json) -> Json:
        if "/pods/" not in path:
            return await super().patch_merge(path, patch)
        if self.pod_patch_fails:
            raise KubeError(403, "forbidden")
        self.pod_patches.append((path, patch))
        return {}


def test_issue55_a_change_the_kubelet_has_not_copied_makes_the_sidecar_nudge_its_pod_once(
    tmp_path: Path,
) -> None:
    """The kubelet rewrites a ConfigMap volume when it syncs the Pod, once a minute or more on
    its own; an annotation change makes it sync now."""
    kube = PodKube(NEW, {APPLIED_HASH: config_hash(OLD)})
    slurm = FakeSlurm()
    mount(tmp_path, OLD)
    a = ConfigApplier(kube, slurm, "plat", "slurm-config", tmp_path, "ctl-0", pod="slurm-controller-0")
    assert "waiting for the kubelet" in step(a)
    assert a.awaiting_copy
    wanted = {"metadata": {"annotations": {WANTED_HASH: config_hash(NEW)}}}
    assert kube.pod_patches == [("/api/v1/namespaces/plat/pods/slurm-controller-0", wanted)]
    step(a)
    assert len(kube.pod_patches) == 1  # once per configuration
    mount(tmp_path, NEW)
    assert step(a) == f"applied {config_hash(NEW)}"
    assert not a.awaiting_copy
    assert slurm.reconfigures == 1


def test_issue55_a_nudge_that_fails_is_tried_again_and_changes_nothing_else(tmp_path: Path) -> None:
    kube = PodKube(NEW, {APPLIED_HASH: config_hash(OLD)})
    mount(tmp_path, OLD)
    a = ConfigApplier(kube, FakeSlurm(), "plat", "slurm-config", tmp_path, "ctl-0", pod="slurm-controller-0")
    kube.pod_patch_fails = True
    assert "waiting for the kubelet" in step(a)
    kube.pod_patch_fails = False
    step(a)
    assert len(kube.pod_patches) == 1
    assert kube.cm["metadata"]["annotations"][APPLIED_HASH] == config_hash(OLD)


def test_issue55_without_its_pod_name_the_sidecar_waits_for_the_kubelet_as_before(tmp_path: Path) -> None:
    kube = PodKube(NEW, {APPLIED_HASH: config_hash(OLD)})
    mount(tmp_path, OLD)
    assert "waiting for the kubelet" in step(applier(tmp_path, kube, FakeSlurm()))
    assert kube.pod_patches == []


def test_issue55_an_up_to_date_configuration_nudges_nothing(tmp_path: Path) -> None:
    """Also catches the fast pace outliving its wait: the ConfigMap set back to what Slurm
    runs while the kubelet's copy was awaited."""
    kube = PodKube(OLD, {APPLIED_HASH: config_hash(OLD)})
    mount(tmp_path, OLD)
    a = ConfigApplier(kube, FakeSlurm(), "plat", "slurm-config", tmp_path, "ctl-0", pod="slurm-controller-0")
    a.awaiting_copy = True
    assert step(a) == "up to date"
    assert kube.pod_patches == []
    assert not a.awaiting_copy
