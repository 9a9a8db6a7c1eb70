"""Issue #37: the Slurm chart's oci.conf, which makes `srun --container=IMAGE` run the step
in IMAGE through sunk-step-container in the slurmd image."""

from __future__ import annotations

from pathlib import Path

from tests.chart.test_slurm_chart import fails, named, render
from tests.chart.test_slurm_confinement import config

RUNTIME = "/usr/local/bin/sunk-step-container"


def oci_conf(chart: Path, helm: Path, *sets: str) -> dict[str, str]:
    text = config(render(chart, helm, *sets))["oci.conf"]
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def test_r10_7_containers_are_on_by_default_through_sunks_runtime(helm: Path, slurm_chart: Path) -> None:
    """Catches a chart without oci.conf (Slurm then ignores --container and runs the step on
    the node, outside the image the user asked for) or one that makes Slurm read a bundle
    from disk (an image reference is no bundle: every step would fail)."""
    conf = oci_conf(slurm_chart, helm)
    assert conf["IgnoreFileConfigJson"] == "true"
    assert conf["CreateEnvFile"] == "null"  # the step's environment, NUL-separated, for the runtime
    run = conf["RunTimeRun"]
    assert f"exec {RUNTIME} --cache-max-gib 20 run --container '%r' --env-file %e --spool %m" in run
    assert run.endswith('exit 125; fi"') and "-- %@;" in run


def test_r10_7_allowed_mounts_and_insecure_registries_reach_the_runtime(
    helm: Path, slurm_chart: Path
) -> None:
    run = oci_conf(
        slurm_chart,
        helm,
        "slurm.containers.allowedMounts={/shared,/scratch}",
        "slurm.containers.insecureRegistries={10.0.0.1:5000}",
        "slurm.containers.cacheMaxGiB=5",
    )["RunTimeRun"]
    assert (
        "--cache-max-gib 5 --allow-mount /shared --allow-mount /scratch --insecure-registry 10.0.0.1:5000"
        in run
    )


def test_r10_7_with_containers_off_a_container_step_is_refused_not_run_on_the_node(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches `enabled: false` dropping oci.conf: Slurm would then run the step outside the
    image without a word."""
    run = oci_conf(slurm_chart, helm, "slurm.containers.enabled=false")["RunTimeRun"]
    assert "containers in job steps are off on this cluster" in run and "exit 125" in run
    assert RUNTIME not in run


def test_r10_7_a_mount_that_is_not_a_plain_absolute_path_fails_the_install(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches a value that would break oci.conf's quoting or inject into the runtime's shell."""
    said = fails(slurm_chart, helm, "slurm.containers.allowedMounts={relative/dir}")
    assert "slurm.containers.allowedMounts" in said
    said = fails(slurm_chart, helm, "slurm.containers.insecureRegistries={a;b}")
    assert "slurm.containers.insecureRegistries" in said


# -- shared volumes ------------------------------------------------------------------------

SHARED = (
    "sharedVolumes[0].name=data",
    "sharedVolumes[0].mountPath=/shared",
    "sharedVolumes[0].storageClassName=nfs",
    "sharedVolumes[1].name=home",
    "sharedVolumes[1].mountPath=/home",
    "sharedVolumes[1].claimName=team-homes",
    "sharedVolumes[1].readOnly=true",
)


def test_r10_7_a_shared_volume_gets_a_kept_readwritemany_claim_unless_one_is_named(
    helm: Path, slurm_chart: Path
) -> None:
    objects = render(slurm_chart, helm, *SHARED)
    claims = [
        o for o in objects if o["kind"] == "PersistentVolumeClaim" and o["metadata"]["name"].startswith("r1-")
    ]
    [claim] = [c for c in claims if c["metadata"]["name"] == "r1-data"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"] and claim["spec"]["storageClassName"] == "nfs"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"  # data outlives uninstall
    assert not [c for c in claims if c["metadata"]["name"] == "team-homes"]  # named: not made


def test_r10_7_shared_volumes_reach_the_login_pods_the_operator_and_container_steps(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches a volume mounted on login but not on the slurmd Pods (a job would not see
    what its user wrote), or one container steps may not bind."""
    objects = render(slurm_chart, helm, *SHARED)
    operator = named(objects, "Deployment", "r1-operator")["spec"]["template"]["spec"]["containers"][0]
    assert "--shared-volumes=r1-data:/shared,team-homes:/home:ro" in operator["args"]
    login = named(objects, "Deployment", "r1-login")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in login["containers"][0]["volumeMounts"]}
    assert mounts["/shared"]["readOnly"] is False and mounts["/home"]["readOnly"] is True
    claims = {
        v["persistentVolumeClaim"]["claimName"] for v in login["volumes"] if "persistentVolumeClaim" in v
    }
    assert claims == {"r1-data", "team-homes"}
    run = oci_conf(slurm_chart, helm, *SHARED)["RunTimeRun"]
    assert "--allow-mount /shared --allow-mount /home" in run


def test_r10_7_a_shared_volume_without_an_absolute_path_fails_the_install(
    helm: Path, slurm_chart: Path
) -> None:
    said = fails(slurm_chart, helm, "sharedVolumes[0].name=data", "sharedVolumes[0].mountPath=data")
    assert "sharedVolumes[0].mountPath" in said
    said = fails(
        slurm_chart,
        helm,
        "sharedVolumes[0].name=a",
        "sharedVolumes[0].mountPath=/x",
        "sharedVolumes[1].name=b",
        "sharedVolumes[1].mountPath=/x",
    )
    assert "two volumes are mounted at /x" in said
