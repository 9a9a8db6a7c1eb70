"""Shared volumes on every slurmd Pod (issue #37): the chart's sharedVolumes reach the
operator as --shared-volumes, every member mounts each claim at its path over anything the
template put there, and a change to the list rolls the members the job-safe way."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest

from sunk.operator.nodeset import members as m
from sunk.operator.nodeset import shared_volumes
from sunk.operator.nodeset.shared_volumes import SharedVolume
from tests.fakes.operator_world import CONFIG, OperatorWorld

DATA = SharedVolume("slurm-data", "/shared")
HOMES = SharedVolume("homes", "/home", read_only=True)


def world(volumes: tuple[SharedVolume, ...] = (), template: dict[str, Any] | None = None) -> OperatorWorld:
    w = OperatorWorld(config=replace(CONFIG, shared_volumes=volumes))
    w.add_node("node-1", "10.64.1.11")
    w.add_nodeset("gpu", **({"template": template} if template else {}))
    return w


def test_r10_7_the_flag_names_claims_and_paths() -> None:
    assert shared_volumes.parse("slurm-data:/shared, homes:/home:ro") == (DATA, HOMES)
    assert shared_volumes.parse("") == ()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("slurm-data", "is not CLAIM:PATH"),
        ("Bad_Claim:/x", "is not a claim name"),
        ("data:relative", "is not an absolute directory"),
        ("data:/", "is not an absolute directory"),
        ("a:/x,b:/x", "two volumes are mounted at /x"),
        ("a:/x:rx", "is not CLAIM:PATH"),
    ],
)
def test_r10_7_a_malformed_flag_is_a_start_up_error_naming_the_item(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        shared_volumes.parse(text)


def test_r10_7_the_volume_name_is_the_same_in_every_process() -> None:
    """Catches a name from Python's salted hash(): each operator restart would change every
    member's spec and roll them all."""
    code = "from sunk.operator.nodeset.shared_volumes import SharedVolume as V; "
    code += "print(V('slurm-data', '/shared').volume_name)"
    names = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert names == {DATA.volume_name}


async def test_r10_7_every_member_mounts_each_shared_claim_at_its_path() -> None:
    w = world((DATA, HOMES))
    await w.settle("gpu")
    [pod] = w.members("gpu").values()
    [slurmd] = [c for c in pod["spec"]["containers"] if c["name"] == m.CONTAINER]
    claims = {
        v["persistentVolumeClaim"]["claimName"]: v
        for v in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert set(claims) == {"slurm-data", "homes"}
    assert claims["homes"]["persistentVolumeClaim"]["readOnly"] is True
    mounts = {mnt["mountPath"]: mnt for mnt in slurmd["volumeMounts"]}
    assert mounts["/shared"]["name"] == claims["slurm-data"]["name"] and not mounts["/shared"]["readOnly"]
    assert mounts["/home"]["readOnly"] is True


async def test_r10_7_a_template_mount_at_a_shared_path_is_replaced_not_doubled() -> None:
    """Catches two mounts at one path (the kubelet refuses such a Pod: no member starts)."""
    template = {
        "spec": {
            "containers": [{"name": "slurmd", "volumeMounts": [{"name": "mine", "mountPath": "/shared"}]}],
            "volumes": [{"name": "mine", "emptyDir": {}}],
        }
    }
    w = world((DATA,), template)
    await w.settle("gpu")
    [pod] = w.members("gpu").values()
    [slurmd] = [c for c in pod["spec"]["containers"] if c["name"] == m.CONTAINER]
    assert [mnt["name"] for mnt in slurmd["volumeMounts"] if mnt["mountPath"] == "/shared"] == [
        DATA.volume_name
    ]


async def test_r10_7_members_made_before_a_shared_volume_was_added_are_rolled_out() -> None:
    before = world()
    await before.settle("gpu")
    after = before.restarted_with(replace(before.config, shared_volumes=(DATA,)))
    await after.reconcile("gpu")
    assert after.condition("gpu", "UpToDate")["reason"] == "RollingOut"
