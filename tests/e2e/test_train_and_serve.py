"""Train with Slurm, serve with Kubernetes, on the same Nodes (issue #37, the seeds' story):
examples/train-and-serve run as a user would run it, on real Nodes.

alice trains a PyTorch model with `sbatch` across three slurmd Pods, each rank a container
step in the example's image from the dev registry, checkpoints on the chart's shared volume;
a Deployment whose Pods sunk places through Slurm loads the newest checkpoint and answers
HTTP through a Service; a second training job, in the higher-tier partition, takes the Nodes
back through Slurm's preemption, and inference returns when it ends, serving its model.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`). The steps are
sunk_dev.story's (shared with `sunk demo`), which use the example's files as they are. The
tests run in file order.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sunk_dev import DevCluster, story
from sunk_dev.kubeapi import AdminKube
from sunk_dev.platform import Platform
from tests.e2e.slurm_in_pods import delete_namespace

pytestmark = pytest.mark.real_nodes
NAMESPACE = "tns"
FIGURES: dict[str, float] = {}


@pytest.fixture(scope="module")
def image(dev_cluster: DevCluster) -> str:
    started = time.monotonic()
    ref = story.build_image(dev_cluster)
    FIGURES["image built and pushed (s)"] = time.monotonic() - started
    return ref


@pytest.fixture(scope="module")
def platform(dev_cluster: DevCluster, kube: AdminKube, image: str) -> Iterator[Platform]:
    plat = story.install(dev_cluster, kube, NAMESPACE)
    yield plat
    print("\ntrain-and-serve figures:", {k: round(v, 2) for k, v in FIGURES.items()})
    story.remove(plat, kube)
    delete_namespace(kube, NAMESPACE, timeout=180)


def test_r10_7_training_completes_across_three_nodes_in_its_image_with_checkpoints_on_the_shared_volume(
    platform: Platform, kube: AdminKube, image: str
) -> None:
    """Catches ranks that never meet (gloo cannot reach rank 0 between slurmd Pods), a
    step outside the image (no torch on the nodes), or checkpoints a node keeps to itself."""
    started = time.monotonic()
    job = story.train(platform, kube, image)
    story.wait_completed(platform, job, timeout=600)
    FIGURES["first training, cold image caches (s)"] = time.monotonic() - started
    output = story.job_output(platform, job)
    hosts = set(re.findall(r"rank \d/3 on (\S+)", output))
    assert len(hosts) == story.MEMBERS, output
    assert "trained on 3 ranks" in output, output
    FIGURES["mean epoch in a container (s)"] = float(re.findall(r"mean epoch ([\d.]+)s", output)[-1])
    latest = platform.login(f"cat {story.WORKDIR}/checkpoints/latest").stdout.strip()
    assert latest.startswith(f"job{job}-epoch"), latest


def test_r10_7_inference_pods_placed_by_sunk_on_the_same_nodes_answer_with_the_trained_model(
    platform: Platform, kube: AdminKube, image: str
) -> None:
    """Catches Pods sunk cannot place beside the NodeSet (no `serve` partition, a refused
    annotation), a registry the Nodes' containerd cannot pull from, or a checkpoint the Pods
    cannot read."""
    started = time.monotonic()
    story.serve(platform, kube, image)
    story.wait_serving(platform, kube, timeout=300)
    FIGURES["Deployment created -> 2 Pods ready (s)"] = time.monotonic() - started
    jobs = platform.login("squeue -h -p serve -t R -o '%i %N'").stdout.split("\n")
    assert len([j for j in jobs if j.strip()]) == 2, jobs  # each Pod holds a job in `serve`
    answer = story.ask(platform, kube, 0.5, -0.25)
    assert answer["checkpoint"].startswith("job"), answer
    assert abs(answer["prediction"] - answer["truth"]) < 0.1, answer


def events(kube: AdminKube, namespace: str, reason: str) -> list[dict[str, Any]]:
    listed = kube.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"reason={reason}")
    return list(listed["items"])


def test_r10_7_a_training_job_takes_the_nodes_back_from_inference_which_returns_when_it_ends(
    platform: Platform, kube: AdminKube, image: str
) -> None:
    """Catches inference that Slurm cannot preempt (placeholders in the training tier, or
    a Pod left running on a preempted job), replacement Pods that jump the queue while the
    Nodes are taken, or inference that never returns."""
    before = {p["metadata"]["name"] for p in story.serve_pods(platform, kube) if story.ready(p)}
    started = time.monotonic()
    # Long enough that the Deployment's new Pods queue behind it.
    job = story.train(platform, kube, image, "--exclusive", "--epochs 60")
    record = story.wait_completed(platform, job, timeout=600)
    FIGURES["preempting training, 60 epochs: submitted -> ended (s)"] = time.monotonic() - started
    preempted = {e["involvedObject"]["name"] for e in events(kube, platform.tenants, "Preempted")}
    assert before <= preempted, (before, preempted)
    # The Deployment's new Pods waited in Slurm's queue for the training job to end.
    story.wait_serving(platform, kube, timeout=300)
    FIGURES["preempting training submitted -> inference back (s)"] = time.monotonic() - started
    after = story.serve_pods(platform, kube)
    assert not before & {p["metadata"]["name"] for p in after}
    for placeholder in platform.login("squeue -h -p serve -t R -o %i").stdout.split():
        held = story.job_record(platform, placeholder)
        assert held["Submit"] < record["End"] <= held["Start"], (held, record)
    answer = story.ask(platform, kube, 0.5, -0.25)
    assert answer["job"] == job, answer  # the newest model: the preempting job's
