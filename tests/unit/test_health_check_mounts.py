"""Issue #51: slurmd's health check runner reaches every member. slurm.conf names it by an
absolute path, which configless slurmd is not sent, so the operator mounts the chart's
ConfigMap there (executable), the operator's own scripts beside it (optional), and turning
the checks on rolls the members the job-safe way; off, members are made as before."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

import pytest

from sunk.operator import config
from sunk.operator.nodeset import members as m
from tests.fakes.operator_world import CONFIG, OperatorWorld

Json = dict[str, Any]


def world(runner: str = "", scripts: str = "") -> OperatorWorld:
    config = replace(CONFIG, health_checks_configmap=runner, health_check_scripts_configmap=scripts)
    w = OperatorWorld(config=config)
    w.add_node("node-1", "10.64.1.11")
    w.add_nodeset("gpu")
    return w


def member(w: OperatorWorld) -> tuple[Json, Json]:
    """(the Pod, its slurmd container)"""
    [pod] = w.members("gpu").values()
    [slurmd] = [c for c in pod["spec"]["containers"] if c["name"] == m.CONTAINER]
    return pod, slurmd


async def test_issue51_the_runner_is_mounted_executable_where_slurm_conf_names_it() -> None:
    """Catches: HealthCheckProgram pointing at a path the member lacks, or a mode slurmd
    cannot execute (ConfigMap files are 0644 by default)."""
    w = world("r1-health-checks")
    await w.settle("gpu")
    pod, slurmd = member(w)
    mount = {"name": m.HEALTH_CHECKS_VOLUME, "mountPath": "/etc/sunk/health-checks", "readOnly": True}
    assert mount in slurmd["volumeMounts"]
    volume = {"name": m.HEALTH_CHECKS_VOLUME, "configMap": {"name": "r1-health-checks", "defaultMode": 0o555}}
    assert volume in pod["spec"]["volumes"]


async def test_issue51_the_operators_scripts_are_mounted_beside_it_and_optional() -> None:
    """Catches: a missing scripts ConfigMap keeping every member from starting (it is a
    configuration problem the runner reports, not a reason to stop slurmd)."""
    w = world("r1-health-checks", "site-checks")
    await w.settle("gpu")
    pod, slurmd = member(w)
    mount = {"name": m.HEALTH_SCRIPTS_VOLUME, "mountPath": "/etc/sunk/health-checks.d", "readOnly": True}
    assert mount in slurmd["volumeMounts"]
    config_map = {"name": "site-checks", "defaultMode": 0o555, "optional": True}
    assert {"name": m.HEALTH_SCRIPTS_VOLUME, "configMap": config_map} in pod["spec"]["volumes"]


async def test_issue51_with_checks_off_members_mount_nothing() -> None:
    """Catches: the default (off) changing members' Pods."""
    plain = world()
    await plain.settle("gpu")
    pod, slurmd = member(plain)
    names = {v["name"] for v in pod["spec"]["volumes"]} | {mt["name"] for mt in slurmd["volumeMounts"]}
    assert not names & {m.HEALTH_CHECKS_VOLUME, m.HEALTH_SCRIPTS_VOLUME}


async def test_issue51_turning_the_checks_on_rolls_the_members_out() -> None:
    """Catches: members made before the checks were on never getting the runner (their
    slurmd would find no HealthCheckProgram)."""
    before = world()
    await before.settle("gpu")
    after = before.restarted_with(replace(before.config, health_checks_configmap="r1-health-checks"))
    await after.reconcile("gpu")
    assert after.condition("gpu", "UpToDate")["reason"] == "RollingOut"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    required = [
        "--namespace=n",
        "--release=r1",
        "--slurm-api-base=https://x",
        "--slurm-jwt-key-file=/k",
        "--conf-server=c:6817",
        "--auth-secret=a",
    ]
    return parser.parse_args([*required, *argv])


def test_issue51_the_flags_reach_the_operators_settings() -> None:
    """Catches: the chart's flags parsed but dropped on the way to the members."""
    cfg = config.from_args(
        _args("--health-checks-configmap=r1-health-checks", "--health-check-scripts-configmap=site")
    )
    assert (cfg.health_checks_configmap, cfg.health_check_scripts_configmap) == ("r1-health-checks", "site")


def test_issue51_scripts_without_the_runner_are_refused_at_start() -> None:
    """Catches: scripts mounted where nothing runs them, silently."""
    with pytest.raises(ValueError, match="--health-checks-configmap"):
        config.from_args(_args("--health-check-scripts-configmap=site"))
