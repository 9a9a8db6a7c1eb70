"""Issue #38: a NodeSet's template may not reach into its Nodes (privileged, hostPath, host
namespaces, extra capabilities) unless the operator was told to allow it. Issue #52: nor
by a sidecar's capabilities or an Unconfined profile; and never to a credential, or to a
program of its own beside slurm.key."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sunk.operator.nodeset.spec import Invalid, NodeSet, parse
from tests.fakes.operator_world import CONFIG, OperatorWorld, nodeset

IMAGE = "slurmd:24.11"


def template(**spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "slurmd"}], **spec}}


def slurmd(security: dict[str, Any]) -> dict[str, Any]:
    return template(containers=[{"name": "slurmd", "securityContext": security}])


def sidecar(**container: Any) -> dict[str, Any]:
    return template(containers=[{"name": "slurmd"}, {"name": "sidecar", "image": "busybox", **container}])


def annotated(key: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {key: "unconfined"}}, **template()}


REACHING = [
    pytest.param(template(hostNetwork=True), "spec.template.spec.hostNetwork", id="host_network"),
    pytest.param(template(hostPID=True), "spec.template.spec.hostPID", id="host_pids"),
    pytest.param(template(hostIPC=True), "spec.template.spec.hostIPC", id="host_ipc"),
    pytest.param(
        template(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        "spec.template.spec.volumes[0] (root): a hostPath volume",
        id="host_path",
    ),
    pytest.param(
        slurmd({"privileged": True}),
        "spec.template.spec.containers[0].securityContext.privileged",
        id="privileged",
    ),
    pytest.param(
        slurmd({"capabilities": {"add": ["CAP_SYS_PTRACE", "NET_ADMIN"]}}),
        "spec.template.spec.containers[0].securityContext.capabilities.add: NET_ADMIN, SYS_PTRACE",
        id="extra_capabilities",
    ),
    pytest.param(
        template(initContainers=[{"name": "setup", "securityContext": {"privileged": True}}]),
        "spec.template.spec.initContainers[0].securityContext.privileged",
        id="a_privileged_init_container",
    ),
    # Issue #52: confinement's capabilities belong to the slurmd container alone.
    pytest.param(
        sidecar(securityContext={"capabilities": {"add": ["CAP_SYS_ADMIN"]}}),
        "spec.template.spec.containers[1].securityContext.capabilities.add: SYS_ADMIN",
        id="sys_admin_in_a_sidecar",
    ),
    pytest.param(
        template(
            initContainers=[{"name": "slurmd", "securityContext": {"capabilities": {"add": ["SYS_NICE"]}}}]
        ),
        "spec.template.spec.initContainers[0].securityContext.capabilities.add: SYS_NICE",
        id="sys_nice_in_an_init_container_named_slurmd",
    ),
    # Issue #52: a profile turned off, for the Pod, slurmd or a sidecar, by field or annotation.
    pytest.param(
        template(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        "spec.template.spec.securityContext.seccompProfile.type: Unconfined",
        id="the_pods_seccomp_unconfined",
    ),
    pytest.param(
        slurmd({"seccompProfile": {"type": "Unconfined"}}),
        "spec.template.spec.containers[0].securityContext.seccompProfile.type: Unconfined",
        id="slurmds_seccomp_unconfined",
    ),
    pytest.param(
        sidecar(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
        "spec.template.spec.containers[1].securityContext.appArmorProfile.type: Unconfined",
        id="a_sidecars_apparmor_unconfined",
    ),
    pytest.param(
        template(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
        "spec.template.spec.securityContext.appArmorProfile.type: Unconfined",
        id="the_pods_apparmor_unconfined",
    ),
    pytest.param(
        annotated("container.apparmor.security.beta.kubernetes.io/sidecar"),
        "spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/sidecar]",
        id="apparmor_unconfined_by_annotation",
    ),
    pytest.param(
        annotated("seccomp.security.alpha.kubernetes.io/pod"),
        "spec.template.metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]",
        id="seccomp_unconfined_by_annotation",
    ),
    pytest.param(
        sidecar(securityContext={"procMount": "Unmasked"}),
        "spec.template.spec.containers[1].securityContext.procMount: Unmasked",
        id="an_unmasked_proc",
    ),
]


@pytest.mark.parametrize(("given", "named"), REACHING)
def test_issue38_a_template_reaching_into_its_nodes_is_refused_naming_the_field(
    given: dict[str, Any], named: str
) -> None:
    """Catches a NodeSet editor getting root on chosen Nodes: with confinement the namespace
    must allow privileged Pods, so nothing else would stop the template."""
    parsed = parse(nodeset("a", template=given), IMAGE)
    assert isinstance(parsed, Invalid)
    [problem] = parsed.problems
    assert problem.startswith(named) and "--allow-host-access=true" in problem


@pytest.mark.parametrize(("given", "named"), REACHING)
def test_issue38_the_administrator_may_allow_it(given: dict[str, Any], named: str) -> None:
    assert isinstance(parse(nodeset("a", template=given), IMAGE, allow_host_access=True), NodeSet)


def test_issue38_the_runtimes_default_capabilities_and_confinements_own_are_allowed() -> None:
    given = slurmd(
        {"capabilities": {"add": ["CAP_SYS_ADMIN", "SYS_NICE", "NET_BIND_SERVICE"], "drop": ["ALL"]}}
    )
    assert isinstance(parse(nodeset("a", template=given), IMAGE), NodeSet)


async def test_issue38_a_refused_template_gets_no_member_and_says_why_in_its_condition() -> None:
    world = OperatorWorld()
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a", template=template(hostPID=True))
    await world.reconcile("a")
    assert world.members() == {}
    assert "spec.template.spec.hostPID" in world.condition("a", "Valid")["message"]


async def test_issue38_with_host_access_allowed_the_member_gets_what_its_template_asks() -> None:
    world = OperatorWorld(config=dataclasses.replace(CONFIG, allow_host_access=True))
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a", template=template(hostPID=True))
    await world.reconcile("a")
    [pod] = world.members().values()
    assert pod["spec"]["hostPID"] is True


# Issue #52: what would put a credential in a member, or a program of the template's own
# beside slurm.key. Never lifted, not even by allowHostAccess.
REACHING_FOR_KEYS = [
    pytest.param(
        template(volumes=[{"name": "jwt", "secret": {"secretName": "slurm-jwt"}}]),
        "spec.template.spec.volumes[0] (jwt): a Secret volume",
        id="a_secret_volume",
    ),
    pytest.param(
        template(volumes=[{"name": "p", "projected": {"sources": [{"secret": {"name": "slurm-auth"}}]}}]),
        "spec.template.spec.volumes[0] (p): a projected secret",
        id="a_projected_secret",
    ),
    pytest.param(
        template(volumes=[{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]),
        "spec.template.spec.volumes[0] (t): a projected serviceAccountToken",
        id="a_projected_token",
    ),
    pytest.param(
        template(automountServiceAccountToken=True),
        "spec.template.spec.automountServiceAccountToken: true",
        id="the_service_account_token",
    ),
    pytest.param(
        sidecar(
            env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": "slurm-auth", "key": "slurm.key"}}}]
        ),
        "spec.template.spec.containers[1].env[0] (K): from a Secret",
        id="env_from_a_secret_key",
    ),
    pytest.param(
        sidecar(envFrom=[{"secretRef": {"name": "slurm-jwt"}}]),
        "spec.template.spec.containers[1].envFrom[0]: a Secret",
        id="env_from_a_whole_secret",
    ),
    pytest.param(
        sidecar(volumeMounts=[{"name": "slurm-key", "mountPath": "/k"}]),
        "spec.template.spec.containers[1].volumeMounts[0]: slurm-key (slurmd's alone)",
        id="a_sidecar_mounting_the_key",
    ),
    pytest.param(
        template(containers=[{"name": "slurmd", "command": ["sh", "-c", "cat /etc/slurm/slurm.key"]}]),
        "spec.template.spec.containers[0].command",
        id="slurmds_command",
    ),
    pytest.param(
        template(containers=[{"name": "slurmd", "livenessProbe": {"exec": {"command": ["sh"]}}}]),
        "spec.template.spec.containers[0].livenessProbe.exec",
        id="an_exec_probe_in_slurmd",
    ),
]


@pytest.mark.parametrize("allow_host_access", [False, True])
@pytest.mark.parametrize(("given", "named"), REACHING_FOR_KEYS)
def test_issue52_a_template_reaching_for_a_credential_is_refused_even_with_host_access(
    given: dict[str, Any], named: str, allow_host_access: bool
) -> None:
    """Catches a NodeSet (or a stolen operator token patching one) that reads slurm.key from a
    sidecar of any image, mounts another Secret of the release's namespace (the JWT key: a
    root token), takes a ServiceAccount's token, or runs its own command where the key is."""
    parsed = parse(nodeset("a", template=given), IMAGE, allow_host_access=allow_host_access)
    assert isinstance(parsed, Invalid)
    [problem] = parsed.problems
    assert problem.startswith(named) and "a member holds no credential but slurm.key" in problem


def test_issue52_a_sidecar_may_keep_the_runtimes_defaults_and_a_chosen_profile() -> None:
    """What an administrator's template legitimately holds: a sidecar with the runtime's
    capabilities and a Localhost profile, the Pod under RuntimeDefault, an exec probe in a
    sidecar, ConfigMaps and claims."""
    given = sidecar(
        securityContext={
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "seccompProfile": {"type": "Localhost", "localhostProfile": "sidecar.json"},
            "appArmorProfile": {"type": "RuntimeDefault"},
        },
        livenessProbe={"exec": {"command": ["true"]}},
        volumeMounts=[{"name": "conf", "mountPath": "/conf"}],
    )
    given["spec"] |= {
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "volumes": [{"name": "conf", "configMap": {"name": "c"}}, {"name": "scratch", "emptyDir": {}}],
    }
    assert isinstance(parse(nodeset("a", template=given), IMAGE), NodeSet)


@pytest.mark.parametrize(
    ("image", "allowed", "ok"),
    [
        ("slurmd:26.05", (), True),  # another tag of the default's repository: an upgrade
        ("slurmd@sha256:" + "0" * 64, (), True),
        ("evil.example/slurmd:24.11", (), False),
        ("slurmd-mine:1", (), False),
        ("registry:5000/slurmd-cuda:24.11", ("registry:5000/slurmd-cuda",), True),
        ("registry:5000/slurmd-cuda:24.11", ("registry:5000/slurmd-cuda:24.11",), True),
        ("registry:5000/slurmd-cuda:25.05", ("registry:5000/slurmd-cuda:24.11",), False),
    ],
)
def test_issue52_a_slurmd_image_must_be_one_the_administrator_allowed(
    image: str, allowed: tuple[str, ...], ok: bool
) -> None:
    """Catches a NodeSet naming an image of its own choosing for slurmd, which would run it
    with slurm.key mounted: root in Slurm on every node."""
    parsed = parse(nodeset("a", image=image), IMAGE, allowed_images=allowed)
    if ok:
        assert isinstance(parsed, NodeSet)
    else:
        assert isinstance(parsed, Invalid)
        [problem] = parsed.problems
        assert problem.startswith(f"spec.image: {image!r} is not an image the administrator allowed")


async def test_issue52_an_allowed_sidecar_gets_no_capability_of_confinements_and_no_key() -> None:
    """The members the operator makes from a template with a sidecar: confinement's
    capabilities, the unconfined AppArmor profile and slurm.key go to the slurmd container only."""
    world = OperatorWorld(config=dataclasses.replace(CONFIG, confinement=True))
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a", template=sidecar(securityContext={"capabilities": {"drop": ["ALL"]}}))
    await world.reconcile("a")
    [pod] = world.members().values()
    slurmd, side = pod["spec"]["containers"]
    assert slurmd["name"] == "slurmd" and side["name"] == "sidecar"
    assert side["securityContext"] == {"capabilities": {"drop": ["ALL"]}}
    assert "volumeMounts" not in side
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["spec"]["automountServiceAccountToken"] is False
