"""GPU fragmentation under Slurm's own node choice (R9.2, issue #13), measured.

    python -m bench.fragmentation [--nodes 8] [--seconds 300] [--rate 0.6] [--seed 1]

Jobs of 1, 2, 4 and 8 GPUs (weights 40/30/20/10 %) arrive at random (Poisson, `--rate` per
second) on nodes of 8 GPUs, each holding its GPUs for 10 to 40 s, shaped exactly as sunk
shapes a Pod's placeholder (one node, `tres_per_node=gres/gpu:N`), and Slurm picks the
node, as it does for sunk. Every half second the benchmark reads Slurm's nodes and queue and
counts, while an 8-GPU (whole-node) job waits, how often the cluster had 8 GPUs free in
total but no node with 8 free: GPUs scattered. It prints that share of the whole-node
waiting time, and the whole-node jobs' waits. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.observe import percentile
from bench.run import rest_client
from sunk.devcluster import ClusterSpec, DevCluster
from sunk.slurm.dialect import number

GPUS_PER_NODE = 8
SIZES = (1, 2, 4, 8)
WEIGHTS = (0.4, 0.3, 0.2, 0.1)
HOLD_S = (10.0, 40.0)
SAMPLE_EVERY_S = 0.5
_GRES_USED = re.compile(r"gpu(?::[^:(]+)?:(\d+)")


@dataclass
class Tally:
    samples: int = 0
    whole_node_waiting: int = 0  # samples with an 8-GPU job pending
    scattered: int = 0  # ...while >= 8 GPUs were free in total, but on no single node
    free_when_scattered: list[int] = field(default_factory=list)
    jobs_hit: set[int] = field(default_factory=set)  # 8-GPU jobs that waited while scattered


def used_gpus(node: dict[str, Any]) -> int:
    return sum(int(m) for m in _GRES_USED.findall(str(node.get("gres_used") or "")))


def sample(http: Any, tally: Tally) -> None:
    nodes = http.get("/nodes").json().get("nodes") or []
    jobs = http.get("/jobs").json().get("jobs") or []
    free = [GPUS_PER_NODE - used_gpus(n) for n in nodes]
    waiting = [
        int(j["job_id"])
        for j in jobs
        if j.get("name") == "frag-8" and "PENDING" in (j.get("job_state") or [j.get("job_state")])
    ]
    tally.samples += 1
    if not waiting:
        return
    tally.whole_node_waiting += 1
    if sum(free) >= GPUS_PER_NODE and max(free, default=0) < GPUS_PER_NODE:
        tally.scattered += 1
        tally.free_when_scattered.append(sum(free))
        tally.jobs_hit.update(waiting)


def submit(http: Any, gpus: int, hold: float) -> int:
    job = {
        "name": f"frag-{gpus}",
        "nodes": "1",
        "tasks": 1,
        "cpus_per_task": 1,
        "memory_per_node": {"set": True, "number": 64},
        "tres_per_node": f"gres/gpu:{gpus}",
        "current_working_directory": "/tmp",
        "standard_output": "/dev/null",
        "standard_error": "/dev/null",
        "environment": ["PATH=/usr/bin:/bin"],
        "script": f"#!/bin/sh\nsleep {hold:.0f}\n",
    }
    reply = http.post("/job/submit", json={"job": job}).json()
    if not reply.get("job_id"):
        raise RuntimeError(f"Slurm refused a job: {reply.get('errors')}")
    return int(reply["job_id"])


def waits(http: Any, ids: list[int]) -> list[float]:
    """Queue waits (start - submit) of the whole-node jobs that started."""
    out = []
    for job in http.get("/jobs").json().get("jobs") or []:
        if int(job["job_id"]) in ids:
            start, submit_at = number(job.get("start_time")) or 0, number(job.get("submit_time")) or 0
            if start and submit_at and "PENDING" not in (job.get("job_state") or []):
                out.append(float(start - submit_at))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=300, help="how long jobs keep arriving")
    parser.add_argument("--rate", type=float, default=0.6, help="arrivals per second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slurm", default="24.11")
    args = parser.parse_args()
    cluster = DevCluster()
    if cluster.is_running():
        print("a dev cluster is running here: stop it, or set SUNK_DEV_DIR for another", file=sys.stderr)
        return 1
    print(f"bringing up {args.nodes} nodes x {GPUS_PER_NODE} GPUs, Slurm {args.slurm} …", flush=True)
    cluster.up(ClusterSpec(nodes=args.nodes, cpus_per_node=64, slurm=args.slurm, gpus_per_node=GPUS_PER_NODE))
    choose = random.Random(args.seed)  # noqa: S311 (a workload, not a secret)
    tally = Tally()
    counts = dict.fromkeys(SIZES, 0)
    whole: list[int] = []
    done = threading.Event()
    try:
        with rest_client(cluster) as http:

            def sampler() -> None:
                while not done.is_set():
                    try:
                        sample(http, tally)
                    except Exception as err:  # a slow answer skips a sample, nothing more
                        print(f"  sample skipped: {err}", flush=True)
                    done.wait(SAMPLE_EVERY_S)

            thread = threading.Thread(target=sampler, daemon=True)
            thread.start()
            start = time.monotonic()
            at = 0.0
            while at < args.seconds:
                at += choose.expovariate(args.rate)
                delay = start + at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                gpus = choose.choices(SIZES, WEIGHTS)[0]
                job_id = submit(http, gpus, choose.uniform(*HOLD_S))
                counts[gpus] += 1
                if gpus == GPUS_PER_NODE:
                    whole.append(job_id)
            time.sleep(HOLD_S[1])  # let the queue drain (arrivals have stopped)
            done.set()
            thread.join(timeout=10)
            whole_waits = waits(http, whole)
    finally:
        done.set()
        cluster.down()
    share = tally.scattered / tally.whole_node_waiting if tally.whole_node_waiting else 0.0
    print(f"\njobs by GPUs: {counts}; {tally.samples} samples every {SAMPLE_EVERY_S} s")
    print(
        "| placement | whole-node jobs | of them waited while GPUs were scattered | "
        "whole-node waiting samples | scattered share | mean free GPUs then | wait p50 s | wait p95 s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    mean_free = (
        sum(tally.free_when_scattered) / len(tally.free_when_scattered) if tally.free_when_scattered else 0
    )
    p50, p95 = percentile(whole_waits, 50), percentile(whole_waits, 95)
    print(
        f"| slurm (default) | {len(whole)} | {len(tally.jobs_hit)} | {tally.whole_node_waiting} | "
        f"{share:.0%} | {mean_free:.1f} | {p50:.0f} | {p95:.0f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
