"""slurmrestd's data_parser versions v0.0.40 to v0.0.45 (Slurm 23.11 to 26.05).

These versions share one shape for everything the scheduler uses, so one class serves
them all, told apart by `version` where they differ (v0.0.40 cannot ask for
exclusive=topo). Compared with v0.0.38: numbers come wrapped as {set, infinite, number},
job and node states are lists of flags, a job's nodes are a compressed host list, the
started mark lives in the job's `extra` field, the Pod's identity in `admin_comment`
(which only an operator's token may set), user and group IDs are plain fields, and nodes
are drained over REST.
"""

from __future__ import annotations

from typing import Any

from sunk.slurm.dialect import (
    DEFAULT_WORKDIR,
    SHARED_JOB_FIELDS,
    STARTED_MARK,
    Submission,
    node_usage,
    number,
    shared_fields,
)
from sunk.slurm.hostlist import expand
from sunk.slurm.models import JobState, SlurmJob, SlurmNode
from sunk.slurm.request import Exclusive, JobRequest, gres_text, name_of_owner_tag, owner_tag

VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")

# Who may share the node, as the job's `shared` list says it (OverSubscribe modes).
_SHARED = {
    Exclusive.NONE: "none",
    Exclusive.OK: "oversubscribe",
    Exclusive.USER: "user",
    Exclusive.MCS: "mcs",
    Exclusive.TOPO: "topo",
}
# A job's state is its base state plus flags. The scheduler reasons on one word, the one
# `squeue` shows: a flag in this list wins over the base state, the first one found.
_STATE_FLAGS_FIRST = (
    "COMPLETING",
    "CONFIGURING",
    "RESIZING",
    "RESV_DEL_HOLD",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STAGE_OUT",
    "STOPPED",
    "SIGNALING",
)
_BASE_STATES = (
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
)
# Node states that are flags next to the base state (IDLE, MIXED, ALLOCATED, DOWN...).
_NODE_BASES = ("IDLE", "DOWN", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN")


def summarize_state(states: list[str] | str | None) -> JobState:
    """(the one word, every flag) for a job state list such as ["RUNNING", "COMPLETING"]."""
    if isinstance(states, str):
        states = [states]
    words = [str(s).upper() for s in states or []]
    for flag in _STATE_FLAGS_FIRST:
        if flag in words:
            return flag, tuple(words)
    base = next((w for w in words if w in _BASE_STATES), words[0] if words else "UNKNOWN")
    return base, tuple(words)


def job_states(reply: dict[str, Any]) -> dict[int, JobState]:
    """Job ID → (one word, every state word) from a `GET /jobs/state` answer, which names
    jobs by strings ("123", or "123_4" for an array's task, never a placeholder)."""
    states: dict[int, JobState] = {}
    for raw in reply.get("jobs") or []:
        text = str(raw.get("job_id") or "")
        if text.isdigit():
            states[int(text)] = summarize_state(raw.get("state"))
    return states


class DataParser:
    mark_field = "extra"
    drains_over_rest = True
    chooses_job_ids = True  # the job description's `job_id`
    reads_job_states = True
    # Every partition's jobs (as by default) without the per-node allocation detail: a
    # third less to render and parse per job. A slurmrestd that ignores it only sends more.
    job_read_params: tuple[tuple[str, str], ...] = (("flags", "ALL"),)
    job_fields = SHARED_JOB_FIELDS | {"job_state", "nodes", "extra", "comment", "admin_comment"}

    def __init__(self, version: str) -> None:
        if version not in VERSIONS:
            raise ValueError(f"{version} is not a data_parser version sunk speaks ({', '.join(VERSIONS)})")
        self.version = version

    def unsupported(self, job: JobRequest) -> list[str]:
        if job.exclusive is Exclusive.TOPO and self.version == "v0.0.40":
            return [
                "exclusive=topo needs slurmrestd v0.0.41 or newer (Slurm 24.05+); this cluster "
                "speaks v0.0.40: use none, user, ok or mcs"
            ]
        return []

    def submission(self, job: JobRequest, script: str, environment: dict[str, str]) -> Submission:
        spec: dict[str, Any] = {
            "script": script,
            "name": job.name,
            "nodes": "1",
            "tasks": 1,
            "cpus_per_task": job.cpus,
            "memory_per_node": {"set": True, "number": job.memory_mib},
            "environment": [f"{key}={value}" for key, value in environment.items()],
            "current_working_directory": job.workdir or DEFAULT_WORKDIR,
            "comment": job.comment,
            # Only an operator's token can set admin_comment: a job carrying our tag was
            # submitted by this scheduler, whatever its name says.
            "admin_comment": owner_tag(job.name, job.user_id),
            # A requeued placeholder would come back for a Pod that is gone: never requeue.
            "requeue": False,
            "standard_output": "/dev/null",
            "standard_error": "/dev/null",
            "user_id": str(job.user_id),
            "group_id": str(job.group_id),
        }
        if job.gres:
            spec["tres_per_node"] = gres_text(job.gres, "gres/")
        if job.exclusive is not None:
            spec["shared"] = [_SHARED[job.exclusive]]
        if job.excluded_nodes:
            spec["excluded_nodes"] = list(job.excluded_nodes)
        if job.required_nodes:
            spec["required_nodes"] = list(job.required_nodes)
        if job.time_limit_min is not None:
            spec["time_limit"] = {"set": True, "number": job.time_limit_min}
        if job.priority is not None:
            spec["priority"] = {"set": True, "number": job.priority}
        if job.hold:
            spec["hold"] = True
        for field in ("account", "partition", "qos", "reservation", "constraints", "prefer"):
            value = getattr(job, field)
            if value:
                spec[field] = value
        return Submission({"job": spec})

    def parse_job(self, raw: dict[str, Any]) -> SlurmJob:
        state, flags = summarize_state(raw.get("job_state"))
        # Pending jobs may name the nodes Slurm plans to use; only an allocation counts.
        nodes = () if "PENDING" in flags else expand(str(raw.get("nodes") or ""))
        extra = str(raw.get("extra") or "")
        return SlurmJob(
            **shared_fields(raw),
            state=state,
            nodes=nodes,
            comment=str(raw.get("comment") or ""),
            started=extra.endswith(STARTED_MARK),
            owner_tag=str(raw.get("admin_comment") or ""),
            flags=flags,
        )

    def parse_node(self, raw: dict[str, Any]) -> SlurmNode:
        words = [str(s).upper() for s in raw.get("state") or []]
        base = next((w for w in words if w in _NODE_BASES), words[0] if words else "UNKNOWN")
        return SlurmNode(
            name=raw.get("name") or "",
            state=base.lower(),
            flags=tuple(w for w in words if w != base),
            reason=raw.get("reason") or "",
            reason_changed_at=number(raw.get("reason_changed_at")) or 0,
            comment=str(raw.get("comment") or ""),
            **node_usage(raw),
        )

    def owner_name(self, job: SlurmJob) -> str:
        """The name in the owner tag, only when the job runs as the user the tag says: a tag
        copied onto someone else's job is not enough."""
        found = name_of_owner_tag(job.owner_tag)
        if found is None:
            return ""
        name, uid = found
        return name if job.user_id == uid else ""

    def drain_body(self, reason: str) -> dict[str, Any]:
        return {"state": ["DRAIN"], "reason": reason}

    def exclusion_update(self, nodes: list[str]) -> dict[str, Any]:
        return {"excluded_nodes": nodes or [""]}  # an empty list changes nothing; [""] clears

    def priority_update(self, priority: int) -> dict[str, Any]:
        return {"priority": {"set": True, "number": priority}}
