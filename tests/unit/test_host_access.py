"""Issue #38: a NodeSet's template may not reach into its Nodes (privileged, hostPath, host
namespaces, extra capabilities) unless the operator was told to allow it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sunk.operator.nodeset import Invalid, NodeSet, parse
from sunk.testing.operator import SETTINGS, OperatorWorld, nodeset

IMAGE = "slurmd:24.11"


def template(**spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "slurmd"}], **spec}}


def slurmd(security: dict[str, Any]) -> dict[str, Any]:
    return template(containers=[{"name": "slurmd", "securityContext": security}])


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
    world = OperatorWorld(settings=dataclasses.replace(SETTINGS, allow_host_access=True))
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("a", template=template(hostPID=True))
    await world.reconcile("a")
    [pod] = world.members().values()
    assert pod["spec"]["hostPID"] is True
