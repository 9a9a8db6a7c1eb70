"""Gangs (R9.1): Pods that join a PodGroup are placed together or not at all.

The API is the one users of the scheduler-plugins coscheduling plugin already write: a
`scheduling.x-k8s.io/v1alpha1` PodGroup with `minMember` (and optionally
`scheduleTimeoutSeconds`), and Pods that name it in the label
`scheduling.x-k8s.io/pod-group`. A group becomes one heterogeneous Slurm job, one
component per member: Slurm starts every component at once or none, which is the
all-or-nothing the gang needs. Pure logic, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
API_GROUP = "scheduling.x-k8s.io"
API_VERSION = "v1alpha1"
PLURAL = "podgroups"
# The coscheduling plugin's own default when a PodGroup names no timeout.
DEFAULT_TIMEOUT_S = 60

Json = dict[str, Any]


def group_of(pod: Json) -> str | None:
    """The PodGroup a Pod joins (in its own namespace), or None."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    name = labels.get(GROUP_LABEL)
    return str(name) if name else None


def path(namespace: str, name: str) -> str:
    return f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{namespace}/{PLURAL}/{name}"


@dataclass(frozen=True)
class PodGroup:
    namespace: str
    name: str
    min_member: int
    timeout_s: int

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse(raw: Json) -> tuple[PodGroup | None, str | None]:
    """(the group, None) or (None, what is wrong with it, in words)."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    where = f"PodGroup {meta.get('namespace')}/{meta.get('name')}"
    minimum = spec.get("minMember", 1)
    timeout = spec.get("scheduleTimeoutSeconds", DEFAULT_TIMEOUT_S)
    if not isinstance(minimum, int) or isinstance(minimum, bool) or minimum < 1:
        return None, f"{where}: spec.minMember must be a whole number of at least 1 (got {minimum!r})"
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        return None, f"{where}: spec.scheduleTimeoutSeconds must be a positive whole number (got {timeout!r})"
    return PodGroup(str(meta.get("namespace")), str(meta.get("name")), minimum, timeout), None


def waiting_for_members(group: PodGroup, present: list[str]) -> str | None:
    """Why no job is submitted for the group yet, or None once enough members are here."""
    if len(present) >= group.min_member:
        return None
    named = ", ".join(sorted(present)[:8]) or "none"
    return (
        f"PodGroup {group} needs {group.min_member} members before Slurm is asked for their nodes; "
        f"{len(present)} waiting ({named})"
    )


def timed_out(group: PodGroup, submitted_at: int, now: float) -> bool:
    """The group's job has waited in Slurm longer than the group allows."""
    return bool(submitted_at) and now - submitted_at >= group.timeout_s


def timeout_message(group: PodGroup, job_id: int, reason: str) -> str:
    return (
        f"Slurm job {job_id} for PodGroup {group} did not start within {group.timeout_s}s "
        f"(pending: {reason}); it was cancelled and the group is tried again in {group.timeout_s}s"
    )


def identity_problem(group: PodGroup, identities: list[tuple[int | None, int | None]]) -> str | None:
    """Why the members cannot share one Slurm job: they ask for different Slurm users or
    groups ((uid, gid) per member), and one job runs as one user. None when they agree."""
    distinct = sorted(set(identities), key=str)
    if len(distinct) < 2:
        return None
    return (
        f"the members of PodGroup {group} ask for different Slurm users ("
        + ", ".join(f"uid {u} gid {g}" for u, g in distinct)
        + "); one Slurm job runs as one user: give them the same user-id and group-id annotations"
    )


@dataclass(frozen=True)
class SubmitStep:
    """What a member with no job does next: `kind` is "wait" (look again after `after`
    seconds; `message`, if any, goes on the waiting members), "alone" (the group's job
    exists: this member gets a job of its own) or "submit" (one job for the waiting members)."""

    kind: str
    after: float = 0.0
    message: str = ""


def next_submit_step(
    group: PodGroup,
    waiting: list[str],
    *,
    placed: bool,
    retry_in: float,
    unanswered: bool,
    wait_s: float,
) -> SubmitStep:
    """For a group whose PodGroup exists. `waiting`: the members with no job; `placed`: some
    member has a job or a Node; `retry_in`: seconds before the group may be submitted again
    (after a timeout); `unanswered`: a submission for a waiting member got no answer and no
    listing since could have shown its job (sunk.scheduler.decide.steps.unanswered_wait)."""
    if placed:
        # A member beyond the group (more replicas than minMember, or one that came back) is
        # placed on its own, as the coscheduling plugin does once a group is scheduled.
        return SubmitStep("alone")
    if retry_in > 0:
        return SubmitStep("wait", retry_in)
    message = waiting_for_members(group, waiting)
    if message:
        return SubmitStep("wait", wait_s, message)
    if unanswered:
        return SubmitStep("wait", 1.0)  # a listing may yet show the job of that submission
    return SubmitStep("submit")
