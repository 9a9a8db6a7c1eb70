"""slurmd Pods and the directory's people (R10.6): with a directory, every member mounts
the people ConfigMap where the images' name service reads it, and members made before the
directory was set are replaced through the roll-out, the job-safe way."""

from __future__ import annotations

from sunk.operator.nodeset import members as m
from tests.fakes.operator_world import CONFIG, OperatorWorld, with_people


def world(people: str = "") -> OperatorWorld:
    w = OperatorWorld(config=with_people(CONFIG, people) if people else CONFIG)
    w.add_node("node-1", "10.64.1.11")
    w.add_nodeset("gpu")
    return w


async def test_r10_6_with_a_directory_every_member_mounts_the_people() -> None:
    w = world("slurm-people")
    await w.settle("gpu")
    [pod] = w.members("gpu").values()
    [slurmd] = [c for c in pod["spec"]["containers"] if c["name"] == m.CONTAINER]
    assert {"name": "people", "mountPath": "/var/lib/extrausers", "readOnly": True} in slurmd["volumeMounts"]
    assert {"name": "people", "configMap": {"name": "slurm-people"}} in pod["spec"]["volumes"]


async def test_r10_6_without_a_directory_members_mount_no_people() -> None:
    w = world()
    await w.settle("gpu")
    [pod] = w.members("gpu").values()
    assert [v for v in pod["spec"]["volumes"] if v["name"] == "people"] == []


async def test_r10_6_members_made_before_the_directory_was_set_are_rolled_out() -> None:
    before = world()
    await before.settle("gpu")
    after = before.restarted_with(with_people(before.config, "slurm-people"))
    await after.reconcile("gpu")
    assert after.condition("gpu", "UpToDate")["reason"] == "RollingOut"


async def test_issue35_an_unreadable_directory_is_named_in_the_nodesets_condition() -> None:
    w = world("slurm-people")
    w.directory_problem = "the directory refused the bind as cn=reader: invalid credentials"
    await w.settle("gpu")
    condition = w.condition("gpu", "DirectoryRead")
    assert (condition["status"], condition["reason"]) == ("False", "DirectoryUnreadable")
    assert condition["message"].startswith("the directory refused the bind as cn=reader: invalid credentials")
    w.directory_problem = None
    await w.reconcile("gpu")
    assert w.condition("gpu", "DirectoryRead")["status"] == "True"


async def test_issue35_without_a_directory_there_is_no_directory_condition() -> None:
    w = world()
    await w.settle("gpu")
    assert "DirectoryRead" not in [c["type"] for c in w.status("gpu")["conditions"]]
