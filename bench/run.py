"""Placement throughput and latency of sunk against its two limits, in one run.

    python -m bench.run --nodes 64 --pods 100,1000 [--rate 50]

For each N it measures, on one fresh dev cluster, with Pods/jobs arriving all at once or
at a fixed rate:
  raw-slurm   N jobs submitted straight to slurmrestd → each running, its script started
              and the same durable started mark set as a placeholder's (the Slurm limit)
  ours        N Pods created → bound by `sunk scheduler` through Slurm
  ours-end    scancel of all their placeholder jobs → Pods being deleted / gone
  kube        N equivalent Pods bound by the default kube-scheduler (same Kubernetes
              module, default client limits) to the same Nodes (the Kubernetes limit)
and prints rates, latency percentiles, the ratios ours/raw-slurm and ours/kube, and CPU
seconds per component for each phase. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.arrivals import END_WITHIN_S, create_pods, delete_namespace, within
from bench.baselines import bench_kube_scheduler, bench_raw_slurm, cancel_jobs, wait_idle, warm_up
from bench.machine import pid_shortage, split_cores
from bench.observe import (
    ApiRequests,
    CpuMeter,
    PodWatch,
    Result,
    peak_rss_mib,
    percentile,
    read_slurm_logs,
    timeline_gaps,
)
from bench.run_report import (
    POD_CHAIN,
    POD_SIDE,
    TIMELINE_HEADER,
    cpu_rows,
    pod_marks,
    report,
    say,
    stage_medians,
    timeline_rows,
)
from bench.scheduler_metrics import (
    PASS_SECONDS,
    SLURM_SECONDS,
    calls_per_pod,
    histogram_totals,
    hook_calls,
    mean_ms,
    slurm_calls,
)
from sunk_dev import ClusterSpec, DevCluster
from sunk_dev.cluster import PROCTRACK_PLUGINS
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import run_cli
from sunk_dev.trust import permissive_policy

SCHEDULER = "sunk-bench"


def start_scheduler(
    cluster: DevCluster,
    namespace: str,
    metrics_port: int,
    n: int | str,
    *extra: str,
    trace: Path | None = None,
) -> subprocess.Popen[bytes]:
    env = {**os.environ, **cluster.env()}
    log = open(cluster.layout.logs / f"bench-scheduler-{n}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            *(["bench.trace_scheduler", str(trace)] if trace else ["sunk.cli"]),
            "scheduler",
            f"--scheduler-name={SCHEDULER}",
            f"--watch-namespace={namespace}",
            "--hooks-api-bind-address=127.0.0.1:29000",
            "--hooks-insecure-http=true",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            "--health-probe-bind-address=127.0.0.1:29081",
            "--log-level=warning",
            f"--policy={permissive_policy(cluster.layout)}",  # the benchmark's Pods name no identity
            *extra,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get("http://127.0.0.1:29081/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("the scheduler did not become ready within 60 s; see its log")


def profiler(pid: int, out: Path | None) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the scheduler (collapsed stacks, for flame graphs) while Pods are placed."""
    if out is None:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    argv = [str(spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "200", "-o", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def bench_ours(
    cluster: DevCluster,
    kube: AdminKube,
    n: int,
    rate: float,
    profile: Path | None = None,
    trace: Path | None = None,
) -> tuple[Result, Result]:
    namespace = kube.create_namespace(f"bench-ours-{n}")
    metrics_port = 29082
    proc = start_scheduler(cluster, namespace, metrics_port, n, trace=trace)
    named = {proc.pid: "sunk scheduler", os.getpid(): "bench client"}
    watch = PodWatch(kube, namespace)
    spy = profiler(proc.pid, profile)
    try:
        calls0 = slurm_calls(metrics_port)
        slurm_s0 = histogram_totals(metrics_port, SLURM_SECONDS, "endpoint")
        passes0 = histogram_totals(metrics_port, PASS_SECONDS, "controller")
        cpu, api = CpuMeter(named), ApiRequests(kube)
        t0 = time.monotonic()
        created = create_pods(kube, namespace, "p", n, rate, SCHEDULER)
        bound = watch.wait_for("bound", set(created), within(n, rate))
        writes = api.writes()
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        calls = calls_per_pod(calls0, slurm_calls(metrics_port), len(bound))
        # What the scheduler's own histograms say of the phase: slurmrestd's answer time by
        # endpoint and a controller pass's time, on average (read after it, like the calls).
        waits = {
            **{f"ms {k}": v for k, v in mean_ms(metrics_port, SLURM_SECONDS, "endpoint", slurm_s0).items()},
            **{
                f"ms pass {k}": v
                for k, v in mean_ms(metrics_port, PASS_SECONDS, "controller", passes0).items()
            },
        }
        placed = Result(
            "ours",
            len(bound),
            max(bound.values()) - t0 if bound else float("nan"),
            [bound[k] - created[k] for k in bound],
            {**stage_medians(created, watch.seen), "slurm_calls_per_pod": sum(calls.values()), **waits},
            cpu.used(),
        )
        placed.writes = {k: v / max(1, len(bound)) for k, v in writes.items()}
        placed.calls = calls
        say(placed, n)
        # Job end → Pod deleted: every placeholder cancelled at once with one scancel, as an
        # operator would, or one by one at the arrival rate through slurmrestd.
        jobs = run_cli(cluster.layout, "squeue", "-h", "-o", "%i %j").splitlines()
        pod_of = {
            line.split()[0]: line.split()[1].split("/")[1].split(":")[0]
            for line in jobs
            if f":{namespace}/" in line
        }
        cpu = CpuMeter(named)
        hooks0 = hook_calls(metrics_port)
        t1 = time.monotonic()
        cancelled = cancel_jobs(cluster, list(pod_of), rate)
        scancel_s = time.monotonic() - t1
        deleting = watch.wait_for("deleting", set(bound), END_WITHIN_S + n / (rate or n))
        gone = watch.wait_for("gone", set(bound), END_WITHIN_S)
        since = {pod_of[j]: t for j, t in cancelled.items()}
        ended = Result(
            "ours-end",
            len(deleting),
            max(deleting.values()) - t1 if deleting else float("nan"),
            [t - since[name] for name, t in deleting.items() if name in since],
            {
                "scancel_s": scancel_s,
                "gone_p50": percentile([t - since[k] for k, t in gone.items() if k in since], 50),
                "gone_p99": percentile([t - since[k] for k, t in gone.items() if k in since], 99),
            },
            cpu.used(),
        )
        ended.calls = {
            f"hook {k}": v for k, v in calls_per_pod(hooks0, hook_calls(metrics_port), len(deleting)).items()
        }
        placed.extra["peak_rss_mib"] = peak_rss_mib(proc.pid)
        say(ended, n)
        # Read after both phases, from what was already watched or logged: nothing asked
        # while they ran.
        marks = pod_timeline(cluster, created, watch, set(bound))
        placed.timeline = timeline_gaps(marks, POD_CHAIN, POD_SIDE)
        placed.marks = {p: {k: round(t - t0, 3) for k, t in m.items()} for p, m in marks.items()}
        return placed, ended
    finally:
        watch.close()
        proc.terminate()
        try:
            proc.wait(timeout=120)  # a loaded machine delays even a clean exit
        except subprocess.TimeoutExpired:
            # Seen after ending 1000 placeholders at once on two cores: the figures are
            # taken by now, so the run goes on (in a cluster the kubelet kills it at its
            # grace period).
            print("  the scheduler did not stop within 120 s of SIGTERM; killed", flush=True)
            proc.kill()
            proc.wait()
        delete_namespace(kube, namespace)


def pod_timeline(
    cluster: DevCluster, created: dict[str, float], watch: PodWatch, pods: set[str]
) -> dict[str, dict[str, float]]:
    """When each of `pods` reached each stage, from creation to Running (`pod_marks`)."""
    wall = time.time() - time.monotonic()
    ids = {name: watch.job_ids[name] for name in pods if name in watch.job_ids}
    slurm = read_slurm_logs(cluster.layout.logs, set(ids.values()))
    return pod_marks({k: v for k, v in created.items() if k in pods}, watch.seen, ids, slurm, wall)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--cpus-per-node", type=int, default=64)
    parser.add_argument("--pods", default="100,1000", help="comma-separated N")
    parser.add_argument("--slurm", default="24.11", help="Slurm of the dev cluster: 24.11, 26.05 or 22.05")
    parser.add_argument("--rate", type=float, default=0, help="arrivals per second (default: all at once)")
    parser.add_argument(
        "--split-cores",
        action="store_true",
        help="run Slurm and Kubernetes on separate halves of the CPUs, as on separate machines",
    )
    parser.add_argument(
        "--proctrack",
        default="linuxproc",
        choices=PROCTRACK_PLUGINS,
        help="how slurmstepd finds a job's processes (pgid: without walking all of /proc, "
        "which here holds every node's jobs)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument(
        "--profile", type=Path, help="py-spy the scheduler while it places Pods (collapsed stacks)"
    )
    parser.add_argument(
        "--trace",
        type=Path,
        help="write the scheduler's steps for each Pod here (bench.trace_scheduler): a diagnostic "
        "that costs the scheduler some CPU, so its rates are not comparable with untraced runs",
    )
    args = parser.parse_args()
    sizes = [int(x) for x in args.pods.split(",")]
    if problem := pid_shortage(max(sizes)):
        print(problem, file=sys.stderr)
        return 1
    cores = len(os.sched_getaffinity(0))
    cluster = DevCluster()
    if cluster.is_running():
        print("a dev cluster is running: stop it with `sunk dev down` first", file=sys.stderr)
        return 1
    print(f"bringing up {args.nodes} nodes x {args.cpus_per_node} CPUs, Slurm {args.slurm} …", flush=True)
    cluster.up(
        ClusterSpec(
            nodes=args.nodes, cpus_per_node=args.cpus_per_node, slurm=args.slurm, proctrack=args.proctrack
        )
    )
    kube = AdminKube(cluster.layout)
    if args.split_cores:
        print(split_cores(), flush=True)
    arrival = f"at {args.rate:g}/s" if args.rate else "at once"
    rows: list[str] = []
    cpu_table: list[str] = []
    timeline_table: list[str] = []
    figures: dict[str, Any] = {}
    try:
        warm_up(cluster)
        for n in sizes:
            print(f"N={n} {arrival}: raw slurmrestd …", flush=True)
            raw = bench_raw_slurm(cluster, n, args.rate)
            print(f"N={n} {arrival}: sunk …", flush=True)
            ours, end = bench_ours(
                cluster,
                kube,
                n,
                args.rate,
                args.profile,
                args.trace.with_suffix(f".{n}") if args.trace else None,
            )
            wait_idle(cluster)
            print(f"N={n} {arrival}: kube-scheduler …", flush=True)
            kube_result = bench_kube_scheduler(cluster, kube, n, args.rate)
            results = {"ours": ours, "ours-end": end, "raw-slurm": raw, "kube-scheduler": kube_result}
            rows += report(n, args.nodes, arrival, results, cores, args.split_cores)
            cpu_table += cpu_rows(f"{n} {arrival}", results)
            timeline = timeline_rows(f"{n} {arrival}", results)
            timeline_table += timeline
            figures[f"{n} {arrival}"] = {k: r.figures() for k, r in results.items()}
            print("\n".join(rows[-4:] + cpu_table[-4:] + timeline), flush=True)
    finally:
        kube.close()
        cluster.down()
    print("| N | nodes | path | done | rate | p50 s | p95 s | p99 s | notes |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(
        "\n| N | phase | CPU seconds by component | API writes per Pod | Slurm calls per Pod |"
        "\n|---|---|---|---|---|"
    )
    print("\n".join(cpu_table))
    print("\nWhere each Pod's time went (medians and p99 of each gap; Slurm's stages from its logs):\n")
    print("\n".join([*TIMELINE_HEADER, *timeline_table]))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
