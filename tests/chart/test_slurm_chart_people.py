"""The Slurm chart's directory values (R10.6): with a directory the operator reads it with
the password from a Secret and may update only the people ConfigMap; half-given values
fail the render naming what is missing; without one nothing of it is rendered."""

from __future__ import annotations

from pathlib import Path

from tests.chart.test_slurm_chart import container, fails, named, pod_spec, render

DIRECTORY = {
    "directory": {
        "uri": "ldaps://ldap.example:636",
        "bindDN": "cn=reader,dc=example,dc=org",
        "bindPasswordSecret": {"name": "ldap-reader", "key": "password"},
        "userBase": "ou=people,dc=example,dc=org",
        "groupBase": "ou=groups,dc=example,dc=org",
        "caSecret": {"name": "ldap-ca", "key": "ca.crt"},
    }
}


def test_r10_6_the_operator_reads_the_directory_with_the_password_from_its_secret(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm, values=DIRECTORY)
    operator = named(objects, "Deployment", "r1-operator")
    args = container(operator, "operator")["args"]
    assert "--directory-uri=ldaps://ldap.example:636" in args
    assert "--directory-password-file=/etc/sunk/directory/password" in args
    assert "--directory-ca-file=/etc/sunk/directory-ca/ca.crt" in args
    assert "--people-configmap=r1-people" in args
    assert not [a for a in args if "password=" in a.lower() and "file" not in a]  # never the password itself
    volumes = {v["name"]: v for v in pod_spec(operator)["volumes"]}
    assert volumes["directory-password"]["secret"]["secretName"] == "ldap-reader"


def test_r10_6_the_operator_may_update_the_people_configmap_and_no_other(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm, values=DIRECTORY)
    assert named(objects, "ConfigMap", "r1-people")["data"] == {}
    rules = named(objects, "Role", "r1-operator")["rules"]
    people = [r for r in rules if r.get("resourceNames") == ["r1-people"]]
    assert people == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["r1-people"],
            "verbs": ["get", "update"],
        }
    ]
    assert not [r for r in rules if "configmaps" in r["resources"] and "create" in r["verbs"]]


def test_r10_6_without_a_directory_nothing_of_it_is_rendered(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm)
    args = container(named(objects, "Deployment", "r1-operator"), "operator")["args"]
    assert [a for a in args if "directory" in a] == []
    assert [o for o in objects if o["metadata"]["name"] == "r1-people"] == []


def test_r10_6_a_directory_without_its_password_secret_fails_naming_the_value(
    helm: Path, slurm_chart: Path
) -> None:
    values = {"directory": {**DIRECTORY["directory"], "bindPasswordSecret": {"name": ""}}}
    assert "directory.bindPasswordSecret.name is needed" in fails(slurm_chart, helm, values=values)


def test_r10_6_a_directory_uri_that_is_not_ldap_fails(helm: Path, slurm_chart: Path) -> None:
    values = {"directory": {**DIRECTORY["directory"], "uri": "https://ldap.example"}}
    assert 'directory.uri is "https://ldap.example"' in fails(slurm_chart, helm, values=values)


def test_r10_6_login_and_slurmctld_read_the_people_where_the_name_service_looks(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm, values=DIRECTORY)
    for kind, name, box in (
        ("Deployment", "r1-login", "sshd"),
        ("StatefulSet", "r1-controller", "slurmctld"),
    ):
        workload = named(objects, kind, name)
        mounts = container(workload, box)["volumeMounts"]
        assert {"name": "people", "mountPath": "/var/lib/extrausers", "readOnly": True} in mounts, name
        assert {"name": "people", "configMap": {"name": "r1-people"}} in pod_spec(workload)["volumes"], name


def test_r10_6_sshd_takes_a_persons_keys_from_the_login_keys_and_the_directory(
    helm: Path, slurm_chart: Path
) -> None:
    script = " ".join(container(named(render(slurm_chart, helm), "Deployment", "r1-login"), "sshd")["args"])
    assert "AuthorizedKeysCommand=/usr/local/sbin/sunk-authorized-keys %u" in script


def test_issue35_password_logins_are_off_by_default(helm: Path, slurm_chart: Path) -> None:
    login = named(render(slurm_chart, helm, values=DIRECTORY), "Deployment", "r1-login")
    assert "PasswordAuthentication=no" in " ".join(container(login, "sshd")["args"])
    assert "directory-password" not in [v["name"] for v in pod_spec(login)["volumes"]]


def test_issue35_with_password_logins_sshd_asks_and_nslcd_beside_it_checks_with_the_directory(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm, values={**DIRECTORY, "login": {"passwordLogin": True}})
    login = named(objects, "Deployment", "r1-login")
    sshd = container(login, "sshd")
    assert "PasswordAuthentication=yes" in " ".join(sshd["args"])
    assert "PermitRootLogin=no" in " ".join(sshd["args"])  # root never, with a password least of all
    env = {e["name"]: e.get("value") for e in sshd["env"]}
    assert env["SUNK_DIRECTORY_URI"] == "ldaps://ldap.example:636"
    assert env["SUNK_DIRECTORY_PASSWORD_FILE"] == "/etc/sunk/directory/password"
    assert env["SUNK_DIRECTORY_CA_FILE"] == "/etc/sunk/directory-ca/ca.crt"
    assert not [
        e for e in sshd["env"] if "password" in str(e.get("value", "")).lower() and "/" not in e["value"]
    ]
    volumes = {v["name"]: v for v in pod_spec(login)["volumes"]}
    assert volumes["directory-password"]["secret"]["secretName"] == "ldap-reader"
    services = named(objects, "ConfigMap", "r1-login-services")["data"]
    assert services["service.nslcd"].strip() == "exec /usr/local/sbin/sunk-nslcd"


def test_issue35_password_logins_without_a_directory_fail_the_render(helm: Path, slurm_chart: Path) -> None:
    said = fails(slurm_chart, helm, values={"login": {"passwordLogin": True}})
    assert "login.passwordLogin checks people's passwords against the directory: set directory.uri" in said
