"""Slurm's job queue counted once per listing, so a metrics scrape never walks the jobs.

The poller lists every job anyway; counting them there costs one pass per listing, while a
scrape reads a handful of small maps whatever the queue's length (sunk.operator.metrics.slurm_metrics).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sunk.slurm.models import SlurmJob

# The pending reasons counted by name; every other reason counts as OTHER, so the label's
# values stay few whatever Slurm says (its reason list grows with each release).
PENDING_REASONS = frozenset(
    {
        "None",
        "Resources",
        "Priority",
        "Dependency",
        "DependencyNeverSatisfied",
        "JobHeldUser",
        "JobHeldAdmin",
        "BeginTime",
        "ReqNodeNotAvail",
        "PartitionTimeLimit",
        "PartitionNodeLimit",
        "PartitionDown",
        "PartitionInactive",
        "NodeDown",
        "BadConstraints",
        "Reservation",
        "Licenses",
        "JobArrayTaskLimit",
        "QOSMaxJobsPerUserLimit",
        "QOSMaxSubmitJobPerUserLimit",
        "QOSGrpCpuLimit",
        "QOSGrpGRES",
        "QOSGrpNodeLimit",
        "AssocMaxJobsLimit",
        "AssocGrpCpuLimit",
        "AssocGrpGRES",
        "AssocGrpNodeLimit",
        "launch failed requeued held",
    }
)
OTHER = "Other"

# Slurm's job states under the word its metrics endpoint uses (slurm_jobs_<word>).
STATE_WORDS = {
    "PENDING": "pending",
    "RUNNING": "running",
    "SUSPENDED": "suspended",
    "COMPLETING": "completing",
    "CONFIGURING": "configuring",
    "COMPLETED": "completed",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
    "TIMEOUT": "timeout",
    "NODE_FAIL": "node_failed",
    "OUT_OF_MEMORY": "outofmemory",
    "PREEMPTED": "preempted",
    "REQUEUED": "requeued",
    "BOOT_FAIL": "bootfail",
    "DEADLINE": "deadline",
}
_GPUS = re.compile(r"(?:^|,)gres/gpu=(\d+)")


def pending_reason(reason: str) -> str:
    """The reason's label value: Slurm's word when it is one of PENDING_REASONS, else OTHER.
    Only the word before a comma counts ("ReqNodeNotAvail, UnavailableNodes:a1")."""
    word = reason.split(",", 1)[0].strip()
    return word if word in PENDING_REASONS else OTHER


def gpus_allocated(job: SlurmJob) -> int:
    """GPUs Slurm handed the job, from its allocated TRES ("cpu=2,gres/gpu=4,...")."""
    found = _GPUS.search(job.allocated)
    return int(found[1]) if found else 0


@dataclass(frozen=True)
class JobCensus:
    """The job queue in counts. `states`: every job by its slurm_jobs_<word> word (hold:
    pending with priority 0, as Slurm holds them); `pending`/`running`: by partition;
    `reasons`: pending jobs by (partition, reason label); `oldest_pending`: partition → the
    earliest submit time (epoch seconds) of its pending jobs; `gpus`: GPUs allocated to
    running jobs, by partition."""

    total: int = 0
    states: Mapping[str, int] = field(default_factory=dict)
    pending: Mapping[str, int] = field(default_factory=dict)
    running: Mapping[str, int] = field(default_factory=dict)
    reasons: Mapping[tuple[str, str], int] = field(default_factory=dict)
    oldest_pending: Mapping[str, int] = field(default_factory=dict)
    gpus: Mapping[str, int] = field(default_factory=dict)


def count_jobs(jobs: Iterable[SlurmJob]) -> JobCensus:
    """One pass over the listing. A pending job naming several partitions counts in each (it
    waits in each); one component of a heterogeneous job counts as a job, as Slurm lists it."""
    total = 0
    states: Counter[str] = Counter()
    pending: Counter[str] = Counter()
    running: Counter[str] = Counter()
    reasons: Counter[tuple[str, str]] = Counter()
    oldest: dict[str, int] = {}
    gpus: Counter[str] = Counter()
    for job in jobs:
        total += 1
        word = STATE_WORDS.get(job.state)
        if word:
            states[word] += 1
        partitions = [p for p in job.partition.split(",") if p]
        if job.pending:
            if job.priority == 0:
                states["hold"] += 1
            label = pending_reason(job.reason)
            for partition in partitions:
                pending[partition] += 1
                reasons[partition, label] += 1
                if job.submit_time and job.submit_time < oldest.get(partition, job.submit_time + 1):
                    oldest[partition] = job.submit_time
        elif job.running:
            for partition in partitions:
                running[partition] += 1
                gpus[partition] += gpus_allocated(job)
    return JobCensus(total, dict(states), dict(pending), dict(running), dict(reasons), oldest, dict(gpus))
