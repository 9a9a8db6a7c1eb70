"""Room on a Node in the kubelet's count (R4.3, R7.1): a Pod sunk binds must fit beside the
Pods already there as the kubelet admits it, or the kubelet fails it (`OutOfcpu`) after
Slurm gave it room. Each row: a Node, the Pods on it, the Pod to place, and the verdict
(None: it fits; else words the reason must contain)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from sunk.kube import noderoom

Json = dict[str, Any]


def node(allocatable: dict[str, str] | None = None, name: str = "real-3") -> Json:
    status = {"allocatable": allocatable} if allocatable is not None else {}
    return {"metadata": {"name": name}, "status": status}


SMALL = node({"cpu": "2", "memory": "4Gi", "pods": "110"})


def container(cpu: str | None = None, memory: str | None = None, **extra: Any) -> Json:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "resources": {"requests": requests}, **extra}


def pod(
    *containers: Json,
    init: tuple[Json, ...] = (),
    overhead: Json | None = None,
    phase: str = "Running",
    deleting: bool = False,
) -> Json:
    spec: Json = {"containers": list(containers) or [container("100m", "64Mi")]}
    if init:
        spec["initContainers"] = list(init)
    if overhead:
        spec["overhead"] = overhead
    meta: Json = {"name": "p"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def gpus(count: str, cpu: str = "100m") -> Json:
    return {
        "name": "c",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}, "limits": {"nvidia.com/gpu": count}},
    }


# The bug as seen: a slurmd Pod asking 1 CPU (its limit, 2, is what Slurm counts), other
# Pods 550m, and a 500m Pod from a Deployment on a 2-CPU Node.
SLURMD = pod(container("1", "512Mi"))
OTHERS = pod(container("550m", "256Mi"))

ROOM = [
    pytest.param(SMALL, [SLURMD], pod(container("500m", "256Mi")), None, id="fits"),
    pytest.param(
        SMALL,
        [SLURMD, OTHERS],
        pod(container("500m", "256Mi")),
        "it asks cpu 500m, 450m is free of 2 allocatable (1550m requested by the slurmd and placed Pods)",
        id="cpu-short-the-outofcpu-storm",
    ),
    pytest.param(SMALL, [SLURMD], pod(container("1", "256Mi")), None, id="exactly-the-free-cpu-fits"),
    pytest.param(SMALL, [SLURMD], pod(container("100m", "3584Mi")), None, id="memory-exactly-free-fits"),
    pytest.param(
        SMALL,
        [SLURMD],
        pod(container("100m", "3585Mi")),
        "memory 3585Mi, 3584Mi is free of 4Gi allocatable (512Mi requested",
        id="memory-short",
    ),
    pytest.param(
        node({"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "4"}),
        [pod(gpus("3"))],
        pod(gpus("2")),
        "nvidia.com/gpu 2, 1 is free of 4 allocatable (3 requested",
        id="gpu-short",
    ),
    pytest.param(
        node({"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "4"}),
        [pod(gpus("3"))],
        pod(gpus("1")),
        None,
        id="gpu-fits",
    ),
    pytest.param(
        node({"cpu": "8", "memory": "16Gi", "pods": "110"}),
        [],
        pod(gpus("8")),
        None,
        id="gpu-the-node-does-not-list-is-dropped-as-the-kubelet-drops-it",
    ),
    pytest.param(
        node({"cpu": "8", "memory": "16Gi", "pods": "2"}),
        [SLURMD, OTHERS],
        pod(container("100m", "64Mi")),
        "a Pod's place, and all 2 are taken (2 slurmd and placed Pods)",
        id="pods-count-full",
    ),
    pytest.param(
        node({"cpu": "8", "memory": "16Gi", "pods": "3"}),
        [SLURMD, OTHERS],
        pod(container("100m", "64Mi")),
        None,
        id="last-pod-place",
    ),
    pytest.param(
        SMALL,
        [SLURMD],
        pod(container("100m", "64Mi"), init=(container("1500m", "64Mi"),)),
        "cpu 1500m, 1 is free",
        id="init-container-busiest-step-counts",
    ),
    pytest.param(
        SMALL,
        [SLURMD],
        pod(container("600m", "64Mi"), init=(container("600m", "64Mi", restartPolicy="Always"),)),
        "cpu 1200m, 1 is free",
        id="sidecar-init-container-adds-to-the-containers",
    ),
    pytest.param(
        SMALL,
        [SLURMD, pod(container("100m", "64Mi"), init=(container("1", "64Mi"),))],
        pod(container("100m", "64Mi")),
        "cpu 100m, 0 is free of 2 allocatable (2 requested",
        id="init-containers-of-pods-already-there-count-too",
    ),
    pytest.param(
        SMALL,
        [SLURMD],
        pod(container("900m", "64Mi"), overhead={"cpu": "250m"}),
        "cpu 1150m, 1 is free",
        id="overhead-counts",
    ),
    pytest.param(
        SMALL,
        [SLURMD, pod(container("1", "64Mi"), phase="Succeeded")],
        pod(container("1", "64Mi")),
        None,
        id="succeeded-not-counted",
    ),
    pytest.param(
        SMALL,
        [SLURMD, pod(container("1", "64Mi"), phase="Failed")],
        pod(container("1", "64Mi")),
        None,
        id="failed-not-counted",
    ),
    pytest.param(
        SMALL,
        [SLURMD, pod(container("1", "64Mi"), deleting=True)],
        pod(container("1", "64Mi")),
        "cpu 1, 0 is free of 2 allocatable (2 requested",
        id="terminating-still-counted",
    ),
    pytest.param(
        SMALL,
        [SLURMD, pod(container("1", "64Mi"), phase="Pending")],
        pod(container("1", "64Mi")),
        "cpu 1, 0 is free",
        id="pending-counted",
    ),
    pytest.param(
        node(), [SLURMD, OTHERS], pod(container("64", "1Ti")), None, id="node-without-allocatable-not-judged"
    ),
    pytest.param(
        node({"memory": "4Gi"}),
        [SLURMD, OTHERS],
        pod(container("64", "64Mi")),
        None,
        id="cpu-missing-from-allocatable-not-judged",
    ),
    pytest.param(
        node({"cpu": "2", "memory": "4Gi", "pods": "110"}),
        [pod(container("3", "64Mi"))],
        pod({"name": "c", "resources": {"requests": {"memory": "64Mi"}}}),
        None,
        id="a-pod-asking-no-cpu-fits-an-overcommitted-node",
    ),
    pytest.param(
        node({"cpu": "2", "memory": "4Gi", "pods": "110"}),
        [pod(container("2500m", "64Mi"))],
        pod(container("100m", "64Mi")),
        "cpu 100m, 0 is free of 2 allocatable (2500m requested",
        id="overcommitted-shows-nothing-free",
    ),
    pytest.param(
        node({"cpu": "2", "memory": "1Gi", "pods": "110"}),
        [SLURMD],
        pod(container("2", "1Gi")),
        "it asks cpu 2, 1 is free of 2 allocatable (1 requested by the slurmd and placed Pods); and "
        "memory 1Gi, 512Mi is free of 1Gi allocatable (512Mi requested",
        id="every-resource-short-is-named",
    ),
]


@pytest.mark.parametrize(("the_node", "there", "the_pod", "verdict"), ROOM)
def test_r4_3_room_in_the_kubelets_count(
    the_node: Json, there: list[Json], the_pod: Json, verdict: str | None
) -> None:
    """Catches binding a Pod the kubelet then refuses (`OutOfcpu`, `OutOfmemory`, a full
    `pods` count: the storm of refused Pods) and ruling out a Node the kubelet would admit
    it on (a Pod waiting for nothing)."""
    problem = noderoom.shortfall(the_node, noderoom.requests_of(the_pod), noderoom.tally(there))
    if verdict is None:
        assert problem is None
    else:
        assert problem is not None
        assert verdict in problem
        name = the_node["metadata"]["name"]
        assert problem.startswith(f"Node {name} has no room for the Pod in the kubelet's count: ")
        assert problem.endswith(f"lower the NodeSet's requests ({noderoom.DOCS})")


def test_r4_3_a_tally_counts_pods_and_takes_them_back() -> None:
    """Catches sums that drift: a Pod counted and then taken back leaves nothing behind,
    GPUs included."""
    tally = noderoom.tally([pod(gpus("2", cpu="1500m"))])
    assert (tally.cpu, tally.devices, tally.pods) == (Decimal("1.5"), {"nvidia.com/gpu": Decimal(2)}, 1)
    tally.add(noderoom.requests_of(pod(gpus("2", cpu="1500m"))), -1)
    assert (tally.cpu, tally.memory, tally.devices["nvidia.com/gpu"], tally.pods) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("resource", "amount", "shown"),
    [
        ("cpu", Decimal("0.45"), "450m"),
        ("cpu", Decimal(2), "2"),
        ("cpu", Decimal("0.0005"), "0.5m"),
        ("memory", Decimal(2**30) * 4, "4Gi"),
        ("memory", Decimal(2**20) * 1536, "1536Mi"),
        ("memory", Decimal(1000), "1000"),
        ("nvidia.com/gpu", Decimal(3), "3"),
    ],
)
def test_r4_3_amounts_are_shown_as_a_manifest_writes_them(resource: str, amount: Decimal, shown: str) -> None:
    """Catches reasons a user cannot act on ("0.45" CPUs, memory in bytes)."""
    assert noderoom.show(resource, amount) == shown
