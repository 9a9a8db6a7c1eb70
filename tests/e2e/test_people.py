"""People, not root (R10.6, issue #35), on real Nodes: the Slurm chart reads the dev
cluster's directory (a real slapd with alice, bob and carol), people log in over SSH with
the keys the directory holds, and their jobs run as themselves with their groups.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`), which also runs the
directory on the Nodes' bridge.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sunk_dev import DevCluster, directory, directory_admin, hostnet, registry
from sunk_dev.kubeapi import AdminKube
from sunk_dev.people import (
    as_user,
    directory_values,
    prepare_namespace,
    ssh,
    ssh_with_password,
    wait_associated,
)
from sunk_dev.platform import Platform, merge_values, nodeset
from tests.e2e.slurm_in_pods import delete_namespace
from tests.support import wait_for

pytestmark = pytest.mark.real_nodes
NAMESPACE = "people"
# Two members: a file alice writes to her home in a job on one is read by a job on the other.
MEMBERS = 2
# The image tests/e2e/test_containers.py runs steps in (the Nodes' slurmd image plus a mark).
JOB_IMAGE_CONTEXT = Path(__file__).parent / "job-image"


def people_written(kube: AdminKube) -> dict[str, str] | None:
    found = kube.find(f"/api/v1/namespaces/{NAMESPACE}/configmaps/slurm-people")
    data = (found or {}).get("data") or {}
    return data if "alice:" in data.get("passwd", "") else None


# An operator's own daemon and start-up script in the slurmd and login containers (issue #35
# point 4): a ticker writing a heartbeat, and a mark that the start-up script ran.
TICKER = {"name": "ticker", "run": "while :; do date +%s > /run/ticker; sleep 5; done"}
MARK = {"name": "10-mark", "run": "echo started > /run/startup-mark"}
# People may also log in with their directory password (login.passwordLogin), and their
# homes are on a ReadWriteMany claim the login and slurmd Pods mount at /home (the dev
# platform's default, said here too: issue #49's tests are about it).
EXTRA_VALUES = {
    "slurmd": {"services": [TICKER], "startupScripts": [MARK]},
    "login": {"services": [TICKER], "startupScripts": [MARK], "passwordLogin": True},
    "sharedVolumes": [{"name": "home", "mountPath": "/home", "size": "1Gi"}],
}


# The member here is Guaranteed (requests equal limits), the other suites' are Burstable: a
# job past its memory must lose its task to the OOM killer on both (issue #49).
GUARANTEED = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


@pytest.fixture(scope="module")
def platform(dev_cluster: DevCluster, kube: AdminKube) -> Iterator[Platform]:
    prepare_namespace(dev_cluster, kube, NAMESPACE)
    plat = Platform(dev_cluster, namespace=NAMESPACE, release="slurm")
    # The dev registry (plain HTTP), for the container step started from alice's home.
    containers = {
        "slurm": {"containers": {"insecureRegistries": [registry.running_address(dev_cluster.layout)]}}
    }
    values = merge_values(merge_values(directory_values(dev_cluster), EXTRA_VALUES), containers)
    # With passwords on, sshd's per-source penalties are on (issue #52). Every SSH attempt of
    # this suite comes from the host's bridge address, and its waits (for a person to reach
    # the login Pod, or to be refused) fail on purpose every few seconds: exempt that one
    # address, or the waits would measure the penalties rather than the directory.
    gateway = hostnet.network_of(dev_cluster.layout).gateway
    values = merge_values(values, {"login": {"perSourcePenaltyExemptList": [gateway]}})
    plat.install(values, scheduler=False)
    plat.apply_nodeset(kube, nodeset("compute", ["main"], replicas=MEMBERS, resources=GUARANTEED))
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
    assert out.strip().endswith("20001")  # her home is there, and is hers


def test_r10_6_alices_job_writes_into_her_shared_home_as_her(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    """Her home, made on the shared volume by the login Pod, is the one her job finds on a
    slurmd Pod (the job starts there, in the directory she submitted from)."""
    out = as_user(
        dev_cluster,
        kube,
        NAMESPACE,
        "alice",
        "cd && srun -N1 sh -c 'hostname > from-job' && stat -c %u from-job && cat from-job",
        within=240,
    )
    owner, host = out.split()[-2:]
    assert owner == "20001"
    assert host.startswith("compute-")  # written on the slurmd Pod, read on the login Pod


def test_r10_6_a_job_of_alice_runs_as_her_with_her_groups_on_a_slurmd_pod(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    out = as_user(dev_cluster, kube, NAMESPACE, "alice", "srun -N1 --chdir=/tmp id", within=240)
    assert "uid=20001(alice) gid=30000(people) groups=30000(people),30001(ml)" in out


# -- issue #49 point 3: homes that follow people -----------------------------------------------


def member_pods(kube: AdminKube) -> list[str]:
    pods = kube.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="sunk.coreweave.com/nodeset=compute"
    )
    return sorted(
        p["metadata"]["name"] for p in pods["items"] if (p.get("status") or {}).get("phase") == "Running"
    )


def homes_seen_from_a_member(platform: Platform, kube: AdminKube) -> str | None:
    """`stat` of /home and the three people's homes, as root in a slurmd container: what
    is on the shared volume itself (the members make no home)."""
    pods = member_pods(kube)
    if not pods:
        return None
    paths = ["/home", "/home/alice", "/home/bob", "/home/carol"]
    done = platform.kubectl("exec", pods[0], "-c", "slurmd", "--", "stat", "-c", "%n %u:%g %a", *paths)
    return done.stdout if done.returncode == 0 else None


def test_issue49_every_persons_home_is_on_the_shared_volume_theirs_0700_under_a_root_owned_0755_home(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches homes made on the login Pod's own disk (a member sees none), a home of the
    wrong owner or mode, and a volume root left writable by everyone (the dev provisioner
    makes it 0777). carol never logs in in this module: her home was made by the login Pod's
    homes service from the people ConfigMap, not by pam_mkhomedir at a login."""
    seen = wait_for(
        lambda: homes_seen_from_a_member(platform, kube),
        timeout=180,
        what="/home/alice, /home/bob and /home/carol on the shared volume, seen from a member",
        every=3,
    )
    assert seen.splitlines() == [
        "/home 0:0 755",
        "/home/alice 20001:30000 700",
        "/home/bob 20002:30000 700",
        "/home/carol 20003:30000 700",
    ], seen


def test_issue49_nobody_can_make_rename_or_enter_anothers_home(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    """The hole the security issue names: with /home writable by all, bob could make
    /home/mallory for a person not yet seen, or move alice's home away and put his own there."""
    as_user(dev_cluster, kube, NAMESPACE, "bob", "true")  # he has reached the login Pod
    done = ssh(
        dev_cluster,
        kube,
        NAMESPACE,
        "bob",
        "mkdir /home/mallory; echo mkdir=$?; mv /home/alice /home/alice-old; echo mv=$?; "
        "ls /home/alice; echo ls=$?",
    )
    said = done.stdout + done.stderr
    assert "mkdir=1" in said and "mv=1" in said and "ls=2" in said, said
    assert "Permission denied" in said
    assert platform.login("stat -c %u /home/alice").stdout.strip() == "20001"


def two_idle_members(platform: Platform) -> list[str] | None:
    nodes = sorted(set(platform.login("sinfo -h -N -p main -t idle -o %N").stdout.split()))
    return nodes if len(nodes) >= MEMBERS else None


def test_issue49_a_file_alice_writes_to_her_home_in_a_job_is_on_the_login_pod_and_on_another_member(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    """Catches homes that do not follow her: the job starting in /tmp (slurmstepd's
    `couldn't chdir ... going to /tmp instead`), or the file only on the member that wrote it."""
    nodes = wait_for(lambda: two_idle_members(platform), timeout=240, what=f"{MEMBERS} members idle")
    first, second = nodes[:2]
    mark = f"written on {first} at {time.time_ns()}"
    out = as_user(
        dev_cluster,
        kube,
        NAMESPACE,
        "alice",
        f"exec 2>&1; cd && rm -f issue49-mark "
        f"&& srun -N1 -w {first} sh -c 'pwd; echo host=$(hostname); echo {mark} > $HOME/issue49-mark' "
        f"&& echo login: $(cat ~/issue49-mark) "
        f"&& srun -N1 -w {second} sh -c 'pwd; echo host=$(hostname); echo there: $(cat $HOME/issue49-mark)'",
        within=240,
    )
    assert "going to /tmp" not in out and "couldn't chdir" not in out, out
    lines = out.splitlines()
    assert lines.count("/home/alice") == 2, out  # each job started in her home
    hosts = [line for line in lines if line.startswith("host=")]
    assert len(set(hosts)) == 2, out  # on two members
    assert f"login: {mark}" in lines and f"there: {mark}" in lines, out


@pytest.fixture(scope="module")
def job_image(dev_cluster: DevCluster) -> str:
    return registry.build_from_slurmd(dev_cluster.layout, JOB_IMAGE_CONTEXT, "job")


def test_issue49_a_container_step_started_from_alices_home_runs_there(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube, job_image: str
) -> None:
    """Catches the step that failed outright from her home: slurmstepd's `couldn't chdir to
    '/home/alice'` and then `_pre_task_child_privileged() failed`, where from /tmp it ran."""
    as_user(dev_cluster, kube, NAMESPACE, "alice", "true")
    done = ssh(
        dev_cluster,
        kube,
        NAMESPACE,
        "alice",
        f"cd && srun -N1 --container={job_image} sh -c 'pwd; cat /etc/sunk-job-image; cat /etc/os-release'",
        timeout=300,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "couldn't chdir" not in said and "_pre_task_child_privileged" not in said, said
    assert "/home/alice" in done.stdout.splitlines(), said
    assert "sunk job image" in said and "ID=" in said, said


def test_issue49_a_person_whose_home_is_not_a_directory_is_told_at_login_and_the_log_says_why(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    """Bad input: carol's home is a file in the way. Her login shell says her home is missing,
    why, and whom to ask (never a quiet start in / or /tmp), and the homes service says it in
    the login container's log. Her home is put back after. (One login replica, the chart's
    default: the reason is in that Pod's /run/sunk-homes.)"""
    as_user(dev_cluster, kube, NAMESPACE, "carol", "true")  # she has reached the login Pod
    pod, _ = pod_of(kube, "login")
    aside = "mv /home/carol /home/.carol-aside && touch /home/carol"
    back = "rm -f /home/carol && mv /home/.carol-aside /home/carol"
    once = "sh /etc/sunk/homes/homes.sh /home /var/lib/extrausers/passwd /run/sunk-homes --once"
    assert platform.kubectl("exec", pod, "-c", "sshd", "--", "sh", "-c", aside).returncode == 0
    try:
        ran = platform.kubectl("exec", pod, "-c", "sshd", "--", "sh", "-c", once)  # the next pass, now
        # Said once per change: by this pass, or by the service's own if one ran in between.
        logged = ran.stderr + platform.kubectl("logs", pod, "-c", "sshd").stdout
        assert "sunk-homes: carol: /home/carol is in the way: it is not a directory" in logged, ran.stderr
        done = ssh(dev_cluster, kube, NAMESPACE, "carol", "bash -l -c true")
        said = done.stderr
        assert "sunk: your home /home/carol does not exist: /home/carol is in the way" in said, said
        assert "Ask your cluster's administrators" in said, said
    finally:
        platform.kubectl("exec", pod, "-c", "sshd", "--", "sh", "-c", back)
        platform.kubectl("exec", pod, "-c", "sshd", "--", "sh", "-c", once)
    assert "sunk:" not in ssh(dev_cluster, kube, NAMESPACE, "carol", "bash -l -c true").stderr


def test_issue49_alices_job_past_its_memory_on_a_guaranteed_member_ends_out_of_memory(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    """Catches the OOM killer taking slurmstepd rather than the task of a directory person's
    job (the job then sat RUNNING until its time limit), on a member of the Guaranteed class."""
    pods = kube.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="sunk.coreweave.com/nodeset=compute"
    )
    assert {p["status"].get("qosClass") for p in pods["items"]} == {"Guaranteed"}
    past = "srun -t 2 --chdir=/tmp --mem=100M sh -c 'echo job $SLURM_JOB_ID; head -c 500M /dev/zero | tail'"
    out = as_user(dev_cluster, kube, NAMESPACE, "alice", f"{past}; echo srun=$?", within=240)
    assert "srun=0" not in out, out
    [job] = re.findall(r"^job (\d+)$", out, re.M)
    state = wait_for(
        lambda: platform.login(f"sacct -nPX -j {job} --format=User,State").stdout.strip() or None,
        timeout=60,
        what=f"job {job} in sacct",
    )
    assert state == "alice|OUT_OF_MEMORY"


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


def test_issue52_bob_cannot_swap_the_slurm_configuration_alices_commands_read(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    """The login Pod's /run/slurm (sackd's configuration and socket) is read-only where people
    have shells: renaming the fetched configuration, or planting a file beside it, is refused,
    and alice's next Slurm command still reads the cluster's own slurm.conf."""
    attempt = ssh(
        dev_cluster,
        kube,
        NAMESPACE,
        "bob",
        "mv /run/slurm/conf /run/slurm/old; echo mv=$?; mkdir /run/slurm/conf2; echo mkdir=$?",
    )
    said = attempt.stdout + attempt.stderr
    assert "mv=1" in said and "mkdir=1" in said, said
    assert "Read-only file system" in said
    out = as_user(dev_cluster, kube, NAMESPACE, "alice", "scontrol show config | grep -E '^PluginDir'")
    assert "/usr/lib/x86_64-linux-gnu/slurm" in out


def test_r10_6_a_key_the_directory_does_not_hold_for_her_is_refused(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    """bob's key does not open alice's account (the keys are per person, not shared)."""
    done = ssh(dev_cluster, kube, NAMESPACE, "alice", "true", key_of="bob")
    assert done.returncode == 255 and "Permission denied" in done.stderr


def test_issue35_alice_logs_in_with_her_directory_password(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    as_user(dev_cluster, kube, NAMESPACE, "alice", "true")  # her people reached the login Pod
    done = ssh_with_password(dev_cluster, kube, NAMESPACE, "alice", "id -un")
    assert (done.returncode, done.stdout.strip()) == (0, "alice"), done.stderr


def test_issue35_bobs_password_does_not_open_alices_account(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    done = ssh_with_password(dev_cluster, kube, NAMESPACE, "alice", "true", password_of="bob")
    assert done.returncode == 255 and "Permission denied" in done.stderr


# How long a change an admin makes in the directory takes to reach the login Pod: the
# operator reads the directory every `interval` (10 s in directory_values) and rewrites the
# people ConfigMap at once; the kubelet refreshes a mounted ConfigMap when it next syncs the
# Pod, every minute plus up to half a minute of jitter (90 s); sshd reads the new files at
# the next login. 10 + 90 s, plus 20 s for the operator's read and write and for the probe's
# own SSH attempts (a few seconds apart, 5 s to connect), is the bound each wait must keep.
DIRECTORY_CHANGE_BOUND_S = 10 + 90 + 20


def test_issue49_a_person_an_admin_adds_logs_in_and_once_removed_is_refused_within_the_bound(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube, tmp_path: Path
) -> None:
    """Catches `sunk dev people` writing an entry the operator skips or refuses (no login),
    a removal that leaves the person's passwd line or keys behind (still let in), and a
    change that takes longer to reach the login Pod than the docs say."""
    layout, name = dev_cluster.layout, "erin"
    if any(u.name == name for u in directory_admin.snapshot(layout).users):
        directory_admin.remove_person(layout, name)  # left by a run that was killed
    try:
        added = directory_admin.add_person(layout, name)
        assert added.private_key is not None
        key = tmp_path / "erin-key"  # kept: removing her forgets the run directory's copy
        shutil.copyfile(added.private_key, key)
        key.chmod(0o600)
        start = time.monotonic()

        def logged_in() -> bool:
            done = ssh(dev_cluster, kube, NAMESPACE, name, "id", identity=key, timeout=30)
            return done.returncode == 0 and f"uid={added.uid}({name}) gid=30000(people)" in done.stdout

        wait_for(logged_in, timeout=240, what=f"{name} logging in after being added", every=2)
        joined = time.monotonic() - start
        directory_admin.remove_person(layout, name)
        start = time.monotonic()

        def refused() -> bool:
            done = ssh(dev_cluster, kube, NAMESPACE, name, "id", identity=key, timeout=30)
            return done.returncode == 255 and "Permission denied" in done.stderr

        wait_for(refused, timeout=240, what=f"{name}'s login refused after her removal", every=2)
        left = time.monotonic() - start
        print(f"\n{name}: logged in {joined:.0f} s after being added, refused {left:.0f} s after removal")
        assert joined <= DIRECTORY_CHANGE_BOUND_S, f"{name} logged in only after {joined:.0f} s"
        assert left <= DIRECTORY_CHANGE_BOUND_S, f"{name} was refused only after {left:.0f} s"
    finally:
        if any(u.name == name for u in directory_admin.snapshot(layout).users):
            directory_admin.remove_person(layout, name)


def unreadable_events(kube: AdminKube) -> list[str]:
    events = kube.get(f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
    return [
        e.get("message") or ""
        for e in events
        if e.get("reason") == "DirectoryUnreadable"
        and (e.get("involvedObject") or {}).get("name") == "slurm-people"
    ]


def directory_condition(platform: Platform, kube: AdminKube) -> dict[str, str]:
    conditions = platform.nodeset(kube, "compute").get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "DirectoryRead"), {})


UNREADABLE_SAID = "the directory's people: unreadable since"


def said_in_log(platform: Platform, kube: AdminKube, component: str, words: str) -> bool:
    pod, container = pod_of(kube, component)
    return words in platform.kubectl("logs", pod, "-c", container).stdout


def test_r10_6_with_the_directory_down_alice_still_logs_in_and_submits_and_everything_says_why(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    """Also issue #35's bad input: the NodeSet's DirectoryRead condition and the login and
    slurmd containers' logs say the directory cannot be read, and nothing restarts."""
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
        wait_for(
            lambda: directory_condition(platform, kube).get("reason") == "DirectoryUnreadable",
            timeout=60,
            what="the NodeSet's DirectoryRead condition turning False",
        )
        for component in ("slurmd", "login"):  # the kubelet brings the ConfigMap within ~1 min
            wait_for(
                lambda c=component: said_in_log(platform, kube, c, UNREADABLE_SAID),
                timeout=150,
                what=f"the {component} container's log saying the directory is unreadable",
                every=5,
            )
    finally:
        directory.serve(dev_cluster.layout)
    wait_for(
        lambda: directory_condition(platform, kube).get("status") == "True",
        timeout=60,
        what="DirectoryRead True once the directory answers",
    )


def pod_of(kube: AdminKube, component: str) -> tuple[str, str]:
    """The Pod and container that run `component` (slurmd: the NodeSet's one member)."""
    name = "slurmd" if component == "slurmd" else "login"
    pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"app.kubernetes.io/name={name}")
    running = [p for p in pods["items"] if (p.get("status") or {}).get("phase") == "Running"]
    return running[0]["metadata"]["name"], "slurmd" if component == "slurmd" else "sshd"


def ticker_pid(platform: Platform, pod: str, container: str) -> str | None:
    """The pid of the ticker service in the container, as s6 reports it (None: down)."""
    shown = platform.kubectl("exec", pod, "-c", container, "--", "s6-svstat", "/run/sunk-services/ticker")
    words = shown.stdout.split()
    return words[2].rstrip(")") if shown.returncode == 0 and words[:2] == ["up", "(pid"] else None


@pytest.mark.parametrize("component", ["slurmd", "login"])
def test_issue35_a_service_the_values_added_runs_and_is_started_again_after_it_is_killed(
    platform: Platform, kube: AdminKube, component: str
) -> None:
    pod, container = pod_of(kube, component)
    first = wait_for(lambda: ticker_pid(platform, pod, container), timeout=60, what="the ticker up", every=1)
    mark = platform.kubectl("exec", pod, "-c", container, "--", "cat", "/run/startup-mark")
    assert mark.stdout.strip() == "started", mark.stderr  # the start-up script ran before it
    for service in ("ticker", "slurmd" if component == "slurmd" else "login"):
        # s6 sends SIGKILL to a service still there 20 s after its SIGTERM (slurmd may spin)
        limit = platform.kubectl(
            "exec", pod, "-c", container, "--", "cat", f"/run/sunk-services/{service}/timeout-kill"
        )
        assert limit.stdout.strip() == "20000", (service, limit.stdout, limit.stderr)
    killed = platform.kubectl("exec", pod, "-c", container, "--", "kill", first)
    assert killed.returncode == 0, killed.stderr
    wait_for(
        lambda: ticker_pid(platform, pod, container) not in (None, first),
        timeout=30,
        what="s6 starting the killed ticker again",
        every=1,
    )
    logs = platform.kubectl("logs", pod, "-c", container).stdout
    assert "sunk-services: ticker was killed by signal 15" in logs
