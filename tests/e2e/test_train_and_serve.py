"""Train with Slurm, serve with Kubernetes, on the same Nodes (issues #37 and #49.5-6):
examples/train-and-serve/README.md, its own commands, run as a reader would run them.

The README marks the shell blocks a reader types with `<!-- test: NAME -->`; these tests
run them in the README's order (sunk_dev.readmesteps: one shell, its variables and
functions carried from block to block), then check what they did: alice trains a PyTorch
model with `sbatch` across three slurmd Pods, each rank a container step in the example's
image from the dev registry, checkpoints on the chart's shared volume; a Deployment whose
Pods sunk places through Slurm, as the service user `serving` in the account `inference`
(never root), loads the newest checkpoint and answers HTTP through a Service; a second
training job, in the higher-tier partition, takes the Nodes back through Slurm's
preemption, and inference returns when it ends, serving its model. The README's clean-up
step is the teardown.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`). The tests run in file
order, each on what the one before left.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sunk_dev import DevCluster, directory_admin, readmesteps, registry, story
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.platform import Platform
from tests.e2e.slurm_in_pods import delete_namespace

pytestmark = pytest.mark.real_nodes
README = story.EXAMPLE / "README.md"
ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = story.README_NAMESPACE  # the README's release namespace
SERVING = f"{NAMESPACE}-apps"
FIGURES: dict[str, float] = {}


def readme_steps() -> list[readmesteps.Step]:
    return readmesteps.steps(README.read_text(), str(README))


def leftovers(cluster: DevCluster, kube: AdminKube) -> None:
    """What a run that failed part way may have left: the README's namespaces, release,
    serving volume, its read-only policy and the service user."""
    delete_namespace(kube, SERVING, timeout=180)
    Platform(cluster, namespace=NAMESPACE).uninstall()
    for namespace in (NAMESPACE, f"{NAMESPACE}-tenant"):
        delete_namespace(kube, namespace, timeout=180)
    kube.delete(f"/api/v1/persistentvolumes/{SERVING}-checkpoints")
    for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
        kube.delete(f"{story.ADMISSION}/{kind}/{SERVING}-checkpoints-read-only")
    known = directory_admin.snapshot(cluster.layout)
    if any(u.name == story.SERVICE_USER for u in known.users):
        directory_admin.remove_person(cluster.layout, story.SERVICE_USER)
    if any(g.name == story.SERVICE_GROUP for g in known.groups):
        directory_admin.remove_group(cluster.layout, story.SERVICE_GROUP)


@pytest.fixture(scope="module")
def shell(dev_cluster: DevCluster, kube: AdminKube) -> Iterator[readmesteps.Shell]:
    leftovers(dev_cluster, kube)
    terminal = readmesteps.Shell(ROOT)
    run(terminal, "shell", timeout=60)
    yield terminal
    print("\ntrain-and-serve figures:", {k: round(v, 2) for k, v in FIGURES.items()})
    done = terminal.run(readmesteps.step(readme_steps(), "clean-up"), timeout=600)
    leftovers(dev_cluster, kube)  # whatever the clean-up step could not do
    assert done.returncode == 0, f"the README's clean-up step failed:\n{done.stdout[-3000:]}"


@pytest.fixture(scope="module")
def platform(dev_cluster: DevCluster) -> Platform:
    return Platform(dev_cluster, namespace=NAMESPACE, release="slurm")


def run(terminal: readmesteps.Shell, name: str, timeout: float) -> str:
    """The README's step `name`, which must succeed; its output."""
    started = time.monotonic()
    done = terminal.run(readmesteps.step(readme_steps(), name), timeout=timeout)
    FIGURES[f"README step {name} (s)"] = time.monotonic() - started
    assert done.returncode == 0, f"README step {name}: exit {done.returncode}\n{done.stdout[-4000:]}"
    return done.stdout


def variable(terminal: readmesteps.Shell, name: str) -> str:
    """What a variable the README's steps set holds now."""
    done = terminal.run(readmesteps.Step(f"echo {name}", f'printf "%s" "${{{name}}}"\n', 1), timeout=10)
    assert done.returncode == 0, done.stdout
    return done.stdout


def answer_in(output: str) -> dict[str, Any]:
    """The last line of JSON a step printed: /predict's answer."""
    lines = [line for line in output.splitlines() if line.startswith("{")]
    assert lines, output
    return dict(json.loads(lines[-1]))


def test_issue49_the_readme_builds_the_image_into_the_dev_registry(
    shell: readmesteps.Shell, dev_cluster: DevCluster
) -> None:
    """Catches a README whose image step the dev cluster cannot run (buildah on the host
    without the Nodes' slurmd image, a registry address nobody stated)."""
    run(shell, "image", timeout=1500)
    image = variable(shell, "IMAGE")
    assert image.startswith(f"{registry.running_address(dev_cluster.layout)}/sunk/train-and-serve:"), image


def test_issue49_the_readme_installs_its_own_release_nodeset_and_service_user(
    shell: readmesteps.Shell, platform: Platform, kube: AdminKube
) -> None:
    """Catches values that lose the shared /home or the people account to helm's list
    merge, a NodeSet that replaces another, or a service user the cluster does not know."""
    run(shell, "platform", timeout=900)
    nodeset = platform.nodeset(kube, "train-and-serve")
    assert nodeset["spec"]["partitions"] == ["train", "serve"]
    said = platform.login("df --output=target /home /shared | tail -n +2; id serving").stdout
    assert "/home\n/shared\n" in said and "uid=20100(serving)" in said and "(inference)" in said, said


def test_r10_7_training_completes_across_three_nodes_in_its_image_with_checkpoints_on_the_shared_volume(
    shell: readmesteps.Shell, platform: Platform
) -> None:
    """Catches ranks that never meet (gloo cannot reach rank 0 between slurmd Pods), a
    step outside the image (no torch on the nodes), checkpoints a node keeps to itself, or
    a batch script the README never gets onto the login Pod."""
    started = time.monotonic()
    output = run(shell, "train", timeout=900)
    FIGURES["first training, cold image caches (s)"] = time.monotonic() - started
    job = variable(shell, "JOB")
    hosts = set(re.findall(r"rank \d/3 on (\S+)", output))
    assert len(hosts) == story.MEMBERS, output
    assert "trained on 3 ranks" in output, output
    FIGURES["mean epoch in a container (s)"] = float(re.findall(r"mean epoch ([\d.]+)s", output)[-1])
    latest = platform.login(f"cat {story.WORKDIR}/checkpoints/latest").stdout.strip()
    assert latest.startswith(f"job{job}-epoch"), latest
    said = platform.login(f"sacct -nPX -j {job} -o User,Account,Partition,State").stdout.strip()
    assert said == "alice|people|train|COMPLETED", said


def test_issue49_inference_pods_jobs_run_as_the_service_user_in_its_account_and_answer(
    shell: readmesteps.Shell, platform: Platform, kube: AdminKube
) -> None:
    """Catches Pods sunk cannot place beside the NodeSet (no `serve` partition, a refused
    annotation), a registry the Nodes' containerd cannot pull from, a checkpoint the Pods
    cannot read, or placeholder jobs that run as root rather than the service user."""
    started = time.monotonic()
    output = run(shell, "serve", timeout=600)
    FIGURES["Deployment created -> 2 Pods ready (s)"] = time.monotonic() - started
    jobs = [j.split() for j in platform.login("squeue -h -p serve -t R -o '%i %u %U %a'").stdout.splitlines()]
    assert len(jobs) == 2, jobs  # each Pod holds a job in `serve`
    assert [j[1:] for j in jobs] == [["serving", "20100", "inference"]] * 2, jobs
    accounted = platform.login(f"sacct -nPX -j {jobs[0][0]} -o User,Account,Partition").stdout.strip()
    assert accounted == "serving|inference|serve", accounted
    assert "serving" in output and "inference" in output, output  # the README's squeue shows it
    answer = answer_in(output)
    print(f"\n/predict answered (README, step serve): {json.dumps(answer)}")
    assert answer["checkpoint"].startswith(f"job{variable(shell, 'JOB')}-epoch"), answer
    assert abs(answer["truth"] - 1.0287) < 1e-3, answer  # what the README says it is
    assert abs(answer["prediction"] - answer["truth"]) < 0.1, answer


def test_issue52_a_pod_in_the_serving_namespace_cannot_mount_the_checkpoints_writable(
    shell: readmesteps.Shell, kube: AdminKube
) -> None:
    """A tenant Pod picks its own UID (alice's, say): the serving claim holds the checkpoints'
    directory alone, and storage.yaml's policy refuses a writable mount of it. Catches a
    policy the API server did not take, or one that lets a Pod leave readOnly out."""

    def pod(read_only: bool | None) -> dict[str, Any]:
        claim: dict[str, Any] = {"claimName": "checkpoints"}
        if read_only is not None:
            claim["readOnly"] = read_only
        return {
            "metadata": {"name": "as-alice"},
            "spec": {
                "securityContext": {"runAsUser": 20001, "runAsGroup": 30000},
                "containers": [{"name": "c", "image": variable(shell, "IMAGE"), "command": ["true"]}],
                "volumes": [{"name": "c", "persistentVolumeClaim": claim}],
            },
        }

    path = f"/api/v1/namespaces/{SERVING}/pods"
    for writable in (None, False):
        with pytest.raises(KubeError) as refused:
            kube.request("POST", path, pod(writable), dryRun="All")
        assert "may be mounted read-only only" in refused.value.body, refused.value.body
    kube.request("POST", path, pod(True), dryRun="All")  # read-only is admitted
    source = kube.get(f"/api/v1/persistentvolumes/{SERVING}-checkpoints")["spec"]["hostPath"]["path"]
    assert source.endswith("/train-and-serve/checkpoints"), source


def events(kube: AdminKube, namespace: str, reason: str) -> list[dict[str, Any]]:
    listed = kube.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"reason={reason}")
    return list(listed["items"])


def test_r10_7_a_training_job_takes_the_nodes_back_from_inference_which_returns_when_it_ends(
    shell: readmesteps.Shell, platform: Platform, kube: AdminKube
) -> None:
    """Catches inference that Slurm cannot preempt (placeholders in the training tier, or
    a Pod left running on a preempted job), replacement Pods that jump the queue while the
    Nodes are taken, or inference that never returns."""
    before = {p["metadata"]["name"] for p in story.serve_pods(platform, kube) if story.ready(p)}
    started = time.monotonic()
    output = run(shell, "preempt", timeout=1500)
    FIGURES["preempting training, 60 epochs: submitted -> inference back (s)"] = time.monotonic() - started
    job = variable(shell, "BIG")
    record = story.job_record(platform, job)
    assert record["State"] == "COMPLETED", record
    preempted = {e["involvedObject"]["name"] for e in events(kube, SERVING, "Preempted")}
    assert before <= preempted, (before, preempted)
    after = story.serve_pods(platform, kube)
    assert not before & {p["metadata"]["name"] for p in after}
    # The Deployment's new Pods waited in Slurm's queue for the training job to end.
    for placeholder in platform.login("squeue -h -p serve -t R -o %i").stdout.split():
        held = story.job_record(platform, placeholder)
        assert held["Submit"] < record["End"] <= held["Start"], (held, record)
    assert answer_in(output)["job"] == job, output  # the newest model: the preempting job's
