"""Everything specific to slurmrestd's openapi/v0.0.38 (Slurm 22.05) in one place.

A newer dialect (v0.0.40+: job `extra`, `user_id`/`group_id`, `exclusive=topo`) would be a
sibling module with the same four functions.
"""

from __future__ import annotations

from typing import Any

from sunk.slurm.models import SlurmJob, SlurmNode
from sunk.translate import Exclusive, PlaceholderJob

VERSION = "v0.0.38"
STARTED_MARK = ": started"
DEFAULT_WORKDIR = "/tmp"

# v0.0.38 names Slurm's OverSubscribe modes directly.
_EXCLUSIVE = {
    Exclusive.NONE: "exclusive",
    Exclusive.OK: "oversubscribe",
    Exclusive.USER: "user",
    Exclusive.MCS: "mcs",
}


def unsupported(job: PlaceholderJob) -> list[str]:
    """Things the Pod asks for that this Slurm cannot express (R3.5): the Pod is refused."""
    problems = []
    if job.options.exclusive is Exclusive.TOPO:
        problems.append(
            "exclusive=topo needs Slurm 23.02 or newer; this cluster's slurmrestd speaks "
            f"{VERSION} (Slurm 22.05): use none, user, ok or mcs"
        )
    return problems


def submit_body(job: PlaceholderJob, script: str, environment: dict[str, str]) -> dict[str, Any]:
    """The POST /job/submit body. The user and group are not in it: v0.0.38 refuses
    user_id/group_id, so the client submits *as* the user instead (see SlurmClient)."""
    options = job.options
    spec: dict[str, Any] = {
        "name": job.name,
        "nodes": [1, 1],
        "tasks": 1,
        "cpus_per_task": job.cpus,
        "memory_per_node": job.memory_mib,
        "environment": environment,
        "current_working_directory": options.current_working_dir or DEFAULT_WORKDIR,
        "comment": options.comment,
        # A requeued placeholder would come back for a Pod that is gone: never requeue.
        "requeue": False,
        "standard_output": "/dev/null",
        "standard_error": "/dev/null",
    }
    if job.gpus:
        spec["gres"] = f"gpu:{job.gpus}"
    if options.exclusive is not None:
        spec["exclusive"] = _EXCLUSIVE[options.exclusive]
    if job.excluded_nodes:
        spec["exclude_nodes"] = ",".join(job.excluded_nodes)
    if options.required_nodes:
        spec["nodelist"] = ",".join(options.required_nodes)
    if options.timeout_minutes is not None:
        spec["time_limit"] = options.timeout_minutes
    if options.priority is not None:
        spec["priority"] = str(options.priority)
    for field in ("account", "partition", "qos", "reservation", "constraints", "prefer"):
        value = getattr(options, field)
        if value:
            spec[field] = value
    return {"script": script, "job": spec}


def started(job: SlurmJob) -> bool:
    """The placeholder script appends the mark to the comment once it runs (R4.2)."""
    return job.comment.endswith(STARTED_MARK)


def _int(value: Any) -> int | None:
    if isinstance(value, dict):  # later dialects wrap numbers as {"set":…, "number":…}
        value = value.get("number") if value.get("set", True) else None
    return value if isinstance(value, int) else None


def parse_job(raw: dict[str, Any]) -> SlurmJob:
    resources = raw.get("job_resources") or {}
    allocated = tuple(n["nodename"] for n in resources.get("allocated_nodes") or [] if n.get("nodename"))
    if not allocated and raw.get("nodes") and "[" not in raw["nodes"]:
        allocated = tuple(raw["nodes"].split(","))
    comment = raw.get("comment") or ""
    return SlurmJob(
        job_id=int(raw["job_id"]),
        name=raw.get("name") or "",
        state=str(raw.get("job_state") or "UNKNOWN"),
        reason=str(raw.get("state_reason") or "None"),
        nodes=allocated,
        comment="" if comment == "(null)" else comment,
        user_id=_int(raw.get("user_id")),
        group_id=_int(raw.get("group_id")),
        partition=raw.get("partition") or "",
        time_limit_min=_int(raw.get("time_limit")),
        priority=_int(raw.get("priority")),
        restarts=_int(raw.get("restart_cnt")) or 0,
        submit_time=_int(raw.get("submit_time")) or 0,
        start_time=_int(raw.get("start_time")) or 0,
        end_time=_int(raw.get("end_time")) or 0,
        preempt_time=_int(raw.get("preempt_time")) or 0,
    )


def parse_node(raw: dict[str, Any]) -> SlurmNode:
    return SlurmNode(
        name=raw.get("name") or "",
        state=str(raw.get("state") or "unknown"),
        flags=tuple(raw.get("state_flags") or ()),
        reason=raw.get("reason") or "",
    )
