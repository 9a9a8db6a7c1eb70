"""GPU fragmentation with Slurm's own node choice and with --placement=pack (R9.2), measured.

    python -m bench.fragmentation [--nodes 8] [--seconds 300] [--rate 0.6] [--seed 1]
                                  [--placement slurm,pack]

Pods of 1, 2, 4 and 8 GPUs (weights 40/30/20/10 %) arrive at random (Poisson, `--rate` per
second) on nodes of 8 GPUs and are placed by `sunk scheduler` through Slurm; each runs 10 to
40 s (kwok ends it), then sunk ends its job. The same arrivals (same seed) are replayed
once per placement, one after the other, on one dev cluster. Every half second the
benchmark reads Slurm's nodes and queue and counts, while a whole-node (8-GPU) Pod's job
waits, how often the cluster had 8 GPUs free in total but no node with 8 free: GPUs
scattered. It prints, per placement, that share of the whole-node waiting time and the
whole-node Pods' waits (creation → bound), and pack's figures as ratios of slurm's. A
benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.arrivals import delete_namespace
from bench.baselines import rest_client
from bench.observe import percentile
from bench.run import SCHEDULER, start_scheduler
from sunk.slurm.dataparser import summarize_state
from sunk.slurm.models import ACTIVE_STATES, gres_counts, gres_is
from sunk_dev import ClusterSpec, DevCluster
from sunk_dev.kubeapi import AdminKube

GPUS_PER_NODE = 8
SIZES = (1, 2, 4, 8)
WEIGHTS = (0.4, 0.3, 0.2, 0.1)
HOLD_S = (10.0, 40.0)
SAMPLE_EVERY_S = 0.5
METRICS_PORT = 29082


@dataclass
class Tally:
    samples: int = 0
    whole_node_waiting: int = 0  # samples with an 8-GPU Pod's job pending
    scattered: int = 0  # ...while >= 8 GPUs were free in total, but on no single node
    free_when_scattered: list[int] = field(default_factory=list)
    pods_hit: set[str] = field(default_factory=set)  # 8-GPU Pods that waited while scattered


@dataclass
class Outcome:
    placement: str
    counts: dict[int, int]
    tally: Tally
    whole_waits: list[float]
    whole_pods: int

    @property
    def share(self) -> float:
        t = self.tally
        return t.scattered / t.whole_node_waiting if t.whole_node_waiting else 0.0

    @property
    def mean_free(self) -> float:
        free = self.tally.free_when_scattered
        return sum(free) / len(free) if free else 0.0


def arrivals(seed: int, rate: float, seconds: float) -> list[tuple[float, int, float]]:
    """(at, GPUs, hold) for every Pod, the same for every placement."""
    choose = random.Random(seed)  # noqa: S311 (a workload, not a secret)
    out = []
    at = choose.expovariate(rate)
    while at < seconds:
        out.append((at, choose.choices(SIZES, WEIGHTS)[0], choose.uniform(*HOLD_S)))
        at += choose.expovariate(rate)
    return out


def used_gpus(node: dict[str, Any]) -> int:
    return sum(n for key, n in gres_counts(str(node.get("gres_used") or "")) if gres_is(key, "gpu"))


def sample(http: Any, namespace: str, tally: Tally) -> None:
    nodes = http.get("/nodes").json().get("nodes") or []
    jobs = http.get("/jobs").json().get("jobs") or []
    free = [GPUS_PER_NODE - used_gpus(n) for n in nodes]
    waiting = [
        str(j.get("name"))
        for j in jobs
        if f":{namespace}/g8-" in str(j.get("name"))
        and "PENDING" in (j.get("job_state") or [j.get("job_state")])
    ]
    tally.samples += 1
    if not waiting:
        return
    tally.whole_node_waiting += 1
    if sum(free) >= GPUS_PER_NODE and max(free, default=0) < GPUS_PER_NODE:
        tally.scattered += 1
        tally.free_when_scattered.append(sum(free))
        tally.pods_hit.update(waiting)


def manifest(name: str, scheduler: str, gpus: int, hold: float) -> dict[str, Any]:
    amount = {"cpu": "1", "memory": "64Mi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"sunk.dev/complete-after": f"{hold:.0f}s"}},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 5,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": amount, "limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def _when(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def whole_node_waits(kube: AdminKube, namespace: str) -> list[float]:
    """Creation → bound of the 8-GPU Pods (one-second stamps, as the API server keeps them)."""
    out = []
    for pod in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
        if not pod["metadata"]["name"].startswith("g8-"):
            continue
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
                out.append(_when(cond["lastTransitionTime"]) - _when(pod["metadata"]["creationTimestamp"]))
    return out


def run_one(
    cluster: DevCluster, kube: AdminKube, placement: str, plan: list[tuple[float, int, float]]
) -> Outcome:
    namespace = kube.create_namespace(f"frag-{placement}")
    sched = start_scheduler(cluster, namespace, METRICS_PORT, f"frag-{placement}", f"--placement={placement}")
    tally = Tally()
    counts = dict.fromkeys(SIZES, 0)
    done = threading.Event()
    print(f"placement {placement}: {len(plan)} Pods over {plan[-1][0]:.0f} s …", flush=True)
    try:
        with rest_client(cluster) as http:

            def sampler() -> None:
                while not done.is_set():
                    try:
                        sample(http, namespace, tally)
                    except Exception as err:  # a slow answer skips a sample, nothing more
                        print(f"  sample skipped: {err}", flush=True)
                    done.wait(SAMPLE_EVERY_S)

            thread = threading.Thread(target=sampler, daemon=True)
            thread.start()
            start = time.monotonic()
            for i, (at, gpus, hold) in enumerate(plan):
                delay = start + at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                kube.create(
                    f"/api/v1/namespaces/{namespace}/pods", manifest(f"g{gpus}-{i}", SCHEDULER, gpus, hold)
                )
                counts[gpus] += 1
            # Arrivals have stopped: let every Pod run and end (its job with it).
            deadline = time.monotonic() + HOLD_S[1] + 120
            while time.monotonic() < deadline and any(
                f":{namespace}/" in str(j.get("name"))
                and summarize_state(j.get("job_state"))[0] in ACTIVE_STATES
                for j in http.get("/jobs").json().get("jobs") or []
            ):
                time.sleep(1)
            done.set()
            thread.join(timeout=10)
        waits = whole_node_waits(kube, namespace)
    finally:
        done.set()
        sched.terminate()
        sched.wait(timeout=30)
    delete_namespace(kube, namespace)
    return Outcome(placement, counts, tally, waits, counts[GPUS_PER_NODE])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=300, help="how long Pods keep arriving")
    parser.add_argument("--rate", type=float, default=0.6, help="arrivals per second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--placement", default="slurm,pack", help="placements to run, in turn")
    parser.add_argument("--slurm", default="24.11")
    args = parser.parse_args()
    placements = [p for p in args.placement.split(",") if p]
    cluster = DevCluster()
    if cluster.is_running():
        print("a dev cluster is running here: stop it, or set SUNK_DEV_DIR for another", file=sys.stderr)
        return 1
    print(f"bringing up {args.nodes} nodes x {GPUS_PER_NODE} GPUs, Slurm {args.slurm} …", flush=True)
    cluster.up(ClusterSpec(nodes=args.nodes, cpus_per_node=64, slurm=args.slurm, gpus_per_node=GPUS_PER_NODE))
    plan = arrivals(args.seed, args.rate, args.seconds)
    kube = AdminKube(cluster.layout)
    try:
        outcomes = [run_one(cluster, kube, placement, plan) for placement in placements]
    finally:
        kube.close()
        cluster.down()
    report(outcomes, args)
    return 0


def report(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    first = outcomes[0]
    counts = "/".join(str(first.counts[s]) for s in SIZES)
    print(f"\nrate {args.rate}/s, {args.seconds:.0f} s, seed {args.seed}; Pods of 1/2/4/8 GPUs: {counts}")
    print(
        "| placement | whole-node Pods | of them waited while GPUs were scattered | "
        "whole-node waiting time | of it scattered | mean free GPUs then | wait p50 s | wait p95 s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for o in outcomes:
        t = o.tally
        waiting_s = t.whole_node_waiting * SAMPLE_EVERY_S
        print(
            f"| {o.placement} | {o.whole_pods} | {len(t.pods_hit)} | {waiting_s:.1f} s | "
            f"{o.share:.0%} | {o.mean_free:.1f} | {percentile(o.whole_waits, 50):.0f} | "
            f"{percentile(o.whole_waits, 95):.0f} |"
        )
    if len(outcomes) > 1 and first.tally.scattered:
        for o in outcomes[1:]:
            ratio = o.tally.scattered / first.tally.scattered
            print(f"{o.placement}/{first.placement}: scattered waiting time x{ratio:.2f}")


if __name__ == "__main__":
    sys.exit(main())
