"""Issue #38 point 6: slurmrestd's traffic, and the tokens in it, over TLS by default."""

from __future__ import annotations

from pathlib import Path

from tests.chart.test_slurm_chart import ON, container, fails, named, pod_spec, render


def _args(objects: list[dict], kind: str, name: str, container_name: str) -> dict[str, str]:
    found = container(named(objects, kind, name), container_name)["args"]
    return dict(a.split("=", 1) for a in found if a.startswith("--") and "=" in a)


def test_issue38_slurmrestd_answers_only_on_a_socket_that_stunnel_serves_over_tls(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches slurmrestd still listening on the Pod's network in clear beside stunnel:
    a client could then skip TLS and send its token readable to anyone on the path."""
    objects = render(slurm_chart, helm)
    restapi = named(objects, "Deployment", "r1-restapi")
    slurmrestd = container(restapi, "slurmrestd")
    assert slurmrestd["args"][-1] == "unix:/run/slurmrestd/slurmrestd.socket"
    assert "ports" not in slurmrestd
    tls = container(restapi, "tls")
    assert tls["args"] == ["stunnel", "/etc/sunk/stunnel.conf"]
    assert tls["ports"] == [{"name": "https", "containerPort": 6820}]
    assert {"name": "certificate", "mountPath": "/etc/slurmrestd-tls", "readOnly": True} in tls[
        "volumeMounts"
    ]
    service = named(objects, "Service", "r1-restapi")
    assert service["spec"]["ports"] == [{"name": "https", "port": 6820, "targetPort": "https"}]


def test_issue38_every_client_in_the_chart_speaks_https_and_verifies_with_the_ca(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches a client left on http (it would fail against stunnel) or on https without
    the CA (every request would fail verification: the certificate is self-signed)."""
    objects = render(slurm_chart, helm, *ON)
    clients = [
        ("Deployment", "r1-operator", "operator", "/etc/sunk/slurmrestd-ca/ca.crt"),
        ("StatefulSet", "r1-controller", "apply-config", "/etc/sunk/slurmrestd-ca/ca.crt"),
        ("Job", "r1-partition-check", "check", "/etc/sunk/slurmrestd-ca/ca.crt"),
        ("Deployment", "r1-sunk-scheduler", "scheduler", "/var/run/secrets/slurm-ca/ca.crt"),
    ]
    for kind, name, container_name, ca_file in clients:
        flags = _args(objects, kind, name, container_name)
        assert flags["--slurm-api-base"] == "https://r1-restapi:6820", name
        assert flags["--slurm-ca-file"] == ca_file, name
        secrets = [v["secret"] for v in pod_spec(named(objects, kind, name))["volumes"] if "secret" in v]
        assert any(
            s["secretName"] == "r1-restapi-tls" and s["items"][0]["key"] == "ca.crt" for s in secrets
        ), name


def test_issue38_tls_off_is_plain_http_everywhere_and_the_notes_warn(helm: Path, slurm_chart: Path) -> None:
    off = ("restapi.tls.enabled=false",)
    objects = render(slurm_chart, helm, *off)
    restapi = named(objects, "Deployment", "r1-restapi")
    assert [c["name"] for c in pod_spec(restapi)["containers"]] == ["slurmrestd"]
    assert container(restapi, "slurmrestd")["args"][-1] == "0.0.0.0:6820"
    flags = _args(objects, "Deployment", "r1-operator", "operator")
    assert flags["--slurm-api-base"] == "http://r1-restapi:6820" and "--slurm-ca-file" not in flags
    secrets_job = container(named(objects, "Job", "r1-secrets"), "ensure")["args"]
    assert not [a for a in secrets_job if a.startswith("--restapi-tls")]


def test_issue38_a_certificate_of_your_own_is_used_and_none_is_made(helm: Path, slurm_chart: Path) -> None:
    objects = render(
        slurm_chart,
        helm,
        *ON,
        "restapi.tls.secret=corp-tls",
        "scheduler.scheduler.slurm.caSecret.name=corp-tls",
    )
    restapi = named(objects, "Deployment", "r1-restapi")
    [certificate] = [v for v in pod_spec(restapi)["volumes"] if v["name"] == "certificate"]
    assert certificate["secret"]["secretName"] == "corp-tls"
    secrets_job = container(named(objects, "Job", "r1-secrets"), "ensure")["args"]
    assert not [a for a in secrets_job if a.startswith("--restapi-tls")]


def test_issue38_a_scheduler_that_could_not_reach_or_verify_slurmrestd_fails_the_render(
    helm: Path, slurm_chart: Path
) -> None:
    """Each mismatch would leave the scheduler unable to talk to Slurm, seen only in its log."""
    said = fails(slurm_chart, helm, *ON, "restapi.tls.enabled=false")
    assert "restapi.tls.enabled is false: set scheduler.scheduler.slurm.apiBase to an http URL" in said
    said = fails(slurm_chart, helm, *ON, "restapi.tls.secret=corp-tls")
    assert "scheduler.scheduler.slurm.caSecret.name must be corp-tls" in said
    said = fails(slurm_chart, helm, *ON, "scheduler.scheduler.slurm.apiBase=http://r1-restapi:6820")
    assert "scheduler.scheduler.slurm.apiBase must be an https URL" in said
