"""R10.1-R10.3: charts/slurm, the platform chart, checked with the real helm binary."""

from __future__ import annotations

import copy
import functools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.conftest import CHART, render_chart, render_text

Obj = dict[str, Any]
PARTITIONS = {
    "slurm": {
        "partitions": [
            {"name": "cpu", "default": True, "options": {"MaxTime": "1-00:00:00", "PriorityTier": 2}},
            {"name": "gpu"},
        ]
    }
}
# The scheduler sub-chart switched on, placing Pods of a tenants' namespace.
ON = ("scheduler.enabled=true", "scheduler.scheduler.scope.namespaces=tenants")
SCHEDULER_ON: Obj = {"enabled": True, "scheduler": {"scope": {"namespaces": "tenants"}}}
NODESETS = {
    "nodeSets": [
        {"name": "cpus", "partitions": ["cpu"], "replicas": 2},
        {"name": "h100", "partitions": ["cpu", "gpu"], "features": ["h100"]},
    ]
}


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    [found] = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def container(workload: Obj, name: str) -> Obj:
    [found] = [c for c in pod_spec(workload)["containers"] if c["name"] == name]
    return found


def containers(objects: list[Obj]) -> Iterator[Obj]:
    for o in objects:
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            spec = pod_spec(o)
            yield from spec.get("initContainers") or []
            yield from spec["containers"]


def slurm_conf(objects: list[Obj]) -> list[str]:
    text: str = named(objects, "ConfigMap", "r1-slurm-config")["data"]["slurm.conf"]
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def conf_value(objects: list[Obj], key: str) -> str | None:
    found = [line.split("=", 1)[1] for line in slurm_conf(objects) if line.split("=", 1)[0] == key]
    assert len(found) <= 1, f"{key} set {len(found)} times"
    return found[0] if found else None


@functools.cache
def _rendered(chart: Path, helm: Path, sets: tuple[str, ...], values: str, release: str) -> list[Obj]:
    return render_chart(helm, chart, *sets, values=json.loads(values), release=release)


def render(chart: Path, helm: Path, *sets: str, values: Obj | None = None, release: str = "r1") -> list[Obj]:
    """The chart's objects (a render is made once per distinct input in this module)."""
    key = json.dumps(values, sort_keys=True)
    return copy.deepcopy(_rendered(chart, helm, sets, key, release))


def fails(chart: Path, helm: Path, *sets: str, values: Obj | None = None) -> str:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render(chart, helm, *sets, values=values)
    return str(failed.value.stderr)


# -- R10.1: one chart, renders stably, no secret in it -----------------------------------------


def test_r10_1_helm_lint_is_clean(helm: Path, slurm_chart: Path) -> None:
    for sets in ([], ["--set", ",".join(ON)]):
        result = subprocess.run([str(helm), "lint", str(slurm_chart), *sets], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


def test_r10_1_two_renders_are_byte_identical(helm: Path, slurm_chart: Path) -> None:
    """GitOps renders on every sync: nothing random, no dates, no generated names."""
    values = {**PARTITIONS, **NODESETS, "scheduler": SCHEDULER_ON}
    first = render_text(helm, slurm_chart, values=values)
    assert first == render_text(helm, slurm_chart, values=values)


def test_r10_1_no_secret_is_rendered_keys_come_from_the_hook_job(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm, *ON)
    assert of_kind(objects, "Secret") == []
    assert not [o for o in objects if "data" in o and o["kind"] != "ConfigMap"]


def test_r10_1_every_hook_object_is_deleted_once_it_succeeded(helm: Path, slurm_chart: Path) -> None:
    """Issue #32: `helm uninstall` does not delete hook objects, so the secrets Jobs (ours and
    the scheduler's) and their Pods stayed behind. Each hook goes once it succeeded; a failed
    one stays for a look and is replaced by the next run."""
    values = {**PARTITIONS, **NODESETS, "scheduler": SCHEDULER_ON}
    hooks = [o for o in render(slurm_chart, helm, values=values) if "helm.sh/hook" in _annotations(o)]
    names = {(o["kind"], o["metadata"]["name"]) for o in hooks}
    assert {("Job", "r1-secrets"), ("Job", "r1-sunk-scheduler-hooks-secret")} <= names
    kept = {
        f"{o['kind']}/{o['metadata']['name']}": _annotations(o).get("helm.sh/hook-delete-policy")
        for o in hooks
        if set(str(_annotations(o).get("helm.sh/hook-delete-policy")).split(","))
        != {"before-hook-creation", "hook-succeeded"}
    }
    assert kept == {}


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def test_r10_1_the_hook_job_makes_the_keys_token_and_password_once(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm)
    job = named(objects, "Job", "r1-secrets")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert container(job, "ensure")["args"] == [
        "ensure-slurm-secrets",
        "--namespace=team",
        "--auth-secret=r1-auth",
        "--token-secret=r1-scheduler-token",
        "--token-user=root",
        "--mariadb-secret=r1-mariadb",
        "--host-keys-secret=r1-login-host-keys",
        "--restapi-tls-secret=r1-restapi-tls",
        "--restapi-tls-host=r1-restapi",
        "--restapi-tls-host=r1-restapi.team",
        "--restapi-tls-host=r1-restapi.team.svc",
        "--restapi-tls-host=r1-restapi.team.svc.cluster.local",
    ]
    role = named(objects, "Role", "r1-secrets")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [
                "r1-auth",
                "r1-scheduler-token",
                "r1-mariadb",
                "r1-login-host-keys",
                "r1-restapi-tls",
            ],
            "verbs": ["get"],
        },
    ]
    # Its rights and its ServiceAccount exist before it runs.
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        hook = named(objects, kind, "r1-secrets")["metadata"]["annotations"]
        assert int(hook["helm.sh/hook-weight"]) < int(job["metadata"]["annotations"]["helm.sh/hook-weight"])


def test_r10_1_names_are_cut_to_40_characters(helm: Path, slurm_chart: Path) -> None:
    release = "a-very-long-release-name-for-a-slurm-cluster-x"
    objects = render(slurm_chart, helm, release=release)
    prefix = release[:40]
    controller = named(objects, "StatefulSet", f"{prefix}-controller")
    assert len(f"{controller['metadata']['name']}-0") <= 63
    assert {s["metadata"]["name"] for s in of_kind(objects, "Service")} == {
        f"{prefix}-{part}"
        for part in (
            "controller",
            "restapi",
            "accounting",
            "mariadb",
            "login",
            "hosts",
            "operator-metrics",
            "config-metrics",
        )
    }


def test_r10_1_services_carry_the_daemons_ports(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm)
    ports = {
        s["metadata"]["name"]: [p["port"] for p in s["spec"].get("ports", [])]
        for s in of_kind(objects, "Service")
    }
    assert ports == {
        "r1-controller": [6817],
        "r1-restapi": [6820],
        "r1-accounting": [6819],
        "r1-mariadb": [3306],
        "r1-login": [22],
        "r1-hosts": [],  # names only (templates/hosts.yaml)
        "r1-operator-metrics": [8080],  # Prometheus's way in (templates/metrics.yaml)
        "r1-config-metrics": [8082],  # ... and to the configuration slurmctld runs
    }
    controller = named(objects, "Service", "r1-controller")["spec"]
    assert controller["clusterIP"] == "None" and controller["publishNotReadyAddresses"] is True
    assert named(objects, "Service", "r1-login")["spec"]["type"] == "ClusterIP"
    login = render(
        slurm_chart,
        helm,
        "login.service.type=LoadBalancer",
        "login.service.loadBalancerSourceRanges[0]=0.0.0.0/0",
    )
    assert named(login, "Service", "r1-login")["spec"]["type"] == "LoadBalancer"


def test_r10_1_the_controller_keeps_its_state_on_a_claim(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm, "controller.persistence.storageClassName=fast")
    controller = named(objects, "StatefulSet", "r1-controller")
    [claim] = controller["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "state" and claim["spec"]["storageClassName"] == "fast"
    mounts = container(controller, "slurmctld")["volumeMounts"]
    assert {"name": "state", "mountPath": "/var/spool/slurmctld"} in mounts
    assert conf_value(objects, "StateSaveLocation") == "/var/spool/slurmctld"
    assert pod_spec(controller)["securityContext"]["fsGroup"] == 64030
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container(controller, "slurmctld")[probe]["tcpSocket"] == {"port": "slurmctld"}
    throwaway = named(
        render(slurm_chart, helm, "controller.persistence.enabled=false"), "StatefulSet", "r1-controller"
    )
    assert "volumeClaimTemplates" not in throwaway["spec"]
    assert {"name": "state", "emptyDir": {}} in pod_spec(throwaway)["volumes"]


def test_r10_1_every_daemon_has_probes(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm)
    for workload in of_kind(objects, "Deployment") + of_kind(objects, "StatefulSet"):
        for c in pod_spec(workload)["containers"]:
            assert "livenessProbe" in c, f"{workload['metadata']['name']}/{c['name']} has no liveness probe"


def test_r10_1_keys_are_readable_by_each_daemons_user_only(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm)
    controller = named(objects, "StatefulSet", "r1-controller")
    [etc] = [v for v in pod_spec(controller)["volumes"] if v["name"] == "etc-slurm"]
    assert etc["projected"]["defaultMode"] == 0o440
    assert pod_spec(controller)["securityContext"]["runAsUser"] == 64030
    # slurmrestd passes each client's token on: no Slurm key at all, only its TLS certificate.
    restapi = named(objects, "Deployment", "r1-restapi")
    [tls] = [v for v in pod_spec(restapi)["volumes"] if "secret" in v or "projected" in v]
    assert tls["secret"]["secretName"] == "r1-restapi-tls" and tls["secret"]["defaultMode"] == 0o440
    assert pod_spec(restapi)["securityContext"]["fsGroup"] == 991
    assert pod_spec(restapi)["securityContext"]["runAsUser"] == 991
    # The operator signs tokens: the JWT key only.
    operator = named(objects, "Deployment", "r1-operator")
    jwt, ca = pod_spec(operator)["volumes"]
    assert jwt["secret"]["items"] == [{"key": "jwt_hs256.key", "path": "jwt_hs256.key"}]
    assert ca["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]  # slurmrestd's CA
    # On login Pods only sackd reads slurm.key; users' commands go through its socket.
    login = named(objects, "Deployment", "r1-login")
    [key] = [v for v in pod_spec(login)["volumes"] if v["name"] == "slurm-key"]
    assert key["secret"]["defaultMode"] == 0o440 and pod_spec(login)["securityContext"]["fsGroup"] == 64030
    assert not [m for m in container(login, "sshd")["volumeMounts"] if m["name"] == "slurm-key"]
    # sackd runs as SlurmUser: slurmctld's configuration pushes are addressed to that user,
    # and a root sackd refuses them (the login Pod would keep its first slurm.conf).
    assert container(login, "sackd")["securityContext"]["runAsUser"] == 64030


def test_r10_1_no_host_path_anywhere(helm: Path, slurm_chart: Path) -> None:
    """It runs on a real cluster unchanged: nothing of the Node's filesystem is used. (The
    admission policies name hostPath and hostNetwork only to refuse them.)"""
    objects = render(slurm_chart, helm, values={**PARTITIONS, **NODESETS, "scheduler": SCHEDULER_ON})
    text = yaml.safe_dump([o for o in objects if not o["kind"].startswith("ValidatingAdmissionPolicy")])
    assert "hostPath" not in text and "hostNetwork" not in text


def test_r10_1_every_image_comes_from_the_values(helm: Path, slurm_chart: Path) -> None:
    names = ("controller", "restapi", "accounting", "login", "operator")
    values: Obj = {n: {"image": {"repository": f"reg.example/{n}", "tag": f"t-{n}"}} for n in names}
    values["accounting"]["mariadb"] = {"image": {"repository": "reg.example/mariadb", "tag": "t-db"}}
    values["slurmd"] = {"image": {"repository": "reg.example/slurmd", "tag": "t-slurmd"}}
    values["scheduler"] = copy.deepcopy(SCHEDULER_ON)
    values["scheduler"]["scheduler"]["image"] = {"repository": "reg.example/sunk", "tag": "t-s"}
    objects = render(slurm_chart, helm, values=values)
    used = {c["image"] for c in containers(objects)}
    expected = {f"reg.example/{n}:t-{n}" for n in names} | {
        "reg.example/mariadb:t-db",
        "reg.example/sunk:t-s",
        "reg.example/slurmd:t-slurmd",  # the upgrade check's parser (slurmd -G reads cgroup.conf)
    }
    assert used == expected
    operator = container(named(objects, "Deployment", "r1-operator"), "operator")
    assert "--slurmd-image=reg.example/slurmd:t-slurmd" in operator["args"]


def test_r10_1_containers_keep_tini_as_pid_1(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm, *ON)
    assert not [c["name"] for c in containers(objects) if "command" in c]


# -- R10.1: accounting ------------------------------------------------------------------------


def test_r10_1_accounting_is_on_by_default_with_mariadb_in_the_cluster(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm)
    assert conf_value(objects, "AccountingStorageType") == "accounting_storage/slurmdbd"
    assert conf_value(objects, "AccountingStorageHost") == "r1-accounting.team.svc.cluster.local"
    dbd = named(objects, "Deployment", "r1-accounting")
    assert pod_spec(dbd)["hostname"] == "r1-accounting"
    conf = named(objects, "ConfigMap", "r1-slurmdbd-config")["data"]["slurmdbd.conf"]
    assert "DbdHost=r1-accounting\n" in conf and "StorageHost=r1-mariadb\n" in conf
    assert "StoragePass" not in conf  # added from the Secret at start, never in a ConfigMap
    mariadb = named(objects, "StatefulSet", "r1-mariadb")
    assert [c["metadata"]["name"] for c in mariadb["spec"]["volumeClaimTemplates"]] == ["data"]
    env = {e["name"]: e["value"] for e in container(mariadb, "mariadb")["env"]}
    assert env == {
        "MARIADB_DATABASE": "slurm_acct_db",
        "MARIADB_USER": "slurm",
        "MARIADB_PASSWORD_FILE": "/etc/mariadb-password/password",
    }
    restd = container(named(objects, "Deployment", "r1-restapi"), "slurmrestd")["args"]
    assert "openapi/slurmctld,openapi/slurmdbd" in restd


def test_r10_1_accounting_can_be_turned_off(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm, "accounting.enabled=false")
    assert conf_value(objects, "AccountingStorageType") is None
    assert not [o for o in objects if o["metadata"]["name"] in ("r1-accounting", "r1-mariadb")]
    assert (
        "--mariadb-secret=r1-mariadb" not in container(named(objects, "Job", "r1-secrets"), "ensure")["args"]
    )
    restd = container(named(objects, "Deployment", "r1-restapi"), "slurmrestd")["args"]
    assert "openapi/slurmctld" in restd and "openapi/slurmctld,openapi/slurmdbd" not in restd
    assert "initContainers" not in pod_spec(named(objects, "StatefulSet", "r1-controller"))


def test_r10_1_an_external_database_replaces_mariadb(helm: Path, slurm_chart: Path) -> None:
    values = {
        "accounting": {
            "database": {
                "host": "db.example.com",
                "port": 3307,
                "passwordSecret": {"name": "db", "key": "pw"},
            }
        }
    }
    objects = render(slurm_chart, helm, values=values)
    assert not [o for o in objects if o["metadata"]["name"] == "r1-mariadb"]
    conf = named(objects, "ConfigMap", "r1-slurmdbd-config")["data"]["slurmdbd.conf"]
    assert "StorageHost=db.example.com\n" in conf and "StoragePort=3307\n" in conf
    [password] = [
        v
        for v in pod_spec(named(objects, "Deployment", "r1-accounting"))["volumes"]
        if v["name"] == "password"
    ]
    assert password["secret"]["secretName"] == "db"
    assert password["secret"]["items"] == [{"key": "pw", "path": "password"}]
    assert not [a for a in container(named(objects, "Job", "r1-secrets"), "ensure")["args"] if "mariadb" in a]


def test_r10_1_an_external_database_needs_its_password_secret(helm: Path, slurm_chart: Path) -> None:
    assert "passwordSecret.name" in fails(slurm_chart, helm, "accounting.database.host=db.example.com")


# -- R10.1: login Pods -----------------------------------------------------------------------


def test_r10_1_login_pods_run_sshd_and_fetch_the_configuration_from_slurmctld(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(
        slurm_chart, helm, "login.allowRootLogin=true", "login.authorizedKeys[0]=ssh-ed25519 AAAAC3 me@laptop"
    )
    login = named(objects, "Deployment", "r1-login")
    # By its full path: on a reconfigure sackd restarts itself with execv(argv[0]), and a
    # bare "sackd" is not found (it died, and the login Pod lost its Slurm commands).
    assert container(login, "sackd")["args"] == [
        "/usr/sbin/sackd",
        "-D",
        "--conf-server",
        "r1-controller.team.svc.cluster.local:6817",
    ]
    # sackd writes the configuration and its socket; people's sshd container only reads them.
    shared = {"name": "run-slurm", "mountPath": "/run/slurm"}
    assert {**shared, "readOnly": True} in container(login, "sshd")["volumeMounts"]
    assert shared in container(login, "sackd")["volumeMounts"]
    keys = named(objects, "ConfigMap", "r1-login-keys")["data"]["root"]
    assert keys == "ssh-ed25519 AAAAC3 me@laptop\n"
    from_secret = named(
        render(slurm_chart, helm, "login.authorizedKeysSecret=team-keys"), "Deployment", "r1-login"
    )
    [volume] = [v for v in pod_spec(from_secret)["volumes"] if v["name"] == "authorized-keys"]
    assert volume["secret"]["secretName"] == "team-keys"


# -- R10.1: the scheduler as a sub-chart ------------------------------------------------------


def test_r10_1_the_scheduler_is_absent_by_default(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm)
    assert not [o for o in objects if "sunk-scheduler" in o["metadata"]["name"]]


def test_r10_1_scheduler_enabled_points_it_at_this_slurm(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm, *ON)
    deployment = named(objects, "Deployment", "r1-sunk-scheduler")
    scheduler = container(deployment, "scheduler")
    flags = dict(a.split("=", 1) for a in scheduler["args"] if a.startswith("--"))
    assert flags["--slurm-api-base"] == "https://r1-restapi:6820"
    assert flags["--slurm-ca-file"] == "/var/run/secrets/slurm-ca/ca.crt"
    [ca] = [v for v in pod_spec(deployment)["volumes"] if v["name"] == "slurm-ca"]
    assert ca["secret"] == {"secretName": "r1-restapi-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    assert flags["--slurmd-selector"] == "app.kubernetes.io/name=slurmd,app.kubernetes.io/instance=r1"
    assert flags["--slurmd-namespace"] == "team"
    assert flags["--slurm-kill-wait"] == "30s" and conf_value(objects, "KillWait") == "30"
    assert scheduler["image"] == "sunk:0.1.0" and scheduler["args"][0] == "scheduler"
    [token] = [v for v in pod_spec(deployment)["volumes"] if v["name"] == "slurm-token"]
    assert token["secret"]["secretName"] == "r1-scheduler-token"


def test_r10_1_the_schedulers_kill_wait_must_equal_slurms(helm: Path, slurm_chart: Path) -> None:
    assert "set it to 45s" in fails(slurm_chart, helm, *ON, "slurm.killWait=45")
    objects = render(slurm_chart, helm, *ON, "slurm.killWait=45", "scheduler.scheduler.killWait=45s")
    assert conf_value(objects, "KillWait") == "45"


def test_issue53_slurms_counter_stops_below_the_job_ids_the_scheduler_asks_for(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches: Slurm's counter (people's jobs) walking into the scheduler's job IDs: MaxJobId
    is the start of the scheduler's range, with the scheduler on or off, and follows it."""

    def both(*sets: str) -> tuple[str | None, str | None]:
        objects = render(slurm_chart, helm, *ON, *sets)
        args = container(named(objects, "Deployment", "r1-sunk-scheduler"), "scheduler")["args"]
        flags = dict(a.split("=", 1) for a in args if a.startswith("--"))
        return conf_value(objects, "MaxJobId"), flags["--job-id-range"]

    assert both() == ("50000000", "50000000-67108863")
    assert conf_value(render(slurm_chart, helm), "MaxJobId") == "50000000"
    assert both("scheduler.scheduler.jobIdRange=40000000-67108863") == ("40000000", "40000000-67108863")
    assert both("scheduler.scheduler.jobIdRange=shared") == (None, "shared")


def test_r10_1_the_schedulers_hook_job_runs_where_the_scheduler_runs(helm: Path, slurm_chart: Path) -> None:
    values = copy.deepcopy({"scheduler": SCHEDULER_ON})
    values["scheduler"]["scheduler"]["nodeSelector"] = {"pool": "control"}
    job = named(render(slurm_chart, helm, values=values), "Job", "r1-sunk-scheduler-hooks-secret")
    assert pod_spec(job)["nodeSelector"] == {"pool": "control"}


def test_r10_1_the_sub_chart_is_the_scheduler_chart_of_the_same_version(slurm_chart: Path) -> None:
    [dependency] = yaml.safe_load((slurm_chart / "Chart.yaml").read_text())["dependencies"]
    scheduler = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert dependency["repository"] == "file://../sunk-scheduler"
    assert (dependency["name"], dependency["version"]) == (scheduler["name"], scheduler["version"])
    assert (dependency["alias"], dependency["condition"]) == ("scheduler", "scheduler.enabled")


# -- R10.2: the operator and NodeSets ---------------------------------------------------------


def test_r10_2_the_operator_gets_the_contracts_arguments(helm: Path, slurm_chart: Path) -> None:
    operator = named(render(slurm_chart, helm), "Deployment", "r1-operator")
    assert container(operator, "operator")["args"] == [
        "operator",
        "--namespace=team",
        "--release=r1",
        "--slurm-api-base=https://r1-restapi:6820",
        "--slurm-jwt-key-file=/etc/sunk/slurm/jwt_hs256.key",
        "--slurm-ca-file=/etc/sunk/slurmrestd-ca/ca.crt",
        "--conf-server=r1-controller.team.svc.cluster.local:6817",
        "--auth-secret=r1-auth",
        "--scheduler-token-secret=r1-scheduler-token",
        "--slurmd-image=slurmd:24.11",
        "--confinement=cgroup",
        "--hosts-domain=r1-hosts.team.svc.cluster.local",
        "--private-tmp=true",
        "--allow-host-access=false",
        "--health-checks-configmap=r1-health-checks",
        "--health-replace-after=1800s",
        "--health-replace-max-unavailable=1",
        "--node-conditions=KernelDeadlock,ReadonlyFilesystem,FrequentKubeletRestart,FrequentContainerdRestart",
        "--leader-elect=false",
        "--lease-name=r1-operator",
        "--metrics-port=8080",
        "--slurm-native-metrics=false",
        "--probes-port=8081",
    ]
    assert pod_spec(operator)["serviceAccountName"] == "r1-operator"
    probes = container(operator, "operator")
    assert probes["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert probes["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}


def test_r10_2_leader_election_is_on_with_more_than_one_operator(helm: Path, slurm_chart: Path) -> None:
    operator = named(render(slurm_chart, helm, "operator.replicas=2"), "Deployment", "r1-operator")
    assert "--leader-elect=true" in container(operator, "operator")["args"]


def test_r10_2_the_operators_rights_are_exactly_the_narrow_set(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm)
    assert named(objects, "Role", "r1-operator")["rules"] == [
        {
            "apiGroups": ["sunk.coreweave.com"],
            "resources": ["nodesets"],
            "verbs": ["get", "list", "watch", "patch"],
        },
        {
            "apiGroups": ["sunk.coreweave.com"],
            "resources": ["nodesets/status"],
            "verbs": ["get", "patch", "update"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "patch", "delete"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["r1-operator"],
            "verbs": ["get", "update"],
        },
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["r1-scheduler-token"],
            "verbs": ["get", "patch"],
        },
    ]
    [cluster_role] = of_kind(objects, "ClusterRole")
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},  # SlurmHealthCheck
    ]
    subject = {"kind": "ServiceAccount", "name": "r1-operator", "namespace": "team"}
    assert named(objects, "RoleBinding", "r1-operator")["subjects"] == [subject]
    assert of_kind(objects, "ClusterRoleBinding")[0]["subjects"] == [subject]


def test_r10_2_nodesets_are_rendered_only_when_listed(helm: Path, slurm_chart: Path) -> None:
    assert not of_kind(render(slurm_chart, helm), "NodeSet")
    objects = render(slurm_chart, helm, values={**PARTITIONS, **NODESETS})
    sets = {n["metadata"]["name"]: n["spec"] for n in of_kind(objects, "NodeSet")}
    assert sets == {
        "cpus": {"partitions": ["cpu"], "replicas": 2},
        "h100": {"partitions": ["cpu", "gpu"], "features": ["h100"]},
    }


def test_r10_2_the_nodeset_crd_is_installed_unless_turned_off(helm: Path, slurm_chart: Path) -> None:
    [crd] = of_kind(render(slurm_chart, helm), "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "nodesets.sunk.coreweave.com"
    assert not of_kind(render(slurm_chart, helm, "nodeSetCRD.install=false"), "CustomResourceDefinition")


# -- R10.3: the configuration ----------------------------------------------------------------


def test_r10_3_slurm_conf_has_the_settings_the_platform_relies_on(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm, "slurm.maxNodeCount=64", "slurm.killWait=20")
    expected = {
        "SlurmctldHost": "r1-controller-0(r1-controller-0.r1-controller.team.svc.cluster.local)",
        "SlurmctldParameters": "enable_configless",
        "AuthType": "auth/slurm",
        "CredType": "cred/slurm",
        "AuthAltTypes": "auth/jwt",
        "AuthAltParameters": "jwt_key=/etc/slurm/jwt_hs256.key",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core_Memory",
        "MaxNodeCount": "64",
        "GresTypes": "gpu",
        "ReturnToService": "2",
        "KillWait": "20",
    }
    assert {key: conf_value(objects, key) for key in expected} == expected
    data = named(objects, "ConfigMap", "r1-slurm-config")["data"]
    assert {"slurm.conf", "cgroup.conf", "gres.conf"} <= set(data)


def test_r10_3_partitions_are_declared_once_and_nodesets_never_touch_slurm_conf(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm, values=PARTITIONS)
    lines = slurm_conf(objects)
    assert [line for line in lines if line.startswith(("NodeSet=", "PartitionName="))] == [
        "NodeSet=part_cpu Feature=part_cpu",
        "PartitionName=cpu Nodes=part_cpu State=UP Default=YES MaxTime=1-00:00:00 PriorityTier=2",
        "NodeSet=part_gpu Feature=part_gpu",
        "PartitionName=gpu Nodes=part_gpu State=UP",
    ]
    with_sets = render(slurm_chart, helm, values={**PARTITIONS, **NODESETS})
    assert slurm_conf(with_sets) == lines
    assert not [line for line in lines if line.startswith("NodeName=")]


def test_r10_3_prolog_and_epilog_scripts_are_shipped_with_the_configuration(
    helm: Path, slurm_chart: Path
) -> None:
    values = {"slurm": {"prolog": {"10-mounts": "#!/bin/sh\ntrue\n"}, "epilog": {"clean": "#!/bin/sh\n"}}}
    objects = render(slurm_chart, helm, values=values)
    data = named(objects, "ConfigMap", "r1-slurm-config")["data"]
    assert data["prolog-10-mounts"] == "#!/bin/sh\ntrue\n"
    # Named without a directory, one line each: what slurmctld pushes to configless slurmd.
    assert [line for line in slurm_conf(objects) if line.startswith(("Prolog=", "Epilog="))] == [
        "Prolog=prolog-10-mounts",
        "Epilog=epilog-clean",
    ]


def test_r10_3_the_pre_upgrade_check_keeps_the_new_values_partitions(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm, values=PARTITIONS)
    job = named(objects, "Job", "r1-partition-check")
    hook = job["metadata"]["annotations"]
    assert hook["helm.sh/hook"] == "pre-upgrade"  # never at install: nothing runs yet
    secrets = named(objects, "Job", "r1-secrets")["metadata"]["annotations"]
    assert int(hook["helm.sh/hook-weight"]) > int(secrets["helm.sh/hook-weight"])
    assert container(job, "check")["args"] == [
        "check-partitions",
        "--slurm-api-base=https://r1-restapi:6820",
        "--slurm-jwt-key-file=/etc/sunk/slurm/jwt_hs256.key",
        "--slurm-ca-file=/etc/sunk/slurmrestd-ca/ca.crt",
        "--keep=cpu,gpu",
    ]
    spec = pod_spec(job)
    assert spec["automountServiceAccountToken"] is False and job["spec"]["backoffLimit"] == 0
    key = next(v for v in spec["volumes"] if v["name"] == "jwt-key")
    assert key["secret"]["items"] == [{"key": "jwt_hs256.key", "path": "jwt_hs256.key"}]


def test_r10_3_before_an_upgrade_slurms_parser_reads_exactly_the_configuration_it_would_apply(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(
        slurm_chart, helm, values={**PARTITIONS, "slurm": {**PARTITIONS["slurm"], "extraConf": {"X": 1}}}
    )
    proposed = named(objects, "ConfigMap", "r1-slurm-config-proposed")
    assert proposed["data"] == named(objects, "ConfigMap", "r1-slurm-config")["data"]
    job = named(objects, "Job", "r1-partition-check")
    hook, job_hook = proposed["metadata"]["annotations"], job["metadata"]["annotations"]
    assert hook["helm.sh/hook"] == "pre-upgrade"
    assert int(hook["helm.sh/hook-weight"]) < int(job_hook["helm.sh/hook-weight"])
    parse = container(job, "parse")
    assert {"name": "SLURM_CONF", "value": "/proposed/slurm.conf"} in parse["env"]
    assert "scontrol show hostnames" in parse["args"][-1]
    assert parse["volumeMounts"] == [{"name": "proposed", "mountPath": "/proposed", "readOnly": True}]
    volume = next(v for v in pod_spec(job)["volumes"] if v["name"] == "proposed")
    assert volume["configMap"]["name"] == "r1-slurm-config-proposed"


def test_r10_3_both_upgrade_checks_run_so_kubectl_logs_all_containers_shows_either_refusal(
    helm: Path, slurm_chart: Path
) -> None:
    """Issue #32: with the parser as an init container, a refusal left `check` waiting
    (PodInitializing) and `kubectl logs job/... --all-containers` failed instead of showing it."""
    job = named(render(slurm_chart, helm, values=PARTITIONS), "Job", "r1-partition-check")
    assert "initContainers" not in pod_spec(job)
    assert [c["name"] for c in pod_spec(job)["containers"]] == ["check", "parse"]
    assert pod_spec(job)["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0


# What Slurm 24.11's scontrol says about a misspelt top-level key and a bad partition option.
SLURM_REFUSAL = """scontrol: error: _parse_next_key: Parsing error at unrecognized key: MaxJobCont
scontrol: error: Bad value "abc" for MaxTime
scontrol: fatal: Unable to process configuration file
"""


def test_r10_3_a_parser_refusal_names_the_lines_setting_each_key_slurm_complains_about(
    helm: Path, slurm_chart: Path, tmp_path: Path
) -> None:
    """Issue #32: Slurm gives no line for an unknown key; the docs promise one."""
    job = named(render(slurm_chart, helm, values=PARTITIONS), "Job", "r1-partition-check")
    script = container(job, "parse")["args"][-1]
    (tmp_path / "scontrol").write_text(f"#!/bin/sh\ncat >&2 <<'SAID'\n{SLURM_REFUSAL}SAID\nexit 1\n")
    (tmp_path / "scontrol").chmod(0o755)
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nMaxJobCont=5000\nPartitionName=cpu Nodes=ALL MaxTime=abc\n")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURM_CONF": str(conf)}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 1
    assert SLURM_REFUSAL in done.stderr  # Slurm's own words first
    assert "slurm.conf line 2: MaxJobCont is set here: MaxJobCont=5000" in done.stderr
    assert "slurm.conf line 3: MaxTime is set here: PartitionName=cpu Nodes=ALL MaxTime=abc" in done.stderr
    assert done.stderr.rstrip().endswith("fix the values and upgrade again")
    (tmp_path / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    accepted = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert accepted.returncode == 0 and "accepts the new slurm.conf" in accepted.stdout


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"slurm": {"partitions": []}}, "declare at least one partition"),
        (
            {"slurm": {"partitions": [{"name": "a", "default": True}, {"name": "b", "default": True}]}},
            "one default",
        ),
        ({"slurm": {"partitions": [{"name": "a"}, {"name": "a"}]}}, "declares a twice"),
        ({"slurm": {"partitions": [{"name": "a b"}]}}, "not a usable partition name"),
        ({"slurm": {"partitions": [{"name": "a", "options": {"Nodes": "x"}}]}}, "is set by the chart"),
        ({"slurm": {"extraConf": {"PartitionName": "x Nodes=ALL"}}}, "declared in slurm.partitions"),
        ({"slurm": {"extraConf": {"KillWait": 10}}}, "is set by the chart already"),
        ({"nodeSets": [{"name": "x", "partitions": ["nope"]}]}, "joins partition nope"),
        ({"slurm": {"topology": {"plugin": "mesh", "labels": ["a"]}}}, "use tree, block"),
        ({"slurm": {"topology": {"plugin": "tree", "labels": []}}}, "name the Node labels"),
        ({"slurm": {"topology": {"plugin": "block", "labels": ["a", "b"]}}}, "exactly one label"),
        ({"slurm": {"topology": {"plugin": "tree", "labels": ["a b"]}}}, "not a Kubernetes label key"),
    ],
)
def test_r10_3_values_that_would_break_slurm_are_refused(
    helm: Path, slurm_chart: Path, values: Obj, words: str
) -> None:
    assert words in fails(slurm_chart, helm, values=values)


def test_r10_3_a_changed_configuration_is_applied_by_reconfigure_not_by_restarting(
    helm: Path, slurm_chart: Path
) -> None:
    before = named(render(slurm_chart, helm), "StatefulSet", "r1-controller")
    after = named(
        render(slurm_chart, helm, values={"slurm": {"partitions": [{"name": "main"}, {"name": "extra"}]}}),
        "StatefulSet",
        "r1-controller",
    )
    # Nothing in the Pod template changes, so the controller Pod is not replaced...
    assert pod_spec(before) == pod_spec(after)
    assert before["spec"]["template"]["metadata"] == after["spec"]["template"]["metadata"]
    # ...and a sidecar watching the same files applies them (sunk apply-config).
    watcher = container(before, "apply-config")
    assert watcher["args"][0] == "apply-config"
    assert "--configmap=r1-slurm-config" in watcher["args"]
    assert {"name": "etc-slurm", "mountPath": "/etc/slurm", "readOnly": True} in watcher["volumeMounts"]


def test_r10_3_only_the_config_sidecar_holds_an_api_token_and_may_touch_only_its_configmap(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm)
    controller = named(objects, "StatefulSet", "r1-controller")
    spec = pod_spec(controller)
    assert spec["serviceAccountName"] == "r1-controller"
    assert spec["automountServiceAccountToken"] is False
    token_mount = "/var/run/secrets/kubernetes.io/serviceaccount"
    holders = [
        c["name"] for c in spec["containers"] if any(m["mountPath"] == token_mount for m in c["volumeMounts"])
    ]
    assert holders == ["apply-config"]
    assert named(objects, "Role", "r1-controller")["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["r1-slurm-config"],
            "verbs": ["get", "watch", "patch"],
        },
        # Its own Pod's annotation makes the kubelet copy a changed ConfigMap at once (#55).
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": ["r1-controller-0"], "verbs": ["patch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    ]
    env = {e["name"]: e for e in container(controller, "apply-config").get("env", [])}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_r10_5_uninstall_first_removes_the_nodesets_job_safely_with_only_that_right(
    helm: Path, slurm_chart: Path
) -> None:
    """Without this hook, `helm uninstall` deletes the operator with the NodeSets: members
    would go under running jobs, or NodeSets would keep a finalizer nobody removes."""
    objects = render(slurm_chart, helm)
    job = named(objects, "Job", "r1-nodeset-removal")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert container(job, "remove")["args"] == ["remove-nodesets", "--namespace=team"]
    assert named(objects, "Role", "r1-nodeset-removal")["rules"] == [
        {"apiGroups": ["sunk.coreweave.com"], "resources": ["nodesets"], "verbs": ["list", "delete"]}
    ]
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        hook = named(objects, kind, "r1-nodeset-removal")["metadata"]["annotations"]
        assert hook["helm.sh/hook"] == "pre-delete"
        assert int(hook["helm.sh/hook-weight"]) < int(job["metadata"]["annotations"]["helm.sh/hook-weight"])


def test_r10_5_evictions_spare_busy_slurmd_pods_and_the_budget_can_be_turned_off(
    helm: Path, slurm_chart: Path
) -> None:
    pdb = named(render(slurm_chart, helm), "PodDisruptionBudget", "r1-busy-slurmd")
    assert pdb["spec"] == {
        "maxUnavailable": 0,
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "slurmd",
                "app.kubernetes.io/instance": "r1",
                "sunk.coreweave.com/slurm-busy": "true",
            }
        },
    }
    off = render(slurm_chart, helm, values={"slurmd": {"busyMembersDisruptionBudget": False}})
    assert not of_kind(off, "PodDisruptionBudget")


def test_r10_4_topology_from_node_labels_is_the_operators_to_write_never_helms(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(
        slurm_chart,
        helm,
        values={"slurm": {"topology": {"plugin": "tree", "labels": ["ex.com/leaf", "ex.com/spine"]}}},
    )
    assert conf_value(objects, "TopologyPlugin") == "topology/tree"
    # Helm must not render the key: an upgrade would put its copy back over the operator's.
    assert "topology.conf" not in named(objects, "ConfigMap", "r1-slurm-config")["data"]
    operator = container(named(objects, "Deployment", "r1-operator"), "operator")
    assert operator["args"][-3:] == [
        "--topology=tree",
        "--topology-labels=ex.com/leaf,ex.com/spine",
        "--slurm-configmap=r1-slurm-config",
    ]
    rules = named(objects, "Role", "r1-operator")["rules"]
    assert {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["r1-slurm-config"],
        "verbs": ["get", "patch"],
    } in rules
    # slurmctld stops when its topology plugin finds no file: it waits for the operator's.
    ctld = container(named(objects, "StatefulSet", "r1-controller"), "slurmctld")
    assert "until [ -e /etc/slurm/topology.conf ]" in ctld["args"][2]
    # ...always, so that turning topology on changes no Pod template (no slurmctld restart).
    assert ctld == container(named(render(slurm_chart, helm), "StatefulSet", "r1-controller"), "slurmctld")
    # Without topology, the operator may not touch the ConfigMap.
    plain = named(render(slurm_chart, helm), "Role", "r1-operator")["rules"]
    assert not any("configmaps" in rule["resources"] for rule in plain)


def test_r10_1_login_and_slurmd_hosts_are_named_where_slurmctld_looks(helm: Path, slurm_chart: Path) -> None:
    """Catches srun's host name unresolvable from slurmctld (it then stalls about ten
    seconds at each job's end, holding its job lock): the login Pods' hostname must live in
    the headless hosts Service, which slurmctld, the login Pods and the operator's slurmd
    Pods search."""
    objects = render(slurm_chart, helm)
    hosts = named(objects, "Service", "r1-hosts")["spec"]
    assert hosts["clusterIP"] == "None" and hosts["publishNotReadyAddresses"] is True
    assert hosts["selector"] == {"app.kubernetes.io/instance": "r1"}
    domain = "r1-hosts.team.svc.cluster.local"
    login = named(objects, "Deployment", "r1-login")["spec"]["template"]["spec"]
    assert (login["hostname"], login["subdomain"]) == ("r1-login-node", "r1-hosts")
    controller = named(objects, "StatefulSet", "r1-controller")["spec"]["template"]["spec"]
    for spec in (login, controller):
        assert spec["dnsConfig"]["searches"] == [domain]
    operator = container(named(objects, "Deployment", "r1-operator"), "operator")
    assert f"--hosts-domain={domain}" in operator["args"]
