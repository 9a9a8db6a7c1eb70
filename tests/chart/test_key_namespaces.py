"""Issue #38, point 1: tenants never share a namespace with the keys. The release's
namespace holds slurm.key, the JWT key and the scheduler's token; whoever may create Pods
there can mount them, so the scheduler never places Pods there, in any scope."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.chart.conftest import CHART, render, render_chart, render_text
from tests.chart.test_chart import flag


def refusal(helm: Path, *sets: str, namespace: str = "team") -> str:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render_text(helm, CHART, *sets, namespace=namespace)
    return str(failed.value.stderr)


def test_issue38_namespace_scope_without_namespaces_is_refused_naming_the_value(helm: Path) -> None:
    """Catches the old default (blank: the release's namespace, where the keys are)."""
    assert "scheduler.scope.namespaces is required" in refusal(helm)


def test_issue38_the_release_namespace_is_refused_among_the_watched_ones(helm: Path) -> None:
    said = refusal(helm, r"scheduler.scope.namespaces=apps\,team", namespace="team")
    assert "scheduler.scope.namespaces must not include team" in said


def test_issue38_the_slurmd_namespace_is_refused_among_the_watched_ones(helm: Path) -> None:
    """slurmd Pods hold slurm.key too, wherever they run."""
    said = refusal(helm, "scheduler.slurmd.namespace=slurm", r"scheduler.scope.namespaces=apps\,slurm")
    assert "scheduler.scope.namespaces must not include slurm" in said


def test_issue38_tenants_namespaces_are_watched_and_the_key_namespaces_ignored(helm: Path) -> None:
    objects = render(helm, r"scheduler.scope.namespaces=apps\,web", "scheduler.slurmd.namespace=slurm")
    assert flag(objects, "watch-namespace") == "apps,web"
    assert flag(objects, "ignore-namespace") == "team,slurm"


def test_issue38_cluster_scope_still_ignores_the_key_namespaces(helm: Path) -> None:
    """Catches cluster scope placing Pods of the release's namespace: it needs no list of
    namespaces, so nothing else keeps tenants' Pods out of the keys' namespace."""
    objects = render_chart(helm, CHART, "scheduler.scope.type=cluster", namespace="team")
    assert flag(objects, "watch-namespace") == ""
    assert flag(objects, "ignore-namespace") == "team"
