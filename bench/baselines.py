"""The two limits `bench.run` measures sunk against, on the same cluster in the same run:
raw Slurm (jobs submitted straight to slurmrestd, each marking itself started as a
placeholder does) and the default kube-scheduler binding equivalent Pods."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

import httpx

from bench.arrivals import END_WITHIN_S, POD_CPU, arrive, create_pods, delete_namespace, within
from bench.observe import (
    ApiRequests,
    CpuMeter,
    PodWatch,
    Result,
    percentile,
    read_marks,
    read_slurm_logs,
    timeline_gaps,
)
from bench.run_report import RAW_CHAIN, say
from sunk_dev import DevCluster
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import cache_dir
from sunk_dev.prereqs import ensure_go_tools
from sunk_dev.slurmcluster import rest_version
from sunk_dev.slurmrun import cli_env, run_cli, runtime


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


def warm_up(cluster: DevCluster) -> None:
    """Slurm's first scheduling pass after start is slow; let it happen outside the figures."""
    result = bench_raw_slurm(cluster, 4, 0)
    if result.count < 4:
        raise RuntimeError("Slurm did not start 4 warm-up jobs; see the dev cluster's logs")
