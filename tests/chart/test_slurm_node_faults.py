"""Issue #51 points 5 and 6 in the chart: slurm.healthChecks.nodeConditions reaches the
operator as --node-conditions (a default list, validated, used with the checks on or off),
and the operator may patch Nodes' status (the SlurmHealthCheck condition) and nothing more
of a Node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chart.test_slurm_chart import container, fails, named, of_kind, render

Obj = dict[str, Any]
DEFAULT = "KernelDeadlock,ReadonlyFilesystem,FrequentKubeletRestart,FrequentContainerdRestart"


def node_conditions(objects: list[Obj]) -> str:
    args: list[str] = container(named(objects, "Deployment", "r1-operator"), "operator")["args"]
    [flag] = [a for a in args if a.startswith("--node-conditions=")]
    return flag.split("=", 1)[1]


@pytest.mark.parametrize("checks", ["true", "false"])
def test_issue51_node_problem_detectors_faults_are_watched_by_default(
    helm: Path, slurm_chart: Path, checks: str
) -> None:
    """Catches: a default install that ignores Node Problem Detector's faults, or one that
    watches them only while the health checks are on."""
    objects = render(slurm_chart, helm, f"slurm.healthChecks.enabled={checks}")
    assert node_conditions(objects) == DEFAULT


def test_issue51_the_list_is_yours_and_may_be_empty(helm: Path, slurm_chart: Path) -> None:
    """Catches: a custom list (a GPU monitor's condition) not reaching the operator, or an
    empty one rendering a flag the operator cannot read."""
    gpu = {"slurm": {"healthChecks": {"nodeConditions": ["GPUProblem", "example.com/NICDown"]}}}
    assert node_conditions(render(slurm_chart, helm, values=gpu)) == "GPUProblem,example.com/NICDown"
    none = {"slurm": {"healthChecks": {"nodeConditions": []}}}
    assert node_conditions(render(slurm_chart, helm, values=none)) == ""


@pytest.mark.parametrize(
    ("given", "named_in_error"),
    [
        (["Ready"], '"Ready" is not a fault'),
        (["SlurmHealthCheck"], '"SlurmHealthCheck" is not a fault'),
        (["Kernel Deadlock"], '"Kernel Deadlock" is not a Node condition type'),
        ("KernelDeadlock", "must be a list"),
    ],
)
def test_issue51_a_list_the_operator_would_refuse_fails_the_render(
    helm: Path, slurm_chart: Path, given: object, named_in_error: str
) -> None:
    """Catches: Ready listed (every healthy member drained), the operator's own mirror read
    back as a fault, or a value that only fails when the operator starts."""
    error = fails(slurm_chart, helm, values={"slurm": {"healthChecks": {"nodeConditions": given}}})
    assert "slurm.healthChecks.nodeConditions" in error and named_in_error in error


def test_issue51_the_operator_may_patch_node_status_and_nothing_else_of_a_node(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches: the SlurmHealthCheck condition refused by RBAC, or more rights on Nodes than
    that one write (update, or the Node object itself)."""
    [cluster_role] = of_kind(render(slurm_chart, helm), "ClusterRole")
    writes = [r for r in cluster_role["rules"] if set(r["verbs"]) - {"get", "list", "watch"}]
    assert writes == [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]
