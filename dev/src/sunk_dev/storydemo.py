"""`sunk demo`: the train-and-serve story on three real Nodes, told as it happens.

Each step is named with the time since the start, and a step that runs long says so at
least every HEARTBEAT_S, so a first run that builds Kubernetes and the images is never a
silent screen. Slurm's view (sinfo, squeue from the login Pod) and Kubernetes' (kubectl)
are printed side by side after each step. Everything is left running for the person to
explore; `sunk dev down` stops it. A second run tells the story again on the same release.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from sunk_dev import directory, procs, realcluster, story
from sunk_dev.cluster import ClusterSpec, DevCluster
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import cache_dir
from sunk_dev.people import login_address
from sunk_dev.platform import Platform

NAMESPACE = "demo"
HEARTBEAT_S = 15.0
REAL_NODES = 3
# Placeholder jobs' names hold the Pod's key and UID: cut to fit a line.
QUEUE = "squeue -o '%.9i %.6P %.36j %.8u %.11T %N'"


class Progress:
    """Named steps with the elapsed time, and a line every HEARTBEAT_S while one runs."""

    def __init__(self, say: Callable[[str], None] = print, heartbeat: float = HEARTBEAT_S) -> None:
        self.say = say
        self.heartbeat = heartbeat
        self.started = time.monotonic()

    def stamp(self) -> str:
        minutes, seconds = divmod(int(time.monotonic() - self.started), 60)
        return f"[{minutes:2d}:{seconds:02d}]"

    @contextlib.contextmanager
    def step(self, what: str, still: Callable[[], str] | None = None) -> Iterator[None]:
        """Say `what`, then `still()` (or that it is still running) every heartbeat."""
        self.say(f"{self.stamp()} {what}")
        began = time.monotonic()
        done = threading.Event()

        def beat() -> None:
            while not done.wait(self.heartbeat):
                detail = ""
                with contextlib.suppress(Exception):
                    detail = still() if still else ""
                self.say(f"{self.stamp()}   ... {detail or 'still at it'} ({time.monotonic() - began:.0f} s)")

        ticker = threading.Thread(target=beat, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()
        self.say(f"{self.stamp()}   done in {time.monotonic() - began:.0f} s")


def _views(plat: Platform, say: Callable[[str], None], slurm: str, *kubectl: list[str]) -> None:
    """Slurm's view and Kubernetes' view of the same moment, one after the other."""
    said = plat.login(slurm)
    say(f"\n  Slurm, from the login Pod: $ {slurm}\n" + _indent(said.stdout or said.stderr))
    for argv in kubectl:
        shown = plat.kubectl(*argv)
        say(
            f"  Kubernetes: $ kubectl {'' if '-n' in argv else f'-n {plat.namespace} '}{' '.join(argv)}\n"
            + _indent(shown.stdout or shown.stderr)
        )


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.rstrip().splitlines())


def _cluster(progress: Progress) -> DevCluster:
    cluster = DevCluster()
    if cluster.is_running():
        spec = cluster.spec()
        if spec is None or spec.real_nodes < REAL_NODES:
            raise DevClusterError(
                "a dev cluster without real Nodes is running; stop it with `sunk dev down`, then run the demo"
            )
        progress.say(f"{progress.stamp()} reusing the dev cluster that is running (three real Nodes)")
        return cluster
    with progress.step(
        "bringing up the dev cluster: an API server, three real kubelet Nodes, Slurm, a registry and a "
        "directory (a first run builds Kubernetes from source and the Slurm images: about 20 minutes)"
    ):
        cluster.up(ClusterSpec(real_nodes=REAL_NODES))
    return cluster


def _fresh(cluster: DevCluster, kube: AdminKube, progress: Progress) -> None:
    """A previous demo's story goes first; its release stays, to be upgraded in place (no
    change when the chart and values are the same), so that its members keep the image each
    node has cached, as a team's cluster would between two runs."""
    found = kube.find(f"/api/v1/namespaces/{NAMESPACE}")
    if found is None:
        return
    if found["metadata"].get("deletionTimestamp"):
        with progress.step(f"waiting for namespace {NAMESPACE} of an earlier demo to go"):
            procs.wait_until(
                lambda: kube.find(f"/api/v1/namespaces/{NAMESPACE}") is None,
                timeout=180,
                what=f"namespace {NAMESPACE} of the previous demo to go",
                interval=1,
            )
        return
    with progress.step("clearing the previous run's Deployment, volume and jobs (the release stays)"):
        story.reset(Platform(cluster, namespace=NAMESPACE, release="slurm"), kube)


def run(say: Callable[[str], None] = print) -> int:
    realcluster.check_machine()  # one sentence, before anything starts, if it cannot run
    progress = Progress(say)
    cluster = _cluster(progress)
    kube = AdminKube(cluster.layout)
    try:
        _fresh(cluster, kube, progress)
        with progress.step(
            "building the example's image (the slurmd image plus Debian's PyTorch), pushing it"
        ):
            image = story.build_image(cluster)
        with progress.step(
            "helm upgrade --install charts/slurm with examples/train-and-serve/values.yaml; NodeSet compute",
            lambda: _pods_running(kube),
        ):
            plat = story.install(cluster, kube, NAMESPACE)
        _views(plat, say, "sinfo", ["get", "nodesets,pods", "-o", "wide"])
        _tell(plat, kube, image, progress)
        _next_steps(cluster, kube, plat, say)
    finally:
        kube.close()
    return 0


def _tell(plat: Platform, kube: AdminKube, image: str, progress: Progress) -> None:
    say = progress.say
    queue = QUEUE + " | head -6"

    def squeue() -> str:
        """The queue in one line: each job's id, partition and state."""
        jobs = plat.login("squeue -h -o '%i %P %T'").stdout.strip().splitlines()
        return "squeue: " + ("; ".join(jobs) or "empty")

    job = story.train(plat, kube, image)
    with progress.step(
        f"alice trains: sbatch train.sbatch (job {job}; three PyTorch ranks in the image)", squeue
    ):
        story.wait_completed(plat, job, timeout=900)
    say(_indent("\n".join(story.job_output(plat, job).splitlines()[-4:])))
    with progress.step("serving: Deployment serve (two Pods sunk places through Slurm) and Service serve"):
        story.serve(plat, kube, image)
        story.wait_serving(plat, kube, timeout=600)
    members = ["get", "pods", "-o", "wide", "-l", "sunk.coreweave.com/nodeset=compute"]
    _views(plat, say, QUEUE, members, ["get", "pods", "-o", "wide", "-n", plat.tenants])
    say(f"  GET /predict?x=0.5&y=-0.25 -> {story.ask(plat, kube, 0.5, -0.25)}\n")
    job = story.train(plat, kube, image, "--exclusive", "--epochs 60")
    with progress.step(f"a bigger run takes the Nodes back: sbatch --exclusive (job {job})", squeue):
        procs.wait_until(
            lambda: bool(_preempted(plat)), timeout=300, what="Slurm to preempt the inference Pods' jobs"
        )
        _views(plat, say, queue, ["get", "pods", "-n", plat.tenants, "-o", "wide"])
        story.wait_completed(plat, job, timeout=900)
    with progress.step("training ended: inference comes back with the new model"):
        story.wait_serving(plat, kube, timeout=600)
    say(f"  GET /predict?x=0.5&y=-0.25 -> {story.ask(plat, kube, 0.5, -0.25)}")
    say(
        f"\n  $ kubectl -n {plat.tenants} get events --field-selector reason=Preempted\n"
        + _indent(_preempted(plat))
    )


def _pods_running(kube: AdminKube) -> str:
    pods = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    return f"{len(running)} of {len(pods)} Pods in namespace {NAMESPACE} running"


def _preempted(plat: Platform) -> str:
    """The Preempted Events sunk wrote on the inference Pods, as kubectl lists them."""
    listed = plat.kubectl("get", "events", "-n", plat.tenants, "--field-selector", "reason=Preempted")
    return listed.stdout if "Preempted" in listed.stdout else ""


def _next_steps(cluster: DevCluster, kube: AdminKube, plat: Platform, say: Callable[[str], None]) -> None:
    key = directory.private_key(cluster.layout, story.PERSON)
    tries = [
        (f"export KUBECONFIG={cluster.layout.kubeconfig} PATH={cache_dir() / 'bin'}:$PATH", ""),
        (f"ssh -i {key} {story.PERSON}@{login_address(kube, NAMESPACE)}", "log in as alice: sinfo, sbatch"),
        (f"kubectl -n {plat.tenants} scale deploy/serve --replicas=3", "one more Pod, one more Slurm job"),
        (f"kubectl -n {NAMESPACE} get nodesets", "Slurm's node states, from Kubernetes"),
        ("less examples/train-and-serve/README.md", "the same story on your cluster"),
        (".venv/bin/sunk dev down", "stop everything"),
    ]
    width = max(len(command) for command, _ in tries)
    say("\nEverything keeps running. Try next:")
    for command, why in tries:
        say(f"  {command:<{width}}  # {why}" if why else f"  {command}")
