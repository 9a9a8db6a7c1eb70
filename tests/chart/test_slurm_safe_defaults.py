"""Issue #38 in the Slurm chart: what a default install holds Slurm, and its hooks, to."""

from __future__ import annotations

from pathlib import Path

from tests.chart.test_slurm_chart import (
    NODESETS,
    PARTITIONS,
    SCHEDULER_ON,
    _annotations,
    conf_value,
    container,
    fails,
    named,
    render,
)

FULL = "associations,limits,qos,safe"


def test_issue38_accounting_enforces_associations_limits_qos_and_safe_by_default(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches the chart leaving AccountingStorageEnforce unset: Slurm then took any
    account string and applied no QoS or association limit."""
    assert conf_value(render(slurm_chart, helm), "AccountingStorageEnforce") == FULL


def test_issue38_without_accounting_nothing_is_enforced_through_it(helm: Path, slurm_chart: Path) -> None:
    """Enforcement needs slurmdbd: slurmctld would refuse to start with it and no database."""
    objects = render(slurm_chart, helm, "accounting.enabled=false")
    assert conf_value(objects, "AccountingStorageEnforce") is None


def test_issue38_weaker_enforcement_fails_the_render_naming_the_value(helm: Path, slurm_chart: Path) -> None:
    said = fails(slurm_chart, helm, "accounting.enforce={associations,qos}")
    assert "accounting.enforce leaves out limits, safe" in said
    assert "accounting.acknowledgeWeakerEnforce=true" in said


def test_issue38_weaker_enforcement_with_the_acknowledgement_is_what_slurm_gets(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(
        slurm_chart, helm, "accounting.enforce={associations,qos}", "accounting.acknowledgeWeakerEnforce=true"
    )
    assert conf_value(objects, "AccountingStorageEnforce") == "associations,qos"


def test_issue38_every_hook_jobs_account_and_rights_go_once_it_succeeded(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches a hook Job's ServiceAccount, Role or RoleBinding rendered as a plain object:
    it would outlive the Job, keeping `get` on the key Secrets for whoever holds a token of
    that account (issue #38, point 9)."""
    values = {**PARTITIONS, **NODESETS, "scheduler": SCHEDULER_ON}
    objects = render(slurm_chart, helm, values=values)
    accounts = {
        o["spec"]["template"]["spec"].get("serviceAccountName")
        for o in objects
        if o["kind"] == "Job" and "helm.sh/hook" in _annotations(o)
    } - {None}  # a Job with no account of its own (the partition check) has no rights to keep
    assert {"r1-secrets", "r1-sunk-scheduler-hooks-secret"} <= accounts
    rights = [
        o
        for o in objects
        if (o["kind"] == "ServiceAccount" and o["metadata"]["name"] in accounts)
        or (o["kind"] == "RoleBinding" and {s["name"] for s in o["subjects"]} & accounts)
        or (o["kind"] == "Role" and o["metadata"]["name"] in accounts)
    ]
    assert len(rights) == 3 * len(accounts)  # each: its account, Role and RoleBinding
    for obj in rights:
        policy = str(_annotations(obj).get("helm.sh/hook-delete-policy", "")).split(",")
        assert "helm.sh/hook" in _annotations(obj) and "hook-succeeded" in policy, obj["metadata"]["name"]


def test_issue38_the_operator_refuses_host_access_in_templates_unless_the_values_allow_it(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches the chart not passing the flag: the operator's own default is false too, so
    this guards the value reaching it when set."""

    def flag(*sets: str) -> list[str]:
        operator = container(named(render(slurm_chart, helm, *sets), "Deployment", "r1-operator"), "operator")
        return [a for a in operator["args"] if a.startswith("--allow-host-access=")]

    assert flag() == ["--allow-host-access=false"]
    assert flag("operator.allowHostAccess=true") == ["--allow-host-access=true"]
