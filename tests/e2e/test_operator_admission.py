"""Issue #38, point 3, for the operator: its Role lets it create, patch and delete any Pod of
the release's namespace; the chart's admission policy, enforced by the real API server,
narrows that to its NodeSets' members, their busy label, and (without allowHostAccess) no
member that uses the host. Issue #52: nor one holding another Secret, a token, a sidecar's
capabilities or profiles beyond the runtime's, or slurmd from an image not allowed."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sunk.operator.nodeset.shared_volumes import SharedVolume
from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from tests.chart.conftest import SLURM_CHART, build_chart_dependencies, render_chart
from tests.e2e.test_chart_rbac import account_token, apply, collection, refusal
from tests.fakes.operator_world import CONFIG, OperatorWorld, with_people
from tests.support import wait_for

pytestmark = pytest.mark.e2e
POLICY = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
KEPT = ("ServiceAccount", "Role", "RoleBinding", *POLICY)


@pytest.fixture
def operator_account(
    helm: Path, kube: AdminKube, dev_cluster: DevCluster, namespace: str
) -> Iterator[AdminKube]:
    """The API server as the chart's operator account sees it, with the chart's Role and policy."""
    yield from chart_account(
        helm, kube, dev_cluster, namespace, "r1-operator", (f"{namespace}-r1-operator", "r1-operator")
    )


def chart_account(
    helm: Path,
    kube: AdminKube,
    dev_cluster: DevCluster,
    namespace: str,
    account: str,
    prefixes: tuple[str, ...],
) -> Iterator[AdminKube]:
    """The chart's account `account` with its Role and policy applied (objects whose names
    start with one of `prefixes`), as the API server sees it; the policies go afterwards."""
    build_chart_dependencies(helm, SLURM_CHART)
    objects = render_chart(helm, SLURM_CHART, namespace=namespace, release="r1")
    mine = [o for o in objects if o["kind"] in KEPT and o["metadata"]["name"].startswith(prefixes)]
    assert {o["kind"] for o in mine} == set(KEPT)
    apply(kube, mine)
    client = AdminKube(dev_cluster.layout, token=account_token(kube, namespace, account))
    yield client
    client.close()
    for obj in mine:
        if obj["kind"] in POLICY:
            kube.delete(f"{collection(obj)}/{obj['metadata']['name']}")


def member(name: str, *, owned: bool = True, **spec: Any) -> dict[str, Any]:
    owner = {
        "apiVersion": "sunk.coreweave.com/v1alpha1",
        "kind": "NodeSet",
        "name": "compute",
        "uid": "00000000-0000-0000-0000-000000000001",
        "controller": True,
    }
    labels = {
        "app.kubernetes.io/instance": "r1",
        "sunk.coreweave.com/nodeset": "compute",
        "sunk.coreweave.com/slurm-busy": "false",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner] if owned else []},
        "spec": {
            "nodeName": "nowhere",
            "automountServiceAccountToken": False,  # as the operator makes members (issue #52)
            "containers": [{"name": "slurmd", "image": "slurmd"}],
            **spec,
        },
    }


def test_issue38_the_operators_account_may_only_make_and_mark_its_members(
    operator_account: AdminKube, kube: AdminKube, namespace: str
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    other = member("other")
    other["metadata"]["labels"] = {"app": "not-a-member"}
    other["metadata"]["ownerReferences"] = []
    kube.create(pods, other)

    def create(pod: dict[str, Any]) -> Callable[[], object]:
        return lambda: operator_account.create(pods, pod)

    # In force once the API server's informer has it: a dry run is refused.
    probe = other | {"metadata": {"name": "probe"}}
    dry = lambda: operator_account.request("POST", pods, probe, dryRun="All")  # noqa: E731
    wait_for(lambda: refusal(dry), timeout=20, what="the admission policy in force")
    privileged = member("privileged")
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    refused = {
        "a Pod that is no member": refusal(create(other | {"metadata": {"name": "plain"}})),
        "a member no NodeSet controls": refusal(create(member("orphan", owned=False))),
        "a hostPath member": refusal(
            create(member("hostpath", volumes=[{"name": "root", "hostPath": {"path": "/"}}]))
        ),
        "a member on the host's network": refusal(create(member("hostnet", hostNetwork=True))),
        "a privileged member": refusal(create(privileged)),
        "another Pod deleted": refusal(lambda: operator_account.request("DELETE", f"{pods}/other")),
    }
    assert all(refused.values()), refused
    assert "unless operator.allowHostAccess is set" in str(refused["a hostPath member"])

    assert refusal(create(member("m1"))) is None
    busy = {"metadata": {"labels": {"sunk.coreweave.com/slurm-busy": "true"}}}
    assert refusal(lambda: operator_account.request("PATCH", f"{pods}/m1", busy)) is None
    relabel = {"metadata": {"labels": {"team": "x"}}}
    assert "only the busy label" in str(
        refusal(lambda: operator_account.request("PATCH", f"{pods}/m1", relabel))
    )
    assert refusal(lambda: operator_account.request("DELETE", f"{pods}/m1")) is None


async def operators_own_member(namespace: str) -> dict[str, Any]:
    """A member as the operator makes it for the chart's defaults (confinement, private /tmp,
    the people and health check ConfigMaps, a shared /home), ready to
    create in `namespace` as the policy sees it."""
    config = dataclasses.replace(
        with_people(CONFIG, "r1-people"),
        release="r1",
        auth_secret="r1-auth",
        confinement=True,
        private_tmp=True,
        health_checks_configmap="r1-health-checks",
        shared_volumes=(SharedVolume("r1-home", "/home", False),),
    )
    world = OperatorWorld(config=config)
    world.add_node("node-1", "10.64.1.11")
    world.add_nodeset("compute")
    await world.reconcile("compute")
    [pod] = world.members().values()
    pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k != "namespace"}
    pod["metadata"]["ownerReferences"][0]["uid"] = "00000000-0000-0000-0000-000000000001"
    pod["spec"]["nodeName"] = "nowhere"
    pod["spec"]["containers"][0]["image"] = "slurmd:24.11"  # the chart's default repository
    return pod


async def test_issue52_the_operators_account_may_make_no_member_beyond_what_slurmd_needs(
    operator_account: AdminKube, namespace: str
) -> None:
    """Catches a stolen operator token making a "member" that reaches past slurmd's own
    needs: confinement's capabilities or an Unconfined profile in a sidecar, another
    capability in slurmd, another Secret of the release's namespace, slurm.key in a sidecar,
    a ServiceAccount token, or slurmd from an image of its own. The member the operator
    really makes (chart defaults: confinement, container steps) passes the same policy."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    own = await operators_own_member(namespace)

    def dry(pod: dict[str, Any]) -> Callable[[], object]:
        return lambda: operator_account.request("POST", pods, pod, dryRun="All")

    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"}, "spec": own["spec"]}
    wait_for(lambda: refusal(dry(probe)), timeout=20, what="the admission policy in force")
    assert refusal(dry(own)) is None, "the operator's own member must pass its policy"

    def changed(name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        pod = copy.deepcopy(own)
        pod["metadata"]["name"] = name
        change(pod)
        return pod

    def with_sidecar(**container: Any) -> Callable[[dict[str, Any]], None]:
        return lambda pod: pod["spec"]["containers"].append(
            {"name": "sidecar", "image": "busybox", **container}
        )

    def security(where: str, value: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
        def change(pod: dict[str, Any]) -> None:
            target = pod["spec"] if where == "pod" else pod["spec"]["containers"][0]
            target.setdefault("securityContext", {}).update(value)

        return change

    def secret_volume(pod: dict[str, Any]) -> None:
        pod["spec"]["volumes"].append({"name": "jwt", "secret": {"secretName": "r1-jwt-key"}})
        pod["spec"]["containers"][0]["volumeMounts"].append({"name": "jwt", "mountPath": "/jwt"})

    def image(pod: dict[str, Any]) -> None:
        pod["spec"]["containers"][0]["image"] = "evil.example/slurmd:24.11"

    cases = {
        "SYS_ADMIN in a sidecar": with_sidecar(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
        "NET_ADMIN in slurmd": security("slurmd", {"capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"]}}),
        "the Pod's seccomp Unconfined": security("pod", {"seccompProfile": {"type": "Unconfined"}}),
        "a sidecar's AppArmor Unconfined": with_sidecar(
            securityContext={"appArmorProfile": {"type": "Unconfined"}}
        ),
        "a sidecar's seccomp Unconfined": with_sidecar(
            securityContext={"seccompProfile": {"type": "Unconfined"}}
        ),
        "another Secret": secret_volume,
        "slurm.key in a sidecar": with_sidecar(volumeMounts=[{"name": "slurm-key", "mountPath": "/k"}]),
        "a Secret in a sidecar's environment": with_sidecar(
            env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": "r1-auth", "key": "slurm.key"}}}]
        ),
        "a ServiceAccount token": lambda pod: pod["spec"].update(automountServiceAccountToken=True),
        "slurmd from another image": image,
    }
    refused = {what: refusal(dry(changed(f"m{i}", change))) for i, (what, change) in enumerate(cases.items())}
    assert all(refused.values()), {k: v for k, v in refused.items() if not v}
    assert "no Secret but slurm.key (r1-auth)" in str(refused["another Secret"])
    assert "only from an allowed image" in str(refused["slurmd from another image"])
    assert "unless operator.allowHostAccess is set" in str(refused["SYS_ADMIN in a sidecar"])
    assert "may not turn off seccomp or AppArmor" in str(refused["a sidecar's AppArmor Unconfined"])


@pytest.fixture
def config_sidecar_account(
    helm: Path, kube: AdminKube, dev_cluster: DevCluster, namespace: str
) -> Iterator[AdminKube]:
    """The API server as the account of slurmctld's config sidecar sees it: the chart's Role
    and the policy that narrows it."""
    yield from chart_account(
        helm,
        kube,
        dev_cluster,
        namespace,
        "r1-controller",
        ("r1-controller", f"{namespace}-r1-controller-writes"),
    )


def test_issue52_the_config_sidecars_account_may_only_write_its_annotations(
    config_sidecar_account: AdminKube, kube: AdminKube, namespace: str
) -> None:
    """Catches a stolen token of slurmctld's config sidecar swapping its Pod's image (another
    program beside slurm.key), relabelling it, or rewriting the slurm.conf every member reads:
    its Role allows each, the policy only the annotations the sidecar writes."""
    pods, maps = f"/api/v1/namespaces/{namespace}/pods", f"/api/v1/namespaces/{namespace}/configmaps"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "r1-controller-0", "labels": {"app": "slurmctld"}},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "slurmctld", "image": "slurmctld:24.11"}]},
    }
    kube.create(pods, pod)
    kube.create(maps, {"metadata": {"name": "r1-slurm-config"}, "data": {"slurm.conf": "ClusterName=r1\n"}})
    own_pod, own_map = f"{pods}/r1-controller-0", f"{maps}/r1-slurm-config"

    def patch(path: str, body: dict[str, Any]) -> Callable[[], object]:
        return lambda: config_sidecar_account.request("PATCH", path, body)

    def swap_image() -> object:
        current = kube.request("GET", own_pod)
        current["spec"]["containers"][0]["image"] = "evil.example/slurmctld:24.11"
        return config_sidecar_account.request("PUT", own_pod, current)

    deadline = {"spec": {"activeDeadlineSeconds": 1}}
    tries = itertools.count()  # a new value each try: a patch that changes nothing is always allowed
    wait_for(
        lambda: refusal(patch(own_map, {"metadata": {"labels": {"try": str(next(tries))}}})),
        timeout=20,
        what="the admission policy in force",
    )
    refused = {
        "its Pod's image": refusal(swap_image),
        "its Pod's deadline (slurmctld stopped)": refusal(patch(own_pod, deadline)),
        "another annotation of its Pod": refusal(patch(own_pod, {"metadata": {"annotations": {"x": "y"}}})),
        "its Pod's labels": refusal(patch(own_pod, {"metadata": {"labels": {"app": "other"}}})),
        "slurm.conf": refusal(patch(own_map, {"data": {"slurm.conf": "PluginDir=/tmp/evil\n"}})),
        "its ConfigMap's labels": refusal(patch(own_map, {"metadata": {"labels": {"x": "y"}}})),
    }
    assert all(refused.values()), {k: v for k, v in refused.items() if not v}
    assert "may change only the annotations it writes" in str(refused["another annotation of its Pod"])
    assert "a ConfigMap content" in str(refused["slurm.conf"])
    wanted = {"metadata": {"annotations": {"sunk.coreweave.com/config-wanted": "abc"}}}
    assert refusal(patch(own_pod, wanted)) is None
    applied = {"sunk.coreweave.com/applied-config-hash": "abc", "sunk.coreweave.com/held-config-hash": "abc"}
    assert refusal(patch(own_map, {"metadata": {"annotations": applied}})) is None
    released = {"metadata": {"annotations": {"sunk.coreweave.com/held-config-hash": None}}}
    assert refusal(patch(own_map, released)) is None
