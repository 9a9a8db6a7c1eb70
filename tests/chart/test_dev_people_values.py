"""The dev platform's directory values (issue #52): StartTLS with the directory's CA where
slapd offers it, and otherwise plain LDAP said out loud with the chart's acknowledgement,
so password logins install either way and never over plain LDAP silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from sunk_dev import DevCluster, directory
from sunk_dev.layout import Layout
from sunk_dev.people import directory_values
from sunk_dev.platform import merge_values
from tests.chart.conftest import render_chart


def cluster_with_directory(tmp_path: Path, *, tls: bool) -> DevCluster:
    layout = Layout(tmp_path)
    here = directory.directory_dir(layout)
    here.mkdir(parents=True)
    (here / "slapd.conf").write_text("TLSCertificateFile /x\n" if tls else "database mdb\n")
    if tls:
        directory.tls_dir(layout).mkdir()
        directory.ca_file(layout).write_text("-----BEGIN CERTIFICATE-----\n")
    return DevCluster(layout)


def test_issue52_a_directory_with_starttls_is_named_with_it_and_its_ca(tmp_path: Path) -> None:
    values = directory_values(cluster_with_directory(tmp_path, tls=True))
    assert values["directory"]["startTLS"] is True
    assert values["directory"]["caSecret"] == {"name": "ldap-ca", "key": "ca.crt"}
    assert "login" not in values


def test_issue52_a_directory_started_before_starttls_is_named_plain_with_the_acknowledgement(
    tmp_path: Path,
) -> None:
    values = directory_values(cluster_with_directory(tmp_path, tls=False))
    assert "startTLS" not in values["directory"]
    assert values["login"] == {"acknowledgePasswordsInClear": True}


@pytest.mark.parametrize("tls", [True, False], ids=["starttls", "plain"])
def test_issue52_the_dev_values_install_with_password_logins(
    helm: Path, slurm_chart: Path, tmp_path: Path, tls: bool
) -> None:
    dev = directory_values(cluster_with_directory(tmp_path, tls=tls))
    objects = render_chart(helm, slurm_chart, values=merge_values(dev, {"login": {"passwordLogin": True}}))
    [login] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "r1-login"]
    [sshd] = [c for c in login["spec"]["template"]["spec"]["containers"] if c["name"] == "sshd"]
    env = {e["name"]: e.get("value") for e in sshd["env"]}
    assert env["SUNK_DIRECTORY_START_TLS"] == ("true" if tls else "false")
