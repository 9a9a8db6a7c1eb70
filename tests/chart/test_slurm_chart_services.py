"""The Slurm chart's services and start-up scripts for the slurmd and login containers
(issue #35 point 4): they become files sunk-services reads, the operator and the login Pods
learn of them, a change restarts what runs them, and bad entries fail the render naming
the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chart.test_slurm_chart import container, fails, named, pod_spec, render

TICKER = {"name": "ticker", "run": "exec sleep 1000"}
MARK = {"name": "10-mark", "run": "touch /run/marked"}


def test_issue35_slurmd_services_become_a_configmap_the_operator_mounts_in_every_member(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm, values={"slurmd": {"services": [TICKER], "startupScripts": [MARK]}})
    configmap = named(objects, "ConfigMap", "r1-slurmd-services")
    assert configmap["data"] == {"service.ticker": "exec sleep 1000", "startup.10-mark": "touch /run/marked"}
    args = container(named(objects, "Deployment", "r1-operator"), "operator")["args"]
    assert "--services-configmap=r1-slurmd-services" in args
    assert [a for a in args if a.startswith("--services-digest=")]


def test_issue35_without_services_nothing_is_rendered_and_the_operator_mounts_nothing(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm)
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"]
    assert not [name for name in names if name.endswith("-services")]
    args = container(named(objects, "Deployment", "r1-operator"), "operator")["args"]
    assert not [a for a in args if a.startswith("--services-")]
    login = named(objects, "Deployment", "r1-login")
    assert "annotations" not in login["spec"]["template"]["metadata"]


def test_issue35_a_changed_slurmd_service_changes_the_operators_digest(helm: Path, slurm_chart: Path) -> None:
    def digest(run: str) -> str:
        objects = render(slurm_chart, helm, values={"slurmd": {"services": [{"name": "ticker", "run": run}]}})
        args = container(named(objects, "Deployment", "r1-operator"), "operator")["args"]
        [flag] = [a for a in args if a.startswith("--services-digest=")]
        return flag

    assert digest("exec sleep 1000") != digest("exec sleep 2000")


def test_issue35_sshd_runs_under_the_supervisor_with_the_login_services_mounted(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm, values={"login": {"services": [TICKER]}})
    login = named(objects, "Deployment", "r1-login")
    sshd = container(login, "sshd")
    assert sshd["args"][:4] == ["sunk-services", "login", "sh", "-c"]
    mount = {"name": "sunk-services", "mountPath": "/etc/sunk/services", "readOnly": True}
    assert mount in sshd["volumeMounts"]
    volumes = {v["name"]: v for v in pod_spec(login)["volumes"]}
    assert volumes["sunk-services"]["configMap"] == {"name": "r1-login-services"}
    assert named(objects, "ConfigMap", "r1-login-services")["data"] == {"service.ticker": "exec sleep 1000"}
    # sackd, in the same image, stays a container of its own, outside the supervisor.
    assert container(login, "sackd")["args"][0] == "/usr/sbin/sackd"


def test_issue35_a_changed_login_service_restarts_the_login_pods(helm: Path, slurm_chart: Path) -> None:
    def annotations(run: str) -> dict[str, str]:
        objects = render(slurm_chart, helm, values={"login": {"services": [{"name": "ticker", "run": run}]}})
        return named(objects, "Deployment", "r1-login")["spec"]["template"]["metadata"]["annotations"]  # type: ignore[no-any-return]

    assert annotations("exec sleep 1") != annotations("exec sleep 2")


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"slurmd": {"services": [{"name": "Ticker", "run": "x"}]}}, 'slurmd.services[0].name is "Ticker"'),
        (
            {"slurmd": {"services": [{"name": "slurmd", "run": "x"}]}},
            "the name of one of the container's own",
        ),
        ({"login": {"services": [{"name": "login", "run": "x"}]}}, "the name of one of the container's own"),
        ({"slurmd": {"startupScripts": [{"name": "a"}]}}, "slurmd.startupScripts[0] (a) has no run"),
        ({"login": {"services": [TICKER, TICKER]}}, "login.services names ticker twice"),
        ({"slurmd": {"services": ["exec sleep 1"]}}, "slurmd.services[0] must be {name, run}"),
    ],
)
def test_issue35_a_bad_service_entry_fails_the_render_naming_it(
    helm: Path, slurm_chart: Path, values: dict[str, object], said: str
) -> None:
    assert said in fails(slurm_chart, helm, values=values)
