"""What differs between slurmrestd versions, behind one interface.

The scheduler talks to Slurm through `SlurmClient`; the client holds one `Dialect`,
chosen at start-up from the versions slurmrestd serves. A dialect turns a `JobRequest`
into a request body and Slurm's answers into `SlurmJob`/`SlurmNode`, and knows where the
job's trusted name and the started mark live in that version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sunk.slurm.hostlist import expand
from sunk.slurm.models import SlurmJob, SlurmNode, gres_counts
from sunk.slurm.request import JobRequest

# Appended by the placeholder script to the job field the dialect names (R4.2).
STARTED_MARK = ": started"
DEFAULT_WORKDIR = "/tmp"
# The PATH placeholder jobs run with.
JOB_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Submission:
    """A submit request: its body, and the user name to send with the token (None: the
    scheduler's own Slurm user)."""

    body: dict[str, Any]
    as_user: str | None = None


class Dialect(Protocol):
    version: str
    # The job field the placeholder script appends STARTED_MARK to ("comment" or "extra").
    mark_field: str
    # True when nodes can be drained over REST; otherwise the client uses scontrol.
    drains_over_rest: bool
    # True when a submission may ask for its job ID (`with_job_ids`); slurmctld grants it
    # to root and SlurmUser only.
    chooses_job_ids: bool
    # True when slurmrestd answers `GET /jobs/state` (the states of many jobs in one light
    # request, Slurm 24.05 and later); otherwise states come from reading each job.
    reads_job_states: bool
    # Query parameters of job reads that leave out what sunk never looks at.
    job_read_params: tuple[tuple[str, str], ...]
    # Every field of a job that parse_job reads: job answers are decoded down to these.
    job_fields: frozenset[str]

    def unsupported(self, job: JobRequest) -> list[str]:
        """What the job asks for that this version cannot express (R3.5), in words."""
        ...

    def submission(self, job: JobRequest, script: str, environment: dict[str, str]) -> Submission: ...

    def parse_job(self, raw: dict[str, Any]) -> SlurmJob: ...

    def parse_node(self, raw: dict[str, Any]) -> SlurmNode: ...

    def owner_name(self, job: SlurmJob) -> str:
        """The name `job` was submitted under, as far as this version lets sunk trust it (""
        when it cannot): whose job it is is read from this, never from the job ID."""
        ...

    def drain_body(self, reason: str) -> dict[str, Any]: ...

    def exclusion_update(self, nodes: list[str]) -> dict[str, Any]:
        """The job update that makes `nodes` (maybe none) the job's excluded nodes."""
        ...

    def priority_update(self, priority: int) -> dict[str, Any]:
        """The job update that fixes the job's priority at `priority` (operators only)."""
        ...


def number(value: Any) -> int | None:
    """An integer from a plain value or a {set, infinite, number} wrapper."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# The job fields shared_fields reads.
SHARED_JOB_FIELDS = frozenset(
    {
        "job_id",
        "name",
        "state_reason",
        "user_id",
        "group_id",
        "partition",
        "time_limit",
        "priority",
        "restart_cnt",
        "submit_time",
        "start_time",
        "end_time",
        "preempt_time",
        "tres_alloc_str",
        "gres_detail",
        "het_job_id",
        "het_job_offset",
        "excluded_nodes",
        "features",
    }
)


def shared_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """The SlurmJob fields every REST version names alike (numbers plain or wrapped)."""
    return {
        "job_id": int(raw["job_id"]),
        "name": raw.get("name") or "",
        "reason": str(raw.get("state_reason") or "None"),
        "user_id": number(raw.get("user_id")),
        "group_id": number(raw.get("group_id")),
        "partition": raw.get("partition") or "",
        "time_limit_min": number(raw.get("time_limit")),
        "priority": number(raw.get("priority")),
        "restarts": number(raw.get("restart_cnt")) or 0,
        "submit_time": number(raw.get("submit_time")) or 0,
        "start_time": number(raw.get("start_time")) or 0,
        "end_time": number(raw.get("end_time")) or 0,
        "preempt_time": number(raw.get("preempt_time")) or 0,
        "allocated": str(raw.get("tres_alloc_str") or ""),
        "gres_detail": tuple(str(g) for g in raw.get("gres_detail") or ()),
        "het_job_id": number(raw.get("het_job_id")) or 0,
        "het_job_offset": number(raw.get("het_job_offset")) or 0,
        "excluded_nodes": expand(str(raw.get("excluded_nodes") or "")),
        "features": str(raw.get("features") or ""),
    }


def node_usage(raw: dict[str, Any]) -> dict[str, Any]:
    """The SlurmNode capacity fields every REST version names alike."""
    partitions = raw.get("partitions") or ()
    features = raw.get("features") or ()
    return {
        "partitions": tuple(partitions.split(",") if isinstance(partitions, str) else partitions),
        "features": tuple(filter(None, features.split(",") if isinstance(features, str) else features)),
        "cpus": number(raw.get("cpus")) or 0,
        "alloc_cpus": number(raw.get("alloc_cpus")) or 0,
        "memory_mib": number(raw.get("real_memory")) or 0,
        "alloc_memory_mib": number(raw.get("alloc_memory")) or 0,
        "gres": gres_counts(str(raw.get("gres") or "")),
        "gres_used": gres_counts(str(raw.get("gres_used") or "")),
        "address": str(raw.get("address") or ""),
    }


def partition_time_limits(reply: dict[str, Any]) -> dict[str, int | None]:
    """Partition name → MaxTime in minutes from a /partitions answer (None: UNLIMITED, or
    not reported, as 22.05 does not)."""
    return {
        str(p["name"]): number((p.get("maximums") or {}).get("time"))
        for p in reply.get("partitions") or []
        if p.get("name")
    }


def group_submission(parts: list[Submission]) -> Submission:
    """One heterogeneous job from the members' own submissions (R9.1): every REST version
    takes a list of job descriptions under `jobs` and one batch script, which runs in the
    first component only. The script and the user are the first member's."""
    users = {part.as_user for part in parts}
    if len(users) != 1:
        raise ValueError("the members of one heterogeneous job must run as one Slurm user")
    specs = []
    script = None
    for part in parts:
        spec = dict(part.body["job"])
        found = spec.pop("script", None) or part.body.get("script")
        script = script or found
        specs.append(spec)
    return Submission({"script": script, "jobs": specs}, as_user=parts[0].as_user)


def with_job_ids(submission: Submission, first: int) -> Submission:
    """`submission` asking Slurm for job ID `first` (a heterogeneous job: `first` for its
    first component, one more for each next one), as `sbatch --jobid` does. slurmctld
    refuses an ID any job record holds ("Duplicate job id") and lets only root and
    SlurmUser choose one; its own counter does not move."""
    body = dict(submission.body)
    if "jobs" in body:
        body["jobs"] = [{**spec, "job_id": first + i} for i, spec in enumerate(body["jobs"])]
    else:
        body["job"] = {**body["job"], "job_id": first}
    return Submission(body, as_user=submission.as_user)


def mark_environment(dialect: Dialect, job: JobRequest) -> dict[str, str]:
    """Tells the placeholder script which field to mark and what it holds already."""
    base = job.comment if dialect.mark_field == "comment" else ""
    return {"SUNK_MARK_FIELD": dialect.mark_field, "SUNK_MARK_BASE": base}
