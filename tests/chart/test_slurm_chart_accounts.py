"""The Slurm chart's accounting.fromDirectory (issue #35): the mapping reaches the operator
as one JSON flag with Slurm's cluster name, and a mapping that cannot work fails the render
naming the value to change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.chart.test_slurm_chart import container, fails, named, render
from tests.chart.test_slurm_chart_people import DIRECTORY

GROUPS = [{"group": "ml-team", "account": "ml", "qos": ["normal", "high"], "defaultQos": "normal"}]


def values(groups: list[dict[str, Any]] = GROUPS, **accounting: Any) -> dict[str, Any]:
    return {**DIRECTORY, "accounting": {"fromDirectory": {"enabled": True, "groups": groups}, **accounting}}


def test_the_operator_gets_the_mapping_and_the_cluster_name(helm: Path, slurm_chart: Path) -> None:
    args = container(
        named(render(slurm_chart, helm, values=values()), "Deployment", "r1-operator"), "operator"
    )["args"]
    mapping = [
        a.removeprefix("--accounts-from-directory=")
        for a in args
        if a.startswith("--accounts-from-directory=")
    ]
    assert [json.loads(m) for m in mapping] == [GROUPS]
    assert "--slurm-cluster=r1" in args


def test_without_it_the_operator_keeps_no_accounts(helm: Path, slurm_chart: Path) -> None:
    args = container(
        named(render(slurm_chart, helm, values=DIRECTORY), "Deployment", "r1-operator"), "operator"
    )["args"]
    assert [a for a in args if "accounts" in a] == []


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (values(groups=[]), "accounting.fromDirectory.groups is empty"),
        (values(groups=[{"group": "ml-team"}]), "groups[0] needs both group and account"),
        (
            values(groups=[{"group": "g", "account": "ML"}]),
            'groups[0].account "ML": Slurm account names are lower-case',
        ),
        (
            values(groups=[{"group": "g", "account": "a"}, {"group": "g", "account": "b"}]),
            "maps group g twice",
        ),
        (
            values(groups=[{"group": "g", "account": "a", "qos": ["low"], "defaultQos": "high"}]),
            "defaultQos high is not in its qos list",
        ),
        ({"accounting": values()["accounting"]}, "needs directory.uri"),
        (values(enabled=False), "needs accounting.enabled"),
    ],
)
def test_a_mapping_that_cannot_work_fails_the_render(
    helm: Path, slurm_chart: Path, given: dict[str, Any], message: str
) -> None:
    assert message in fails(slurm_chart, helm, values=given)
