"""How `bench.run`'s Pods arrive (all at once, or at a rate, from a pool of client
threads), what each asks for, and how long a phase may take."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sunk_dev.kubeapi import AdminKube

POD_CPU = "1"


POD_MEMORY = "64Mi"


CLIENT_THREADS = 16  # the same for Pod creation and raw job submission


def pod(name: str, scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}},
            }
        ],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def arrive(n: int, rate: float, one: Callable[[int], None]) -> None:
    """Call `one(i)` for i < n from a thread pool: all at once (rate 0) or `rate` per second."""
    with ThreadPoolExecutor(max_workers=CLIENT_THREADS) as pool:
        if not rate:
            list(pool.map(one, range(n)))
            return
        start = time.monotonic()
        futures = []
        for i in range(n):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(one, i))
        for future in futures:
            future.result()


def create_pods(
    kube: AdminKube, namespace: str, prefix: str, n: int, rate: float, scheduler: str | None
) -> dict[str, float]:
    """Create Pods; returns when each creation request was sent (monotonic)."""
    sent: dict[str, float] = {}

    def one(i: int) -> None:
        name = f"{prefix}{i}"
        sent[name] = time.monotonic()
        kube.create(f"/api/v1/namespaces/{namespace}/pods", pod(name, scheduler))

    arrive(n, rate, one)
    return sent


def delete_namespace(kube: AdminKube, namespace: str) -> None:
    kube.delete(f"/api/v1/namespaces/{namespace}")
    deadline = time.monotonic() + 120
    while kube.find(f"/api/v1/namespaces/{namespace}") is not None and time.monotonic() < deadline:
        time.sleep(0.5)


def within(n: int, rate: float) -> float:
    """How long a phase may take before the benchmark gives up on the stragglers."""
    arrival = n / rate if rate else 0.0
    return 120 + arrival + n * 0.5


# Beyond KillWait (30 s on the dev cluster) the placeholder drains the node anyway.
END_WITHIN_S = 90
