"""slurmrestd's openapi/v0.0.38 (Slurm 22.05), kept while it stays cheap.

Differences from the later data_parser versions: no job `extra` (the started mark goes
into the comment, which a Pod's own `comment` annotation can fake), no `admin_comment`
(the Pod is recognised by the job's name alone), no `user_id`/`group_id` fields (a job for
another user is submitted *as* that user: a root token plus the user's name in
X-SLURM-USER-NAME, so it runs with that user's primary group), no node updates over REST
(nodes are drained with scontrol), and no exclusive=topo.
"""

from __future__ import annotations

import pwd
from typing import Any

from sunk.slurm.dialect import (
    DEFAULT_WORKDIR,
    SHARED_JOB_FIELDS,
    STARTED_MARK,
    Submission,
    node_usage,
    shared_fields,
)
from sunk.slurm.models import SlurmJob, SlurmNode
from sunk.slurm.request import Exclusive, JobRequest, gres_text

# v0.0.38 names Slurm's OverSubscribe modes directly.
_EXCLUSIVE = {
    Exclusive.NONE: "exclusive",
    Exclusive.OK: "oversubscribe",
    Exclusive.USER: "user",
    Exclusive.MCS: "mcs",
}


class V0038:
    version = "v0.0.38"
    mark_field = "comment"
    drains_over_rest = False
    chooses_job_ids = False  # v0.0.38's job properties have no `job_id`
    reads_job_states = False  # no `/jobs/state` before Slurm 24.05
    job_read_params: tuple[tuple[str, str], ...] = ()  # the allocation detail is used here
    job_fields = SHARED_JOB_FIELDS | {"job_resources", "nodes", "comment", "job_state"}

    def __init__(self, default_user: str = "root") -> None:
        self.default_user = default_user

    def _user_name(self, job: JobRequest) -> tuple[str | None, str | None]:
        """(user name to submit as, or None for the scheduler's own; problem in words)."""
        user_id, group_id = job.user_id, job.group_id
        if user_id == 0 and group_id == 0:
            return (None if self.default_user == "root" else "root"), None
        try:
            entry = pwd.getpwuid(user_id)
        except KeyError:
            return None, (
                f"user-id {user_id} has no user name on the scheduler's host, and Slurm 22.05's "
                "REST API can only run a job as a named user: add the user to the scheduler's "
                "user database (e.g. its image's /etc/passwd) or use a known user-id"
            )
        if entry.pw_gid != group_id:
            return None, (
                f"group-id {group_id} cannot be honoured: Slurm 22.05's REST API runs the job with "
                f"user {entry.pw_name}'s primary group {entry.pw_gid}; drop the group-id annotation "
                f"or set it to {entry.pw_gid}"
            )
        return entry.pw_name, None

    def unsupported(self, job: JobRequest) -> list[str]:
        problems = []
        if job.exclusive is Exclusive.TOPO:
            problems.append(
                "exclusive=topo needs Slurm 23.02 or newer; this cluster's slurmrestd speaks "
                f"{self.version} (Slurm 22.05): use none, user, ok or mcs"
            )
        _, problem = self._user_name(job)
        if problem:
            problems.append(problem)
        return problems

    def submission(self, job: JobRequest, script: str, environment: dict[str, str]) -> Submission:
        spec: dict[str, Any] = {
            "name": job.name,
            "nodes": [1, 1],
            "tasks": 1,
            "cpus_per_task": job.cpus,
            "memory_per_node": job.memory_mib,
            "environment": environment,
            "current_working_directory": job.workdir or DEFAULT_WORKDIR,
            "comment": job.comment,
            # A requeued placeholder would come back for a Pod that is gone: never requeue.
            "requeue": False,
            "standard_output": "/dev/null",
            "standard_error": "/dev/null",
        }
        if job.gres:
            spec["gres"] = gres_text(job.gres)
        if job.exclusive is not None and job.exclusive in _EXCLUSIVE:
            spec["exclusive"] = _EXCLUSIVE[job.exclusive]
        if job.excluded_nodes:
            spec["exclude_nodes"] = ",".join(job.excluded_nodes)
        if job.required_nodes:
            spec["nodelist"] = ",".join(job.required_nodes)
        if job.time_limit_min is not None:
            spec["time_limit"] = job.time_limit_min
        if job.priority is not None:
            spec["priority"] = str(job.priority)
        if job.hold:
            spec["hold"] = True
        for field in ("account", "partition", "qos", "reservation", "constraints", "prefer"):
            value = getattr(job, field)
            if value:
                spec[field] = value
        user, _ = self._user_name(job)
        return Submission({"script": script, "job": spec}, as_user=user)

    def parse_job(self, raw: dict[str, Any]) -> SlurmJob:
        resources = raw.get("job_resources") or {}
        allocated = tuple(n["nodename"] for n in resources.get("allocated_nodes") or [] if n.get("nodename"))
        if not allocated and raw.get("nodes") and "[" not in raw["nodes"]:
            allocated = tuple(raw["nodes"].split(","))
        comment = raw.get("comment") or ""
        comment = "" if comment == "(null)" else comment
        return SlurmJob(
            **shared_fields(raw),
            state=str(raw.get("job_state") or "UNKNOWN"),
            nodes=allocated,
            comment=comment,
            started=comment.endswith(STARTED_MARK),
            owner_tag=raw.get("name") or "",
        )

    def parse_node(self, raw: dict[str, Any]) -> SlurmNode:
        return SlurmNode(
            name=raw.get("name") or "",
            state=str(raw.get("state") or "unknown"),
            flags=tuple(raw.get("state_flags") or ()),
            reason=raw.get("reason") or "",
            reason_changed_at=int(raw.get("reason_changed_at") or 0),
            comment=str(raw.get("comment") or ""),
            **node_usage(raw),
        )

    def owner_name(self, job: SlurmJob) -> str:
        """22.05 has no field only an operator's token may set: the name alone."""
        return job.owner_tag

    def exclusion_update(self, nodes: list[str]) -> dict[str, Any]:
        return {"exclude_nodes": ",".join(nodes)}  # "" clears the list

    def priority_update(self, priority: int) -> dict[str, Any]:
        return {"priority": str(priority)}

    def drain_body(self, reason: str) -> dict[str, Any]:
        raise NotImplementedError("slurmrestd v0.0.38 cannot update nodes: drain with scontrol")
