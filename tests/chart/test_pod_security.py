"""Issue #38, point 8: every Pod the charts make runs under the runtime's default seccomp
profile, the control plane meets the Pod Security Standards' restricted level, and the login
Pods baseline; checked on the rendered manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chart.test_slurm_chart import NODESETS, PARTITIONS, SCHEDULER_ON, container, named, render

Obj = dict[str, Any]
WORKLOADS = ("Deployment", "StatefulSet", "Job", "DaemonSet")
# The volume types the restricted level allows.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}


@pytest.fixture(scope="module")
def objects(helm: Path, slurm_chart: Path) -> list[Obj]:
    return render(slurm_chart, helm, values={**PARTITIONS, **NODESETS, "scheduler": SCHEDULER_ON})


def pods(objects: list[Obj]) -> dict[str, Obj]:
    return {
        f"{o['kind']}/{o['metadata']['name']}": o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in WORKLOADS
    }


def all_containers(spec: Obj) -> list[Obj]:
    return [*(spec.get("initContainers") or []), *spec["containers"]]


def baseline_problems(spec: Obj) -> list[str]:
    """What the baseline level forbids in this Pod spec."""
    found = [f"host namespace {k}" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    found += [f"hostPath volume {v['name']}" for v in spec.get("volumes") or [] if "hostPath" in v]
    profiles = [(spec.get("securityContext") or {}).get("seccompProfile") or {}]
    for c in all_containers(spec):
        security = c.get("securityContext") or {}
        profiles.append(security.get("seccompProfile") or {})
        if security.get("privileged"):
            found.append(f"{c['name']} privileged")
        added = set((security.get("capabilities") or {}).get("add") or [])
        found += [f"{c['name']} adds {a}" for a in sorted(added - BASELINE_CAPABILITIES)]
        if (security.get("appArmorProfile") or {}).get("type") == "Unconfined":
            found.append(f"{c['name']} AppArmor Unconfined")
    found += ["seccomp Unconfined" for p in profiles if p.get("type") == "Unconfined"]
    return found


def restricted_problems(spec: Obj) -> list[str]:
    """What the restricted level forbids (beyond baseline) in this Pod spec."""
    found = baseline_problems(spec)
    pod = spec.get("securityContext") or {}
    found += [
        f"volume {v['name']}"
        for v in spec.get("volumes") or []
        if not set(v) - {"name"} <= RESTRICTED_VOLUMES
    ]
    for c in all_containers(spec):
        security = c.get("securityContext") or {}
        if security.get("allowPrivilegeEscalation") is not False:
            found.append(f"{c['name']} may escalate privileges")
        if "ALL" not in ((security.get("capabilities") or {}).get("drop") or []):
            found.append(f"{c['name']} keeps capabilities")
        if set((security.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{c['name']} adds capabilities")
        if not security.get("runAsNonRoot", pod.get("runAsNonRoot")):
            found.append(f"{c['name']} may run as root")
        if security.get("runAsUser", pod.get("runAsUser")) == 0:
            found.append(f"{c['name']} runs as uid 0")
        profile = security.get("seccompProfile") or pod.get("seccompProfile") or {}
        if profile.get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{c['name']} has no seccomp profile")
    return found


def test_issue38_every_pod_the_charts_make_runs_under_the_runtimes_default_seccomp_profile(
    objects: list[Obj],
) -> None:
    """Catches a Pod with no seccomp profile: the runtime's default filters syscalls such as
    kexec_load, open_by_handle_at and (without CAP_SYS_ADMIN) mount and unshare."""
    made = pods(objects)
    assert len(made) >= 9  # controller, restapi, accounting, mariadb, login, operator, hook Jobs
    missing = [
        name
        for name, spec in made.items()
        if (spec.get("securityContext") or {}).get("seccompProfile") != {"type": "RuntimeDefault"}
    ]
    assert missing == []


def test_issue38_the_control_plane_meets_the_restricted_pod_security_level(objects: list[Obj]) -> None:
    """Catches a control-plane container that keeps capabilities, may escalate, may run as
    root or has no seccomp profile: slurmctld, slurmrestd, slurmdbd, MariaDB, the operator,
    the scheduler and every hook Job need none of it."""
    problems = {
        name: found
        for name, spec in pods(objects).items()
        if name != "Deployment/r1-login" and (found := restricted_problems(spec))
    }
    assert problems == {}


def test_issue38_the_login_pods_meet_the_baseline_level(objects: list[Obj]) -> None:
    """sshd runs as root to let people log in as themselves (restricted forbids that); it
    needs no capability, host namespace or volume beyond baseline."""
    assert baseline_problems(pods(objects)["Deployment/r1-login"]) == []


def test_issue38_every_control_plane_daemon_runs_on_a_read_only_root(objects: list[Obj]) -> None:
    """Catches a daemon that could rewrite its own binaries or configuration in place;
    each gets writable directories only where it writes (measured on real Nodes by the
    platform and accounting suites)."""
    writable = {
        ("Deployment", "r1-restapi", "slurmrestd"): {"/tmp", "/run/slurmrestd"},
        ("Deployment", "r1-restapi", "tls"): {"/run/slurmrestd"},
        ("StatefulSet", "r1-controller", "slurmctld"): {
            "/var/spool/slurmctld",
            "/run/slurmctld",
            "/run/slurm",
            "/tmp",
        },
        ("StatefulSet", "r1-controller", "apply-config"): {"/tmp"},
        ("Deployment", "r1-accounting", "slurmdbd"): {"/run/slurmdbd", "/tmp"},
        ("StatefulSet", "r1-mariadb", "mariadb"): {"/var/lib/mysql", "/run/mysqld", "/tmp"},
        ("Deployment", "r1-operator", "operator"): set(),
    }
    for (kind, name, container_name), paths in writable.items():
        c = container(named(objects, kind, name), container_name)
        assert c["securityContext"]["readOnlyRootFilesystem"] is True, name
        mounted = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")}
        assert mounted == paths, (name, container_name)


def test_issue38_slurmrestd_skips_the_unshare_calls_runtime_default_refuses(objects: list[Obj]) -> None:
    """slurmrestd unshares its IPC namespace and file table at start; with no capabilities
    the RuntimeDefault profile refuses unshare(2) and it exits ("Unable to unshare System V
    namespace"), as it did on real Nodes before this value was set."""
    restd = container(named(objects, "Deployment", "r1-restapi"), "slurmrestd")
    env = {e["name"]: e.get("value") for e in restd["env"]}
    assert set(env["SLURMRESTD_SECURITY"].split(",")) == {"disable_unshare_sysv", "disable_unshare_files"}
