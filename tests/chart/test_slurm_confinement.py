"""Issue #36: job confinement in the Slurm chart's rendered configuration (cgroup v1, v2 and
autodetect, off, GPUs' devices, private /tmp), and the upgrade check's cgroup.conf parse;
issue #49: a PID namespace per job where Slurm has one (namespace/linux, 25.11 and later)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.test_slurm_chart import conf_value, container, fails, named, render

Obj = dict[str, Any]
PLUGINS = ("ProctrackType", "TaskPlugin", "JobAcctGatherType", "JobContainerType", "PrologFlags")


def config(objects: list[Obj]) -> dict[str, str]:
    data: dict[str, str] = named(objects, "ConfigMap", "r1-slurm-config")["data"]
    return data


def cgroup_conf(objects: list[Obj]) -> dict[str, str]:
    lines = [line for line in config(objects)["cgroup.conf"].splitlines() if line and line[0] != "#"]
    return dict(line.split("=", 1) for line in lines)


CONSTRAINTS = {
    "ConstrainCores": "yes",
    "ConstrainRAMSpace": "yes",
    "AllowedRAMSpace": "100",
    "ConstrainSwapSpace": "yes",
    "AllowedSwapSpace": "0",
    "ConstrainDevices": "yes",
}


def test_issue36_confinement_is_on_by_default(helm: Path, slurm_chart: Path) -> None:
    """Catches a chart that still ships CgroupPlugin=disabled and task/none, where a job
    asking for one CPU may use every CPU and all the memory of its node."""
    objects = render(slurm_chart, helm)
    assert {k: conf_value(objects, k) for k in PLUGINS} == {
        "ProctrackType": "proctrack/cgroup",
        "TaskPlugin": "task/cgroup,task/affinity",
        "JobAcctGatherType": "jobacct_gather/cgroup",
        "JobContainerType": "job_container/tmpfs",  # a private /tmp and /dev/shm per job
        "PrologFlags": "Contain",
    }
    assert cgroup_conf(objects) == {
        "CgroupPlugin": "autodetect",
        "IgnoreSystemd": "yes",
        "EnableControllers": "yes",
        **CONSTRAINTS,
    }
    assert "AutoBasePath=true" in config(objects)["job_container.conf"]
    # MPI ranks behind a private /tmp cannot open PMIx's shared-memory store.
    assert "PMIxEnv=PMIX_MCA_gds=hash" in config(objects)["mpi.conf"]
    operator = container(named(objects, "Deployment", "r1-operator"), "operator")
    assert "--confinement=cgroup" in operator["args"]
    assert "--private-tmp=true" in operator["args"]  # slurmd starts where it can pin them


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("v1", {"CgroupPlugin": "cgroup/v1", **CONSTRAINTS}),
        (
            "v2",
            {"CgroupPlugin": "cgroup/v2", "IgnoreSystemd": "yes", "EnableControllers": "yes", **CONSTRAINTS},
        ),
    ],
)
def test_issue36_cgroup_conf_for_v1_and_v2(
    helm: Path, slurm_chart: Path, version: str, expected: dict[str, str]
) -> None:
    """Catches a cgroup.conf that v2 cannot use in a container (without IgnoreSystemd slurmd
    looks for systemd over dbus and stops; without EnableControllers a job's cgroup gets no
    cpuset or memory controller), or one that gives v1 options it has no use for."""
    objects = render(slurm_chart, helm, f"slurm.confinement.cgroupVersion={version}")
    assert cgroup_conf(objects) == expected
    assert conf_value(objects, "ProctrackType") == "proctrack/cgroup"


def test_issue36_gpus_are_confined_to_the_ones_slurm_allocated(helm: Path, slurm_chart: Path) -> None:
    """Catches a configuration where a job granted one GPU sees every GPU of its node:
    ConstrainDevices in cgroup.conf, GPUs found by the nvidia plugin and counted as GRES."""
    objects = render(slurm_chart, helm)
    assert cgroup_conf(objects)["ConstrainDevices"] == "yes"
    assert config(objects)["gres.conf"].strip() == "AutoDetect=nvidia"
    assert conf_value(objects, "GresTypes") == "gpu"
    assert conf_value(objects, "TaskPlugin") == "task/cgroup,task/affinity"


def test_issue36_an_operator_may_turn_confinement_off(helm: Path, slurm_chart: Path) -> None:
    """Catches an off switch that leaves a cgroup plugin or the tmpfs container behind (slurmd
    would then fail in a container that cannot give cgroups) or keeps the operator adding
    CAP_SYS_ADMIN to slurmd."""
    objects = render(slurm_chart, helm, "slurm.confinement.enabled=false")
    assert {k: conf_value(objects, k) for k in PLUGINS} == {
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "JobAcctGatherType": "jobacct_gather/none",
        "JobContainerType": None,
        "PrologFlags": None,
    }
    assert cgroup_conf(objects) == {"CgroupPlugin": "disabled"}
    assert "job_container.conf" not in config(objects)
    operator = container(named(objects, "Deployment", "r1-operator"), "operator")
    assert "--confinement=off" in operator["args"]
    assert "--private-tmp=false" in operator["args"]


def test_issue36_private_tmp_can_be_turned_off_alone(helm: Path, slurm_chart: Path) -> None:
    """Catches a privateTmp=false that still writes job_container/tmpfs (every job would
    still get a mount namespace) or still has the operator start slurmd for it."""
    objects = render(slurm_chart, helm, "slurm.confinement.privateTmp=false")
    assert conf_value(objects, "JobContainerType") is None
    assert conf_value(objects, "PrologFlags") is None
    assert conf_value(objects, "ProctrackType") == "proctrack/cgroup"
    assert "job_container.conf" not in config(objects) and "mpi.conf" not in config(objects)
    operator = container(named(objects, "Deployment", "r1-operator"), "operator")
    assert "--private-tmp=false" in operator["args"]


NAMESPACE_YAML = {
    "defaults": {
        "auto_base_path": True,
        "base_path": "/var/spool/slurmd/job-tmp",  # where job_container/tmpfs keeps them too
        "dirs": "/tmp,/dev/shm",
        "clone_ns_flags": ["CLONE_NEWPID"],
    }
}


def tags(controller: str, slurmd: str) -> Obj:
    return {"controller": {"image": {"tag": controller}}, "slurmd": {"image": {"tag": slurmd}}}


def job_namespaces(objects: list[Obj]) -> tuple[str | None, str | None, str | None]:
    """(NamespaceType, JobContainerType, PrologFlags), checking that the file each plugin reads
    is written exactly when it is loaded, with the MPI setting both need."""
    data = config(objects)
    namespace, container = conf_value(objects, "NamespaceType"), conf_value(objects, "JobContainerType")
    assert ("namespace.yaml" in data) == (namespace == "namespace/linux")
    assert ("job_container.conf" in data) == (container == "job_container/tmpfs")
    assert ("mpi.conf" in data) == bool(namespace or container)
    return namespace, container, conf_value(objects, "PrologFlags")


@pytest.mark.parametrize(
    ("controller", "slurmd"),
    [("26.05", "26.05"), ("25.11", "25.11.3"), ("v26.05.5", "26.05-8e6ae5515eba"), ("27.05", "26.05")],
)
def test_issue49_from_slurm_25_11_each_job_gets_its_own_pid_namespace(
    helm: Path, slurm_chart: Path, controller: str, slurmd: str
) -> None:
    """Catches a job on 25.11+ that still sees every other job's processes on its node in
    /proc (job_container/tmpfs makes no PID namespace), and a namespace.yaml that keeps the
    jobs' /tmp anywhere but where slurmd's spool (and the e2e tests) expect it."""
    objects = render(slurm_chart, helm, values=tags(controller, slurmd))
    assert job_namespaces(objects) == ("namespace/linux", None, "Contain")
    assert yaml.safe_load(config(objects)["namespace.yaml"]) == NAMESPACE_YAML
    assert "PMIxEnv=PMIX_MCA_gds=hash" in config(objects)["mpi.conf"]
    operator = container(named(objects, "Deployment", "r1-operator"), "operator")
    assert "--private-tmp=true" in operator["args"]  # slurmd still pins mount namespaces


@pytest.mark.parametrize(
    ("controller", "slurmd"),
    [("24.11", "24.11"), ("26.05", "24.11"), ("24.11", "26.05"), ("25.05", "25.05"), ("latest", "26.05")],
)
def test_issue49_before_slurm_25_11_jobs_keep_job_container_tmpfs(
    helm: Path, slurm_chart: Path, controller: str, slurmd: str
) -> None:
    """Catches NamespaceType written for a Slurm that does not know it (24.11's daemons stop at
    start on the line), including where only one of the two images is older or a tag does not
    say its version: those keep the private /tmp and /dev/shm of job_container/tmpfs."""
    objects = render(slurm_chart, helm, values=tags(controller, slurmd))
    assert job_namespaces(objects) == (None, "job_container/tmpfs", "Contain")
    assert "BasePath=/var/spool/slurmd/job-tmp" in config(objects)["job_container.conf"]


@pytest.mark.parametrize(
    ("version", "pid_namespace", "expected"),
    [
        ("26.05", False, (None, "job_container/tmpfs", "Contain")),
        ("24.11", True, ("namespace/linux", None, "Contain")),  # said outright: tags not read
    ],
)
def test_issue49_pid_namespace_can_be_set_outright(
    helm: Path, slurm_chart: Path, version: str, pid_namespace: bool, expected: tuple[str | None, ...]
) -> None:
    values = tags(version, version)
    values["slurm"] = {"confinement": {"pidNamespace": pid_namespace}}
    assert job_namespaces(render(slurm_chart, helm, values=values)) == expected


def test_issue49_no_private_tmp_means_no_pid_namespace(helm: Path, slurm_chart: Path) -> None:
    """Catches namespace/linux left on a 26.05 cluster whose private /tmp is off (the plugin
    always makes the mount namespace) or with confinement off altogether."""
    for off in ("privateTmp", "enabled"):
        values = {**tags("26.05", "26.05"), "slurm": {"confinement": {off: False}}}
        assert job_namespaces(render(slurm_chart, helm, values=values)) == (None, None, None)


@pytest.mark.parametrize(
    ("confinement", "said"),
    [
        ({"pidNamespace": "yes"}, 'pidNamespace is "yes": use auto (on from Slurm 25.11), true or false'),
        ({"pidNamespace": True, "privateTmp": False}, "pidNamespace=true needs slurm.confinement.enabled"),
    ],
)
def test_issue49_a_pid_namespace_setting_that_cannot_work_is_refused(
    helm: Path, slurm_chart: Path, confinement: Obj, said: str
) -> None:
    assert said in fails(slurm_chart, helm, values={"slurm": {"confinement": confinement}})


def test_issue36_a_cgroup_conf_of_ones_own_replaces_the_written_one(helm: Path, slurm_chart: Path) -> None:
    objects = render(slurm_chart, helm, values={"slurm": {"cgroupConf": "CgroupPlugin=cgroup/v1\n"}})
    assert cgroup_conf(objects) == {"CgroupPlugin": "cgroup/v1"}


def test_issue36_an_unknown_cgroup_version_is_refused(helm: Path, slurm_chart: Path) -> None:
    said = fails(slurm_chart, helm, values={"slurm": {"confinement": {"cgroupVersion": "v3"}}})
    assert "use auto, v1 or v2" in said


# What Slurm 24.11's `slurmd -G` says about a misspelt cgroup.conf key (seen in a slurmd Pod).
CGROUP_REFUSAL = """slurmd: error: _parse_next_key: Parsing error at unrecognized key: ConstrainCoress
slurmd: fatal: Could not open/read/parse cgroup.conf file /proposed/cgroup.conf
"""
# ...and about a cgroup.conf it accepted, once it goes on without slurm.key.
LATER_FATAL = "slurmd: fatal: auth/slurm: cannot stat '/proposed/slurm.key': No such file or directory\n"


def test_issue36_the_upgrade_check_refuses_a_cgroup_conf_slurm_rejects(
    helm: Path, slurm_chart: Path, tmp_path: Path
) -> None:
    """Catches an upgrade check that reads only slurm.conf (scontrol never parses cgroup.conf,
    so a misspelt cgroupConf key would pass and every slurmd stop at its next start), and one
    that mistakes slurmd's later, unrelated stop for a refusal."""
    job = named(render(slurm_chart, helm), "Job", "r1-partition-check")
    parse = container(job, "parse")
    assert parse["image"] == "slurmd:24.11"  # the image that has slurmd
    script = parse["args"][-1]
    (tmp_path / "scontrol").write_text("#!/bin/sh\nexit 0\n")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SLURM_CONF": str(tmp_path / "slurm.conf")}
    for said, refused in ((CGROUP_REFUSAL, True), (LATER_FATAL, False)):
        (tmp_path / "slurmd").write_text(f"#!/bin/sh\ncat >&2 <<'SAID'\n{said}SAID\nexit 1\n")
        for tool in ("scontrol", "slurmd"):
            (tmp_path / tool).chmod(0o755)
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
        assert (done.returncode == 1) is refused, done.stderr
        if refused:
            assert (
                CGROUP_REFUSAL in done.stderr and "cgroup.conf (slurm.cgroupConf) is refused" in done.stderr
            )
        else:
            assert "accepts the new slurm.conf and cgroup.conf" in done.stdout
