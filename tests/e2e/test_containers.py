"""Job steps in container images (issue #37, R10.7), on real Nodes: people run steps with
`srun --container=IMAGE` from the dev cluster's registry, as themselves, in the job's cgroup,
on every node of the job; a bad image or mount fails the step with a clear message and
leaves the node idle.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`), which also runs the
registry and the directory on the Nodes' bridge. The job image is the project's slurmd image
plus a mark only the image has (tests/e2e/job-image). The tests run in file order.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sunk_dev import DevCluster, registry
from sunk_dev.kubeapi import AdminKube
from sunk_dev.people import as_user, directory_values, prepare_namespace, ssh, wait_associated
from sunk_dev.platform import Platform, nodeset
from tests.e2e.slurm_in_pods import delete_namespace
from tests.support import wait_for

pytestmark = pytest.mark.real_nodes
NAMESPACE = "ctr"
MEMBERS = 3
FIGURES: dict[str, float] = {}
JOB_IMAGE_CONTEXT = Path(__file__).parent / "job-image"
MPI_NODE_IMAGE_CONTEXT = Path(__file__).parent / "mpi-node-image"


def built(dev_cluster: DevCluster, context: Path, name: str, figure: str) -> str:
    """An image FROM the Nodes' slurmd image, pushed to the registry; the time it took noted."""
    started = time.monotonic()
    ref = registry.build_from_slurmd(dev_cluster.layout, context, name)
    FIGURES[f"{figure} built and pushed (s)"] = time.monotonic() - started
    return ref


@pytest.fixture(scope="module")
def job_image(dev_cluster: DevCluster) -> str:
    return built(dev_cluster, JOB_IMAGE_CONTEXT, "job", "job image")


@pytest.fixture(scope="module")
def node_image(dev_cluster: DevCluster) -> str:
    """The NodeSet's slurmd image: the project's, plus Open MPI (the MPI test runs on it)."""
    return built(dev_cluster, MPI_NODE_IMAGE_CONTEXT, "slurmd-mpi", "slurmd image with Open MPI")


@pytest.fixture(scope="module")
def platform(dev_cluster: DevCluster, kube: AdminKube, job_image: str, node_image: str) -> Iterator[Platform]:
    prepare_namespace(dev_cluster, kube, NAMESPACE)
    plat = Platform(dev_cluster, namespace=NAMESPACE, release="slurm")
    values = directory_values(dev_cluster)
    values["slurm"]["containers"] = {
        "insecureRegistries": [registry.running_address(dev_cluster.layout)],
        "allowedMounts": ["/var/tmp"],
    }
    values["sharedVolumes"] = [{"name": "data", "mountPath": "/shared", "size": "1Gi"}]
    # The NodeSet's own slurmd image, which the operator refuses unless the values allow it.
    values.setdefault("slurmd", {})["allowedImages"] = [node_image]
    plat.install(values, scheduler=False)
    plat.apply_nodeset(kube, nodeset("compute", ["main"], replicas=MEMBERS, image=node_image))
    wait_for(
        lambda: plat.login("sinfo -h -t idle -o %D").stdout.strip() == str(MEMBERS) or None,
        timeout=240,
        what=f"{MEMBERS} members idle",
    )
    wait_associated(plat, "alice")
    yield plat
    print("\ncontainer figures:", {k: round(v, 2) for k, v in FIGURES.items()})
    plat.uninstall()
    delete_namespace(kube, NAMESPACE, timeout=180)


def alice(cluster: DevCluster, kube: AdminKube, command: str) -> tuple[int, str]:
    done = ssh(cluster, kube, NAMESPACE, "alice", command, timeout=300)
    return done.returncode, done.stdout + done.stderr


def nodes_idle(platform: Platform) -> str | None:
    said = platform.login("sinfo -h -o '%D|%t|%E'").stdout.strip()
    return said if said == f"{MEMBERS}|idle|none" else None


def wait_all_idle(platform: Platform) -> None:
    """Every member idle and none drained. A failed step's node may stay COMPLETING for a
    while (Slurm's UnkillableStepTimeout is a minute); a drain never passes."""
    try:
        wait_for(lambda: nodes_idle(platform), timeout=150, what="every node idle, none drained")
    except AssertionError as err:
        state = platform.login("sinfo -N -o '%N %t %E'; squeue -t all").stdout
        raise AssertionError(f"{err}; Slurm says:\n{state}") from None


def test_r10_7_a_step_runs_in_the_image_as_its_user_on_every_node_of_the_job(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube, job_image: str
) -> None:
    """Catches a step that runs on the node instead of in the image (no mark), as root or
    as a user the image does not know (id), on fewer nodes than the job has, or outside
    the job's cgroup (more CPUs than the one it was granted)."""
    as_user(dev_cluster, kube, NAMESPACE, "alice", "true")  # she has reached the login Pod
    step = "cat /etc/sunk-job-image; id -un; hostname; grep Cpus_allowed_list /proc/self/status"
    started = time.monotonic()
    rc, said = alice(
        dev_cluster, kube, f"srun -N{MEMBERS} -c1 --chdir=/tmp --container={job_image} sh -c '{step}'"
    )
    FIGURES["first container step, 3 nodes, cold caches (s)"] = time.monotonic() - started
    assert rc == 0, said
    assert said.count("sunk job image") == MEMBERS, said
    assert said.count("alice") == MEMBERS, said
    hosts = {line for line in said.splitlines() if line.startswith("compute-")}
    assert len(hosts) == MEMBERS, said
    allowed = re.findall(r"Cpus_allowed_list:\s*(\S+)", said)
    assert len(allowed) == MEMBERS and all(re.fullmatch(r"\d+", cpus) for cpus in allowed), said
    # The mark is the image's alone: the same command outside a container does not see it.
    rc, said = alice(dev_cluster, kube, "srun -N1 --chdir=/tmp cat /etc/sunk-job-image")
    assert rc != 0 and "No such file" in said, said
    started = time.monotonic()
    rc, said = alice(dev_cluster, kube, f"srun -N{MEMBERS} --chdir=/tmp --container={job_image} true")
    FIGURES["container step, 3 nodes, warm caches (s)"] = time.monotonic() - started
    assert rc == 0, said


def test_issue49_a_container_step_past_its_memory_ends_out_of_memory_and_frees_its_node(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube, job_image: str
) -> None:
    """Catches the OOM killer taking slurmstepd rather than the step's process when the step
    runs in an image (the job then sat RUNNING until its time limit), and a node left
    drained or completing after it."""
    step = "sh -c 'echo job $SLURM_JOB_ID; head -c 500M /dev/zero | tail'"
    rc, said = alice(
        dev_cluster, kube, f"srun -N1 -t 2 --mem=100M --chdir=/tmp --container={job_image} {step}"
    )
    assert rc != 0, said
    [job] = re.findall(r"^job (\d+)$", said, re.M)
    state = wait_for(
        lambda: platform.login(f"sacct -nPX -j {job} --format=State").stdout.strip() or None,
        timeout=60,
        what=f"job {job} in sacct",
    )
    assert state == "OUT_OF_MEMORY", said
    wait_all_idle(platform)


def test_r10_7_a_file_a_container_step_writes_on_one_node_is_read_on_another_and_on_login(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube, job_image: str
) -> None:
    """Catches a shared volume missing from the slurmd Pods or from container steps, or
    files that lose their owner on the way."""
    names = platform.login("sinfo -h -N -o %N").stdout.split()
    [first, _, last] = sorted({name for name in names if name.startswith("compute-")})
    step = "sh -c 'mkdir -p /shared/alice && hostname > /shared/alice/ckpt'"
    rc, said = alice(dev_cluster, kube, f"srun -w {first} --chdir=/tmp --container={job_image} {step}")
    assert rc == 0, said
    rc, said = alice(
        dev_cluster,
        kube,
        f"srun -w {last} --chdir=/tmp stat -c '%u %n' /shared/alice/ckpt; cat /shared/alice/ckpt",
    )
    assert rc == 0, said
    assert "20001 /shared/alice/ckpt" in said and said.strip().endswith(first), said


def test_r10_7_an_image_the_registry_does_not_have_fails_the_step_with_the_registrys_words(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube, job_image: str
) -> None:
    """Catches a missing image that hangs the step, fails it without saying why, or drains
    the node (a runtime failure reported as a node failure)."""
    missing = job_image.rpartition("/")[0] + "/no-such-image:1"
    rc, said = alice(dev_cluster, kube, f"srun -N1 --chdir=/tmp --container={missing} true")
    assert rc != 0, said
    assert f"sunk: cannot fetch {missing}" in said, said
    assert "manifest unknown" in said, said  # the registry's own words
    wait_all_idle(platform)


def test_r10_7_a_reference_that_does_not_parse_is_refused_before_anything_runs(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    rc, said = alice(dev_cluster, kube, "srun -N1 --chdir=/tmp --container=Not/An:Image:ref true")
    assert rc != 0, said
    assert "is not a" in said and "sunk:" in said, said
    wait_all_idle(platform)


def test_r10_7_a_mount_outside_what_the_cluster_allows_is_refused(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube, job_image: str
) -> None:
    """Catches a runtime that binds any directory a user names (the node's /etc, keys)."""
    command = f"SUNK_CONTAINER_MOUNTS=/etc/munge:/keys srun -N1 --chdir=/tmp --container={job_image} ls /keys"
    rc, said = alice(dev_cluster, kube, command)
    assert rc != 0, said
    assert "/etc/munge is outside what this cluster lets containers mount: /shared, /var/tmp" in said, said
    mounts = "SUNK_CONTAINER_MOUNTS=/var/tmp:/scratch"
    allowed = f"{mounts} srun -N1 --chdir=/tmp --container={job_image} ls -d /scratch"
    rc, said = alice(dev_cluster, kube, allowed)
    assert rc == 0 and "/scratch" in said, said
    wait_all_idle(platform)


def test_r10_7_a_nodes_containerd_pulls_the_job_image_from_the_clusters_registry(
    platform: Platform, kube: AdminKube, job_image: str
) -> None:
    """Catches real Nodes that only run imported images: a Pod (an inference server, say)
    must get its image from the registry as in a user's cluster."""
    pod = {
        "metadata": {"name": "from-registry"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"sunk.dev/real-node": "true"},
            "containers": [
                {
                    "name": "main",
                    "image": job_image,
                    "imagePullPolicy": "Always",
                    "command": ["cat", "/etc/sunk-job-image"],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }
    kube.create(f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/from-registry"
    phase = wait_for(
        lambda: (
            kube.get(path)["status"].get("phase") in ("Succeeded", "Failed")
            and kube.get(path)["status"]["phase"]
        ),
        timeout=180,
        what="the Pod pulling its image from the registry to finish",
    )
    logs = platform.kubectl("logs", "from-registry").stdout
    assert phase == "Succeeded" and "sunk job image" in logs, (phase, logs, kube.get(path)["status"])


def test_r10_7_an_open_mpi_program_prints_its_ranks_from_three_nodes(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube
) -> None:
    """Catches MPI ranks that cannot wire up across slurmd Pods through Slurm's PMIx
    (`srun --mpi=pmix`): no pmix plugin in the image, ranks that each think they are alone
    (size 1), or a collective that never completes between Pods."""
    program = (
        "from mpi4py import MPI; world = MPI.COMM_WORLD; total = world.allreduce(world.rank); "
        "print('rank', world.rank, 'of', world.size, 'on', MPI.Get_processor_name(), 'sum', total)"
    )
    rc, said = alice(dev_cluster, kube, f'srun -N{MEMBERS} --chdir=/tmp --mpi=pmix python3 -c "{program}"')
    assert rc == 0, said
    ranks = re.findall(r"rank (\d) of 3 on (compute-\S+) sum 3", said)
    assert sorted(rank for rank, _ in ranks) == ["0", "1", "2"], said
    assert len({host for _, host in ranks}) == MEMBERS, said


# A built-in reduction, a user-defined one (MPI_Op_create) and mpi4py's reduction of Python
# objects, which duplicates the communicator first: that MPI_Comm_dup crashed every rank while
# Open MPI could not write its session directory (docs/platform.md, Containers in jobs).
MPI_IN_IMAGE = """\
from mpi4py import MPI
import array
world = MPI.COMM_WORLD
total = array.array("i", [0])
world.Allreduce(array.array("i", [world.rank]), total, op=MPI.SUM)
def add(a, b, _):
    a, b = memoryview(a).cast("i"), memoryview(b).cast("i")
    b[0] += a[0]
mine = array.array("i", [0])
world.Allreduce(array.array("i", [world.rank]), mine, op=MPI.Op.Create(add, commute=True))
objects = world.allreduce(world.rank)
name = MPI.Get_processor_name()
peers = set(world.allgather(name))
print("rank", world.rank, "of", world.size, "on", name, "sum", total[0], mine[0], objects, "saw", len(peers))
"""


def test_r10_7_an_open_mpi_program_in_a_container_step_wires_up_across_three_nodes(
    platform: Platform, dev_cluster: DevCluster, kube: AdminKube, node_image: str
) -> None:
    """Catches container steps whose ranks cannot reach Slurm's PMIx server or read the job's
    data from it (PMIx's shared-memory store behind the job's private /tmp: MPI_Init fails),
    ranks that each think they are alone, a collective that never completes between
    containers on different Pods, or ranks that crash at MPI_Comm_dup or a user-defined
    reduction (the ranks' PMIx session directory not bound: Open MPI's start fails silently)."""
    program = base64.b64encode(MPI_IN_IMAGE.encode()).decode()
    rc, said = alice(
        dev_cluster,
        kube,
        f"echo {program} | base64 -d > /shared/mpi-in-image.py && "
        f"srun -N{MEMBERS} --chdir=/tmp --mpi=pmix --container={node_image} python3 /shared/mpi-in-image.py",
    )
    assert rc == 0, said
    ranks = re.findall(rf"rank (\d) of {MEMBERS} on (compute-\S+) sum 3 3 3 saw {MEMBERS}", said)
    assert sorted(rank for rank, _ in ranks) == ["0", "1", "2"], said
    assert len({host for _, host in ranks}) == MEMBERS, said
