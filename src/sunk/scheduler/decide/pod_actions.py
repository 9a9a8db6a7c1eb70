"""What the Pod controller does when a step needs more than one write, decided without I/O:
typed actions the executor carries out in order (R5.2, R5.3, R8.2).

- `for_ending_job`: Slurm ends (or gave up) the Pod's job: cancel what must not come
  back, say why, delete the Pod, drain the node if the Pod outlives KillWait.
- `for_bound_pod`: a bound Pod's job now runs on a Slurm node another Node hosts.
- `for_missing_job`: Slurm has no record of a bound Pod's job: re-adopt it or end the Pod.
- `waiting_for_room`: the job runs, but the kubelet has no room for the Pod on its Node yet.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from sunk.kube import events as ev
from sunk.runtime.actions import CancelJob, Drain, Event
from sunk.scheduler.decide.actions import (
    ConfirmReverted,
    DeletePod,
    Plan,
    PodAction,
    PodPlan,
    Readopt,
    SetCondition,
)
from sunk.scheduler.decide.drains import drain_due, kill_wait_drain_reason
from sunk.scheduler.decide.pod_state import finished
from sunk.scheduler.decide.problems import slurm_node_problem
from sunk.scheduler.jobs import MIN_JOB_AGE_S
from sunk.scheduler.translate import PodRef
from sunk.slurm.models import SlurmJob, SlurmNode

Json = dict[str, Any]


def for_ending_job(
    pod: Json,
    job: SlurmJob,
    leader: SlurmJob | None,
    *,
    cancelled_for_pod: bool,
    being_deleted: bool,
    drained: bool,
    kill_wait_s: int,
    now: float,
) -> PodPlan:
    """`job` is the Pod's and Slurm is ending it, or gave its resources up while the Pod is
    bound. `leader`: the first component of the gang's job `job` belongs to, if any.
    `cancelled_for_pod`: this process already cancelled a job for this ending (it is
    never cancelled twice). `being_deleted`: the Pod has a deletion timestamp, or this
    process asked for its deletion. `drained`: its node was drained for this job already."""
    if finished(pod):
        # The Pod's containers ended on their own (a batch Job's Pod): nothing runs on the
        # node any more, so nothing is deleted or drained; the Pod stays for its controller.
        return Plan()
    actions: list[PodAction] = []
    if job.gave_up_resources and job.active and not cancelled_for_pod:
        # Requeued or suspended: Slurm may hand the resources on, so the Pod must go, and
        # the job must not come back later for a Pod that no longer exists.
        actions.append(CancelJob(job.job_id, f"Slurm {job.state.lower()} it; its Pod goes"))
    elif leader is not None and not leader.ending and not cancelled_for_pod:
        # One component ended (say, an administrator cancelled just that one): the group
        # lives and dies as one job, so the others end with it.
        actions.append(CancelJob(leader.job_id, f"its component {job.job_id} ended"))
    if not being_deleted:
        reason, words = job.why_ending(now)
        where = f" on {job.nodes[0]}" if job.nodes else ""
        note = f"Slurm job {job.job_id}{where} {words}; deleting the Pod"
        actions += [Event(reason, note, warning=True), DeletePod()]
    bound = bool((pod.get("spec") or {}).get("nodeName"))
    wait = drain_due(job, bound, kill_wait_s, now)
    if wait is not None and wait > 0:
        return Plan(tuple(actions), after=wait)
    if wait is not None and not drained:
        # The Event comes from the Slurm-node controller (drains.drain_notice), which
        # explains every drain, this one and the placeholder script's alike.
        actions.append(Drain(job.nodes[0], kill_wait_drain_reason(PodRef.of(pod), job.job_id)))
    return Plan(tuple(actions))


def for_bound_pod(pod: Json, job: SlurmJob, hosts: set[str], *, readoptable: bool) -> PodPlan:
    """A bound Pod must stay on the Node hosting its job's node: if Slurm now runs the job
    elsewhere, both sides would hand out the same resources. A job never requeued that runs
    elsewhere was started again by a slurmctld that lost its start (restarted from older
    state): Slurm did not move it for a reason, so the job is read again and the Pod
    re-adopted on its own node (issue #53). A requeued job (Slurm chose to move it) or a
    PodGroup's member ends its Pod at once. `hosts`: the Nodes hosting the job's Slurm
    node; `readoptable`: the Pod is no PodGroup's member."""
    if not moved(pod, job, hosts):
        return Plan()
    if not job.restarts and readoptable:
        return Plan((ConfirmReverted(job.job_id),))
    node_name = (pod.get("spec") or {}).get("nodeName")
    note = (
        f"Slurm job {job.job_id} now runs on {job.nodes[0]}, hosted by {', '.join(sorted(hosts))}, "
        f"not on this Pod's Node {node_name}; deleting the Pod"
    )
    return Plan((Event(ev.JOB_MOVED, note, warning=True), DeletePod()))


def moved(pod: Json, job: SlurmJob, hosts: set[str]) -> bool:
    """The bound Pod's job runs on one Slurm node that Nodes other than the Pod's host."""
    if not job.running or len(job.nodes) != 1 or not hosts:
        return False
    return (pod.get("spec") or {}).get("nodeName") not in hosts


def for_missing_job(
    pod: Json,
    job_id: int | None,
    last: SlurmJob | None,
    *,
    node: SlurmNode | None,
    hosts: set[str],
    group: str | None,
    now: float,
) -> PodPlan:
    """A bound Pod whose job `job_id` Slurm has no record of. `last` is that job as this
    process last saw it, given only when the evidence says Slurm lost it rather than ended
    it: a listing showed it running less than MinJobAge ago (an ended job stays listed that
    long with its end state). The Pod still runs and the resources Slurm forgot are free
    again, so a new job takes them back on the same node (R8.2, issue #34); anything in
    doubt ends the Pod as before. `node`: that Slurm node as Slurm shows it now; `hosts`:
    the Nodes hosting it; `group`: the Pod's PodGroup, if any; `now`: wall clock."""
    gone = f"Slurm job {job_id} no longer exists in Slurm"
    if last is not None and node is not None and not_registered(node):
        # slurmctld has just restarted and the node has not reported back yet (a few
        # seconds): nothing can start there, for this Pod or anyone else, until it has.
        return Plan(after=1.0)
    why_not = why_not_readopted(pod, last, node, hosts, now)
    if why_not is not None:
        return Plan((Event(ev.JOB_ENDED, f"{gone}{why_not}; deleting the Pod", warning=True), DeletePod()))
    assert last is not None
    # A PodGroup's member: the whole group is re-adopted with one new job, or none of it.
    return Plan((Readopt(last.job_id, last.nodes[0], time_left_min(last, now), group),))


# Slack against the clocks of the API server, Slurm and the scheduler disagreeing, taken off
# MinJobAge when only the Pod's own record is evidence.
CLOCK_SLACK_S = 15.0
STARTED_AT = "job-started-at"  # annotation: when a re-adopted job started (epoch seconds)


def recorded_run(
    pod: Json,
    job_id: int,
    slurm_node: str,
    time_limit_min: int | None,
    *,
    prefix: str,
    now: float,
    max_age_s: float = MIN_JOB_AGE_S - CLOCK_SLACK_S,
) -> SlurmJob | None:
    """The Pod's job `job_id` as the Pod itself records it, when that record is evidence
    that Slurm lost the job rather than ended it (a restarted scheduler has no listing of
    its own to go by): the Pod was bound, or its job re-adopted, less than MinJobAge ago,
    and the job ran then. Had Slurm ended the job since, it would still list it with its
    end state; with no record at all, slurmctld lost it. `slurm_node`: the one Slurm node
    the Pod's Node hosts. Its time limit counts from the first binding, as a re-adopted
    job's does. None when the record says nothing recent enough."""
    bound = _scheduled_at(pod)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    raw = str(annotations.get(prefix + STARTED_AT) or "")
    readopted = int(raw) if raw.isdigit() else 0
    ran_at = max(bound, readopted)
    if not ran_at or now - ran_at >= max_age_s:
        return None
    return SlurmJob(
        job_id=job_id,
        name="",
        state="RUNNING",
        reason="None",
        nodes=(slurm_node,),
        comment="",
        user_id=None,
        group_id=None,
        partition="",
        time_limit_min=time_limit_min,
        priority=None,
        start_time=bound or ran_at,
    )


def _scheduled_at(pod: Json) -> int:
    """When the API server bound the Pod (its PodScheduled condition turned True), epoch."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            try:
                stamp = dt.datetime.strptime(str(condition.get("lastTransitionTime")), "%Y-%m-%dT%H:%M:%SZ")
            except ValueError:
                return 0
            return int(stamp.replace(tzinfo=dt.UTC).timestamp())
    return 0


# How soon a Pod waiting for room on its Node is looked at again, should no Pod's leaving
# the Node say so first (the scheduler looks again whenever one of its Pods leaves a Node).
ROOM_RECHECK_S = 5.0


def waiting_for_room(pod: Json, job: SlurmJob, node: str, shortfall: str) -> PodPlan:
    """Slurm started the Pod's job, but the kubelet of `node` counts too little room for
    the Pod yet (`shortfall`), while the slurmd Pods alone would leave enough: other Pods
    hold it (preempted or ended ones still terminating, or ones Slurm counts differently).
    The Pod is not bound, which the kubelet would refuse (`OutOfcpu`); the job keeps its
    place and the Pod is bound once they are gone."""
    return Plan(room_reports(pod, job, node, shortfall), ROOM_RECHECK_S)


def room_reports(pod: Json, job: SlurmJob, node: str, shortfall: str) -> tuple[SetCondition | Event, ...]:
    """What a Pod waiting for the kubelet's room on `node` is told, once per wait: the
    condition, and an Event with what is short (a PodGroup's member as a single Pod)."""
    slurm_node = ",".join(job.nodes) or "?"
    message = (
        f"Slurm job {job.job_id} runs on {slurm_node}; waiting for the kubelet's room on Node {node}, "
        "which other Pods hold until they are gone"
    )
    if not ev.condition_changes(pod, False, ev.WAITING_FOR_ROOM, message):
        return ()
    note = f"Slurm job {job.job_id} runs on {slurm_node}, but {shortfall}; the Pod is bound once it fits"
    return (SetCondition(ev.WAITING_FOR_ROOM, message, pod), Event(ev.WAITING_FOR_ROOM, note, pod=pod))


def readoption_failed(action: Readopt, why: str) -> PodPlan:
    """Slurm could not give the lost job's resources back at once (`why`): the Pod goes,
    as it did before re-adoption, saying why."""
    if action.moved_to:
        lost = started_again(action.moved_to)
    elif action.pending_again:
        lost = (
            "is PENDING again although it had started "
            "(slurmctld lost its record of the start, e.g. in a restart)"
        )
    else:
        lost = "no longer exists in Slurm (Slurm lost it, e.g. slurmctld restarted without its state)"
    note = f"Slurm job {action.old_job} {lost}, and it cannot be re-adopted on {action.node}: {why}"
    note += "; deleting the Pod"
    return Plan((Event(ev.JOB_ENDED, note, warning=True), DeletePod()))


def reverted(pod: Json, job: SlurmJob) -> bool:
    """The bound Pod's job is PENDING again without a requeue: a slurmctld restarted from
    state saved before the job started has no record of its start, and counts its
    resources free. Its Pod still runs: a case for re-adoption, as a lost job is."""
    bound = bool((pod.get("spec") or {}).get("nodeName"))
    return bound and job.state == "PENDING" and not job.restarts and not finished(pod)


def for_reverted(job: SlurmJob, group: str | None) -> PodPlan:
    """`job` is `reverted`: a single Pod's job is read again before it is re-adopted; a
    PodGroup's member hands over to the group's re-adoption, which judges every member
    and re-adopts the whole group with one new job, or ends every member."""
    if group is None:
        return Plan((ConfirmReverted(job.job_id),))
    return Plan((Readopt(job.job_id, "", None, group, pending_again=True),))


def lost_start(pod: Json, job: SlurmJob, hosts: set[str]) -> bool:
    """Slurm lost the start of the bound Pod's job, never requeued: it lists the job PENDING
    again (`reverted`), or has started it again on a Slurm node other Nodes host (`moved`:
    the same loss, with the job scheduled again before the scheduler saw it PENDING).
    `hosts`: the Nodes hosting the job's Slurm node."""
    if reverted(pod, job):
        return True
    return moved(pod, job, hosts) and not job.restarts and not finished(pod)


def for_reverted_job(
    pod: Json, job: SlurmJob, last: SlurmJob | None, *, node: SlurmNode | None, hosts: set[str], now: float
) -> PodPlan:
    """`job` is `reverted`; `last` is it as the Pod records its run (`recorded_run`, with
    no age limit: Slurm still has the job), `node` and `hosts` as for `for_missing_job`. A
    new job pinned to the Pod's node takes the resources back; the Pod then names it, and
    the PENDING one, no longer its Pod's, is cancelled as any such claim."""
    if last is not None and node is not None and not_registered(node):
        return Plan(after=1.0)
    problem = why_not_readopted(pod, last, node, hosts, now)
    moved_to = job.nodes[0] if job.running and job.nodes else ""
    if problem is None:
        assert last is not None
        left = time_left_min(last, now)
        return Plan((Readopt(job.job_id, last.nodes[0], left, pending_again=True, moved_to=moved_to),))
    words = started_again(moved_to) if moved_to else job.why_ending(now)[1]
    problem = problem.replace(" (Slurm lost it, e.g. slurmctld restarted without its state)", "")
    note = f"Slurm job {job.job_id} {words}{problem}; deleting the Pod"
    return Plan((Event(ev.JOB_ENDED, note, warning=True), DeletePod()))


def started_again(node: str) -> str:
    """What happened to a job Slurm started again on `node` after losing its start."""
    return (
        f"was started again on {node} although it had started on this Pod's node "
        "(slurmctld lost its record of the start, e.g. in a restart)"
    )


def readopted_job_ended(action: Readopt, job: SlurmJob, now: float) -> PodPlan:
    """Slurm ended the Pod's new job before it ran for the Pod, and not on the scheduler's
    word (a user's scancel of the job squeue showed for the Pod): the Pod ends with it, as
    with any job of a Pod, with the reason Slurm gives."""
    reason, words = job.why_ending(now)
    note = (
        f"Slurm lost job {action.old_job}, and its new job {job.job_id} on {action.node} {words} "
        "before it ran for this Pod; deleting the Pod"
    )
    return Plan((Event(reason, note, warning=True), DeletePod()))


def why_not_readopted(
    pod: Json, last: SlurmJob | None, node: SlurmNode | None, hosts: set[str], now: float
) -> str | None:
    """Why the job cannot be taken back (in words that follow "no longer exists in Slurm"),
    or None when it can (a PodGroup's member: as far as this member goes)."""
    if last is None or len(last.nodes) != 1:
        # No sign that Slurm lost it rather than ended it: the Pod goes, as always.
        return (
            ", and nothing shows that Slurm lost it rather than ended it (this scheduler did not "
            "see it run lately, and the Pod's own record of its start is older than Slurm keeps "
            "an ended job, or its Node hosts no single Slurm node)"
        )
    lost = " (Slurm lost it, e.g. slurmctld restarted without its state), and it cannot be re-adopted: "
    problem = slurm_node_problem(last.nodes[0], node)
    if problem is not None:
        return lost + problem
    if (pod.get("spec") or {}).get("nodeName") not in hosts:
        return lost + f"Slurm node {last.nodes[0]} is no longer hosted by this Pod's Node"
    left = time_left_min(last, now)
    if left is not None and left <= 0:
        return lost + f"its time limit of {last.time_limit_min} min is reached"
    return None


def not_registered(node: SlurmNode) -> bool:
    """slurmctld does not know yet what the node runs: just restarted, it lists every node
    UNKNOWN (or not responding) until that node's slurmd registers again."""
    return node.state.upper() == "UNKNOWN" or "NOT_RESPONDING" in node.flags


def time_left_min(job: SlurmJob, now: float) -> int | None:
    """What is left of the job's time limit, in whole minutes rounded up (None: no limit)."""
    if job.time_limit_min is None or not job.start_time:
        return job.time_limit_min
    return math.ceil((job.start_time + job.time_limit_min * 60 - now) / 60)
