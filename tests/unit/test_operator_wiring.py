"""The operator's flags reach its NodeSet controller (issue #54): the app and the tests'
world build the controller with one factory (`app.build_controller`) from an
`OperatorConfig`, so a flag the app parses but does not pass on fails here, not on a cluster."""

from __future__ import annotations

import argparse
import dataclasses

from sunk.operator.app import member_settings
from sunk.operator.config import OperatorConfig, add_arguments, from_args
from sunk.operator.nodeset import confinement
from sunk.operator.nodeset import members as m
from tests.fakes.operator_world import NAMESPACE, OperatorWorld

# Every flag a member depends on, each away from its default.
FLAGS = [
    f"--namespace={NAMESPACE}",
    "--release=r1",
    "--slurm-api-base=http://r1-restapi:6820",
    "--slurm-jwt-key-file=/nonexistent/jwt_hs256.key",
    "--conf-server=r1-controller.slurm.svc.cluster.local:6817",
    "--auth-secret=r1-auth",
    "--slurmd-image=registry.example/slurmd:25.05",
    "--allowed-slurmd-images=registry.example/gpu-slurmd",
    "--poll-interval=30s",
    "--topology=tree",
    "--topology-labels=example.com/leaf,example.com/spine",
    "--slurm-configmap=r1-slurm",
    "--confinement=cgroup",
    "--private-tmp=true",
    "--hosts-domain=r1-hosts.slurm.svc.cluster.local",
    "--allow-host-access=true",
    "--shared-volumes=r1-home:/home,r1-data:/data:ro",
    "--directory-uri=ldaps://ldap.example:636",
    "--directory-bind-dn=cn=reader,dc=example",
    "--directory-password-file=/nonexistent/password",
    "--directory-user-base=ou=people,dc=example",
    "--directory-group-base=ou=groups,dc=example",
    "--people-configmap=r1-people",
    "--services-configmap=r1-services",
    "--services-digest=digest-1",
    "--health-checks-configmap=r1-health-checks",
    "--health-check-scripts-configmap=r1-site-checks",
    "--node-conditions=KernelDeadlock",
    "--health-replace-after=30m",
    "--health-replace-max-unavailable=2",
]


def operator_config(*flags: str) -> OperatorConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_args(parser.parse_args(list(flags)))


def test_issue54_every_flag_a_member_depends_on_reaches_the_controller() -> None:
    """Catches the app parsing a flag and building its controller without it (a member
    setting left at its default, the default image, or the age past which a listing of
    Slurm is stale)."""
    config = operator_config(*FLAGS)
    controller = OperatorWorld(config=config).controller
    for field in dataclasses.fields(m.Settings):
        given = getattr(controller.settings, field.name)
        assert given == getattr(config, field.name), field.name
        assert given != field.default, f"FLAGS leave {field.name} at its default: the test sees nothing"
    assert controller.default_image == "registry.example/slurmd:25.05"
    assert controller.stale_s == 180.0  # six polls of 30s


async def test_issue54_the_flags_shape_the_members_the_world_makes() -> None:
    """Catches the same through a member Pod: the flags' checks, people and confinement are
    in the Pod the controller creates."""
    world = OperatorWorld(config=operator_config(*FLAGS))
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a")
    await world.reconcile("a")
    [pod] = world.members("a").values()
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["people"]["configMap"] == {"name": "r1-people"}
    assert any((v.get("configMap") or {}).get("name") == "r1-health-checks" for v in volumes.values())
    [slurmd] = [c for c in pod["spec"]["containers"] if c["name"] == m.CONTAINER]
    assert slurmd["image"] == "registry.example/slurmd:25.05"
    assert f'State=DRAIN Reason="{m.FIRST_CHECK_REASON}"' in " ".join(slurmd["args"])
    assert slurmd["args"][:4] == ["sh", "-c", confinement.PREFLIGHT, "preflight"]
    assert confinement.ORDERED_NAMESPACE in slurmd["args"]  # --private-tmp


def test_issue54_without_a_directory_members_mount_no_people() -> None:
    """Catches mounting the people ConfigMap every start names (`<release>-people` by
    default) when no directory fills it."""
    without = [f for f in FLAGS if not f.startswith("--directory-")]
    config = operator_config(*without)
    assert config.people_configmap == "r1-people"
    assert member_settings(config).people_configmap == ""
    assert OperatorWorld(config=config).settings.people_configmap == ""
