"""Issue #38, point 3: the scheduler chart narrows its account's Pod writes with a
ValidatingAdmissionPolicy, on by default; checked on the rendered manifests (the API server
enforcing it is tests/e2e/test_chart_rbac.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.chart.conftest import render

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
