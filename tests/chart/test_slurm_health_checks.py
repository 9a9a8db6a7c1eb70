"""Issue #51: the chart's node health checks (slurm.healthChecks). On by default (off, the
release renders without them); on, slurm.conf names the runner, the runner and its settings
ship in a ConfigMap the operator mounts into members, and values the runner could not use
fail the render naming the value."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chart.test_slurm_chart import conf_value, container, fails, named, of_kind, render

Obj = dict[str, Any]
RUNNER = Path(__file__).resolve().parents[2] / "charts" / "slurm" / "files" / "health-check.sh"
ON = "slurm.healthChecks.enabled=true"
KEYS = ("HealthCheckProgram", "HealthCheckInterval", "HealthCheckNodeState")


def _operator_args(objects: list[Obj]) -> list[str]:
    args: list[str] = container(named(objects, "Deployment", "r1-operator"), "operator")["args"]
    return args


def _settings(objects: list[Obj], tmp_path: Path) -> dict[str, str]:
    """The settings file as the runner's sh reads it."""
    text = named(objects, "ConfigMap", "r1-health-checks")["data"]["settings"]
    path = tmp_path / "settings"
    path.write_text(text)
    names = (
        "checks timeout_s budget_s scontrol_s mounts spool_min_mib nvidia_smi dcgm_level "
        "scripts_dir scripts_configmap"
    )
    script = f'. "{path}"; for v in {names}; do eval "printf \'%s=%s\\n\' $v \\"\\${{$v:-}}\\""; done'
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_issue51_on_by_default_and_off_renders_nothing_of_the_checks(helm: Path, slurm_chart: Path) -> None:
    """Catches: a default install without checks (a failing node would keep taking jobs), or
    checks turned off still reaching slurm.conf, the ConfigMap or the operator."""
    assert conf_value(render(slurm_chart, helm), "HealthCheckProgram") == "/etc/sunk/health-checks/run"
    objects = render(slurm_chart, helm, "slurm.healthChecks.enabled=false")
    assert [conf_value(objects, key) for key in KEYS] == [None, None, None]
    assert [c for c in of_kind(objects, "ConfigMap") if c["metadata"]["name"] == "r1-health-checks"] == []
    assert not [a for a in _operator_args(objects) if a.startswith("--health-check")]


def test_issue51_on_slurm_conf_names_the_mounted_runner(helm: Path, slurm_chart: Path) -> None:
    """Catches: a HealthCheckProgram path other than where the operator mounts the runner
    (sunk.operator.nodeset.members.HEALTH_CHECKS_PATH), or an interval Slurm would misread."""
    objects = render(slurm_chart, helm, ON)
    assert conf_value(objects, "HealthCheckProgram") == "/etc/sunk/health-checks/run"
    assert conf_value(objects, "HealthCheckInterval") == "60"
    assert conf_value(objects, "HealthCheckNodeState") == "ANY,CYCLE"


def test_issue51_on_the_runner_ships_in_a_configmap_the_operator_mounts(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches: the runner in the ConfigMap differing from files/health-check.sh (the one the
    unit tests run), or the operator not told to mount it."""
    objects = render(slurm_chart, helm, ON, "slurm.healthChecks.scripts.configMap=site-checks")
    data = named(objects, "ConfigMap", "r1-health-checks")["data"]
    assert data["run"].strip() == RUNNER.read_text().strip()
    args = _operator_args(objects)
    assert "--health-checks-configmap=r1-health-checks" in args
    assert "--health-check-scripts-configmap=site-checks" in args


def test_issue51_the_settings_carry_the_chosen_checks(helm: Path, slurm_chart: Path, tmp_path: Path) -> None:
    """Catches: a check turned off in values still run (or one turned on missing), or a
    settings file sh cannot read."""
    values = {
        "slurm": {
            "healthChecks": {
                "enabled": True,
                "timeoutSeconds": 20,
                "checks": {"gpus": False, "mounts": ["/home", "/shared"], "spool": {"minFreeMiB": 2048}},
                "scripts": {"configMap": "site-checks"},
            }
        }
    }
    settings = _settings(render(slurm_chart, helm, values=values), tmp_path)
    assert settings == {
        "checks": "cpus memory nvidia mounts spool",
        "timeout_s": "20",
        "budget_s": "34",
        "scontrol_s": "5",
        "mounts": "/home /shared",
        "spool_min_mib": "2048",
        "nvidia_smi": "auto",
        "dcgm_level": "1",
        "scripts_dir": "/etc/sunk/health-checks.d",
        "scripts_configmap": "site-checks",
    }


def test_issue51_no_mounts_and_no_spool_floor_leave_those_checks_out(
    helm: Path, slurm_chart: Path, tmp_path: Path
) -> None:
    """Catches: a mounts check with nothing to check, or a spool floor of 0 still checked."""
    objects = render(slurm_chart, helm, ON, "slurm.healthChecks.checks.spool.minFreeMiB=0")
    settings = _settings(objects, tmp_path)
    assert settings["checks"] == "cpus memory gpus nvidia"
    assert settings["scripts_dir"] == ""


@pytest.mark.parametrize(
    ("values", "checks", "nvidia_smi", "dcgm_level"),
    [
        ({}, "cpus memory gpus nvidia spool", "auto", "1"),
        ({"nvidia": {"enabled": True}}, "cpus memory gpus nvidia spool", "required", "1"),
        ({"nvidia": {"enabled": False}}, "cpus memory gpus spool", "auto", "1"),
        ({"nvidia": False}, "cpus memory gpus spool", "auto", "1"),
        ({"dcgm": {"enabled": True, "level": 1}}, "cpus memory gpus nvidia dcgm spool", "auto", "1"),
        ({"dcgm": True}, "cpus memory gpus nvidia dcgm spool", "auto", "1"),
    ],
    ids=["default", "nvidia-required", "nvidia-off", "nvidia-false", "dcgm-on", "dcgm-true"],
)
def test_issue51_the_gpu_checks_follow_their_values(
    helm: Path,
    slurm_chart: Path,
    tmp_path: Path,
    values: dict[str, Any],
    checks: str,
    nvidia_smi: str,
    dcgm_level: str,
) -> None:
    """Catches: nvidia-smi's check not on by default (auto: where it is installed), `true`
    not reaching the runner as required, a check turned off still run, or DCGM's diagnostic
    run without being asked for (it needs nv-hostengine)."""
    objects = render(
        slurm_chart, helm, values={"slurm": {"healthChecks": {"enabled": True, "checks": values}}}
    )
    settings = _settings(objects, tmp_path)
    assert (settings["checks"], settings["nvidia_smi"], settings["dcgm_level"]) == (
        checks,
        nvidia_smi,
        dcgm_level,
    )


def test_issue51_an_interval_in_minutes_is_given_to_slurm_in_seconds(helm: Path, slurm_chart: Path) -> None:
    """Catches: "5m" written as is (Slurm reads a number of seconds)."""
    objects = render(slurm_chart, helm, ON, "slurm.healthChecks.interval=5m")
    assert conf_value(objects, "HealthCheckInterval") == "300"


def test_issue51_extra_conf_cannot_replace_the_checks_lines(helm: Path, slurm_chart: Path) -> None:
    """Catches: a second HealthCheckProgram line in slurm.conf (Slurm takes the last)."""
    error = fails(slurm_chart, helm, ON, "slurm.extraConf.HealthCheckProgram=/bin/true")
    assert "slurm.extraConf.HealthCheckProgram" in error


@pytest.mark.parametrize(
    ("value", "named_in_error"),
    [
        ("slurm.healthChecks.interval=soon", "slurm.healthChecks.interval"),
        ("slurm.healthChecks.interval=0", "slurm.healthChecks.interval"),
        ("slurm.healthChecks.interval=20h", "slurm.healthChecks.interval"),
        ("slurm.healthChecks.timeoutSeconds=ten", "slurm.healthChecks.timeoutSeconds"),
        ("slurm.healthChecks.timeoutSeconds=50", "slurm.healthChecks.timeoutSeconds"),
        ("slurm.healthChecks.timeoutSeconds=31", "slurm.healthChecks.timeoutSeconds"),
        ("slurm.healthChecks.timeoutSeconds=0", "slurm.healthChecks.timeoutSeconds"),
        ("slurm.healthChecks.nodeState=ANY\\,BUSY", "slurm.healthChecks.nodeState"),
        ("slurm.healthChecks.nodeState=START_ONLY", "slurm.healthChecks.nodeState"),
        ("slurm.healthChecks.nodeState=NONDRAINED_IDLE\\,MIXED", "slurm.healthChecks.nodeState"),
        ("slurm.healthChecks.nodeState=ALLOC", "slurm.healthChecks.nodeState"),
        ("slurm.healthChecks.checks.mounts={data}", "slurm.healthChecks.checks.mounts"),
        ("slurm.healthChecks.checks.mounts={/data;rm}", "slurm.healthChecks.checks.mounts"),
        ("slurm.healthChecks.checks.spool.minFreeMiB=lots", "slurm.healthChecks.checks.spool.minFreeMiB"),
        ("slurm.healthChecks.scripts.configMap=Site_Checks", "slurm.healthChecks.scripts.configMap"),
        ("slurm.healthChecks.checks.nvidia.enabled=sometimes", "slurm.healthChecks.checks.nvidia.enabled"),
        ("slurm.healthChecks.checks.dcgm.enabled=yes", "slurm.healthChecks.checks.dcgm.enabled"),
        ("slurm.healthChecks.checks.dcgm.level=3", "slurm.healthChecks.checks.dcgm.level"),
        ("slurm.healthChecks.replace.after=later", "slurm.healthChecks.replace.after"),
        ("slurm.healthChecks.replace.after=30x", "slurm.healthChecks.replace.after"),
        ("slurm.healthChecks.replace.after=30s", "slurm.healthChecks.replace.after"),
        ("slurm.healthChecks.replace.maxUnavailable=-1", "slurm.healthChecks.replace.maxUnavailable"),
        ("slurm.healthChecks.replace.maxUnavailable=one", "slurm.healthChecks.replace.maxUnavailable"),
    ],
)
def test_issue51_values_the_runner_cannot_use_fail_naming_the_value(
    helm: Path, slurm_chart: Path, value: str, named_in_error: str
) -> None:
    """Catches: an interval or timeout that does not parse reaching slurm.conf or the runner
    (Slurm would ignore the line; a timeout past the budget would never fail a hang), a
    START_ONLY (26.05 only, and before registration a dynamic node cannot be drained), node
    states under which a drained idle node never runs the checks (never returned), a path
    or name that would break the sourced settings, or a replacement delay shorter than the
    interval (a member replaced before its checks ran again) or one the operator cannot read."""
    assert named_in_error in fails(slurm_chart, helm, ON, value)


def test_issue51_idle_with_cycle_is_accepted(helm: Path, slurm_chart: Path) -> None:
    """Catches: the ANY-or-IDLE rule refusing a state list that does include IDLE."""
    objects = render(slurm_chart, helm, ON, "slurm.healthChecks.nodeState=idle\\,mixed\\,cycle")
    assert conf_value(objects, "HealthCheckNodeState") == "IDLE,MIXED,CYCLE"


def test_issue51_bad_values_are_not_checked_while_the_checks_are_off(helm: Path, slurm_chart: Path) -> None:
    """Catches: a half-written section breaking installs that leave the checks off."""
    render(slurm_chart, helm, "slurm.healthChecks.enabled=false", "slurm.healthChecks.interval=soon")


def test_issue51_the_operator_is_told_when_to_replace_a_member_the_checks_keep_drained(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches: the replacement values not reaching the operator, or reaching it in a form
    its flags do not read (minutes where it expects a duration)."""
    args = _operator_args(render(slurm_chart, helm, ON))
    assert "--health-replace-after=1800s" in args
    assert "--health-replace-max-unavailable=1" in args
    objects = render(
        slurm_chart,
        helm,
        ON,
        "slurm.healthChecks.replace.after=2h",
        "slurm.healthChecks.replace.maxUnavailable=0",
    )
    args = _operator_args(objects)
    assert {"--health-replace-after=7200s", "--health-replace-max-unavailable=0"} <= set(args)


def test_issue51_no_replacement_flags_while_the_checks_are_off(helm: Path, slurm_chart: Path) -> None:
    """Catches: members replaced for checks that do not run (the operator refuses the flag
    without the runner's ConfigMap, so the release would not start)."""
    args = _operator_args(render(slurm_chart, helm, "slurm.healthChecks.enabled=false"))
    assert not [a for a in args if a.startswith("--health-replace")]


def test_issue51_kubectl_get_nodesets_shows_the_unhealthy_members(helm: Path, slurm_chart: Path) -> None:
    """Catches: an UNHEALTHY column reading a field the operator does not write, or a status
    schema that prunes the count or a member's unhealthySince (the API server drops fields a
    structural schema does not name, and the drain's start would be lost between passes)."""
    [crd] = [c for c in render(slurm_chart, helm) if c["kind"] == "CustomResourceDefinition"]
    [version] = crd["spec"]["versions"]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["Unhealthy"] == {"name": "Unhealthy", "type": "integer", "jsonPath": ".status.unhealthy"}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["unhealthy"]["type"] == "integer"
    member = status["members"]["items"]["properties"]
    assert member["unhealthySince"]["format"] == "date-time"
