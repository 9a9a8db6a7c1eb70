"""People, not root (R10.6, issue #35), on real Nodes: the Slurm chart reads the dev
cluster's directory (a real slapd with alice, bob and carol), people log in over SSH with
the keys the directory holds, and their jobs run as themselves with their groups.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`), which also runs the
directory on the Nodes' bridge.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sunk_dev import DevCluster, directory
from sunk_dev.kubeapi import AdminKube
from sunk_dev.people import as_user, directory_values, prepare_namespace, ssh, wait_associated
from sunk_dev.platform import Platform, nodeset
from tests.e2e.slurm_in_pods import delete_namespace
from tests.support import wait_for

pytestmark = pytest.mark.real_nodes
NAMESPACE = "people"


def people_written(kube: AdminKube) -> dict[str, str] | None:
    found = kube.find(f"/api/v1/namespaces/{NAMESPACE}/configmaps/slurm-people")
    data = (found or {}).get("data") or {}
    return data if "alice:" in data.get("passwd", "") else None


@pytest.fixture(scope="module")
def platform(dev_cluster: DevCluster, kube: AdminKube) -> Iterator[Platform]:
    prepare_namespace(dev_cluster, kube, NAMESPACE)
    plat = Platform(dev_cluster, namespace=NAMESPACE, release="slurm")
    plat.install(directory_values(dev_cluster), scheduler=False)
    plat.apply_nodeset(kube, nodeset("compute", ["main"], replicas=1))
    wait_for(lambda: people_written(kube), timeout=60, what="the operator writing the directory's people")
    wait_associated(plat, "alice", "bob", "carol")
    yield plat
    plat.uninstall()
    delete_namespace(kube, NAMESPACE, timeout=180)


def test_r10_6_alice_logs_in_with_her_directory_key_as_herself(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    out = as_user(dev_cluster, kube, NAMESPACE, "alice", "id; echo home=$HOME; stat -c %u $HOME")
    assert "uid=20001(alice) gid=30000(people) groups=30000(people),30001(ml)" in out
    assert "home=/home/alice" in out
    assert out.strip().endswith("20001")  # her home was made at first login, and is hers


def test_r10_6_a_job_of_alice_runs_as_her_with_her_groups_on_a_slurmd_pod(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    out = as_user(dev_cluster, kube, NAMESPACE, "alice", "srun -N1 --chdir=/tmp id", within=240)
    assert "uid=20001(alice) gid=30000(people) groups=30000(people),30001(ml)" in out


def test_r10_6_sacct_shows_alices_job_under_her_groups_account(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    submit = "sbatch --parsable --wait --chdir=/tmp --wrap true"
    job = as_user(dev_cluster, kube, NAMESPACE, "alice", submit).strip()
    line = wait_for(
        lambda: platform.login(f"sacct -nPX -j {job} --format=User,Account,State").stdout.strip() or None,
        timeout=30,
        what=f"job {job} in sacct",
    )
    assert line == "alice|people|COMPLETED"


def test_r10_6_bob_cannot_cancel_alices_job(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    job = as_user(
        dev_cluster, kube, NAMESPACE, "alice", "sbatch --parsable --chdir=/tmp --wrap 'sleep 300'"
    ).strip()
    try:
        refused = ssh(dev_cluster, kube, NAMESPACE, "bob", f"scancel {job}")
        assert refused.returncode != 0
        assert "Access/permission denied" in refused.stderr + refused.stdout
    finally:
        ssh(dev_cluster, kube, NAMESPACE, "alice", f"scancel {job}")  # best effort: the job may have ended


def test_r10_6_a_key_the_directory_does_not_hold_for_her_is_refused(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    """bob's key does not open alice's account (the keys are per person, not shared)."""
    done = ssh(dev_cluster, kube, NAMESPACE, "alice", "true", key_of="bob")
    assert done.returncode == 255 and "Permission denied" in done.stderr


def unreadable_events(kube: AdminKube) -> list[str]:
    events = kube.get(f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
    return [
        e.get("message") or ""
        for e in events
        if e.get("reason") == "DirectoryUnreadable"
        and (e.get("involvedObject") or {}).get("name") == "slurm-people"
    ]


def test_r10_6_with_the_directory_down_alice_still_logs_in_and_submits_and_the_configmap_says_why(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    as_user(dev_cluster, kube, NAMESPACE, "alice", "true")  # her people reached the login Pod before
    directory.stop(dev_cluster.layout)
    try:
        wait_for(lambda: unreadable_events(kube) or None, timeout=60, what="a DirectoryUnreadable Event")
        out = as_user(
            dev_cluster,
            kube,
            NAMESPACE,
            "alice",
            "sbatch --parsable --chdir=/tmp --wrap true && id -un",
            within=60,
        )
        assert out.split()[-1] == "alice"
        assert people_written(kube) is not None  # the last people stay as they were
    finally:
        directory.serve(dev_cluster.layout)
