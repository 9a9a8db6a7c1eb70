"""sshd on the login Pods gives nobody more than a shell (issue #38 point 4): no root login
unless the values say so, no forwarding of ports, agents or X11, and an outside address
only with the client ranges named."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

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


# -- issue #52: passwords only over TLS to the directory, and penalties for guessing ------------

PLAIN_DIRECTORY = {**DIRECTORY["directory"], "uri": "ldap://ldap.example:389", "caSecret": {"name": ""}}


def sshd_args(helm: Path, chart: Path, values: dict[str, Any]) -> list[str]:
    objects = render_chart(helm, chart, values=values)
    [login] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "r1-login"]
    [sshd] = [c for c in login["spec"]["template"]["spec"]["containers"] if c["name"] == "sshd"]
    return list(sshd["args"])


def test_issue52_password_logins_over_plain_ldap_fail_the_install_naming_the_acknowledgement(
    helm: Path, slurm_chart: Path
) -> None:
    """nslcd binds as the person with the password they typed: over ldap:// without StartTLS
    it would cross the network in clear."""
    values = {"directory": PLAIN_DIRECTORY, "login": {"passwordLogin": True}}
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render_chart(helm, slurm_chart, values=values)
    said = failed.value.stderr
    assert "the passwords would cross the network in clear" in said
    assert "directory.startTLS=true" in said and "login.acknowledgePasswordsInClear=true" in said


@pytest.mark.parametrize(
    "directory",
    [
        DIRECTORY["directory"],
        {**PLAIN_DIRECTORY, "startTLS": True, "caSecret": {"name": "ldap-ca", "key": "ca.crt"}},
    ],
    ids=["ldaps", "starttls"],
)
def test_issue52_password_logins_over_tls_to_the_directory_install_and_nslcd_demands_its_certificate(
    helm: Path, slurm_chart: Path, directory: dict[str, object]
) -> None:
    objects = render_chart(
        helm, slurm_chart, values={"directory": directory, "login": {"passwordLogin": True}}
    )
    [login] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "r1-login"]
    [sshd] = [c for c in login["spec"]["template"]["spec"]["containers"] if c["name"] == "sshd"]
    env = {e["name"]: e.get("value") for e in sshd["env"]}
    assert env["SUNK_DIRECTORY_CA_FILE"] == "/etc/sunk/directory-ca/ca.crt"
    assert env["SUNK_DIRECTORY_URI"].startswith("ldaps://") or env["SUNK_DIRECTORY_START_TLS"] == "true"
    nslcd = (slurm_chart.parents[1] / "images" / "login" / "sunk-nslcd").read_text()
    assert 'ldaps://* | *:true) echo "tls_reqcert demand"' in nslcd


def test_issue52_plain_ldap_with_the_acknowledgement_installs(helm: Path, slurm_chart: Path) -> None:
    values = {
        "directory": PLAIN_DIRECTORY,
        "login": {"passwordLogin": True, "acknowledgePasswordsInClear": True},
    }
    assert "-o PasswordAuthentication=yes" in " ".join(sshd_args(helm, slurm_chart, values))


def test_issue52_per_source_penalties_are_on_once_passwords_are_accepted(
    helm: Path, slurm_chart: Path
) -> None:
    """OpenSSH's defaults (authfail 5 s, refused from 15 s accrued, up to 10 min) hold with
    passwords: no PerSourcePenalties=no. Keys only, they stay off (a shared source address,
    nothing to guess)."""
    with_passwords = " ".join(sshd_args(helm, slurm_chart, {**DIRECTORY, "login": {"passwordLogin": True}}))
    assert "PerSourcePenalties" not in with_passwords
    assert "-o 'PerSourcePenalties=no'" in " ".join(sshd_args(helm, slurm_chart, DIRECTORY))


def test_issue52_penalties_the_values_tune_reach_sshd_and_no_is_refused_with_passwords(
    helm: Path, slurm_chart: Path
) -> None:
    login = {"passwordLogin": True, "perSourcePenalties": "authfail:30s max:30m"}
    login["perSourcePenaltyExemptList"] = ["192.0.2.10", "10.1.0.0/16"]
    args = " ".join(sshd_args(helm, slurm_chart, {**DIRECTORY, "login": login}))
    assert "-o 'PerSourcePenalties=authfail:30s max:30m'" in args
    assert "-o 'PerSourcePenaltyExemptList=192.0.2.10,10.1.0.0/16'" in args
    for penalties, says in [
        ("no", "would let a client guess passwords"),
        ("authfail:5s; rm -rf /", "sshd's PerSourcePenalties keywords only"),
    ]:
        bad = {**DIRECTORY, "login": {"passwordLogin": True, "perSourcePenalties": penalties}}
        with pytest.raises(subprocess.CalledProcessError) as failed:
            render_chart(helm, slurm_chart, values=bad)
        assert says in failed.value.stderr
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render_chart(helm, slurm_chart, values={"login": {"perSourcePenaltyExemptList": ["a' b"]}})
    assert "addresses or CIDR ranges only" in failed.value.stderr


def test_issue52_a_load_balancer_may_keep_client_addresses_for_the_penalties(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render_chart(
        helm,
        slurm_chart,
        "login.service.type=LoadBalancer",
        "login.service.loadBalancerSourceRanges[0]=10.0.0.0/8",
        "login.service.externalTrafficPolicy=Local",
    )
    [service] = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "r1-login"]
    assert service["spec"]["externalTrafficPolicy"] == "Local"
