"""Placement throughput and latency of sunk against its two limits, in one run.

    python -m bench.run --nodes 64 --pods 100,1000

For each N it measures, on one fresh dev cluster:
  ours        N Pods created at once → bound by `sunk scheduler` through Slurm
  ours-end    scancel of all their placeholder jobs → Pods deleted
  raw-slurm   N equivalent jobs submitted straight to slurmrestd → each running and its
              script started (the same started mark as ours)
  kube        N equivalent Pods bound by the default kube-scheduler (same Kubernetes
              module, default client limits) to the same Nodes
and prints rates and latency percentiles with the ratios ours/raw-slurm and ours/kube.
A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sunk.devcluster import ClusterSpec, DevCluster
from sunk.devcluster.kubeapi import AdminKube
from sunk.devcluster.layout import cache_dir
from sunk.devcluster.prereqs import ensure_go_tools
from sunk.devcluster.slurmcluster import REST_VERSION, run_cli

SCHEDULER = "sunk-bench"
POD_CPU = "1"
POD_MEMORY = "64Mi"


@dataclass
class Result:
    name: str
    count: int
    seconds: float  # first request → last one done
    latencies: list[float] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("inf")

    def pct(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


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


def create_all(kube: AdminKube, namespace: str, manifests: list[dict[str, Any]]) -> dict[str, float]:
    """Create Pods concurrently; returns each Pod's creation time (monotonic)."""
    created: dict[str, float] = {}

    def one(manifest: dict[str, Any]) -> None:
        kube.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
        created[manifest["metadata"]["name"]] = time.monotonic()

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(one, manifests))
    return created


def watch_until(
    kube: AdminKube, namespace: str, done: Any, names: set[str], within: float, *, gone_counts: bool = False
) -> dict[str, float]:
    """Poll the Pod list until `done(pod)` held for every name; the first time each held.
    With `gone_counts`, a Pod that has disappeared counts as done (deletions finish fast)."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + within
    while len(seen) < len(names) and time.monotonic() < deadline:
        items = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        now = time.monotonic()
        present = set()
        for item in items:
            name = item["metadata"]["name"]
            present.add(name)
            if name not in seen and done(item):
                seen[name] = now
        if gone_counts:
            for name in names - present - set(seen):
                seen[name] = now
        time.sleep(0.05)
    return seen


def watch_stages(
    kube: AdminKube, slurm: httpx.Client, namespace: str, names: set[str], within: float
) -> dict[str, dict[str, float]]:
    """For each Pod, when it was first seen submitted (job ID on the Pod), started (the
    placeholder's mark in Slurm) and bound. Polling slurmrestd adds a little load."""
    stages: dict[str, dict[str, float]] = {name: {} for name in names}
    job_of: dict[int, str] = {}
    deadline = time.monotonic() + within
    last_slurm = 0.0
    while time.monotonic() < deadline and not all("bound" in s for s in stages.values()):
        now = time.monotonic()
        for item in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
            name = item["metadata"]["name"]
            job_id = (item["metadata"].get("annotations") or {}).get("sunk.coreweave.com/job-id")
            if job_id:
                stages[name].setdefault("submitted", now)
                job_of[int(job_id)] = name
            if item["spec"].get("nodeName"):
                stages[name].setdefault("bound", now)
        if now - last_slurm > 0.2:
            last_slurm = now
            for job in slurm.get("/jobs").json().get("jobs", []):
                name = job_of.get(job["job_id"])
                if name and (job.get("comment") or "").endswith(": started"):
                    stages[name].setdefault("started", now)
        time.sleep(0.05)
    return stages


def namespace_for(kube: AdminKube, name: str) -> str:
    kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
            break
        except Exception:
            time.sleep(0.1)
    return name


def proc_usage(pid: int) -> tuple[float, float]:
    """(CPU seconds, peak RSS MiB) of a live process."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    return cpu, peak


def slurm_calls(metrics_port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("sunk_slurm_api_request_seconds_count")
    )


def bench_ours(cluster: DevCluster, kube: AdminKube, n: int) -> tuple[Result, Result]:
    namespace = namespace_for(kube, f"bench-ours-{n}")
    metrics_port = 29080 + n % 1000
    env = {**os.environ, **cluster.env()}
    log = open(cluster.layout.logs / f"bench-scheduler-{n}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sunk.cli",
            "scheduler",
            f"--scheduler-name={SCHEDULER}",
            f"--watch-namespace={namespace}",
            "--hooks-api-bind-address=127.0.0.1:29000",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            "--health-probe-bind-address=127.0.0.1:29081",
            "--log-level=warning",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get("http://127.0.0.1:29081/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        cpu0, _ = proc_usage(proc.pid)
        calls0 = slurm_calls(metrics_port)
        manifests = [pod(f"p{i}", SCHEDULER) for i in range(n)]
        t0 = time.monotonic()
        created = create_all(kube, namespace, manifests)
        with rest_client(cluster) as slurm:
            stages = watch_stages(kube, slurm, namespace, set(created), within=600)
        bound = {name: s["bound"] for name, s in stages.items() if "bound" in s}
        cpu1, peak = proc_usage(proc.pid)
        placed = Result(
            "ours",
            len(bound),
            max(bound.values()) - t0 if bound else float("nan"),
            [bound[k] - created[k] for k in bound],
            {
                **stage_medians(created, stages),
                "slurm_calls_per_pod": (slurm_calls(metrics_port) - calls0) / max(1, len(bound)),
                "cpu_s": cpu1 - cpu0,
                "peak_rss_mib": peak,
            },
        )
        # Job end → Pod deleted: cancel every placeholder at once.
        jobs = run_cli(cluster.layout, "squeue", "-h", "-o", "%i %j").splitlines()
        ids = [line.split()[0] for line in jobs if f":{namespace}/" in line]
        t1 = time.monotonic()
        for chunk in range(0, len(ids), 200):
            run_cli(cluster.layout, "scancel", *ids[chunk : chunk + 200], timeout=120)
        gone = watch_until(
            kube,
            namespace,
            lambda p: p["metadata"].get("deletionTimestamp"),
            set(bound),
            within=300,
            gone_counts=True,
        )
        ended = Result(
            "ours-end",
            len(gone),
            max(gone.values()) - t1 if gone else float("nan"),
            [t - t1 for t in gone.values()],
        )
        _, peak = proc_usage(proc.pid)
        placed.extra["peak_rss_mib"] = peak
        return placed, ended
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
        kube.delete(f"/api/v1/namespaces/{namespace}")


def stage_medians(created: dict[str, float], stages: dict[str, dict[str, float]]) -> dict[str, float]:
    """Median seconds spent in each stage, over the Pods that went through all of them."""
    spans: dict[str, list[float]] = {"to_submitted_s": [], "to_started_s": [], "to_bound_s": []}
    for name, s in stages.items():
        if {"submitted", "started", "bound"} <= set(s):
            spans["to_submitted_s"].append(s["submitted"] - created[name])
            spans["to_started_s"].append(s["started"] - s["submitted"])
            spans["to_bound_s"].append(s["bound"] - s["started"])
    return {k: sorted(v)[len(v) // 2] if v else float("nan") for k, v in spans.items()}


def rest_client(cluster: DevCluster) -> httpx.Client:
    layout = cluster.layout
    return httpx.Client(
        base_url=f"{layout.rest_url}/slurm/{REST_VERSION}",
        headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": layout.slurm_token.read_text().strip()},
        timeout=30,
    )


RAW_SCRIPT = """#!/bin/bash
scontrol update jobid="$SLURM_JOB_ID" comment=": started"
trap 'exit 0' TERM
sleep infinity & wait
"""


def bench_raw_slurm(cluster: DevCluster, n: int) -> Result:
    layout = cluster.layout
    http = rest_client(cluster)
    env = {"PATH": "/usr/sbin:/usr/bin:/bin", "SLURM_CONF": str(layout.slurm_conf)}
    body = {
        "script": RAW_SCRIPT,
        "job": {
            "name": "raw",
            "nodes": [1, 1],
            "tasks": 1,
            "cpus_per_task": int(POD_CPU),
            "memory_per_node": 64,
            "environment": env,
            "current_working_directory": "/tmp",
            "standard_output": "/dev/null",
            "standard_error": "/dev/null",
        },
    }
    submitted: dict[int, float] = {}
    t0 = time.monotonic()

    def one(_: int) -> None:
        job_id = http.post("/job/submit", json=body).json()["job_id"]
        submitted[job_id] = time.monotonic()

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, range(n)))
    started: dict[int, float] = {}
    deadline = time.monotonic() + 600
    while len(started) < n and time.monotonic() < deadline:
        for job in http.get("/jobs").json().get("jobs", []):
            fresh = job["job_id"] in submitted and job["job_id"] not in started
            if fresh and job["job_state"] == "RUNNING" and (job.get("comment") or "").endswith(": started"):
                started[job["job_id"]] = time.monotonic()
        time.sleep(0.05)
    ids = [str(i) for i in submitted]
    for chunk in range(0, len(ids), 200):
        run_cli(layout, "scancel", *ids[chunk : chunk + 200], timeout=120)
    wait_idle(cluster)
    http.close()
    return Result(
        "raw-slurm",
        len(started),
        max(started.values()) - t0 if started else float("nan"),
        [started[j] - submitted[j] for j in started],
    )


def wait_idle(cluster: DevCluster) -> None:
    deadline = time.monotonic() + 120
    while run_cli(cluster.layout, "squeue", "-h", "-o", "%i").strip() and time.monotonic() < deadline:
        time.sleep(0.5)


def bench_kube_scheduler(cluster: DevCluster, kube: AdminKube, n: int) -> Result:
    binary = ensure_go_tools(cache_dir() / "bench-build.log", ("kube-scheduler",))["kube-scheduler"]
    namespace = namespace_for(kube, f"bench-kube-{n}")
    log = open(cluster.layout.logs / f"bench-kube-scheduler-{n}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            str(binary),
            f"--kubeconfig={cluster.layout.kubeconfig}",
            f"--authentication-kubeconfig={cluster.layout.kubeconfig}",
            f"--authorization-kubeconfig={cluster.layout.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=29259",
            "--v=1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        time.sleep(3)  # its caches warm up; it has no readiness we can read without auth setup
        manifests = [pod(f"k{i}", None) for i in range(n)]
        t0 = time.monotonic()
        created = create_all(kube, namespace, manifests)
        bound = watch_until(kube, namespace, lambda p: p["spec"].get("nodeName"), set(created), within=600)
        return Result(
            "kube-scheduler",
            len(bound),
            max(bound.values()) - t0 if bound else float("nan"),
            [bound[k] - created[k] for k in bound],
        )
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
        kube.delete(f"/api/v1/namespaces/{namespace}")
        deadline = time.monotonic() + 60
        while kube.find(f"/api/v1/namespaces/{namespace}") is not None and time.monotonic() < deadline:
            time.sleep(0.5)


def row(n: int, nodes: int, label: str, r: Result, note: str = "") -> str:
    return (
        f"| {n} | {nodes} | {label} | {r.count}/{n} | {r.rate:.1f}/s | "
        f"{r.pct(50):.2f} | {r.pct(95):.2f} | {r.pct(99):.2f} | {note} |"
    )


def report(n: int, nodes: int, results: dict[str, Result]) -> list[str]:
    ours, raw, kube = results["ours"], results["raw-slurm"], results["kube-scheduler"]
    usage = (
        f"median stages: created→submitted {ours.extra['to_submitted_s']:.2f} s, "
        f"submitted→started {ours.extra['to_started_s']:.2f} s, "
        f"started→bound {ours.extra['to_bound_s']:.2f} s; "
        f"Slurm calls/Pod {ours.extra['slurm_calls_per_pod']:.1f}, "
        f"scheduler CPU {ours.extra['cpu_s']:.1f} s, peak RSS {ours.extra['peak_rss_mib']:.0f} MiB"
    )
    return [
        row(n, nodes, "sunk: create → bound", ours, usage),
        row(
            n,
            nodes,
            "raw slurmrestd: submit → started",
            raw,
            f"sunk/raw rate **{ours.rate / raw.rate:.2f}x**",
        ),
        row(
            n,
            nodes,
            "kube-scheduler: create → bound",
            kube,
            f"sunk/kube rate **{ours.rate / kube.rate:.2f}x**",
        ),
        row(n, nodes, "sunk: scancel → Pod deleted", results["ours-end"]),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--cpus-per-node", type=int, default=64)
    parser.add_argument("--pods", default="100,1000")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args()
    cluster = DevCluster()
    if cluster.is_running():
        print("a dev cluster is running: stop it with `sunk dev down` first", file=sys.stderr)
        return 1
    spec = ClusterSpec(nodes=args.nodes, cpus_per_node=args.cpus_per_node)
    print(f"bringing up {args.nodes} nodes x {args.cpus_per_node} CPUs …", flush=True)
    cluster.up(spec)
    kube = AdminKube(cluster.layout)
    rows: list[str] = []
    raw_figures: dict[str, Any] = {}
    try:
        for n in (int(x) for x in args.pods.split(",")):
            print(f"N={n}: raw slurmrestd …", flush=True)
            raw = bench_raw_slurm(cluster, n)
            print(f"N={n}: sunk …", flush=True)
            ours, end = bench_ours(cluster, kube, n)
            wait_idle(cluster)
            print(f"N={n}: kube-scheduler …", flush=True)
            kube_result = bench_kube_scheduler(cluster, kube, n)
            results = {"ours": ours, "ours-end": end, "raw-slurm": raw, "kube-scheduler": kube_result}
            rows += report(n, args.nodes, results)
            raw_figures[str(n)] = {
                k: {
                    "count": r.count,
                    "seconds": r.seconds,
                    "rate": r.rate,
                    "p50": r.pct(50),
                    "p95": r.pct(95),
                    "p99": r.pct(99),
                    **r.extra,
                }
                for k, r in results.items()
            }
            print("\n".join(rows[-4:]), flush=True)
    finally:
        kube.close()
        cluster.down()
    header = [
        "| N | nodes | path | done | rate | p50 s | p95 s | p99 s | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(header + rows))
    if args.json:
        args.json.write_text(json.dumps(raw_figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
