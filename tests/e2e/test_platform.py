"""R10 end to end: the Slurm chart installed with helm on the dev cluster's real Nodes, slurmd
Pods from a NodeSet, users' Slurm commands from the login Pod, accounting in MariaDB, and a
Pod placed by sunk's scheduler running beside a Slurm job.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`, which `make test` runs).
The tests share one install and run in file order; each leaves the cluster as it found it.
"""

from __future__ import annotations

import base64
import re
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sunk.operator.chart.config_apply import APPLIED_AT, APPLIED_HASH, config_hash
from sunk.slurm.hostlist import expand
from sunk.slurm.jwt import expires_at, mint
from sunk_dev import DevCluster, netpol
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.kubecluster import create_once
from sunk_dev.people import directory_values, prepare_namespace
from sunk_dev.platform import Platform, merge_values, nodeset
from tests.e2e.slurm_in_pods import containers_running, delete_namespace
from tests.security.attack import POSITIONS, REFUSED, REST_VERSIONS, Attacker, Target, report
from tests.support import make_pod, wait_for

pytestmark = pytest.mark.real_nodes
NAMESPACE = "plat"
# The NodeSet joins both; a later upgrade adds a third, with no nodes yet.
PARTITIONS = [{"name": "main", "default": True}, {"name": "extra"}]
FIGURES: dict[str, float] = {}
# The directory's people log in with their keys or passwords, and their homes are on the
# shared /home (the dev values' default); a key is authorized for root, whose SSH login
# stays off (the attack script tries it: only sshd's PermitRootLogin may stop it).
ROOT_KEYS = "root-keys"
PEOPLE_VALUES = {"login": {"passwordLogin": True, "authorizedKeysSecret": ROOT_KEYS}}


def members(kube: AdminKube) -> dict[str, dict[str, Any]]:
    pods = kube.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="sunk.coreweave.com/nodeset=compute"
    )
    return {p["metadata"]["name"]: p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")}


def nodeset_ready(platform: Platform, kube: AdminKube, name: str) -> bool:
    conditions = (platform.nodeset(kube, name).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def slurm_counts(platform: Platform, kube: AdminKube, name: str = "compute") -> dict[str, int]:
    return dict((platform.nodeset(kube, name).get("status") or {}).get("slurm") or {})


def table_columns(text: str) -> dict[str, list[str]]:
    """kubectl's table by column (cells cut at the headers' positions; blank cells stay)."""
    header, *rows = text.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return {header[a:b].strip(): [row[a:b].strip() for row in rows] for a, b in bounds}


def pod_if_running(kube: AdminKube, namespace: str, name: str) -> dict[str, Any] | None:
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return pod if containers_running(pod) else None


def login_output(platform: Platform, command: str) -> str | None:
    """The command's output once it succeeds, else None (to wait on)."""
    result = platform.login(command)
    return result.stdout if result.returncode == 0 else None


def logged_in(platform: Platform, command: str) -> str:
    result = platform.login(command)
    assert result.returncode == 0, f"{command}: {result.stderr or result.stdout}"
    return result.stdout


@pytest.fixture(scope="module")
def platform(dev_cluster: DevCluster, kube: AdminKube) -> Iterator[Platform]:
    prepare_namespace(dev_cluster, kube, NAMESPACE)
    root_key = dev_cluster.layout.root / f"{NAMESPACE}-root-key"
    if not root_key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root_key)], check=True)
    public = root_key.with_suffix(".pub").read_text()
    create_once(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        {"metadata": {"name": ROOT_KEYS}, "stringData": {"root": public}},
    )
    plat = Platform(dev_cluster, namespace=NAMESPACE, release="slurm")
    values = merge_values(
        merge_values(directory_values(dev_cluster), PEOPLE_VALUES), {"slurm": {"partitions": PARTITIONS}}
    )
    FIGURES["helm install (s)"] = plat.install(values)
    started = time.monotonic()
    plat.apply_nodeset(kube, nodeset("compute", ["main", "extra"]))
    wait_for(
        lambda: (nodeset_ready(plat, kube, "compute") and slurm_counts(plat, kube).get("idle") == 3) or None,
        timeout=180,
        what="the NodeSet's three members ready and idle",
    )
    FIGURES["NodeSet applied -> 3 nodes idle (s)"] = time.monotonic() - started
    yield plat
    print("\nplatform figures:", {k: round(v, 1) for k, v in FIGURES.items()})
    plat.uninstall()
    delete_namespace(kube, NAMESPACE, timeout=180)


def test_r10_1_helm_install_gives_a_nodeset_of_idle_slurm_nodes_that_kubectl_shows_like_sinfo(
    platform: Platform,
) -> None:
    table = platform.kubectl("get", "nodesets")
    assert table.returncode == 0, table.stderr
    columns = table_columns(table.stdout)
    assert list(columns)[:9] == [
        "NAME",
        "PARTITIONS",
        "DESIRED",
        "FEASIBLE",
        "PODS",
        "READY",
        "UPDATED",
        "IDLE",
        "ALLOC",
    ]
    [row] = [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
    assert row["NAME"] == "compute" and row["PARTITIONS"] == "main,extra"
    assert row["DESIRED"] == ""  # no replicas: one per qualifying Node
    assert [row[c] for c in ("FEASIBLE", "PODS", "READY", "UPDATED", "IDLE", "ALLOC", "DRAIN", "DOWN")] == [
        "3",
        "3",
        "3",
        "3",
        "3",
        "0",
        "0",
        "0",
    ]


def test_r10_1_the_secrets_hook_jobs_and_their_pods_are_gone_once_they_succeeded(
    platform: Platform, kube: AdminKube
) -> None:
    """Issue #32: `helm uninstall` leaves hook objects, so these stayed for good."""
    hooks = ("slurm-secrets", "slurm-sunk-scheduler-hooks-secret")

    def left() -> list[str]:
        jobs = kube.get(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")["items"]
        pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        return [f"Job {j['metadata']['name']}" for j in jobs if j["metadata"]["name"] in hooks] + [
            f"Pod {p['metadata']['name']}"
            for p in pods
            if (p["metadata"].get("labels") or {}).get("job-name") in hooks
        ]

    wait_for(lambda: not left() or None, timeout=60, what=f"no hook Job or Pod left (left: {left()})")


def test_r10_1_sinfo_from_the_login_pod_lists_the_nodeset(platform: Platform) -> None:
    lines = logged_in(platform, "sinfo -h -o '%P %D %t'").splitlines()
    assert lines == ["main* 3 idle", "extra 3 idle"]


def test_r10_1_srun_runs_across_the_nodeset(platform: Platform, kube: AdminKube) -> None:
    hosts = logged_in(platform, "srun -N3 hostname").split()
    assert sorted(hosts) == sorted(members(kube))


def test_r10_1_slurm_host_names_resolve_so_slurmctld_never_stalls_on_srun(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches srun's host (the login Pod, or a member inside a batch job) that slurmctld
    cannot resolve: it then retries for about ten seconds at each job's end, holding its job
    lock, and other steps' messages time out. Also catches nodes of a job that cannot
    reach each other by name (MASTER_ADDR from SLURM_JOB_NODELIST)."""
    started = time.monotonic()
    logged_in(platform, "for i in 1 2 3 4 5 6; do srun -N1 true; done")
    FIGURES["six sruns from the login Pod (s)"] = time.monotonic() - started
    first = sorted(members(kube))[0]
    said = logged_in(platform, f"srun -N3 getent hosts {first}")
    inside = re.findall(rf"^[0-9a-f.:]+\s+{re.escape(first)}", said, re.M)  # an address, then the name
    assert len(inside) == 3, said
    logs = platform.kubectl("logs", f"{platform.release}-controller-0", "-c", "slurmctld")
    assert "Unable to resolve" not in logs.stdout, [
        line for line in logs.stdout.splitlines() if "resolve" in line
    ][:3]


def test_r10_1_sacct_shows_a_finished_job_from_mariadb(platform: Platform) -> None:
    job = logged_in(platform, "sbatch --parsable --wait --wrap true").strip()
    state = wait_for(
        lambda: logged_in(platform, f"sacct -X -n -P -j {job} -o State").strip() or None,
        timeout=60,
        what=f"job {job} in sacct",
    )
    assert state == "COMPLETED"


def test_issue38_slurmrestd_answers_over_tls_that_the_releases_ca_verifies_and_never_in_clear(
    platform: Platform, kube: AdminKube, tmp_path: Path
) -> None:
    """Catches slurmrestd reachable in clear beside stunnel (tokens readable on the wire)
    or a certificate its clients cannot verify by the Service's name. The operator and the
    scheduler of this suite talk to it the same way in every other test."""
    secrets = f"/api/v1/namespaces/{NAMESPACE}/secrets"
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(kube.get(f"{secrets}/slurm-restapi-tls")["data"]["ca.crt"]))
    token = base64.b64decode(kube.get(f"{secrets}/slurm-scheduler-token")["data"]["token"]).decode()
    [pod] = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app.kubernetes.io/name=slurmrestd")[
        "items"
    ]
    address = pod["status"]["podIP"]
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token}
    verified = ssl.create_default_context(cafile=str(ca))
    with httpx.Client(verify=verified, timeout=10) as client:
        answer = client.get(
            f"https://{address}:6820/openapi/v3",
            headers=headers,
            extensions={"sni_hostname": "slurm-restapi"},  # the name the certificate is for
        )
    assert answer.status_code == 200, answer.text[:300]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://{address}:6820/openapi/v3", headers=headers, timeout=10)


def test_issue38_the_attack_script_finds_no_way_in(
    platform: Platform, kube: AdminKube, dev_cluster: DevCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issues #38 and #52: an attacker in every position (a Kubernetes tenant, the host's
    network, a tenant's Pod, an unlabelled Pod in the release's namespace, bob on the login
    Pod, a job of bob's on a slurmd Pod) tries every path the chart closes; each must be
    refused. NetworkPolicies are enforced on the dev cluster's real Nodes, so a network path
    that opens fails this, as does one no control proves (`unproven`)."""
    assert netpol.state(dev_cluster.layout).startswith("enforced")
    root_key = dev_cluster.layout.root / f"{NAMESPACE}-root-key"
    # The key is one sshd would take for root, were root's login allowed.
    public = root_key.with_suffix(".pub").read_text().split()[1]
    assert public in logged_in(platform, "/usr/local/sbin/sunk-authorized-keys root")
    target = Target(NAMESPACE, platform.release, platform.strangers, "bob", "alice", root_key)
    attacker = Attacker(dev_cluster, kube, target)
    started = time.monotonic()
    try:
        attempts = attacker.run()
    finally:
        attacker.close()
    FIGURES["attack script (s)"] = time.monotonic() - started
    with capsys.disabled():  # the report is the suite's record of every position tried
        print("\n" + report(attempts), flush=True)
    assert [a for a in attempts if a.outcome != REFUSED] == []
    assert {a.position for a in attempts} == set(POSITIONS)
    tried = {(a.position, a.path) for a in attempts}
    for position in POSITIONS[2:4]:
        for daemon in ("MariaDB", "slurmdbd", "slurmctld", "slurmd", "slurmrestd", "the hooks API"):
            assert any(p == position and path.startswith(f"connect to {daemon} (") for p, path in tried)
    paths = {path for _, path in tried}
    assert {
        "read the release's Slurm keys",
        "exec into a slurmd Pod",
        "a Slurm job as root",
        "log in as root over SSH",  # with the key authorized for root
        "slurmrestd over TLS with a forged token",
        "bob: rename /run/slurm/conf (to plant a slurm.conf)",
        "bob: read alice's files",
        "bob's job: connect to MariaDB (port 3306)",
        "bob's job: read slurmd's slurm.key",
    } <= paths


def test_issue52_the_operator_renews_the_schedulers_token_and_slurmrestd_takes_it(
    platform: Platform, kube: AdminKube, dev_cluster: DevCluster
) -> None:
    """Catches: a renewal that stops under enforced NetworkPolicies, or a renewed token
    slurmrestd refuses. A token due for renewal (valid, less than 3 hours left) is put in
    the Secret; the operator, restarted, replaces it at once with a 6-hour one, which
    slurmrestd accepts over TLS. (The scheduler reaching slurmrestd through the policies
    with its token: the next test's Pod.)"""
    assert netpol.state(dev_cluster.layout).startswith("enforced")
    secrets = f"/api/v1/namespaces/{NAMESPACE}/secrets"
    secret = f"{secrets}/{platform.release}-scheduler-token"
    key = base64.b64decode(kube.get(f"{secrets}/{platform.release}-auth")["data"]["jwt_hs256.key"])
    due = mint(key, "root", 3600)
    kube.patch(secret, {"data": {"token": base64.b64encode(due.encode()).decode()}})

    def token() -> str:
        return base64.b64decode(kube.get(secret)["data"]["token"]).decode()

    selector = f"app.kubernetes.io/name=sunk-operator,app.kubernetes.io/instance={platform.release}"
    for pod in kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=selector)["items"]:
        kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}")
    started = time.monotonic()
    renewed = wait_for(
        lambda: ((t := token()) != due and (expires_at(t) or 0) > time.time() + 5 * 3600 and t) or None,
        timeout=240,  # a new operator starts in 10-20 s; on a loaded 2-core machine, 80 s
        what="the restarted operator to renew the token",
    )
    FIGURES["operator restarted -> token renewed (s)"] = time.monotonic() - started
    [pod] = kube.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        labelSelector=f"app.kubernetes.io/name=slurmrestd,app.kubernetes.io/instance={platform.release}",
    )["items"]
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": renewed}
    with httpx.Client(verify=False, timeout=10, headers=headers) as client:
        answers = (
            client.get(f"https://{pod['status']['podIP']}:6820/slurm/{version}/diag")
            for version in REST_VERSIONS
        )
        answer = next(a for a in answers if a.status_code != 404)
    assert answer.status_code == 200, answer.text[:300]


def test_r10_7_a_pod_placed_by_sunk_runs_on_a_real_node_beside_a_slurm_job(
    platform: Platform, kube: AdminKube
) -> None:
    member = next(name for name, pod in members(kube).items() if pod["spec"]["nodeName"] == "real-1")
    job = logged_in(platform, f"sbatch --parsable -w {member} -c1 --mem=64 --wrap 'sleep 600'").strip()
    try:
        pod = make_pod(
            "beside",
            f"{NAMESPACE}-{platform.release}",
            cpu="100m",
            memory="32Mi",
            nodeSelector={"kubernetes.io/hostname": "real-1"},
        )
        main = pod["spec"]["containers"][0]
        main.update(
            image=platform.images["slurmd"].ref, imagePullPolicy="Never", command=["sleep", "infinity"]
        )
        started = time.monotonic()
        kube.create(f"/api/v1/namespaces/{platform.tenants}/pods", pod)
        running = wait_for(
            lambda: pod_if_running(kube, platform.tenants, "beside"),
            timeout=120,
            what="the Pod placed by sunk to run",
        )
        FIGURES["Pod through sunk: create -> running on a real Node (s)"] = time.monotonic() - started
        assert running["spec"]["nodeName"] == "real-1"
        queue = logged_in(platform, "squeue -h -t R -o '%i %N'")
        assert f"{job} {member}" in queue
        assert len([line for line in queue.splitlines() if line.endswith(member)]) == 2, queue
    finally:
        kube.delete(f"/api/v1/namespaces/{platform.tenants}/pods/beside")
        logged_in(platform, f"scancel {job}")
        wait_for(
            lambda: logged_in(platform, "squeue -h").strip() == "" or None,
            timeout=90,
            what="the queue to drain",
        )


def slurm_config(kube: AdminKube) -> dict[str, Any]:
    return kube.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/slurm-slurm-config")


def test_r10_3_a_values_change_adds_a_partition_without_restarting_slurmd(
    platform: Platform, kube: AdminKube
) -> None:
    before = {
        name: (p["metadata"]["uid"], p["status"]["containerStatuses"][0]["restartCount"])
        for name, p in members(kube).items()
    }
    changed = time.monotonic()
    platform.upgrade({"slurm": {"partitions": [*PARTITIONS, {"name": "third"}]}})
    shown = wait_for(
        lambda: login_output(platform, "scontrol show partition third"),
        timeout=180,
        what="partition third in scontrol show partition",
    )
    FIGURES["config change → partition in Slurm (s)"] = round(time.monotonic() - changed, 1)
    assert "PartitionName=third" in shown
    after = {
        name: (p["metadata"]["uid"], p["status"]["containerStatuses"][0]["restartCount"])
        for name, p in members(kube).items()
    }
    assert after == before
    # The ConfigMap says which configuration Slurm runs, and since when.
    cm = wait_for(
        lambda: (
            (c := slurm_config(kube))["metadata"]["annotations"].get(APPLIED_HASH) == config_hash(c["data"])
            and c
        ),
        timeout=60,
        what="the applied configuration's hash on the ConfigMap",
    )
    assert cm["metadata"]["annotations"][APPLIED_AT].endswith("Z")


def test_r10_3_an_upgrade_slurms_parser_refuses_is_stopped_and_changes_nothing(
    platform: Platform, kube: AdminKube
) -> None:
    before = slurm_config(kube)["data"]
    wrong = {"slurm": {"partitions": [*PARTITIONS, {"name": "third"}], "extraConf": {"MaxJobCont": "5000"}}}
    result = platform.upgrade(wrong, check=False)
    assert result.returncode != 0
    # The documented way: both containers' logs (issue #32: `check` waited in PodInitializing
    # and this failed), with the line of slurm.conf that sets the key Slurm did not know.
    shown = platform.kubectl("logs", "job/slurm-partition-check", "--all-containers")
    said = shown.stdout
    assert shown.returncode == 0, shown.stderr
    assert "MaxJobCont" in said and "refused by Slurm's parser" in said, said
    assert re.search(r"slurm\.conf line \d+: MaxJobCont is set here: MaxJobCont=5000", said), said
    assert slurm_config(kube)["data"] == before
    assert "PartitionName=third" in logged_in(platform, "scontrol show partition third")


def test_r10_3_an_upgrade_dropping_a_partition_jobs_still_use_is_refused_naming_them(
    platform: Platform,
) -> None:
    job = logged_in(platform, "sbatch --parsable -p extra --wrap 'sleep 600'").strip()
    try:
        keep = [PARTITIONS[0], {"name": "third"}]
        result = platform.upgrade({"slurm": {"partitions": keep}}, check=False)
        assert result.returncode != 0
        assert "partition-check" in result.stderr, result.stderr
        said = platform.kubectl("logs", "job/slurm-partition-check", "--all-containers").stdout
        assert re.search(rf"\bextra\b.*\b{job}\b", said), said
        assert "PartitionName=extra" in logged_in(platform, "scontrol show partition extra")
    finally:
        logged_in(platform, f"scancel {job}")


def test_r10_2_a_second_nodeset_selecting_a_held_node_does_not_take_it_and_says_so(
    platform: Platform, kube: AdminKube
) -> None:
    platform.apply_nodeset(
        kube, nodeset("other", ["main"], nodeSelector={"kubernetes.io/hostname": "real-1"})
    )
    status = wait_for(
        lambda: (
            (platform.nodeset(kube, "other").get("status") or {}).get("conditions")
            and platform.nodeset(kube, "other")["status"]
        ),
        timeout=60,
        what="the second NodeSet's status",
    )
    feasible = next(c for c in status["conditions"] if c["type"] == "Feasible")
    assert feasible["status"] == "False" and "compute" in feasible["message"]
    events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]
    assert any(e["reason"] == "NodeHeldByOtherNodeSet" and e["regarding"]["name"] == "other" for e in events)
    assert status["replicas"] == 0 and len(members(kube)) == 3


def test_r10_2_a_nodeset_whose_selection_matches_nothing_reports_it(
    platform: Platform, kube: AdminKube
) -> None:
    platform.apply_nodeset(kube, nodeset("nowhere", ["main"], nodeSelector={"sunk.dev/no-such": "label"}))
    feasible = wait_for(
        lambda: next(
            (
                c
                for c in (platform.nodeset(kube, "nowhere").get("status") or {}).get("conditions", [])
                if c["type"] == "Feasible"
            ),
            None,
        ),
        timeout=60,
        what="the NodeSet's Feasible condition",
    )
    assert (feasible["status"], feasible["reason"]) == ("False", "NoFeasibleNodes")
    assert "does not match nodeSelector" in feasible["message"]


def test_r10_2_a_restarted_operator_creates_no_duplicate_and_loses_no_member(
    platform: Platform, kube: AdminKube
) -> None:
    before = {name: p["metadata"]["uid"] for name, p in members(kube).items()}
    platform.kubectl("delete", "pod", "-l", "app.kubernetes.io/name=sunk-operator", "--wait=false")
    # A spec change only the new operator can answer: its status shows it has looked.
    platform.apply_nodeset(kube, nodeset("nowhere", ["main"], nodeSelector={"sunk.dev/no-such": "other"}))
    wait_for(
        lambda: (
            (platform.nodeset(kube, "nowhere").get("status") or {}).get("observedGeneration") == 2 or None
        ),
        timeout=120,
        what="the restarted operator to reconcile",
    )
    assert {name: p["metadata"]["uid"] for name, p in members(kube).items()} == before


def test_r10_5_scaling_in_removes_idle_members_and_their_records_and_scaling_out_brings_them_back(
    platform: Platform, kube: AdminKube
) -> None:
    for name in ("other", "nowhere"):
        kube.delete(f"/apis/sunk.coreweave.com/v1alpha1/namespaces/{NAMESPACE}/nodesets/{name}")
    started = time.monotonic()
    assert platform.kubectl("scale", "nodeset/compute", "--replicas=1").returncode == 0
    wait_for(lambda: len(members(kube)) == 1 or None, timeout=120, what="two idle members to go")
    wait_for(
        lambda: (
            sorted(set(logged_in(platform, "sinfo -h -N -o '%N'").split())) == sorted(members(kube)) or None
        ),
        timeout=60,
        what="their Slurm node records to go",
    )
    FIGURES["scale 3 -> 1: Pods and records gone (s)"] = time.monotonic() - started
    started = time.monotonic()
    assert platform.kubectl("scale", "nodeset/compute", "--replicas=3").returncode == 0
    wait_for(
        lambda: slurm_counts(platform, kube).get("idle") == 3 or None, timeout=180, what="3 idle members"
    )
    FIGURES["scale 1 -> 3: all idle (s)"] = time.monotonic() - started
    lines = logged_in(platform, "sinfo -h -o '%P %D %t'").splitlines()
    assert "main* 3 idle" in lines and "extra 3 idle" in lines


def removals(platform: Platform, kube: AdminKube) -> list[dict[str, Any]]:
    return list((platform.nodeset(kube, "compute").get("status") or {}).get("removals") or [])


def slurm_reasons(platform: Platform) -> dict[str, str]:
    """Slurm node → its drain reason (sinfo -R)."""
    lines = logged_in(platform, "sinfo -h -R -N -o '%N|%E'").splitlines()
    return dict(line.split("|", 1) for line in lines if "|" in line)


def job_on(platform: Platform, member: str, seconds: int, options: str = "") -> str:
    job = logged_in(
        platform, f"sbatch --parsable -w {member} -c1 --mem=64 {options} --wrap 'sleep {seconds}'"
    ).strip()
    wait_for(
        lambda: logged_in(platform, f"squeue -h -j {job} -o %T").strip() == "RUNNING" or None,
        timeout=60,
        what=f"job {job} to run on {member}",
    )
    return job


def sacct_state(platform: Platform, job: str) -> str:
    """The job's final state in accounting (waits while it runs)."""

    def final() -> str | None:
        state = logged_in(platform, f"sacct -X -n -P -j {job} -o State").strip()
        return state if state not in ("", "PENDING", "RUNNING", "COMPLETING") else None

    return wait_for(final, timeout=180, what=f"job {job} to end in sacct")


def wait_members(
    platform: Platform, kube: AdminKube, names: list[str], what: str, timeout: float = 120
) -> None:
    """Wait until exactly `names` are members; on a timeout, say what the NodeSet reported."""
    try:
        wait_for(lambda: sorted(members(kube)) == sorted(names) or None, timeout=timeout, what=what)
    except AssertionError as err:
        status = platform.nodeset(kube, "compute").get("status") or {}
        said = {k: status.get(k) for k in ("summary", "removals", "members")}
        raise AssertionError(f"{err}; members {sorted(members(kube))}; the NodeSet says {said}") from None


def scale(platform: Platform, replicas: int) -> None:
    result = platform.kubectl("scale", "nodeset/compute", f"--replicas={replicas}")
    assert result.returncode == 0, result.stderr


def back_to_three(platform: Platform, kube: AdminKube) -> None:
    scale(platform, 3)
    wait_for(
        lambda: (
            (slurm_counts(platform, kube).get("idle") == 3 and nodeset_ready(platform, kube, "compute"))
            or None
        ),
        timeout=180,
        what="3 idle members again",
    )


def test_r10_5_scaling_in_drains_a_busy_member_and_removes_it_only_after_its_job_completed(
    platform: Platform, kube: AdminKube
) -> None:
    busy = next(name for name, pod in members(kube).items() if pod["spec"]["nodeName"] == "real-2")
    job = job_on(platform, busy, 45)
    wait_for(  # the operator has seen the job (its listing is a few seconds behind)
        lambda: (
            any(
                m["slurmNode"] == busy and m["state"] in ("mixed", "allocated")
                for m in (platform.nodeset(kube, "compute").get("status") or {}).get("members") or []
            )
            or None
        ),
        timeout=30,
        what=f"the NodeSet's status to show {busy} busy",
    )
    started = time.monotonic()
    scale(platform, 1)
    wait_members(platform, kube, [busy], "the two idle members to go")
    FIGURES["scale 3 -> 1 beside a job: idle Pods gone (s)"] = time.monotonic() - started
    assert busy not in slurm_reasons(platform)  # the one that stays is not drained

    scale(platform, 0)
    drained_at = time.monotonic()
    removal = wait_for(
        lambda: next((r for r in removals(platform, kube) if r.get("jobs")), None),
        timeout=60,
        what="the busy member's removal in the status",
    )
    assert removal["slurmNode"] == busy and removal["jobs"] == [int(job)] and removal["phase"] == "Draining"
    assert slurm_reasons(platform)[busy] == "sunk: NodeSet compute scales in"
    assert busy in members(kube)  # kept while its job runs
    wait_members(platform, kube, [], "the member to go after its job")
    pod_gone = time.monotonic()
    wait_for(
        lambda: busy not in logged_in(platform, "sinfo -h -N -o '%N'").split() or None,
        timeout=60,
        what="its Slurm node record to go",
    )
    FIGURES["busy member: drain -> Pod gone (s, incl. the job's rest)"] = pod_gone - drained_at
    FIGURES["busy member: Pod gone -> record gone (s)"] = time.monotonic() - pod_gone
    assert sacct_state(platform, job) == "COMPLETED"
    back_to_three(platform, kube)


def nodeset_story(platform: Platform, kube: AdminKube, name: str = "compute") -> str:
    """What the NodeSet's status and Slurm say now, for a failure message: the removals and
    their steps, the conditions' messages, and every node's state and reason."""
    status = platform.nodeset(kube, name).get("status") or {}
    removals = [
        f"{r.get('slurmNode')}: {r.get('phase')}, {r.get('message')}" for r in status.get("removals") or []
    ]
    conditions = [
        f"{c['type']}={c['status']}: {c.get('message', '')}" for c in status.get("conditions") or []
    ]
    nodes = logged_in(platform, "sinfo -h -N -o '%N %T %E'").strip().replace("\n", "; ")
    return f"NodeSet {name}: removals {removals or 'none'}; {' | '.join(conditions)}; Slurm: {nodes}"


def draining_events(kube: AdminKube) -> dict[str, str]:
    """Event name -> note, for every DrainingMember Event (one per drain the operator made)."""
    events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]
    return {e["metadata"]["name"]: e.get("note", "") for e in events if e.get("reason") == "DrainingMember"}


def test_r10_5_a_scale_in_right_after_jobs_start_drains_the_idle_member_and_one_busy_one(
    platform: Platform, kube: AdminKube
) -> None:
    """Issue #32: jobs start on two members and the NodeSet is scaled to one at once, before
    the operator's periodic listing can show them. Exactly two drains: the idle member and
    the busy member whose time limit ends first; none is lifted, the other is never drained."""
    by_node = {pod["spec"]["nodeName"]: name for name, pod in members(kube).items()}
    soon, late, idle = by_node["real-1"], by_node["real-2"], by_node["real-3"]
    before = set(draining_events(kube))
    short = job_on(platform, soon, 20, "-t 1")  # its end is due first
    long = job_on(platform, late, 600, "-t 20")
    scale(platform, 1)
    try:
        wait_members(platform, kube, [soon, late], f"the idle member {idle} to go")
        wait_members(platform, kube, [late], f"{soon} to go after its job", timeout=180)
        drained = {n: note for n, note in draining_events(kube).items() if n not in before}
        assert sorted(note.split()[2] for note in drained.values()) == sorted([soon, idle]), drained
        assert late not in slurm_reasons(platform)
        assert sacct_state(platform, short) == "COMPLETED"
    finally:
        logged_in(platform, f"scancel {long}")
    back_to_three(platform, kube)


def test_r10_5_a_template_change_replaces_the_members_one_at_a_time(
    platform: Platform, kube: AdminKube
) -> None:
    before = {name: p["metadata"]["uid"] for name, p in members(kube).items()}
    started = time.monotonic()
    platform.apply_nodeset(
        kube,
        nodeset("compute", ["main", "extra"], template={"metadata": {"annotations": {"sunk.dev/rev": "2"}}}),
    )
    worst = 0

    def rolled() -> bool:
        nonlocal worst
        status = platform.nodeset(kube, "compute").get("status") or {}
        serving = [m for m in status.get("members") or [] if m["state"] in ("idle", "allocated", "mixed")]
        worst = max(worst, 3 - len(serving))
        now = members(kube)
        return (
            len(now) == 3
            and not set(before.values()) & {p["metadata"]["uid"] for p in now.values()}
            and (status.get("updated") == 3 and nodeset_ready(platform, kube, "compute"))
        )

    wait_for(lambda: rolled() or None, timeout=300, what="every member replaced", every=0.5)
    FIGURES["roll-out of 3 members (s)"] = time.monotonic() - started
    assert worst == 1  # maxUnavailable 1: never two out at once
    assert sorted(members(kube)) == sorted(before)  # the same Slurm nodes, on the same Nodes
    assert slurm_counts(platform, kube).get("idle") == 3


def test_r10_5_a_cordoned_nodes_member_is_drained_and_goes_only_once_idle(
    platform: Platform, kube: AdminKube
) -> None:
    member = next(name for name, pod in members(kube).items() if pod["spec"]["nodeName"] == "real-3")
    job = job_on(platform, member, 30)
    assert platform.kubectl("cordon", "real-3").returncode == 0
    try:
        wait_for(
            lambda: "cordoned" in slurm_reasons(platform).get(member, "") or None,
            timeout=60,
            what="the cordoned Node's member to drain",
            explain=lambda: nodeset_story(platform, kube),
        )
        assert member in members(kube)
        wait_for(lambda: member not in members(kube) or None, timeout=120, what="the member to go once idle")
        assert sacct_state(platform, job) == "COMPLETED"
        assert platform.nodeset(kube, "compute")["status"]["feasible"] == 2
    finally:
        platform.kubectl("uncordon", "real-3")
    wait_for(
        lambda: slurm_counts(platform, kube).get("idle") == 3 or None, timeout=180, what="the member back"
    )


def test_r10_5_a_busy_member_is_not_evicted_and_when_deleted_waits_for_its_job(
    platform: Platform, kube: AdminKube
) -> None:
    member = next(name for name, pod in members(kube).items() if pod["spec"]["nodeName"] == "real-1")
    job = job_on(platform, member, 30)
    wait_for(
        lambda: (
            members(kube)[member]["metadata"]["labels"].get("sunk.coreweave.com/slurm-busy") == "true" or None
        ),
        timeout=30,
        what=f"{member} labelled busy",
    )
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": member}}
    with pytest.raises(KubeError) as refused:
        kube.create(f"/api/v1/namespaces/{NAMESPACE}/pods/{member}/eviction", eviction)
    assert refused.value.status == 429  # the disruption budget allows no busy member to go
    uid = members(kube)[member]["metadata"]["uid"]
    assert platform.kubectl("delete", "pod", member, "--wait=false").returncode == 0
    wait_for(
        lambda: slurm_reasons(platform).get(member) == f"sunk: Pod {member} is being deleted" or None,
        timeout=30,
        what="the deleted member's preStop to drain it",
    )
    pod = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{member}")
    assert pod["metadata"]["uid"] == uid and containers_running(pod)  # slurmd still serves its job
    assert sacct_state(platform, job) == "COMPLETED"

    def replaced() -> bool:
        new = members(kube).get(member)
        return new is not None and new["metadata"]["uid"] != uid and slurm_counts(platform, kube)["idle"] == 3

    wait_for(lambda: replaced() or None, timeout=180, what="a new member in its place, idle")


def test_r10_5_demand_mode_grows_for_a_waiting_job_and_shrinks_when_idle(
    platform: Platform, kube: AdminKube
) -> None:
    scale(platform, 1)
    wait_members(
        platform,
        kube,
        [n for n, p in members(kube).items() if p["spec"]["nodeName"] == "real-3"],
        "2 Nodes freed",
    )
    burst = "/apis/sunk.coreweave.com/v1alpha1/namespaces/plat/nodesets/burst"
    platform.apply_nodeset(
        kube, nodeset("burst", ["third"], demand={"minReplicas": 1, "maxReplicas": 2, "idleAfter": "20s"})
    )

    def burst_members() -> list[str]:
        pods = kube.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="sunk.coreweave.com/nodeset=burst"
        )
        return sorted(
            p["metadata"]["name"] for p in pods["items"] if not p["metadata"].get("deletionTimestamp")
        )

    def idle_in_third() -> int:
        return sum(int(n) for n in logged_in(platform, "sinfo -h -p third -t idle -o %D").split())

    wait_for(
        lambda: (len(burst_members()) == 1 and idle_in_third() == 1) or None,
        timeout=120,
        what="minReplicas 1",
    )
    # Long enough that the second job can only run beside the first on a member demand adds.
    first = logged_in(platform, "sbatch --parsable -p third --exclusive --wrap 'sleep 90'").strip()
    second = logged_in(platform, "sbatch --parsable -p third --exclusive --wrap 'sleep 90'").strip()
    queued = time.monotonic()
    wait_for(
        lambda: (
            logged_in(platform, f"squeue -h -j {first},{second} -o %T").split() == ["RUNNING", "RUNNING"]
            or None
        ),
        timeout=180,
        what="the waiting job to run on a member demand mode added",
    )
    FIGURES["demand: job waits -> runs on a new member (s)"] = time.monotonic() - queued
    assert len(burst_members()) == 2
    events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]
    assert any(e["reason"] == "ScalingUp" and e["regarding"]["name"] == "burst" for e in events)
    assert sacct_state(platform, first) == sacct_state(platform, second) == "COMPLETED"
    ended = time.monotonic()
    wait_for(lambda: len(burst_members()) == 1 or None, timeout=180, what="the idle member to go after 20 s")
    FIGURES["demand: jobs ended -> idle member gone (s, idleAfter 20 s)"] = time.monotonic() - ended
    kube.delete(burst)
    wait_for(
        lambda: kube.find(burst) is None or None, timeout=120, what="the NodeSet deleted with its members"
    )
    back_to_three(platform, kube)


LEAF, SPINE = "sunk.test/leaf", "sunk.test/spine"


def label_node(kube: AdminKube, node: str, labels: dict[str, str | None]) -> None:
    kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}})


def shown_topology(platform: Platform) -> dict[str, list[str]]:
    """`scontrol show topology` as switch name -> the switches (or else nodes) below it;
    {} while the login Pod's copy of slurm.conf does not yet name the plugin slurmctld
    uses (its scontrol then fails to read the answer)."""
    shown: dict[str, list[str]] = {}
    for line in (login_output(platform, "scontrol show topology") or "").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "SwitchName" in fields:
            shown[fields["SwitchName"]] = sorted(expand(fields.get("Switches") or fields.get("Nodes", "")))
    return shown


def test_r10_4_topology_follows_node_labels_and_a_missing_label_changes_nothing(
    platform: Platform, kube: AdminKube
) -> None:
    """Last in the module: the tree topology it turns on stays until the uninstall."""
    by_node = {
        p["spec"]["nodeName"]: p["metadata"]["labels"]["sunk.coreweave.com/slurm-node"]
        for p in members(kube).values()
    }
    n1, n2, n3 = (by_node[f"real-{i}"] for i in (1, 2, 3))
    try:
        for node, leaf in (("real-1", "a"), ("real-2", "a"), ("real-3", "b")):
            label_node(kube, node, {LEAF: leaf, SPINE: "s1"})
        started = time.monotonic()
        platform.upgrade(
            {
                "slurm": {
                    "partitions": [*PARTITIONS, {"name": "third"}],
                    "topology": {"plugin": "tree", "labels": [LEAF, SPINE]},
                }
            }
        )
        wait_for(
            lambda: shown_topology(platform).get("leaf-b") == [n3] or None,
            timeout=240,
            what="the tree topology in scontrol show topology",
        )
        FIGURES["topology turned on -> in scontrol show topology (s)"] = time.monotonic() - started
        shown = shown_topology(platform)
        assert shown["leaf-a"] == sorted([n1, n2]), shown
        assert shown["spine-s1"] == ["leaf-a", "leaf-b"], shown
        # A Node moves to another leaf switch: Slurm's topology follows.
        moved = time.monotonic()
        label_node(kube, "real-3", {LEAF: "a"})
        wait_for(
            lambda: shown_topology(platform).get("leaf-a") == sorted([n1, n2, n3]) or None,
            timeout=180,
            what="real-3's member under leaf-a",
        )
        FIGURES["topology label changed -> in scontrol show topology (s)"] = time.monotonic() - moved
        # A Node without one of the labels: a Warning names it, and the topology stays.
        label_node(kube, "real-3", {SPINE: None})

        def warned() -> bool:
            events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]
            return any(e["reason"] == "UnknownTopologyLabel" and "real-3" in e["note"] for e in events)

        def labeled() -> dict[str, str]:
            conditions = platform.nodeset(kube, "compute")["status"]["conditions"]
            return next(c for c in conditions if c["type"] == "TopologyLabeled")

        wait_for(lambda: warned() or None, timeout=60, what="an UnknownTopologyLabel Warning naming real-3")
        # The plan sends its Events before it writes the status, so the condition may
        # follow the Warning by one write.
        wait_for(
            lambda: (labeled()["status"] == "False" and "real-3" in labeled()["message"]) or None,
            timeout=30,
            what="TopologyLabeled False naming real-3",
            explain=lambda: str(labeled()),
        )
        cm = slurm_config(kube)
        assert "SwitchName=leaf-a" in cm["data"]["topology.conf"]
        assert "spine-s1" in shown_topology(platform)
    finally:
        for node in ("real-1", "real-2", "real-3"):
            label_node(kube, node, {LEAF: None, SPINE: None})
