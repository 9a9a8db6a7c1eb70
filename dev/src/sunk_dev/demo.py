"""`sunk demo`: the README's first command.

Brings the dev cluster up if needed, starts `sunk scheduler` next to it (stopped by
`sunk dev down`), places sample Pods through Slurm and prints each Pod next to the Slurm
job that holds its resources.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import textwrap
import time
from typing import Any

from sunk_dev import ClusterSpec, DevCluster, procs, report
from sunk_dev import topology as topo
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import run_cli
from sunk_dev.trust import permissive_policy

SCHEDULER = "sunk"
DEMO_LABEL = "sunk.dev/demo"
P = "sunk.coreweave.com/"
Json = dict[str, Any]


def _pod(
    name: str, *, cpu: str, memory: str, gpus: int = 0, annotations: dict[str, str], **spec: Any
) -> Json:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": spec.pop("grace", 10),
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": limits}}
            ],
            **spec,
        },
    }


def _gpu_class(value: str) -> Json:
    term = {"matchExpressions": [{"key": "gpu.nvidia.com/class", "operator": "In", "values": [value]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def sample_pods() -> list[Json]:
    return [
        _pod("cpu-shared-a", cpu="2", memory="2Gi", annotations={P + "exclusive": "ok"}),
        _pod("cpu-shared-b", cpu="2", memory="2Gi", annotations={P + "exclusive": "ok"}),
        _pod(
            "gpu-h100-user",
            cpu="4",
            memory="8Gi",
            gpus=1,
            affinity=_gpu_class("H100_NVLINK_80GB"),
            annotations={P + "exclusive": "user", P + "user-id": str(topo.JOB_UID), P + "comment": "one GPU"},
        ),
        _pod(
            "gpu-a100-whole-node",
            cpu="8",
            memory="12Gi",
            gpus=4,
            affinity=_gpu_class("A100_PCIE_80GB"),
            annotations={P + "exclusive": "none", P + "timeout": "60"},
        ),
        _pod("invalid-grace", cpu="1", memory="1Gi", annotations={}, grace=30),
    ]


def _start_scheduler(cluster: DevCluster) -> None:
    layout = cluster.layout
    running = procs.load(layout.pids, "sunk-scheduler")
    if running and running.alive():
        return
    proc = procs.spawn(
        "sunk-scheduler",
        [
            sys.executable,
            "-m",
            "sunk.cli",
            "scheduler",
            f"--scheduler-name={SCHEDULER}",
            "--hooks-api-bind-address=127.0.0.1:28000",
            "--hooks-insecure-http=true",  # a local dev cluster: no certificate to manage
            "--metrics-bind-address=127.0.0.1:28080",
            "--health-probe-bind-address=127.0.0.1:28081",
            # The demo's Pods run as root and name any account, as the reference system's do.
            f"--policy={permissive_policy(layout)}",
        ],
        layout.pids,
        layout.logs,
        env={**os.environ, **cluster.env()},
    )
    log = layout.logs / "sunk-scheduler.log"
    procs.wait_until(
        lambda: "caches synced" in log.read_text(errors="replace"),
        timeout=30,
        what="the scheduler to sync",
        watch=[proc],
        log_dir=layout.logs,
    )


def _fresh_namespace(admin: AdminKube) -> str:
    """A new namespace per run; earlier runs' namespaces (and so their Pods and jobs) go.
    Reusing Pod names at once is avoided on purpose: kwok deletes Pods by name, and a
    deletion it queued for an old Pod could hit a new one with the same name."""
    for old in admin.get("/api/v1/namespaces", labelSelector=f"{DEMO_LABEL}=true")["items"]:
        admin.delete(f"/api/v1/namespaces/{old['metadata']['name']}")
    name = f"demo-{dt.datetime.now():%H%M%S}"
    return admin.create_namespace(name, labels={DEMO_LABEL: "true"})


def _condition(pod: Json) -> Json:
    for item in (pod.get("status") or {}).get("conditions") or []:
        if item.get("type") == "PodScheduled":
            return dict(item)
    return {}


def _settled(pod: Json) -> bool:
    return bool(pod["spec"].get("nodeName")) or _condition(pod).get("reason") in (
        "InvalidForSlurm",
        "RejectedBySlurm",
    )


def demo(cluster: DevCluster) -> int:

    if cluster.is_running():
        print("reusing the dev cluster that is already running")
    else:
        print("bringing up the dev cluster (the first run also installs Slurm and builds Kubernetes)...")
        print(f"dev cluster up in {cluster.up(ClusterSpec()):.1f} s")
    report.print_status(cluster, cluster.status())
    _start_scheduler(cluster)
    admin = AdminKube(cluster.layout)
    try:
        namespace = _fresh_namespace(admin)
        created = {}
        for manifest in sample_pods():
            admin.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
            created[manifest["metadata"]["name"]] = time.monotonic()
        print(f"\ncreated {len(created)} Pods in namespace {namespace} with schedulerName {SCHEDULER}")
        bound_after: dict[str, float] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pods = admin.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
            for pod in pods:
                name = pod["metadata"]["name"]
                if pod["spec"].get("nodeName") and name not in bound_after:
                    bound_after[name] = time.monotonic() - created[name]
            if len(pods) == len(created) and all(_settled(p) for p in pods):
                break
            time.sleep(0.1)
        _print_table(cluster, pods, bound_after)
    finally:
        admin.close()
    print(
        f"\nThe scheduler keeps running (log: {cluster.layout.logs / 'sunk-scheduler.log'}). Try:\n"
        f'  eval "$(.venv/bin/sunk dev env)"\n'
        f"  kubectl -n {namespace} describe pod invalid-grace    # the refusal, as Event and condition\n"
        f"  kubectl -n {namespace} delete pod cpu-shared-a        # its Slurm job is cancelled\n"
        f"  .venv/bin/sunk dev slurm squeue -o '%i %j %T %N %k'\n"
        f"  .venv/bin/sunk dev down                               # stop everything"
    )
    return 0


def _print_table(cluster: DevCluster, pods: list[Json], bound_after: dict[str, float]) -> None:
    squeue = run_cli(cluster.layout, "squeue", "-h", "-o", "%i|%T|%N|%u")
    jobs = {fields[0]: fields[1:] for fields in (line.split("|") for line in squeue.splitlines())}
    print()
    for line in table(pods, bound_after, jobs, shutil.get_terminal_size().columns):
        print(line)
    stamp = dt.datetime.now().strftime("%H:%M:%S")
    print(f"\n(Slurm's own view at {stamp}: squeue)")
    print(run_cli(cluster.layout, "squeue", "-o", "%.9i %.40j %.9T %.8N %.10u %k").rstrip())


def table(
    pods: list[Json], bound_after: dict[str, float], jobs: dict[str, list[str]], width: int
) -> list[str]:
    """Each Pod next to its Node, Slurm job, Slurm node, job state and user, then the reason
    of each Pod that was not placed, whole, wrapped at `width` (a refusal is the one line a
    user must read to the end)."""
    row = "{:<20} {:<9} {:<8} {:<10} {:<10} {:<9} {:>7}  {}"
    lines = [row.format("POD", "NODE", "JOB", "SLURM NODE", "JOB STATE", "JOB USER", "BOUND", "NOTE")]
    notes: list[tuple[str, str]] = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        name = pod["metadata"]["name"]
        job_id = (pod["metadata"].get("annotations") or {}).get(P + "job-id", "-")
        state, slurm_node, user = jobs.get(job_id, ["-", "-", "-"])
        took = f"{bound_after[name]:.2f}s" if name in bound_after else "-"
        note = ""
        if not pod["spec"].get("nodeName"):
            condition = _condition(pod)
            note = f"{condition.get('reason') or 'not placed'} (below)"
            notes.append((name, condition.get("message") or "no reason given yet"))
        lines.append(
            row.format(name, pod["spec"].get("nodeName") or "-", job_id, slurm_node, state, user, took, note)
        )
    for name, message in notes:
        lines.append("")
        lines += textwrap.wrap(
            f"{name}: {message}", width=max(40, width), subsequent_indent="    ", break_on_hyphens=False
        )
    return lines
