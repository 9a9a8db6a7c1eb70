"""R1.1: the Helm chart, checked with the real helm binary."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from sunk.scheduler.config import parse_devices
from sunk.scheduler.policy import Policy, parse
from tests.chart.conftest import CHART, TENANTS, render


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def args(objects: list[dict[str, Any]]) -> list[str]:
    [deployment] = of_kind(objects, "Deployment")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def flag(objects: list[dict[str, Any]], name: str) -> str:
    [value] = [a.split("=", 1)[1] for a in args(objects) if a.startswith(f"--{name}=")]
    return value


def test_r1_1_helm_lint_passes(helm: Path) -> None:
    result = subprocess.run([str(helm), "lint", str(CHART), "--set", TENANTS], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_r1_1_scheduler_name_defaults_to_namespace_dash_release(helm: Path) -> None:
    assert flag(render(helm, namespace="tenant-a", release="slurm"), "scheduler-name") == "tenant-a-slurm"


def test_r1_1_scheduler_name_can_be_set(helm: Path) -> None:
    assert flag(render(helm, "scheduler.name=gpu-pods"), "scheduler-name") == "gpu-pods"


def test_r1_1_namespace_scope_renders_roles_only_in_the_listed_namespaces(helm: Path) -> None:
    objects = render(helm, "scheduler.scope.type=namespace", r"scheduler.scope.namespaces=a\,b")
    pod_roles = [r for r in of_kind(objects, "Role") if r["metadata"]["name"].endswith("-pods")]
    assert sorted(r["metadata"]["namespace"] for r in pod_roles) == ["a", "b"]
    assert not [c for c in of_kind(objects, "ClusterRole") if c["metadata"]["name"].endswith("-pods")]
    assert flag(objects, "watch-namespace") == "a,b"


def test_r1_1_cluster_scope_renders_a_cluster_role_and_watches_everything(helm: Path) -> None:
    objects = render(helm, "scheduler.scope.type=cluster")
    roles = {c["metadata"]["name"] for c in of_kind(objects, "ClusterRole")}
    assert roles == {"team-r1-sunk-scheduler-pods", "team-r1-sunk-scheduler-nodes"}
    assert not [r for r in of_kind(objects, "Role") if r["metadata"]["name"].endswith("-pods")]
    assert flag(objects, "watch-namespace") == ""


CLUSTER_WIDE = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def test_two_releases_of_one_name_in_two_namespaces_share_no_name_cluster_wide_or_in_a_tenants_namespace(
    helm: Path,
) -> None:
    """Catches a cluster-scoped object (or a Role in the tenants' namespace) named after the
    release alone: the second release's install then fails on the first one's object, or
    takes it over."""
    for scope in ("scheduler.scope.type=cluster", "scheduler.scope.type=namespace"):
        names = []
        for namespace in ("team-a", "team-b"):
            objects = render(
                helm, scope, "scheduler.scope.namespaces=shared", namespace=namespace, release="slurm"
            )
            shared = [
                o for o in objects if o["kind"] in CLUSTER_WIDE or o["metadata"].get("namespace") == "shared"
            ]
            names.append(
                {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in shared}
            )
        assert names[0] and not names[0] & names[1], (scope, names[0] & names[1])


def test_r1_1_rbac_is_least_privilege(helm: Path) -> None:
    """No wildcard, no secrets for the scheduler, nodes read-only, nothing but what the
    scheduler calls; the hooks-secret Job alone may create a Secret and read its own."""
    objects = render(helm, "scheduler.scope.type=cluster")
    for role in of_kind(objects, "ClusterRole") + of_kind(objects, "Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
            if role["metadata"]["name"].endswith("-hooks-secret"):
                assert rule["resources"] == ["secrets"] and rule["verbs"] in (["create"], ["get"])
                own = ["r1-sunk-scheduler-hooks", "r1-sunk-scheduler-hooks-tls"]
                assert rule["verbs"] == ["create"] or rule["resourceNames"] == own
                continue
            assert "secrets" not in rule["resources"]
            if "nodes" in rule["resources"]:
                assert set(rule["verbs"]) == {"get", "list", "watch"}
            if "leases" in rule["resources"] and rule["verbs"] != ["create"]:
                assert rule["resourceNames"] == ["team-r1"]  # the Lease named after the scheduler


def test_r12_4_the_chart_renders_the_same_thing_every_time(helm: Path) -> None:
    """GitOps renders the chart on every sync: nothing random may be in it."""
    assert render(helm) == render(helm)
    assert not of_kind(render(helm), "Secret")


def test_r1_1_kill_wait_feeds_the_flag(helm: Path) -> None:
    assert flag(render(helm, "scheduler.killWait=45s"), "slurm-kill-wait") == "45s"


def test_r1_1_disabled_renders_nothing(helm: Path) -> None:
    assert render(helm, "scheduler.enabled=false") == []


def test_r1_1_hooks_service_targets_only_the_leader(helm: Path) -> None:
    objects = render(helm)
    hooks = next(s for s in of_kind(objects, "Service") if s["metadata"]["name"].endswith("-hooks"))
    assert hooks["spec"]["selector"]["sunk.coreweave.com/leader"] == "true"
    assert flag(objects, "hooks-api-url") == "https://r1-sunk-scheduler-hooks.team.svc:8000"


def test_r12_2_the_hooks_api_serves_tls_from_a_secret_the_job_makes_for_the_services_names(
    helm: Path,
) -> None:
    objects = render(helm)
    assert flag(objects, "hooks-tls-cert-file") == "/var/run/secrets/sunk-hooks-tls/tls.crt"
    assert flag(objects, "hooks-tls-ca-file") == "/var/run/secrets/sunk-hooks-tls/ca.crt"
    assert not [a for a in args(objects) if a.startswith("--hooks-insecure-http")]
    [job] = of_kind(objects, "Job")
    job_args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--tls-secret=r1-sunk-scheduler-hooks-tls" in job_args
    assert "--tls-host=r1-sunk-scheduler-hooks.team.svc" in job_args
    given = render(helm, "scheduler.hooks.tls.secretName=from-cert-manager")
    [job] = of_kind(given, "Job")
    assert not [a for a in job["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--tls")]


def test_r1_2_every_documented_flag_is_passed(helm: Path) -> None:
    given = {a.split("=", 1)[0] for a in args(render(helm))}
    for name in (
        "--scheduler-name",
        "--slurm-kill-wait",
        "--watch-namespace",
        "--slurm-api-base",
        "--slurm-auth-token-file",
        "--hooks-api-bind-address",
        "--metrics-bind-address",
        "--health-probe-bind-address",
        "--log-level",
        "--components",
    ):
        assert name in given


def test_r1_1_the_leader_may_label_its_pod_even_where_it_does_not_schedule(helm: Path) -> None:
    objects = render(
        helm, "scheduler.scope.type=namespace", "scheduler.scope.namespaces=apps", namespace="team"
    )
    leader = next(r for r in of_kind(objects, "Role") if r["metadata"]["name"].endswith("-leader"))
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]} in leader["rules"]
    cluster = render(helm, "scheduler.scope.type=cluster", namespace="team")  # its ClusterRole covers it
    leader = next(r for r in of_kind(cluster, "Role") if r["metadata"]["name"].endswith("-leader"))
    assert all("pods" not in rule["resources"] for rule in leader["rules"])


def policy_of(objects: list[dict[str, Any]]) -> Policy:
    [config] = [c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith("-policy")]
    return parse(config["data"]["policy.yaml"], "chart")


def test_issue38_the_charts_default_policy_grants_nothing_and_reaches_the_scheduler(helm: Path) -> None:
    """Catches the old default (root, anything allowed) coming back."""
    objects = render(helm)
    policy = policy_of(objects)
    assert policy.unbounded() == [] and not policy.acknowledged
    assert policy.rules_for("tenants").default_uid is None and policy.rules_for("tenants").accounts == ()
    assert flag(objects, "policy") == "/etc/sunk/policy/policy.yaml"
    [deployment] = of_kind(objects, "Deployment")
    mounts = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "policy", "mountPath": "/etc/sunk/policy", "readOnly": True} in mounts


def test_r12_1_a_namespace_policy_set_in_the_values_is_what_the_scheduler_reads(helm: Path) -> None:
    objects = render(
        helm,
        "scheduler.policy.namespaces.inference.uids={1001}",
        "scheduler.policy.namespaces.inference.defaultUid=1001",
    )
    rules = policy_of(objects).rules_for("inference")
    assert rules.uids == (1001,) and rules.default_uid == 1001
    assert policy_of(objects).rules_for("other").default_uid is None


def test_r12_3_the_device_table_reaches_the_scheduler(helm: Path) -> None:
    assert flag(render(helm), "device-gres") == "nvidia.com/gpu=gpu,rdma/ib="
    assert parse_devices(flag(render(helm), "device-gres")) == (("nvidia.com/gpu", "gpu"), ("rdma/ib", ""))


def test_r12_4_the_network_policy_lets_only_the_named_peers_reach_the_hooks_port(helm: Path) -> None:
    assert not of_kind(render(helm), "NetworkPolicy")  # off by default
    objects = render(
        helm,
        "scheduler.networkPolicy.enabled=true",
        "scheduler.networkPolicy.hooksFrom[0].ipBlock.cidr=10.20.0.0/16",
    )
    [policy] = of_kind(objects, "NetworkPolicy")
    hooks, others = policy["spec"]["ingress"]
    assert hooks == {
        "from": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
        "ports": [{"port": 8000, "protocol": "TCP"}],
    }
    assert "from" not in others and {p["port"] for p in others["ports"]} == {8080, 8081}


def test_r12_4_a_network_policy_without_peers_is_refused_at_render(helm: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render(helm, "scheduler.networkPolicy.enabled=true")
    assert "hooksFrom must name the Slurm nodes" in failed.value.stderr


def test_r12_4_the_grace_period_ends_before_the_lease_could_hand_over(helm: Path) -> None:
    [deployment] = of_kind(render(helm), "Deployment")
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] < 15  # the Lease duration


def test_r9_1_the_podgroup_crd_is_installed_only_when_asked(helm: Path) -> None:
    assert not of_kind(render(helm), "CustomResourceDefinition")
    [crd] = of_kind(render(helm, "podGroups.installCRD=true"), "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "podgroups.scheduling.x-k8s.io"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
