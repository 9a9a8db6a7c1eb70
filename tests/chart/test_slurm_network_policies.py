"""Issue #38 point 5: NetworkPolicies on by default, each daemon reachable only by the
components that use it. These tests read the rendered policies; the daemons' own
authentication stays the first stop (docs/security.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.chart.test_slurm_chart import ON, named, render

Obj = dict[str, Any]


def _policy(objects: list[Obj], name: str) -> Obj:
    return named(objects, "NetworkPolicy", name)


def _senders(policy: Obj, port: int | None = None) -> set[str]:
    """The components (app.kubernetes.io/name) that may open connections to `port`."""
    names: set[str] = set()
    for rule in policy["spec"]["ingress"]:
        ports = {p["port"] for p in rule.get("ports", [])}
        if port is not None and ports and port not in ports:
            continue
        for peer in rule.get("from", [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "*"}}}]):
            names.add(peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"])
    return names


def test_issue38_mariadb_is_reached_by_slurmdbd_alone(helm: Path, slurm_chart: Path) -> None:
    """Catches any other Pod, a tenant's included, reaching the database port."""
    policy = _policy(render(slurm_chart, helm), "r1-mariadb")
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "mariadb",
        "app.kubernetes.io/instance": "r1",
    }
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert _senders(policy, 3306) == {"slurmdbd"}
    assert [r["ports"] for r in policy["spec"]["ingress"]] == [[{"port": 3306, "protocol": "TCP"}]]


def test_issue38_each_daemon_lists_exactly_the_components_that_use_it(helm: Path, slurm_chart: Path) -> None:
    """A name too many opens a path; a name missing breaks Slurm where policies hold."""
    objects = render(slurm_chart, helm, *ON)
    assert _senders(_policy(objects, "r1-slurmctld"), 6817) == {
        "slurmd",
        "login",
        "slurmrestd",
        "slurmdbd",
        "sunk-scheduler",
    }
    assert _senders(_policy(objects, "r1-slurmd")) == {"slurmctld", "login", "slurmd"}
    assert _senders(_policy(objects, "r1-slurmrestd"), 6820) == {
        "sunk-operator",
        "slurmctld",
        "partition-check",
        "sunk-scheduler",
    }
    assert _senders(_policy(objects, "r1-slurmdbd"), 6819) == {"slurmctld", "slurmrestd", "login", "slurmd"}
    # every selector names this release, so another release's Pods are strangers
    for policy in [o for o in objects if o["kind"] == "NetworkPolicy"]:
        for rule in policy["spec"]["ingress"]:
            for peer in rule.get("from", []):
                assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "r1", policy


def test_issue38_the_hooks_api_is_reached_by_this_releases_slurm_nodes_only(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches the scheduler chart's hooks policy left off (any Pod could call the hooks
    API) or open to every slurmd of the namespace, not this release's."""
    policy = _policy(render(slurm_chart, helm, *ON), "r1-sunk-scheduler")
    hooks, open_ports = policy["spec"]["ingress"]
    assert hooks["ports"] == [{"port": 8000, "protocol": "TCP"}]
    assert hooks["from"] == [
        {
            "podSelector": {
                "matchLabels": {"app.kubernetes.io/name": "slurmd", "app.kubernetes.io/instance": "r1"}
            }
        }
    ]
    assert "from" not in open_ports and {p["port"] for p in open_ports["ports"]} == {8080, 8081}


def test_issue38_ssh_and_slurmrestd_take_the_administrators_peers(helm: Path, slurm_chart: Path) -> None:
    office = {"ipBlock": {"cidr": "192.0.2.0/24"}}
    portal = {"namespaceSelector": {"matchLabels": {"team": "portal"}}}
    values = {"networkPolicy": {"sshFrom": [office], "restapiFrom": [portal]}}
    objects = render(slurm_chart, helm, values=values)
    ssh, _ = _policy(objects, "r1-login")["spec"]["ingress"]
    assert ssh == {"ports": [{"port": 22, "protocol": "TCP"}], "from": [office]}
    [rest] = _policy(objects, "r1-slurmrestd")["spec"]["ingress"]
    assert rest["from"][-1] == portal


def test_issue38_policies_can_be_turned_off(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm, "networkPolicy.enabled=false")
    assert not [o for o in objects if o["kind"] == "NetworkPolicy"]


# -- issue #52: the hops that stay in clear (docs/security.md, "Slurm's own connections") -------


def test_issue52_the_ports_a_forwarded_token_crosses_admit_only_this_releases_slurm_components(
    helm: Path, slurm_chart: Path
) -> None:
    """slurmrestd hands each caller's JWT (the scheduler's is root's) on to slurmctld (6817)
    and slurmdbd (6819) in Slurm's own protocol, unencrypted with Debian's Slurm. Catches the
    peers the values add for SSH or slurmrestd (a namespace, an address block) reaching those
    ports too, where a token seen on the way could be used directly."""
    office = {"ipBlock": {"cidr": "192.0.2.0/24"}}
    portal = {"namespaceSelector": {"matchLabels": {"team": "portal"}}}
    values = {
        "networkPolicy": {"sshFrom": [office], "restapiFrom": [portal]},
        "scheduler": {"enabled": True, "scheduler": {"scope": {"namespaces": "tenants"}}},
    }
    objects = render(slurm_chart, helm, values=values)
    for name, port in (("r1-slurmctld", 6817), ("r1-slurmdbd", 6819)):
        for rule in _policy(objects, name)["spec"]["ingress"]:
            if port not in {p["port"] for p in rule.get("ports", [])}:
                continue
            assert rule.get("from"), (name, rule)  # never open to all
            for peer in rule["from"]:
                assert set(peer) == {"podSelector"}, (name, peer)  # no namespace, no address block
                assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "r1"


def test_issue52_the_database_password_is_mounted_by_mariadb_and_slurmdbd_alone(
    helm: Path, slurm_chart: Path
) -> None:
    """'slurm'@'%' may log in from any address (on a Pod network an address is not an
    identity): what holds is the policy above and a password only these two Pods read."""
    objects = render(slurm_chart, helm, *ON)
    readers: set[str] = set()
    for workload in objects:
        spec = (workload.get("spec") or {}).get("template", {}).get("spec") or {}
        for volume in spec.get("volumes", []):
            if (volume.get("secret") or {}).get("secretName") == "r1-mariadb":
                readers.add(workload["metadata"]["name"])
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            for env in container.get("env", []):
                ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
                assert ref.get("name") != "r1-mariadb", (workload["metadata"]["name"], env)
    assert readers == {"r1-mariadb", "r1-accounting"}  # MariaDB and slurmdbd
