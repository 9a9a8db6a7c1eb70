"""The PodGroup steps' planner (R9.1): from what one pass gathered about a gang, the typed
actions of its next step, in order, decided without I/O.

- `for_submit`: a member with no job: wait for the group (saying why), submit it alone (the
  group's job exists), or submit one job for the waiting members;
- `for_bind`: the group's job runs: wait, check the members' nodes, bind them all, or
  release the job when one member cannot go where Slurm put it (`group_bind`: may all of
  them be bound now?);
- `for_timeout`: the group's job waited longer than its PodGroup allows: release it;
- `submitted`, `released`, `waiting`: what the members are told of those steps.

`pod.gangs.Gangs` gathers the facts under the group's lock and carries the actions out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sunk.kube import events as ev
from sunk.runtime.actions import Event
from sunk.scheduler.decide.actions import (
    BindMember,
    CheckNodes,
    GroupPlan,
    Plan,
    ReleaseGroup,
    Report,
    SetCondition,
    SubmitAlone,
    SubmitGroup,
)
from sunk.scheduler.decide.pod_actions import ROOM_RECHECK_S, room_reports
from sunk.scheduler.translate import PlaceholderJob, gang
from sunk.slurm.models import SlurmJob

Json = dict[str, Any]
# How often a group short of members, or waiting for its PodGroup, is looked at again.
GROUP_WAIT_S = 5.0
# A group whose members do not agree on one Slurm identity is looked at again this late.
IDENTITY_WAIT_S = 30.0


def waiting(pods: tuple[Json, ...], reason: str, message: str) -> tuple[Report, ...]:
    """The condition on every member that does not show it yet; an Event only when the
    reason is new (the count of members waiting changes with each arrival: one Event each
    would be a flood)."""
    said: list[Report] = []
    for pod in pods:
        if not ev.condition_changes(pod, False, reason, message):
            continue
        said.append(SetCondition(reason, message, pod))
        if (ev.scheduled_condition(pod) or {}).get("reason") != reason:
            said.append(Event(ev.FAILED_SCHEDULING, message, warning=True, pod=pod))
    return tuple(said)


@dataclass(frozen=True)
class SubmitFacts:
    """A member with no job (`pod`), its PodGroup, and the group's other members."""

    pod: Json
    group: gang.PodGroup | None
    problem: str | None = None  # why the PodGroup could not be used (missing, invalid)
    waiting: tuple[Json, ...] = ()  # the live, unbound, not refused members with no job
    placed: bool = False  # some member has a job or a Node
    retry_in: float = 0.0  # seconds before the group may be submitted again
    unanswered: bool = False  # a submission for a waiting member may still show its job


def for_submit(facts: SubmitFacts) -> GroupPlan:
    group = facts.group
    if group is None:
        return Plan(waiting((facts.pod,), ev.WAITING_FOR_GROUP, facts.problem or "no PodGroup"), GROUP_WAIT_S)
    step = gang.next_submit_step(
        group,
        [str(p["metadata"]["name"]) for p in facts.waiting],
        placed=facts.placed,
        retry_in=facts.retry_in,
        unanswered=facts.unanswered,
        wait_s=GROUP_WAIT_S,
    )
    if step.kind == "alone":
        return Plan((SubmitAlone(),))
    if step.kind == "submit":
        return Plan((SubmitGroup(group, facts.waiting),))
    said = waiting(facts.waiting, ev.WAITING_FOR_GROUP, step.message) if step.message else ()
    return Plan(said, step.after)


def identity(group: gang.PodGroup, members: tuple[Json, ...], jobs: list[PlaceholderJob]) -> GroupPlan | None:
    """Before the group's job is submitted: the members must agree on one Slurm identity,
    else they wait, told why. None when they do."""
    message = gang.identity_problem(group, [(j.options.user_id, j.options.group_id) for j in jobs])
    if not message:
        return None
    return Plan(waiting(members, ev.UNSCHEDULABLE, message), IDENTITY_WAIT_S)


def submitted(
    group: gang.PodGroup,
    members: tuple[Json, ...],
    jobs: list[PlaceholderJob],
    components: list[SlurmJob],
    leader: int,
    warning: str | None,
) -> tuple[Event, ...]:
    """What each member is told once the group's job exists (`components` in the members'
    order); Slurm's `warning`, if any, goes to every member."""
    said = [
        Event(
            ev.PLACEHOLDER_SUBMITTED,
            f"Submitted Slurm job {component.job_id} ({job.cpus} CPU, {job.memory_mib} MiB), component "
            f"{component.het_job_offset} of job {leader} for the {len(jobs)} members of PodGroup {group}",
            pod=pod,
        )
        for pod, job, component in zip(members, jobs, components, strict=True)
    ]
    if warning:
        note = f"Slurm accepted job {leader} but says: {warning}"
        said += [Event(ev.SLURM_WARNING, note, warning=True, pod=pod) for pod in members]
    return tuple(said)


def released(members: list[Json], action: ReleaseGroup) -> tuple[Report, ...]:
    """What each member given back its freedom is told."""
    said: list[Report] = []
    for pod in members:
        said += [
            Event(action.reason, action.message, warning=True, pod=pod),
            SetCondition(ev.WAITING_FOR_GROUP, action.message, pod),
        ]
    return tuple(said)


def group_bind(components: list[SlurmJob]) -> str | None:
    """R9.1: why the members of a gang cannot all be bound now, or None when they can. Every
    component must run on its one node and the script (which runs in the first component
    only) must have marked the job started; Slurm starts all components at once, so this
    holds for all of them or none, and no member is bound before the others can be."""
    offsets = sorted(c.het_job_offset for c in components)
    if not components or offsets != list(range(len(components))):
        return f"the listing shows components {offsets} of the group's job, not all of them"
    leader = min(components, key=lambda c: c.het_job_offset)
    if not all(c.running for c in components):
        return "not every component of the group's job runs yet"
    if not leader.started:
        return "the group's placeholder script has not started yet"
    if any(len(c.nodes) != 1 for c in components):
        return "a component of the group's job holds more than one node"
    return None


@dataclass(frozen=True)
class Target:
    """Where an unbound member may go: `node` (a Node) or None, with `problem` and whether
    its next job should avoid that node for good (`remember`), or whether the member waits
    for the kubelet's room on Node `waits_on`, which other Pods hold for now."""

    pod: Json
    job: SlurmJob
    node: str | None
    problem: str = ""
    remember: bool = True
    waits_on: str | None = None


@dataclass(frozen=True)
class BindFacts:
    """The group's running job. `components` in offset order, with the group's started mark;
    `members`: the Pod of each (None when gone or replaced); `targets`: the unbound members'
    nodes, in order up to the first that cannot be used (None: not checked yet)."""

    group: str  # namespace/name
    leader: int
    components: tuple[SlurmJob, ...]
    members: tuple[Json | None, ...]
    targets: tuple[Target, ...] | None = None


def for_bind(facts: BindFacts) -> GroupPlan:
    """If any member cannot go where Slurm put it, none is bound and the group gets a new
    job that avoids that node, unless the member only waits for room other Pods hold on its
    Node: then none is bound yet, and the group keeps its job. Else all are bound together."""
    if group_bind(list(facts.components)) or any(m is None for m in facts.members):
        return Plan(after=1.0)  # not all started yet; a member gone settles its claim on its own pass
    if facts.targets is None:
        return Plan((CheckNodes(),))
    for target in facts.targets:
        if target.node is None and target.waits_on is not None:
            said = room_reports(target.pod, target.job, target.waits_on, target.problem)
            return Plan(said, ROOM_RECHECK_S)
        if target.node is None:
            slurm_node = target.job.nodes[0]
            note = (
                f"Slurm started job {facts.leader} but member {target.pod['metadata']['name']} cannot go to "
                f"{slurm_node}: {target.problem}; no member is bound; the group gets a new job"
                + (" avoiding it" if target.remember else "")
            )
            avoid = ((str(target.pod["metadata"]["uid"]), slurm_node),) if target.remember else ()
            return Plan((ReleaseGroup(facts.leader, ev.NODE_REJECTED, note, facts.group, avoid=avoid),))
    note = f"; all members of PodGroup {facts.group} together"
    return Plan(tuple(BindMember(t.pod, t.job, t.node, note) for t in facts.targets if t.node))


def for_timeout(group: gang.PodGroup | None, leader: SlurmJob | None) -> GroupPlan:
    """The group's job waited longer than its PodGroup's scheduleTimeoutSeconds: cancel it
    and let no new job be submitted for as long again (the cluster is busy)."""
    if group is None or leader is None or not leader.pending:
        return Plan(after=1.0)  # it started meanwhile, or is gone: look again
    message = gang.timeout_message(group, leader.job_id, leader.reason)
    return Plan((ReleaseGroup(leader.job_id, ev.GROUP_TIMED_OUT, message, str(group), group.timeout_s),))
