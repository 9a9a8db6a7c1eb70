"""What this machine allows a run of `bench.run`: enough PIDs for N jobs at once, and
Slurm and Kubernetes on separate halves of the CPUs (`--split-cores`)."""

from __future__ import annotations

import os
from pathlib import Path

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
