"""Issue #38, point 3: the scheduler chart narrows its account's Pod writes with a
ValidatingAdmissionPolicy, on by default; checked on the rendered manifests (the API server
enforcing it is tests/e2e/test_chart_rbac.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    assert len(closed) == len(opened) + 1


def test_issue38_the_operator_policy_can_be_turned_off(helm: Path, slurm_chart: Path) -> None:
    assert operator_policy(helm, slurm_chart, "operator.admissionPolicy.enabled=false") is None
