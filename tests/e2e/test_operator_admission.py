"""Issue #38, point 3, for the operator: its Role lets it create, patch and delete any Pod of
the release's namespace; the chart's admission policy, enforced by the real API server,
narrows that to its NodeSets' members, their busy label, and (without allowHostAccess) no
member that uses the host."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from tests.chart.conftest import SLURM_CHART, build_chart_dependencies, render_chart
from tests.e2e.test_chart_rbac import account_token, apply, collection, refusal
from tests.support import wait_for

pytestmark = pytest.mark.e2e
POLICY = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
KEPT = ("ServiceAccount", "Role", "RoleBinding", *POLICY)


@pytest.fixture
def operator_account(
    helm: Path, kube: AdminKube, dev_cluster: DevCluster, namespace: str
) -> Iterator[AdminKube]:
    """The API server as the chart's operator account sees it, with the chart's Role and policy."""
    build_chart_dependencies(helm, SLURM_CHART)
    objects = render_chart(helm, SLURM_CHART, namespace=namespace, release="r1")
    mine = [
        o
        for o in objects
        if o["kind"] in KEPT and o["metadata"]["name"].startswith((f"{namespace}-r1-operator", "r1-operator"))
    ]
    assert {o["kind"] for o in mine} == set(KEPT)
    apply(kube, mine)
    account = AdminKube(dev_cluster.layout, token=account_token(kube, namespace, "r1-operator"))
    yield account
    account.close()
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
        "spec": {"nodeName": "nowhere", "containers": [{"name": "slurmd", "image": "slurmd"}], **spec},
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
