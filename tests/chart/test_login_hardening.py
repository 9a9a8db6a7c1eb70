"""sshd on the login Pods gives nobody more than a shell (issue #38 point 4): no root login
unless the values say so, no forwarding of ports, agents or X11, and an outside address
only with the client ranges named."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.chart.conftest import render_chart
from tests.chart.test_slurm_chart_people import DIRECTORY


def sshd_command(helm: Path, chart: Path, *sets: str) -> str:
    objects = render_chart(helm, chart, *sets)
    [login] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "r1-login"]
    [sshd] = [c for c in login["spec"]["template"]["spec"]["containers"] if c["name"] == "sshd"]
    return " ".join(sshd["args"])


def test_root_cannot_log_in_over_ssh_by_default(helm: Path, slurm_chart: Path) -> None:
    assert "-o PermitRootLogin=no" in sshd_command(helm, slurm_chart)


def test_root_logs_in_with_a_key_only_when_the_values_allow_it(helm: Path, slurm_chart: Path) -> None:
    command = sshd_command(helm, slurm_chart, "login.allowRootLogin=true")
    assert "-o PermitRootLogin=prohibit-password" in command
    assert "-o PasswordAuthentication=no" in command


def test_sshd_forwards_nothing(helm: Path, slurm_chart: Path) -> None:
    command = sshd_command(helm, slurm_chart, "login.allowRootLogin=true")
    assert "-o DisableForwarding=yes" in command and "-o PermitTunnel=no" in command


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (["login.authorizedKeys[0]=ssh-ed25519 AAAA me"], "set login.allowRootLogin=true to use them"),
        (["login.service.type=LoadBalancer"], "login.service.loadBalancerSourceRanges"),
    ],
)
def test_values_that_reopen_a_closed_path_fail_naming_the_value(
    helm: Path, slurm_chart: Path, sets: list[str], says: str
) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render_chart(helm, slurm_chart, *sets)
    assert says in failed.value.stderr


def test_a_load_balancer_admits_only_the_ranges_named(helm: Path, slurm_chart: Path) -> None:
    objects = render_chart(
        helm,
        slurm_chart,
        "login.service.type=LoadBalancer",
        "login.service.loadBalancerSourceRanges[0]=10.0.0.0/8",
    )
    [service] = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "r1-login"]
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.0.0.0/8"]


def test_the_hook_job_makes_the_login_host_key_once_for_the_release(helm: Path, slurm_chart: Path) -> None:
    """Issue #38: each login replica made its own host keys at start."""
    objects = render_chart(helm, slurm_chart)
    [job] = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "r1-secrets"]
    assert "--host-keys-secret=r1-login-host-keys" in job["spec"]["template"]["spec"]["containers"][0]["args"]
    [login] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "r1-login"]
    [volume] = [v for v in login["spec"]["template"]["spec"]["volumes"] if v["name"] == "host-keys"]
    assert volume["secret"]["secretName"] == "r1-login-host-keys"
    assert "ssh-keygen -A" not in sshd_command(helm, slurm_chart)


def test_host_keys_the_values_name_replace_the_releases_own(helm: Path, slurm_chart: Path) -> None:
    objects = render_chart(helm, slurm_chart, "login.hostKeysSecret=site-host-keys")
    [job] = [o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "r1-secrets"]
    assert not [a for a in job["spec"]["template"]["spec"]["containers"][0]["args"] if "host-keys" in a]
    [login] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "r1-login"]
    [volume] = [v for v in login["spec"]["template"]["spec"]["volumes"] if v["name"] == "host-keys"]
    assert volume["secret"]["secretName"] == "site-host-keys"


DIRECTORY_AND_PASSWORDS = {
    **DIRECTORY,
    "login": {"passwordLogin": True},
    "sharedVolumes": [{"name": "home", "mountPath": "/home", "size": "1Gi"}],
}


@pytest.mark.parametrize("values", [{}, DIRECTORY_AND_PASSWORDS], ids=["defaults", "directory-people"])
def test_people_on_the_login_pod_can_write_nothing_another_container_reads(
    helm: Path, slurm_chart: Path, values: dict[str, object]
) -> None:
    """Issue #52: /run/slurm was an emptyDir every person could write (no sticky bit), shared
    with sackd, so anyone could swap the slurm.conf every later Slurm command on the Pod reads.
    Only the values' shared volumes (people's own files) may be both writable and shared."""
    objects = render_chart(helm, slurm_chart, values=values)
    [login] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "r1-login"]
    spec = login["spec"]["template"]["spec"]
    claims = {v["name"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
    [sshd] = [c for c in spec["containers"] if c["name"] == "sshd"]
    others = {m["name"] for c in spec["containers"] if c["name"] != "sshd" for m in c.get("volumeMounts", [])}
    writable = {m["name"] for m in sshd["volumeMounts"] if not m.get("readOnly")}
    assert "run-slurm" in {m["name"] for m in sshd["volumeMounts"]}
    assert (writable & others) - claims == set()
