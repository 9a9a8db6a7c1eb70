"""slurmd Pods run slurmd under s6 beside the operator's own services (issue #35 point 4):
the supervisor wraps slurmd, the chart's services ConfigMap is mounted where the image's
sunk-services reads it, and a change to those services rolls the members the job-safe way."""

from __future__ import annotations

from dataclasses import replace

from sunk.operator.nodeset import members as m
from tests.fakes.operator_world import CONFIG, OperatorWorld


def world(configmap: str = "", digest: str = "") -> OperatorWorld:
    w = OperatorWorld(config=replace(CONFIG, services_configmap=configmap, services_digest=digest))
    w.add_node("node-1", "10.64.1.11")
    w.add_nodeset("gpu")
    return w


def slurmd_of(w: OperatorWorld) -> dict:  # type: ignore[type-arg]
    [pod] = w.members("gpu").values()
    [slurmd] = [c for c in pod["spec"]["containers"] if c["name"] == m.CONTAINER]
    return slurmd  # type: ignore[no-any-return]


async def test_issue35_slurmd_runs_under_the_supervisor_as_its_main_service() -> None:
    w = world()
    await w.settle("gpu")
    assert slurmd_of(w)["args"][:4] == ["sunk-services", "slurmd", "slurmd", "-D"]


async def test_issue35_the_operators_services_are_mounted_read_only_where_sunk_services_reads_them() -> None:
    w = world("slurm-slurmd-services", "abc")
    await w.settle("gpu")
    mount = {"name": "sunk-services", "mountPath": "/etc/sunk/services", "readOnly": True}
    assert mount in slurmd_of(w)["volumeMounts"]
    [pod] = w.members("gpu").values()
    assert {"name": "sunk-services", "configMap": {"name": "slurm-slurmd-services"}} in pod["spec"]["volumes"]


async def test_issue35_a_template_volume_of_another_name_is_kept_beside_the_services() -> None:
    w = world("slurm-slurmd-services", "abc")
    w.spec("gpu")["template"] = {
        "spec": {
            "containers": [{"name": "slurmd", "volumeMounts": [{"name": "services", "mountPath": "/srv"}]}],
            "volumes": [{"name": "services", "emptyDir": {}}],
        }
    }
    await w.settle("gpu")
    names = [v["name"] for v in w.members("gpu").popitem()[1]["spec"]["volumes"]]
    assert "services" in names and "sunk-services" in names


async def test_issue35_without_services_members_mount_none() -> None:
    plain = world()
    await plain.settle("gpu")
    assert [mt for mt in slurmd_of(plain)["volumeMounts"] if mt["name"] == "sunk-services"] == []


async def test_issue35_changed_services_roll_the_members_out() -> None:
    before = world("slurm-slurmd-services", "digest-1")
    await before.settle("gpu")
    after = before.restarted_with(replace(before.config, services_digest="digest-2"))
    await after.reconcile("gpu")
    assert after.condition("gpu", "UpToDate")["reason"] == "RollingOut"


async def test_issue35_the_same_services_after_an_operator_restart_roll_nothing() -> None:
    before = world("slurm-slurmd-services", "digest-1")
    await before.settle("gpu")
    after = before.restarted_with(before.config)
    await after.reconcile("gpu")
    assert after.condition("gpu", "UpToDate")["status"] == "True"
