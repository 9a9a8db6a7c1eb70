"""Issue #38 in the Slurm chart: what a default install holds Slurm, and its hooks, to."""

from __future__ import annotations

from pathlib import Path

from tests.chart.test_slurm_chart import conf_value, fails, render

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
