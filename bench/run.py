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
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.observe import (
    ApiRequests,
    CpuMeter,
    PodWatch,
    Result,
    gap_rows,
    peak_rss_mib,
    percentile,
    read_marks,
    read_slurm_logs,
    timeline_gaps,
)
from sunk_dev import ClusterSpec, DevCluster
from sunk_dev.cluster import PROCTRACK_PLUGINS
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import cache_dir
from sunk_dev.prereqs import ensure_go_tools
from sunk_dev.slurmcluster import rest_version
from sunk_dev.slurmrun import cli_env, run_cli, runtime
from sunk_dev.trust import permissive_policy

SCHEDULER = "sunk-bench"
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


def counted(metrics_port: int, series: str, label: str) -> dict[str, float] | None:
    """One counter of the scheduler's own metrics so far, by the value of one label. On a
    machine a thousand ending jobs keep busy the answer can take a while: wait for it, and
    when it does not come, say so and count nothing rather than lose the run's figures."""
    try:
        text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=120).text
    except httpx.HTTPError as err:
        print(f"  (the scheduler's metrics did not answer: {err!r}; {series} not counted)", flush=True)
        return None
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(series + "{"):
            value = line[line.index(f'{label}="') + len(label) + 2 :].split('"', 1)[0]
            counts[value] = float(line.split()[-1])
    return counts


def slurm_calls(metrics_port: int) -> dict[str, float] | None:
    """The scheduler's slurmrestd requests so far, by endpoint."""
    return counted(metrics_port, "sunk_slurm_api_request_seconds_count", "endpoint")


def hook_calls(metrics_port: int) -> dict[str, float] | None:
    """The placeholders' hook calls so far, by outcome (a `terminating_wait` is a long poll
    that ended before the Pod was gone: the placeholder signs and calls again)."""
    return counted(metrics_port, "sunk_hook_calls_total", "outcome")


def mean_ms(
    metrics_port: int, histogram: str, label: str, before: dict[str, dict[str, float]] | None
) -> dict[str, float]:
    """Mean milliseconds per observation of one of the scheduler's histograms since
    `before` (a `histogram_totals` reading), by the value of one label; none when either
    reading could not be taken."""
    now = histogram_totals(metrics_port, histogram, label)
    if before is None or now is None:
        return {}
    means = {}
    for key, count in now["count"].items():
        spent = count - before["count"].get(key, 0.0)
        if spent > 0:
            means[key] = round(1000 * (now["sum"].get(key, 0.0) - before["sum"].get(key, 0.0)) / spent, 1)
    return means


def histogram_totals(metrics_port: int, histogram: str, label: str) -> dict[str, dict[str, float]] | None:
    """A histogram's sums and counts so far, or None when the metrics did not answer."""
    sums = counted(metrics_port, f"{histogram}_sum", label)
    counts = counted(metrics_port, f"{histogram}_count", label)
    return None if sums is None or counts is None else {"sum": sums, "count": counts}


def calls_per_pod(
    before: dict[str, float] | None, after: dict[str, float] | None, pods: int
) -> dict[str, float]:
    """Calls per Pod between two counts; none when either count could not be read."""
    if before is None or after is None:
        return {}
    spent = {k: (v - before.get(k, 0.0)) / max(1, pods) for k, v in after.items()}
    return {k: round(v, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v > 0}


def say(r: Result, n: int) -> None:
    print(
        f"  {r.name}: {r.count}/{n} in {r.seconds:.1f} s ({r.rate:.1f}/s), "
        f"p50 {r.pct(50):.2f} s, p99 {r.pct(99):.2f} s",
        flush=True,
    )


SLURM_SECONDS = "sunk_slurm_api_request_seconds"
PASS_SECONDS = "sunk_reconcile_duration_seconds"

# Beyond KillWait (30 s on the dev cluster) the placeholder drains the node anyway.
END_WITHIN_S = 90


def within(n: int, rate: float) -> float:
    """How long a phase may take before the benchmark gives up on the stragglers."""
    arrival = n / rate if rate else 0.0
    return 120 + arrival + n * 0.5


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


def stage_medians(created: dict[str, float], seen: dict[str, dict[str, float]]) -> dict[str, float]:
    """Median seconds from creation to the job ID on the Pod, and from there to bound."""
    to_submitted, to_bound = [], []
    for name, marks in seen.items():
        if name in created and {"submitted", "bound"} <= set(marks):
            to_submitted.append(marks["submitted"] - created[name])
            to_bound.append(marks["bound"] - marks["submitted"])
    return {"to_submitted_s": percentile(to_submitted, 50), "to_bound_s": percentile(to_bound, 50)}


# A Pod's way through sunk, stage by stage: the Pod watch's marks (monotonic, here) and
# the Slurm daemons' log lines (wall clock, moved onto the same clock).
POD_CHAIN = ("created", "submitted", "started", "launched", "marked", "bound", "running")
POD_SIDE = (("created", "job ID on Pod"), ("submitted", "job ID on Pod"), ("job ID on Pod", "bound"))
# A raw job's: sent to slurmrestd, the same Slurm stages, then its own file mark.
RAW_CHAIN = ("sent", "submitted", "started", "launched", "marked", "script mark")
TIMELINE_HEADER = (
    "| N / path | from → to | seen | p50 s | p99 s | reversed |",
    "|---|---|---|---|---|---|",
)


def pod_marks(
    created: dict[str, float],
    seen: dict[str, dict[str, float]],
    job_ids: dict[str, int],
    slurm: dict[int, dict[str, float]],
    wall_minus_monotonic: float,
) -> dict[str, dict[str, float]]:
    """Pod name → stage → monotonic time, for each Pod created: `created` (its creation
    sent), `job ID on Pod` (the scheduler's annotation seen), `bound`, `running` (the
    watch), and the Slurm stages of the job it was given (`slurm`, wall clock)."""
    marks: dict[str, dict[str, float]] = {}
    for name, sent in created.items():
        watched = seen.get(name, {})
        own = {"created": sent}
        if "submitted" in watched:
            own["job ID on Pod"] = watched["submitted"]
        own |= {k: watched[k] for k in ("bound", "running") if k in watched}
        if name in job_ids:
            own |= {k: t - wall_minus_monotonic for k, t in slurm.get(job_ids[name], {}).items()}
        marks[name] = own
    return marks


def pod_timeline(
    cluster: DevCluster, created: dict[str, float], watch: PodWatch, pods: set[str]
) -> dict[str, dict[str, float]]:
    """When each of `pods` reached each stage, from creation to Running (`pod_marks`)."""
    wall = time.time() - time.monotonic()
    ids = {name: watch.job_ids[name] for name in pods if name in watch.job_ids}
    slurm = read_slurm_logs(cluster.layout.logs, set(ids.values()))
    return pod_marks({k: v for k, v in created.items() if k in pods}, watch.seen, ids, slurm, wall)


def rest_client(cluster: DevCluster) -> httpx.Client:
    layout = cluster.layout
    return httpx.Client(
        base_url=f"{layout.rest_url}/slurm/{rest_version(layout)}",
        headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": layout.slurm_token.read_text().strip()},
        timeout=60,
        trust_env=False,
    )


# The same Slurm-side work as a placeholder's start (a durable mark set with scontrol),
# then the start time written where the benchmark reads it without asking Slurm.
RAW_SCRIPT = """#!/bin/bash
export LC_ALL=C
scontrol update jobid="$SLURM_JOB_ID" "$MARK_FIELD=: started"
echo "$EPOCHREALTIME" > "$BENCH_MARKS/$SLURM_JOB_ID"
trap 'echo "$EPOCHREALTIME" > "$BENCH_ENDS/$SLURM_JOB_ID"; exit 0' TERM
sleep infinity & wait
"""


def bench_raw_slurm(cluster: DevCluster, n: int, rate: float) -> Result:
    layout = cluster.layout
    marks, ends = layout.root / f"bench-marks-{n}", layout.root / f"bench-ends-{n}"
    for directory in (marks, ends):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir()
    env = {
        "PATH": "/usr/sbin:/usr/bin:/bin",
        "SLURM_CONF": str(layout.slurm_conf),
        "BENCH_MARKS": str(marks),
        "BENCH_ENDS": str(ends),
    }
    job: dict[str, Any] = {
        "name": "raw",
        "tasks": 1,
        "cpus_per_task": int(POD_CPU),
        "current_working_directory": "/tmp",
        "standard_output": "/dev/null",
        "standard_error": "/dev/null",
    }
    if rest_version(layout) == "v0.0.38":  # Slurm 22.05: no `extra`, older field shapes
        env["MARK_FIELD"] = "comment"
        job |= {"nodes": [1, 1], "memory_per_node": 64, "environment": env}
        body: dict[str, Any] = {"script": RAW_SCRIPT, "job": job}
    else:
        env["MARK_FIELD"] = "extra"
        job |= {"nodes": "1", "memory_per_node": {"set": True, "number": 64}}
        job["environment"] = [f"{k}={v}" for k, v in env.items()]
        body = {"job": {**job, "script": RAW_SCRIPT}}
    submitted: dict[int, float] = {}  # job ID → wall-clock time its submission was sent
    cpu = CpuMeter({os.getpid(): "bench client"})
    with rest_client(cluster) as http:

        def one(_: int) -> None:
            # slurmctld under a burst of thousands may answer "try again": as sbatch, do.
            for attempt in range(20):
                sent = time.time()
                answer = http.post("/job/submit", json=body).json()
                if answer.get("job_id"):
                    submitted[answer["job_id"]] = sent
                    return
                time.sleep(0.1 * (attempt + 1))
            raise RuntimeError(f"slurmrestd refused a raw job 20 times: {answer.get('errors')}")

        t0 = time.time()
        arrive(n, rate, one)
        started = {j: t for j, t in read_marks(marks, n, within(n, rate)).items() if j in submitted}
    used = cpu.used()
    # Ended as sunk's placeholders will be (one scancel, or one DELETE each at the rate):
    # when each job's script gets its SIGTERM is Slurm's own part of sunk's job-end path.
    ending = CpuMeter({os.getpid(): "bench client"})
    wall = time.time() - time.monotonic()
    cancelled = cancel_jobs(cluster, [str(j) for j in started], rate)
    signalled = read_marks(ends, len(started), END_WITHIN_S)
    if never_started := [str(j) for j in submitted if j not in started]:
        scancel(cluster, never_started)
    wait_idle(cluster)
    slurm = read_slurm_logs(layout.logs, set(started))
    raw_marks = {j: {"sent": submitted[j], "script mark": started[j], **slurm.get(j, {})} for j in started}
    to_signal = [t - (cancelled[str(j)] + wall) for j, t in signalled.items() if str(j) in cancelled]
    result = Result(
        "raw-slurm",
        len(started),
        max(started.values()) - t0 if started else float("nan"),
        [started[j] - submitted[j] for j in started],
        {
            # What ending a raw job costs the machine, to set sunk's job-end phase against.
            "end_machine_cpu_s": ending.used().get("machine (busy)", 0.0),
            "end_signal_p50": percentile(to_signal, 50),
            "end_signal_p99": percentile(to_signal, 99),
        },
        cpu=used,
    )
    result.timeline = timeline_gaps({str(j): m for j, m in raw_marks.items()}, RAW_CHAIN)
    say(result, n)
    return result


def scancel(cluster: DevCluster, ids: list[str]) -> None:
    """scancel as an operator would; a busy slurmctld makes it back off and complain, and
    jobs ending on their own make it fail for those: neither stops the benchmark."""
    for chunk in range(0, len(ids), 500):
        argv = runtime(cluster.layout).argv(["scancel", *ids[chunk : chunk + 500]])
        result = subprocess.run(
            argv, env=cli_env(cluster.layout), capture_output=True, text=True, timeout=600
        )
        if result.returncode != 0:
            print(f"scancel: {result.stderr.strip().splitlines()[-1:]}", flush=True)


def cancel_jobs(cluster: DevCluster, ids: list[str], rate: float) -> dict[str, float]:
    """Cancel jobs (all with scancel, or `rate` per second through slurmrestd); returns
    when each cancellation was sent."""
    if not rate:
        sent = time.monotonic()
        scancel(cluster, ids)
        return dict.fromkeys(ids, sent)
    cancelled: dict[str, float] = {}
    with rest_client(cluster) as http:

        def one(i: int) -> None:
            cancelled[ids[i]] = time.monotonic()
            http.delete(f"/job/{ids[i]}")

        arrive(len(ids), rate, one)
    return cancelled


def wait_idle(cluster: DevCluster) -> None:
    """Until Slurm has no job left (or 5 minutes). A slurmctld swamped by a thousand jobs
    ending may not answer squeue for a while: that is not idle, and not a reason to stop."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if not run_cli(cluster.layout, "squeue", "-h", "-o", "%i").strip():
                return
        except DevClusterError:
            pass
        time.sleep(0.5)


def bench_kube_scheduler(cluster: DevCluster, kube: AdminKube, n: int, rate: float) -> Result:
    binary = ensure_go_tools(cache_dir() / "bench-build.log", ("kube-scheduler",))["kube-scheduler"]
    namespace = kube.create_namespace(f"bench-kube-{n}")
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
    log.close()
    watch = PodWatch(kube, namespace)
    try:
        wait_kube_scheduler_ready(kube)
        cpu, api = CpuMeter({proc.pid: "kube-scheduler", os.getpid(): "bench client"}), ApiRequests(kube)
        t0 = time.monotonic()
        created = create_pods(kube, namespace, "k", n, rate, None)
        bound = watch.wait_for("bound", set(created), within(n, rate))
        result = Result(
            "kube-scheduler",
            len(bound),
            max(bound.values()) - t0 if bound else float("nan"),
            [bound[k] - created[k] for k in bound],
            cpu=cpu.used(),
        )
        result.writes = {k: v / max(1, len(bound)) for k, v in api.writes().items()}
        say(result, n)
        return result
    finally:
        watch.close()
        proc.terminate()
        proc.wait(timeout=30)
        delete_namespace(kube, namespace)


def wait_kube_scheduler_ready(kube: AdminKube) -> None:
    """Ready once it binds a probe Pod: its caches are warm, as ours are at /readyz."""
    namespace = kube.create_namespace("bench-kube-probe")
    watch = PodWatch(kube, namespace)
    try:
        create_pods(kube, namespace, "probe", 1, 0, None)
        watch.wait_for("bound", {"probe0"}, 60)
    finally:
        watch.close()
        delete_namespace(kube, namespace)


SLURM_SIDE = {"slurmctld", "slurmrestd", "slurmd", "slurmscriptd", "munged"}
KUBE_SIDE = {"kube-apiserver", "etcd", "kwok"}


def split_cores() -> str:
    """Slurm (its daemons, and through slurmd every job) on one half of the CPUs; the API
    server, etcd, kwok, the schedulers and this client on the other: as in a real cluster,
    where they run on different machines, neither side's work slows the other down."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise RuntimeError("--split-cores needs at least 2 CPUs")
    slurm, kube = set(cpus[: len(cpus) // 2]), set(cpus[len(cpus) // 2 :])
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            comm = Path(entry.path, "comm").read_text().strip()
            side = slurm if comm in SLURM_SIDE else kube if comm in KUBE_SIDE else None
            if side is not None:
                for task in os.scandir(Path(entry.path, "task")):  # every thread, not just the first
                    os.sched_setaffinity(int(task.name), side)
        except OSError:
            continue
    os.sched_setaffinity(0, kube)  # the schedulers we start inherit it
    return (
        f"Slurm on CPU {','.join(map(str, sorted(slurm)))}, Kubernetes on {','.join(map(str, sorted(kube)))}"
    )


# What one running job holds on the dev cluster, measured on Slurm 24.11: its slurmstepd
# with its connection threads (14), the script and its sleep.
PIDS_PER_JOB = 16


def pid_shortage(n: int) -> str | None:
    """Why N jobs at once cannot run here, or None. Every node's jobs share this machine's
    PIDs (each thread takes one): past kernel.pid_max, fork and pthread_create fail and
    slurmctld stops with a fatal error, which would look like a Slurm failure."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    in_use = sum(1 for _ in Path("/proc").glob("[0-9]*/task/*"))
    needed = in_use + n * PIDS_PER_JOB + 2000  # the dev cluster's own daemons
    if needed <= pid_max:
        return None
    return (
        f"{n} jobs at once need about {needed} PIDs on this machine and kernel.pid_max is "
        f"{pid_max}: raise it for the run (`sysctl -w kernel.pid_max={2 ** (needed - 1).bit_length()}`) "
        f"and set it back to {pid_max} after, or run fewer Pods"
    )


def warm_up(cluster: DevCluster) -> None:
    """Slurm's first scheduling pass after start is slow; let it happen outside the figures."""
    result = bench_raw_slurm(cluster, 4, 0)
    if result.count < 4:
        raise RuntimeError("Slurm did not start 4 warm-up jobs; see the dev cluster's logs")


def floor_rate(raw: Result, kube: Result, cores: int, split: bool) -> float:
    """The fastest sunk could place Pods on this machine in this run: each Pod costs at
    least a raw job's CPU plus the kube path's (create, bind, its Event and status) plus one
    more write, the job ID, priced as an average write of the kube path. CPU seconds are the
    whole machine's busy time per Pod in each phase. Split cores: the Kubernetes half alone
    must carry the Kubernetes side, and Slurm's half gives raw Slurm's rate. Never above
    raw Slurm's own rate: sunk runs every Pod through it."""
    raw_cpu = raw.cpu.get("machine (busy)", 0.0) / max(1, raw.count)
    kube_cpu = kube.cpu.get("machine (busy)", 0.0) / max(1, kube.count)
    writes = sum(kube.writes.values()) or 1.0
    kube_side = kube_cpu * (writes + 1) / writes
    if split:
        cap = (cores / 2) / kube_side if kube_side else float("inf")
    else:
        cap = cores / (raw_cpu + kube_side) if raw_cpu + kube_side else float("inf")
    return min(raw.rate, cap)


def report(
    n: int, nodes: int, arrival: str, results: dict[str, Result], cores: int, split: bool
) -> list[str]:
    ours, raw, kube, end = (
        results["ours"],
        results["raw-slurm"],
        results["kube-scheduler"],
        results["ours-end"],
    )
    floor = floor_rate(raw, kube, cores, split)
    ours.extra["floor_rate"] = floor

    def row(label: str, r: Result, note: str) -> str:
        return (
            f"| {n} {arrival} | {nodes} | {label} | {r.count}/{n} | {r.rate:.1f}/s | "
            f"{r.pct(50):.2f} | {r.pct(95):.2f} | {r.pct(99):.2f} | {note} |"
        )

    usage = (
        f"median created→job ID {ours.extra['to_submitted_s']:.2f} s, job ID→bound "
        f"{ours.extra['to_bound_s']:.2f} s; Slurm calls/Pod {ours.extra['slurm_calls_per_pod']:.1f}; "
        f"scheduler CPU {ours.cpu.get('sunk scheduler', 0):.1f} s, "
        f"peak RSS {ours.extra['peak_rss_mib']:.0f} MiB"
    )
    ended = (
        f"cancelling took {end.extra['scancel_s']:.2f} s; "
        f"→ Pod gone p50 {end.extra['gone_p50']:.2f} s, p99 {end.extra['gone_p99']:.2f} s; machine CPU "
        f"{end.cpu.get('machine (busy)', 0.0):.1f} s (ending as many raw jobs: "
        f"{raw.extra.get('end_machine_cpu_s', 0.0):.1f} s; their scripts got SIGTERM p50 "
        f"{raw.extra.get('end_signal_p50', float('nan')):.2f} s, p99 "
        f"{raw.extra.get('end_signal_p99', float('nan')):.2f} s after it was sent)"
    )
    return [
        row("sunk: create → bound", ours, usage),
        row(
            "raw slurmrestd: submit → started",
            raw,
            f"sunk/raw rate **{ours.rate / raw.rate:.2f}x**; floor {floor:.1f}/s = "
            f"{floor / raw.rate:.2f}x raw, sunk at **{ours.rate / floor:.2f}x** of it",
        ),
        row("kube-scheduler: create → bound", kube, f"sunk/kube rate **{ours.rate / kube.rate:.2f}x**"),
        row("sunk: job cancelled → Pod deleting", end, ended),
    ]


def timeline_rows(at: str, results: dict[str, Result]) -> list[str]:
    """Where each Pod's (or raw job's) time went, stage by stage: medians and p99 of each
    gap; `reversed` counts those that reached the later stage first."""
    rows = []
    for name in ("ours", "raw-slurm"):
        if name in results and results[name].timeline:
            rows += gap_rows(f"{at} {name}", results[name].timeline, results[name].count)
    if "ours" in results:
        waits = {k.removeprefix("ms "): v for k, v in results["ours"].extra.items() if k.startswith("ms ")}
        rows.append(f"| {at} ours | mean ms per slurmrestd call / pass | {waits} | | | |")
    return rows


def cpu_rows(at: str, results: dict[str, Result]) -> list[str]:
    rows = []
    for name, r in results.items():
        writes = ", ".join(f"{k} {v:.2f}" for k, v in r.writes.items())
        calls = ", ".join(f"{k} {v:.2f}" for k, v in r.calls.items())
        cpu = ", ".join(f"{k} {v:.1f}" for k, v in r.cpu.items())
        rows.append(f"| {at} | {name} | {cpu} | {writes} | {calls} |")
    return rows


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
