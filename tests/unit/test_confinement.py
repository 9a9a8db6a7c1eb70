"""Issue #36: what the operator gives a slurmd container for job confinement, and how a
Node that cannot give it is reported (NodeSet condition and Event naming the Node)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from sunk.operator.nodeset import confinement as c
from sunk.operator.nodeset import removal as r
from sunk.operator.nodeset.spec import DrainPolicy
from tests.fakes.operator_world import CONFIG, OperatorWorld
from tests.unit.test_people import operator_config


def confined_world() -> OperatorWorld:
    world = OperatorWorld(config=dataclasses.replace(CONFIG, confinement=True))
    world.add_node("node-1", "10.64.1.11", labels={"pool": "gpu"})
    world.add_nodeset("a")
    return world


async def test_issue36_a_confining_member_gets_sys_admin_and_the_preflight_not_privilege() -> None:
    """Catches a member made privileged (every device and capability of the host) or one
    whose slurmd starts before its cgroup mounts were made writable."""
    world = confined_world()
    await world.reconcile("a")
    [pod] = world.members().values()
    [slurmd] = pod["spec"]["containers"]
    security = slurmd["securityContext"]
    assert security == {
        "capabilities": {"add": ["SYS_ADMIN", "SYS_NICE"]},
        "appArmorProfile": {"type": "Unconfined"},
    }
    assert slurmd["args"][:4] == ["sh", "-c", c.PREFLIGHT, "preflight"]
    # The check runs once, before the supervisor and slurmd: a refusal ends the container.
    assert slurmd["args"][4:11] == ["sunk-services", "slurmd", "slurmd", "-D", "-Z", "-N", "a-001-011"]


async def test_issue36_without_confinement_the_member_is_as_before() -> None:
    world = OperatorWorld()
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a")
    await world.reconcile("a")
    [pod] = world.members().values()
    assert "securityContext" not in pod["spec"]["containers"][0]
    assert pod["spec"]["containers"][0]["args"][:3] == ["sunk-services", "slurmd", "slurmd"]


async def test_issue36_with_private_tmp_slurmd_starts_after_the_preflight_in_an_ordered_namespace() -> None:
    """Catches a member whose slurmd starts in the container's own mount namespace, where on
    Linux 6.18 and later jobs started on some CPUs cannot have their namespace pinned (and
    fail to boot), or one that looks for that namespace before the cgroups are checked."""
    world = OperatorWorld(config=dataclasses.replace(CONFIG, confinement=True, private_tmp=True))
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a")
    await world.reconcile("a")
    [pod] = world.members().values()
    args = pod["spec"]["containers"][0]["args"]
    assert args[:4] == ["sh", "-c", c.PREFLIGHT, "preflight"]
    assert args[4:9] == ["sh", "-c", c.BOOT, "ordered", c.ORDERED_NAMESPACE]
    assert args[9:11] == ["sunk-services", "slurmd"]


async def test_issue36_turning_private_tmp_on_rolls_the_members_out() -> None:
    """Catches members left with slurmd in an unordered namespace after private /tmp was
    turned on (slurmd loads job_container/tmpfs only at start)."""
    world = confined_world()
    await world.settle("a")
    on = world.restarted_with(dataclasses.replace(world.config, private_tmp=True))
    await on.reconcile("a")
    assert on.condition("a", "UpToDate")["reason"] == "RollingOut"


def test_issue36_a_template_that_asks_for_privileged_keeps_it_and_gets_no_extra_capability() -> None:
    container = {"args": ["slurmd"], "securityContext": {"privileged": True}}
    c.confine(container)
    assert container["securityContext"] == {"privileged": True}


async def test_issue36_a_node_that_refuses_confinement_is_named_in_a_condition_and_an_event() -> None:
    """Catches a member whose preflight failed being shown only as a crash loop (or not at
    all): the NodeSet says which Node cannot confine jobs and why."""
    world = confined_world()
    await world.reconcile("a")
    assert world.condition("a", c.CONFINED)["status"] == "True"
    [pod] = world.members().values()
    said = "confinement unavailable: /sys/fs/cgroup/memory is read-only and could not be remounted"
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "slurmd",
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                "lastState": {"terminated": {"exitCode": 3, "message": said + "\n"}},
            }
        ],
    }
    await world.reconcile("a")
    confined = world.condition("a", c.CONFINED)
    assert (confined["status"], confined["reason"]) == ("False", c.CONFINEMENT_UNAVAILABLE)
    assert confined["message"].startswith(
        "Node node-1 (member a-001-011): /sys/fs/cgroup/memory is read-only"
    )
    [note] = world.kube.notes(c.CONFINEMENT_UNAVAILABLE)
    assert "node-1" in note
    await world.reconcile("a")
    assert len(world.kube.notes(c.CONFINEMENT_UNAVAILABLE)) == 1  # told once


def test_issue36_the_preflight_stops_with_its_reason_when_cgroups_cannot_be_made_writable(
    tmp_path: Path,
) -> None:
    """The preflight as a shell script, on a cgroup tree it may not write to and cannot
    remount: it must not start slurmd, and must say why in the termination message."""
    script = c.PREFLIGHT.replace("/dev/termination-log", str(tmp_path / "said")).replace(
        "cg=/sys/fs/cgroup", f"cg={tmp_path / 'cg'}"
    )
    (tmp_path / "cg" / "cpuset").mkdir(parents=True)
    (tmp_path / "mount").write_text("#!/bin/sh\necho 'permission denied' >&2\nexit 32\n")
    (tmp_path / "mount").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    done = subprocess.run(
        ["sh", "-c", script, "preflight", "echo", "slurmd started"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 3 and "slurmd started" not in done.stdout
    said = (tmp_path / "said").read_text()
    assert said.startswith("confinement unavailable: the cgroup v1 controller memory is not mounted")
    for controller in ("memory", "devices", "freezer", "cpuacct"):
        (tmp_path / "cg" / controller).mkdir()
    started = subprocess.run(
        ["sh", "-c", script, "preflight", "echo", "slurmd started"], capture_output=True, text=True, env=env
    )
    assert started.returncode == 0 and started.stdout == "slurmd started\n"  # writable: slurmd runs


def test_issue36_a_refused_member_goes_at_once_when_it_must_leave() -> None:
    """Catches a refused member (phase Running through its crash loop, never in Slurm) kept
    for ever "until Slurm lists it", so its NodeSet's deletion and the uninstall never end."""
    pod = {
        "metadata": {"name": "a-001-011", "uid": "u1"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "slurmd",
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 3, "message": "confinement unavailable: no"}},
                }
            ],
        },
    }
    leaving = r.Leaving(pod, "a-001-011", "node-1", r.DELETED)
    step = r.step("a", leaving, None, (), DrainPolicy(), 0, listed_after_write=True)
    assert [type(a).__name__ for a in step.actions] == ["DeletePod"], step
    pod["status"]["containerStatuses"] = []  # a member still starting: kept until it registers
    kept = r.step("a", leaving, None, (), DrainPolicy(), 0, listed_after_write=True)
    assert kept.actions == [] and "kept until it does" in kept.message


async def test_issue38_a_confined_member_runs_under_the_runtimes_default_seccomp_profile() -> None:
    """Catches a member made without a seccomp profile. RuntimeDefault still lets a container
    holding CAP_SYS_ADMIN mount and unshare, which confinement needs."""
    world = confined_world()
    await world.reconcile("a")
    [pod] = world.members().values()
    assert pod["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN", "SYS_NICE"]


async def test_issue52_no_container_of_a_member_goes_without_seccomp_container_steps_or_not() -> None:
    """Catches a member whose slurmd (or sidecar) runs Unconfined: container steps once needed
    it for crun's pivot_root, which RuntimeDefault refuses; the runtime now does without it
    (--no-pivot), so every container keeps the Pod's RuntimeDefault."""
    world = OperatorWorld(config=dataclasses.replace(CONFIG, confinement=True))
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a", template={"spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}})
    await world.reconcile("a")
    [pod] = world.members().values()
    assert pod["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert [c["name"] for c in pod["spec"]["containers"]] == ["slurmd", "sidecar"]
    for container in pod["spec"]["containers"]:
        assert "seccompProfile" not in container.get("securityContext", {}), container["name"]


async def test_issue38_a_templates_own_pod_security_context_is_kept() -> None:
    """A NodeSet that chose a profile (a Localhost one, say) or other Pod settings keeps them."""
    world = OperatorWorld()
    world.add_node("node-1", "10.64.1.11")
    chosen = {"fsGroup": 5, "seccompProfile": {"type": "Localhost", "localhostProfile": "slurmd.json"}}
    world.add_nodeset("a", template={"spec": {"securityContext": dict(chosen)}})
    await world.reconcile("a")
    [pod] = world.members().values()
    assert pod["spec"]["securityContext"] == chosen


async def test_issue36_turning_confinement_off_or_on_rolls_the_members_out() -> None:
    """Catches members left running with the plugins and capabilities of the old setting
    (slurmd reads its plugins at start), which the docs once told operators to fix by
    deleting each Pod by hand."""
    world = confined_world()
    await world.settle("a")
    off = world.restarted_with(dataclasses.replace(world.config, confinement=False))
    await off.reconcile("a")
    assert off.condition("a", "UpToDate")["reason"] == "RollingOut"
    await off.settle("a")
    on = off.restarted_with(dataclasses.replace(off.config, confinement=True))
    await on.reconcile("a")
    assert on.condition("a", "UpToDate")["reason"] == "RollingOut"


def test_issue36_private_tmp_without_confinement_stops_the_operator_naming_both_flags() -> None:
    """Catches an operator that starts with a private /tmp asked for but no confinement
    (slurm.conf would lack job_container/tmpfs while slurmd moved for it), or that drops
    the flag silently."""
    assert operator_config("--confinement=cgroup", "--private-tmp=true").private_tmp
    assert not operator_config("--confinement=cgroup").private_tmp
    with pytest.raises(ValueError, match="--private-tmp=true needs --confinement=cgroup"):
        operator_config("--confinement=off", "--private-tmp=true")
