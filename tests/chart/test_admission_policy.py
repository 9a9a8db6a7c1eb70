"""Issue #38, point 3: the scheduler chart narrows its account's Pod writes with a
ValidatingAdmissionPolicy, on by default; checked on the rendered manifests (the API server
enforcing it is tests/e2e/test_chart_rbac.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.chart.conftest import render, render_chart

Obj = dict[str, Any]


def policy_objects(objects: list[Obj]) -> dict[str, Obj]:
    return {o["kind"]: o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")}


def test_issue38_the_policy_is_on_by_default_and_bound_to_deny(helm: Path) -> None:
    found = policy_objects(render(helm, namespace="keys", release="r1"))
    policy, binding = found["ValidatingAdmissionPolicy"], found["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"


def test_issue38_the_policy_judges_only_the_schedulers_own_account(helm: Path) -> None:
    policy = policy_objects(render(helm, namespace="keys", release="r1"))["ValidatingAdmissionPolicy"]
    [condition] = policy["spec"]["matchConditions"]
    assert (
        condition["expression"]
        == 'request.userInfo.username == "system:serviceaccount:keys:r1-sunk-scheduler"'
    )
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE", "DELETE"],
            "resources": ["pods", "pods/status"],
        }
    ]


def test_issue38_the_policy_names_the_scheduler_and_its_annotation_prefix(helm: Path) -> None:
    objects = render(helm, "scheduler.name=gpu-pods", "scheduler.annotationPrefix=example.org/")
    variables = {
        v["name"]: v["expression"]
        for v in policy_objects(objects)["ValidatingAdmissionPolicy"]["spec"]["variables"]
    }
    assert variables["ours"] == "variables.pod.spec.?schedulerName.orValue('') == 'gpu-pods'"
    assert variables["prefix"] == "'example.org/'"


def test_issue38_two_releases_get_two_policies(helm: Path) -> None:
    names = {
        policy_objects(render(helm, namespace=ns, release="r1"))["ValidatingAdmissionPolicy"]["metadata"][
            "name"
        ]
        for ns in ("keys-a", "keys-b")
    }
    assert len(names) == 2


def test_issue38_the_policy_can_be_turned_off_for_a_cluster_older_than_1_30(helm: Path) -> None:
    assert policy_objects(render(helm, "scheduler.admissionPolicy.enabled=false")) == {}


def operator_policy(helm: Path, slurm_chart: Path, *sets: str) -> Obj | None:
    objects = render_chart(helm, slurm_chart, *sets, namespace="keys", release="r1")
    found = [
        o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and "operator" in o["metadata"]["name"]
    ]
    return found[0] if found else None


def test_issue38_the_operator_policy_is_on_by_default_for_the_operators_account(
    helm: Path, slurm_chart: Path
) -> None:
    policy = operator_policy(helm, slurm_chart)
    assert policy is not None
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == 'request.userInfo.username == "system:serviceaccount:keys:r1-operator"'


def test_issue38_allow_host_access_lifts_only_the_host_rule(helm: Path, slurm_chart: Path) -> None:
    def messages(*sets: str) -> list[str]:
        policy = operator_policy(helm, slurm_chart, *sets)
        assert policy is not None
        return [v["messageExpression"] for v in policy["spec"]["validations"]]

    closed, opened = messages(), messages("operator.allowHostAccess=true")
    assert [m for m in closed if "operator.allowHostAccess" not in m] == opened
    # Issue #52: the host, the capabilities and the profiles rules; the key and image rules stay.
    assert len(closed) == len(opened) + 3
    assert any("no Secret but slurm.key" in m for m in opened)
    assert any("only from an allowed image" in m for m in opened)


def validation(policy: Obj, words: str) -> str:
    [found] = [v["expression"] for v in policy["spec"]["validations"] if words in v["messageExpression"]]
    return str(found)


def test_issue52_the_operator_policy_allows_only_the_releases_key_and_the_charts_slurmd_images(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches a policy that lets the operator's account mount any Secret (the JWT key: a root
    token) or run slurmd from any image, and one that forgets the images an administrator
    listed (the operator would make members the API server then refuses)."""
    values = {
        "slurmd": {"allowedImages": ["reg.example/slurmd-cuda"]},
        "nodeSets": [{"name": "gpu", "image": "reg.example/slurmd-mine:1"}],
    }
    objects = render_chart(helm, slurm_chart, namespace="keys", release="r1", values=values)
    [policy] = [
        o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and "operator" in o["metadata"]["name"]
    ]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert json.loads(variables["slurmdImages"]) == [
        "slurmd",
        "reg.example/slurmd-cuda",
        "reg.example/slurmd-mine:1",
    ]
    assert "v.secret.?secretName.orValue('') == 'r1-auth'" in validation(policy, "no Secret but slurm.key")
    [operator] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "r1-operator"]
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--allowed-slurmd-images=reg.example/slurmd-cuda,reg.example/slurmd-mine:1" in args


@pytest.mark.parametrize(
    ("confinement", "steps"), [(True, True), (True, False), (False, True), (False, False)]
)
def test_issue52_only_slurmds_apparmor_may_be_off_only_for_confinement_and_seccomp_never(
    helm: Path, slurm_chart: Path, confinement: bool, steps: bool
) -> None:
    """Catches a policy letting a member's slurmd run without AppArmor where confinement is
    off, or without seccomp at all: container steps run under RuntimeDefault (their runtime
    skips pivot_root), so nothing needs it off."""
    policy = operator_policy(
        helm,
        slurm_chart,
        f"slurm.confinement.enabled={str(confinement).lower()}",
        f"slurm.containers.enabled={str(steps).lower()}",
    )
    assert policy is not None
    rule = validation(policy, "may not turn off seccomp")
    slurmds_seccomp = (
        "variables.slurmd.all(c, c.?securityContext.?seccompProfile.?type.orValue('') != 'Unconfined'"
    )
    assert slurmds_seccomp in rule
    assert "seccomp.security.alpha.kubernetes.io/slurmd'" not in rule
    assert f"({str(confinement).lower()} || c.?securityContext.?appArmorProfile" in rule
    assert (
        f"({str(confinement).lower()} && k == 'container.apparmor.security.beta.kubernetes.io/slurmd')"
        in rule
    )


def test_issue38_the_operator_policy_can_be_turned_off(helm: Path, slurm_chart: Path) -> None:
    assert operator_policy(helm, slurm_chart, "operator.admissionPolicy.enabled=false") is None


# A message expression is string literals joined by + to fields (request.name); a quote inside a
# literal ends it early, and the API server then refuses the whole policy at install.
MESSAGE = re.compile(r"\s*'[^'\\]*'(\s*\+\s*([a-z]\w*(\.\w+)+|'[^'\\]*'))*\s*")


def test_every_policys_messages_are_literals_the_api_server_compiles(helm: Path, slurm_chart: Path) -> None:
    """Catches a quote inside a message's literal (an apostrophe, "slurmd's"): CEL then fails
    to compile it and every helm install of the chart is refused."""
    rendered = render(helm, "scheduler.scope.type=cluster") + render_chart(helm, slurm_chart)
    policies = [o for o in rendered if o["kind"] == "ValidatingAdmissionPolicy"]
    assert len(policies) >= 2
    for policy in policies:
        for validation in policy["spec"]["validations"]:
            text = validation.get("messageExpression", "")
            assert not text or MESSAGE.fullmatch(text), (policy["metadata"]["name"], text)


def test_issue52_the_config_sidecar_policy_judges_only_its_account(helm: Path, slurm_chart: Path) -> None:
    """Catches the sidecar's policy missing, left unbound, or aimed at another account (it
    would then judge nobody, and the sidecar's token could rewrite slurm.conf)."""
    objects = render_chart(helm, slurm_chart, namespace="keys", release="r1")
    found = {o["kind"]: o for o in objects if o["metadata"]["name"] == "keys-r1-controller-writes"}
    policy, binding = found["ValidatingAdmissionPolicy"], found["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"] == {"policyName": "keys-r1-controller-writes", "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    [condition] = policy["spec"]["matchConditions"]
    assert (
        condition["expression"] == 'request.userInfo.username == "system:serviceaccount:keys:r1-controller"'
    )
    accounts = [
        o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "r1-controller"
    ]
    assert accounts, "the policy names the account the sidecar runs as"
    off = render_chart(
        helm, slurm_chart, "operator.admissionPolicy.enabled=false", namespace="keys", release="r1"
    )
    assert not [o for o in off if o["metadata"]["name"] == "keys-r1-controller-writes"]
