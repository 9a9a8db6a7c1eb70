"""Issue #36 end to end: Slurm jobs confined in cgroups inside slurmd Pods on real Nodes
(the chart's default), accounting of what they used, CPU binding,
sunk's Pod scheduler beside a confined job, and a Node that cannot confine jobs reported.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`, which `make test` runs):
one install, NodeSet `compute` on real-1 and real-2, and on real-3 a NodeSet whose slurmd
container is refused the one capability confinement needs. The tests run in file order.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sunk.operator.nodeset.confinement import CONFINED, CONFINEMENT_UNAVAILABLE
from sunk_dev import DevCluster
from sunk_dev.kubeapi import AdminKube
from sunk_dev.platform import Platform, nodeset
from tests.conftest import SLURM
from tests.e2e.slurm_in_pods import containers_running, delete_namespace
from tests.support import make_pod, wait_for

pytestmark = pytest.mark.real_nodes
NAMESPACE = "conf"
FIGURES: dict[str, float] = {}
HOSTNAME = "kubernetes.io/hostname"
# Four busy loops and a 1.1 GiB allocation, in a job granted one CPU and 256 MiB.
GREEDY = (
    'echo "job $SLURM_JOB_ID"; grep Cpus_allowed_list /proc/self/status; '
    "for i in 1 2 3 4; do (while :; do :; done) & done; sleep 3; "
    'grep Cpus_allowed_list /proc/$!/status; head -c 1100M /dev/zero | tail >/dev/null; echo "tail: $?"'
)


def login(platform: Platform, command: str) -> tuple[int, str]:
    result = platform.login(command, timeout=180)
    return result.returncode, result.stdout + result.stderr


def logged_in(platform: Platform, command: str) -> str:
    rc, said = login(platform, command)
    assert rc == 0, f"{command}: {said}"
    return said


def member_on(kube: AdminKube, node: str) -> str:
    pods = kube.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector="sunk.coreweave.com/nodeset=compute"
    )["items"]
    [name] = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == node]
    return name


def sacct(platform: Platform, job: str) -> dict[str, dict[str, str]]:
    """Step ID -> its sacct fields, once the job has ended."""
    fields = "JobID,State,TotalCPU,MaxRSS,Elapsed"

    def ended() -> dict[str, dict[str, str]] | None:
        lines = logged_in(platform, f"sacct -n -P -j {job} -o {fields}").splitlines()
        names = fields.split(",")
        rows = {
            line.split("|")[0]: dict(zip(names, line.split("|"), strict=True))
            for line in lines
            if line.count("|") == len(names) - 1  # kubectl's own warnings are not sacct's
        }
        done = rows.get(job, {}).get("State") not in (None, "", "PENDING", "RUNNING", "COMPLETING")
        return rows if done else None

    return wait_for(ended, timeout=120, what=f"job {job} to end in sacct")


def seconds(slurm_time: str) -> float:
    """Slurm's [DD-][HH:]MM:SS[.mmm] as seconds."""
    days, _, clock = slurm_time.rpartition("-")
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return total + 86400 * int(days or 0)


@pytest.fixture(scope="module")
def platform(dev_cluster: DevCluster, kube: AdminKube) -> Iterator[Platform]:
    plat = Platform(dev_cluster, namespace=NAMESPACE, release="slurm")
    FIGURES["helm install (s)"] = plat.install()
    not_real_3 = {"key": HOSTNAME, "operator": "NotIn", "values": ["real-3"]}
    plat.apply_nodeset(
        kube,
        nodeset(
            "compute",
            ["main"],
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [not_real_3]}]
                    }
                }
            },
        ),
    )
    wait_for(
        lambda: logged_in(plat, "sinfo -h -t idle -o %D").strip() == "2" or None,
        timeout=180,
        what="the two confining members idle",
    )
    yield plat
    print("\nconfinement figures:", {k: round(v, 1) for k, v in FIGURES.items()})
    plat.uninstall()
    delete_namespace(kube, NAMESPACE, timeout=180)


def test_issue36_a_greedy_job_is_held_to_its_cpu_and_memory_and_accounted(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches jobs that run unconfined (four busy loops spread over both CPUs, the 1.1 GiB
    allocation succeeds), an OOM that Slurm does not record as OUT_OF_MEMORY, a node left
    drained after it, and accounting that samples nothing (no TotalCPU or MaxRSS)."""
    member = member_on(kube, "real-1")
    started = time.monotonic()
    rc, said = login(platform, f"srun -w {member} -c1 --mem=256M sh -c '{GREEDY}'")
    FIGURES["greedy job, srun to its end (s)"] = time.monotonic() - started
    assert rc != 0, said
    allowed = re.findall(r"Cpus_allowed_list:\s*(\S+)", said)
    assert len(allowed) == 2 and all(re.fullmatch(r"\d+", cpus) for cpus in allowed), said
    assert "tail: 137" in said and "Out Of Memory" in said, said  # the allocation was killed
    [job] = re.findall(r"^job (\d+)$", said, re.M)
    steps = sacct(platform, job)
    assert steps[job]["State"] == "OUT_OF_MEMORY", steps
    step = steps[f"{job}.0"]
    used, elapsed = seconds(step["TotalCPU"]), seconds(step["Elapsed"])
    assert used > 1.0, step  # the busy loops' CPU time was sampled
    assert used <= 1.2 * elapsed + 1, step  # ...and never more than one CPU's worth
    max_rss_kib = int(step["MaxRSS"].rstrip("K"))
    assert 150 * 1024 < max_rss_kib <= 270 * 1024, step  # it grew to its 256 MiB, not past
    # Once the job's cleanup is done the node is idle again; a drain (Slurm drains a node
    # whose job's processes would not die) never would be.
    # Under load slurmd may take over a minute to finish the killed step's cleanup
    # (COMPLETING), so the wait is long; the message names the state it was last in.
    states: list[str] = []

    def idle() -> bool | None:
        states[:] = [logged_in(platform, f"sinfo -h -n {member} -o '%T|%E'").strip()]
        return states[0] == "idle|none" or None

    try:
        wait_for(idle, timeout=150, what=f"{member} idle and not drained after the OOM", every=1)
    except AssertionError as err:
        raise AssertionError(f"{err}; last state: {states}") from None


# The first-day job of issue #49: a pipe holding far more than the job's 100 MiB.
PAST_ITS_MEMORY = "srun -t 2 --mem=100M sh -c 'echo job $SLURM_JOB_ID; head -c 500M /dev/zero | tail'"


def test_issue49_a_job_past_its_memory_on_a_burstable_member_loses_its_task_not_slurmstepd(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches slurmstepd chosen by the job's OOM killer before the task: it kept the
    kubelet's Burstable score while Slurm moved the task to 0, so srun never returned and the
    job sat RUNNING until its time limit (TIMEOUT, never OUT_OF_MEMORY)."""
    member = member_on(kube, "real-1")
    pod = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{member}")
    assert pod["status"]["qosClass"] == "Burstable"
    started = time.monotonic()
    rc, said = login(platform, PAST_ITS_MEMORY.replace("srun", f"srun -w {member}"))
    FIGURES["job past its memory, srun to its end (s)"] = time.monotonic() - started
    assert rc != 0 and "Out Of Memory" in said, said
    [job] = re.findall(r"^job (\d+)$", said, re.M)
    assert sacct(platform, job)[job]["State"] == "OUT_OF_MEMORY"
    wait_for(
        lambda: logged_in(platform, f"sinfo -h -n {member} -o '%T|%E'").strip() == "idle|none" or None,
        timeout=150,
        what=f"{member} idle and not drained after the OOM",
        every=1,
    )


def test_issue36_cpu_bind_cores_places_each_task_on_the_cores_it_reports(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches task/affinity missing or lying: the mask srun reports for a task must be the
    CPUs the kernel lets that task run on, and two tasks get different cores."""
    member = member_on(kube, "real-1")
    said = logged_in(
        platform,
        f"srun -w {member} -n2 -c1 --mem=64M --cpu-bind=cores,verbose "
        "sh -c 'echo task $SLURM_PROCID $(grep Cpus_allowed_list /proc/self/status)'",
    )
    masks = {
        int(t): int(m, 16) for t, m in re.findall(r"task\s+(\d+)\s+\d+ \[\d+\]: mask 0x([0-9a-f]+) set", said)
    }
    actual = {int(t): int(c) for t, c in re.findall(r"task (\d+) Cpus_allowed_list: (\d+)$", said, re.M)}
    assert sorted(masks) == sorted(actual) == [0, 1], said
    assert {t: 1 << cpu for t, cpu in actual.items()} == masks, said
    assert actual[0] != actual[1], said


# Leaves a mark in /tmp and /dev/shm, waits for its twin to leave its own, then says what it sees.
MARKS = (
    'echo "$SLURM_JOB_ID" >/tmp/mark; touch "/dev/shm/mark-$SLURM_JOB_ID"; sleep 4; '
    'echo "job $SLURM_JOB_ID tmp=$(cat /tmp/mark) shm=$(ls /dev/shm | tr "\\n" " ")"'
)


def test_issue36_two_jobs_on_one_node_each_see_their_own_tmp_and_shm_removed_at_the_end(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches jobs sharing /tmp or /dev/shm (one reads the other's mark), a job's directory
    left on the node after it ends, and jobs that fail to boot on some CPUs: Linux 6.18
    refuses to pin a job's mount namespace made on a CPU whose numbers run below those of
    slurmd's namespace (sunk.operator.nodeset.confinement.ORDERED_NAMESPACE moves slurmd)."""
    member = member_on(kube, "real-1")
    srun = f"srun -w {member} -c1 --mem=32M"
    said = logged_in(platform, f"{srun} sh -c '{MARKS}' & {srun} sh -c '{MARKS}' & wait")
    seen = re.findall(r"^job (\d+) tmp=(\d+) shm=(.*)$", said, re.M)
    assert len(seen) == 2 and seen[0][0] != seen[1][0], said  # both ran, at once (one sleep)
    for job, tmp, shm in seen:
        assert tmp == job and shm.split() == [f"mark-{job}"], said
    jobs = {job for job, _, _ in seen}

    def removed() -> bool | None:
        # Debian's Slurm (built for several slurmd per host) keeps them in job-tmp/<node>/<job>.
        find = ("find", "/var/spool/slurmd/job-tmp", "-mindepth", "1", "-maxdepth", "2", "-type", "d")
        left = platform.kubectl("exec", member, "-c", "slurmd", "--", *find)
        names = {path.rsplit("/", 1)[-1] for path in left.stdout.split()}
        return (left.returncode == 0 and not jobs & names) or None

    wait_for(removed, timeout=60, what=f"the private /tmp of jobs {sorted(jobs)} removed from {member}")
    # Every job boots, whichever CPU its namespace is made on: eight on each node.
    names = [member_on(kube, node) for node in ("real-1", "real-2")]
    sbatch = "sbatch --parsable -c1 --mem=16M -o /dev/null --wrap true -w"
    submit = "; ".join(f"{sbatch} {name}" for name in names for _ in range(8))
    batch = re.findall(r"^(\d+)$", logged_in(platform, submit), re.M)  # not kubectl's warnings
    assert len(batch) == 16, batch

    def all_ended() -> set[str] | None:
        said = logged_in(platform, f"sacct -n -X -P -j {','.join(batch)} -o State")
        lines = re.findall(r"^([A-Z_]+)\s*$", said, re.M)  # sacct's, not kubectl's warnings
        states = set(lines)
        busy = {"PENDING", "RUNNING", "COMPLETING"}
        return states if len(lines) == 16 and not states & busy else None

    assert wait_for(all_ended, timeout=180, what="sixteen short jobs to end") == {"COMPLETED"}
    # Ended in sacct, a node may still be completing (26.05 tears the job's namespaces down
    # after that): it must reach idle, never drained.
    for name in names:
        wait_for(
            lambda name=name: logged_in(platform, f"sinfo -h -n {name} -o %T").strip() == "idle" or None,
            timeout=60,
            what=f"{name} idle after the sixteen jobs",
            every=1,
        )


# Slurm 25.11 and later give each job a PID namespace (namespace/linux, which the chart writes
# for those versions); 24.11's job_container/tmpfs gives none (docs/platform.md, Confinement).
PID_NAMESPACES = tuple(int(part) for part in SLURM.split(".")[:2]) >= (25, 11)


def looking_at_proc(meeting: str) -> str:
    """A job that starts a marker process (`sleep 300.<job id>`), meets its twin in `meeting`
    (under /var/tmp, which the jobs of one member share: their /tmp is private), says what its
    /proc shows (PID 1's name, how many processes, which markers), and ends once the twin has
    looked too, so each looks while the other's marker runs. No single quotes: it goes in some."""

    def until_both(stage: str) -> str:  # up to a minute
        count = f'"$(ls $d | grep -c "^{stage}\\.")"'
        return f"n=0; while [ {count} -lt 2 ] && [ $n -lt 300 ]; do sleep 0.2; n=$((n+1)); done; "

    markers = 'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" "\\n" | grep "^300\\.[0-9]*$" | sort -u'
    return "".join(
        [
            f"d={meeting}; mkdir -p $d; sleep 300.$SLURM_JOB_ID & touch $d/up.$SLURM_JOB_ID; ",
            until_both("up"),
            'met=no; [ "$(ls $d | grep -c "^up\\.")" -ge 2 ] && met=yes; ',
            "init=$(cat /proc/1/comm); pids=$(ls -d /proc/[0-9]* 2>/dev/null | wc -l); ",
            f'markers=$({markers} | tr "\\n" " "); ',
            "touch $d/looked.$SLURM_JOB_ID; ",
            until_both("looked"),
            'kill $!; echo "job $SLURM_JOB_ID met=$met init=$init pids=$pids markers=$markers"',
        ]
    )


def test_issue49_two_jobs_on_one_member_see_each_others_processes_only_without_pid_namespaces(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches, on Slurm 25.11 and later, a job that lists another job's processes in /proc
    (no PID namespace: namespace.yaml missing CLONE_NEWPID, or the chart still writing
    job_container/tmpfs) or whose /proc is the container's (PID 1 not Slurm's holder of the
    namespace); on 24.11, docs that promise more than job_container/tmpfs gives (a job there
    sees its twin's processes, as docs/platform.md says)."""
    member = member_on(kube, "real-1")
    config = logged_in(platform, "scontrol show config")
    plugin = (
        r"^NamespaceType\s*=\s*namespace/linux\s*$"
        if PID_NAMESPACES
        else r"^JobContainerType\s*=\s*job_container/tmpfs\s*$"
    )
    assert re.search(plugin, config, re.M), config
    meeting = f"/var/tmp/sunk-issue49-{int(time.time())}"
    srun = f"srun -w {member} -c1 --mem=32M"
    script = looking_at_proc(meeting)
    try:
        said = logged_in(platform, f"{srun} sh -c '{script}' & {srun} sh -c '{script}' & wait")
    finally:
        platform.kubectl("exec", member, "-c", "slurmd", "--", "rm", "-rf", meeting)
    seen = re.findall(r"^job (\d+) met=(\w+) init=(\S+) pids=(\d+) markers=(.*)$", said, re.M)
    assert len(seen) == 2 and seen[0][0] != seen[1][0], said
    assert all(met == "yes" for _, met, _, _, _ in seen), said  # both ran at once
    jobs = {job for job, *_ in seen}
    for job, _, init, pids, markers in seen:
        if PID_NAMESPACES:
            # Its own few: Slurm's holder, the shell, its marker and the look's own commands.
            assert (init, markers.split()) == ("slurmstepd", [f"300.{job}"]), said
            assert int(pids) <= 12, said
        else:
            assert init != "slurmstepd" and set(markers.split()) == {f"300.{j}" for j in jobs}, said


def test_issue36_a_pod_placed_by_sunk_binds_and_runs_beside_a_confined_job(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches confinement getting in the way of sunk's placeholder jobs (a placeholder that
    cannot start in its cgroup leaves the Pod unbound) or giving the Pod the job's CPU."""
    member = member_on(kube, "real-1")
    job = logged_in(platform, f"sbatch --parsable -w {member} -c1 --mem=64 --wrap 'sleep 600'").strip()
    try:
        pod = make_pod(
            "beside", f"{NAMESPACE}-slurm", cpu="100m", memory="32Mi", nodeSelector={HOSTNAME: "real-1"}
        )
        pod["spec"]["containers"][0].update(
            image=platform.images["slurmd"].ref, imagePullPolicy="Never", command=["sleep", "infinity"]
        )
        started = time.monotonic()
        kube.create(f"/api/v1/namespaces/{platform.tenants}/pods", pod)

        def running() -> dict[str, Any] | None:
            found = kube.get(f"/api/v1/namespaces/{platform.tenants}/pods/beside")
            return found if containers_running(found) else None

        placed = wait_for(running, timeout=120, what="the Pod placed by sunk to run")
        FIGURES["Pod beside a confined job: create -> running (s)"] = time.monotonic() - started
        assert placed["spec"]["nodeName"] == "real-1"
        queue = logged_in(platform, f"squeue -h -t R -w {member} -o '%i %C'").split("\n")
        assert f"{job} 1" in queue and len([q for q in queue if q.strip()]) == 2, queue
        cpus = logged_in(platform, f"scontrol show node {member} | grep -o 'CPUAlloc=[0-9]*'").strip()
        assert cpus == "CPUAlloc=2", cpus  # the job's CPU and the placeholder's: never the same one
    finally:
        kube.delete(f"/api/v1/namespaces/{platform.tenants}/pods/beside")
        logged_in(platform, f"scancel {job}")


def test_issue36_a_node_that_cannot_confine_jobs_is_named_and_serves_none(
    platform: Platform, kube: AdminKube
) -> None:
    """Catches a member that falls back in silence to running jobs unconfined: its slurmd
    container lacks CAP_SYS_ADMIN here, so the cgroup mounts stay read-only; the NodeSet's
    Confined condition and a ConfinementUnavailable Event name real-3, and no Slurm node of
    that NodeSet ever registers."""
    drop = {
        "containers": [{"name": "slurmd", "securityContext": {"capabilities": {"drop": ["SYS_ADMIN"]}}}],
        "terminationGracePeriodSeconds": 10,  # a member's default hour would hold the deletion
    }
    path = f"/apis/sunk.coreweave.com/v1alpha1/namespaces/{NAMESPACE}/nodesets/locked"
    started = time.monotonic()
    platform.apply_nodeset(
        kube, nodeset("locked", ["main"], nodeSelector={HOSTNAME: "real-3"}, template={"spec": drop})
    )

    def refused() -> dict[str, Any] | None:
        status = platform.nodeset(kube, "locked").get("status") or {}
        found = next((c for c in status.get("conditions") or [] if c["type"] == CONFINED), None)
        return found if found and found["status"] == "False" else None

    def warned() -> bool:
        events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]
        return any(
            e["reason"] == CONFINEMENT_UNAVAILABLE
            and e["regarding"]["name"] == "locked"
            and "real-3" in e["note"]
            for e in events
        )

    try:
        condition = wait_for(
            refused, timeout=120, what="the Confined condition of NodeSet locked to turn False"
        )
        FIGURES["refused Node: NodeSet applied -> condition (s)"] = time.monotonic() - started
        assert condition["reason"] == CONFINEMENT_UNAVAILABLE
        assert condition["message"].startswith("Node real-3 "), condition
        assert "read-only" in condition["message"] and "CAP_SYS_ADMIN" in condition["message"], condition
        wait_for(lambda: warned() or None, timeout=30, what="a ConfinementUnavailable Event naming real-3")
        assert "locked" not in logged_in(platform, "sinfo -h -N -o %N")
    finally:
        kube.delete(path)
        wait_for(lambda: kube.find(path) is None or None, timeout=120, what="NodeSet locked gone")
