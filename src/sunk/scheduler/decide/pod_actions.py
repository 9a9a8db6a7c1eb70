"""What the Pod controller does when a step needs more than one write, decided without I/O:
typed actions the executor carries out in order (R5.2, R5.3, R8.2).

- `for_ending_job`: Slurm ends (or gave up) the Pod's job: cancel what must not come
  back, say why, delete the Pod, drain the node if the Pod outlives KillWait.
- `for_bound_pod`: a bound Pod's job now runs on a Slurm node another Node hosts.
"""

from __future__ import annotations

from typing import Any

from sunk.scheduler.decide import drain_due, finished, kill_wait_drain_reason
from sunk.scheduler.decide.actions import CancelJob, DeletePod, Drain, Event, Plan, PodAction
from sunk.scheduler.translate import PodRef
from sunk.slurm.models import SlurmJob

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
) -> Plan:
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
        # The Event comes from the Slurm-node controller (decide.drain_notice), which
        # explains every drain, this one and the placeholder script's alike.
        actions.append(Drain(job.nodes[0], kill_wait_drain_reason(PodRef.of(pod), job.job_id)))
    return Plan(tuple(actions))


def for_bound_pod(pod: Json, job: SlurmJob, hosts: set[str]) -> Plan:
    """A bound Pod must stay on the Node hosting its job's node: if Slurm now runs the job
    elsewhere (restarted after a crash, say), both sides would hand out the same
    resources, so the Pod goes at once. `hosts`: the Nodes hosting the job's Slurm node."""
    if not job.running or len(job.nodes) != 1:
        return Plan()
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not hosts or node_name in hosts:
        return Plan()
    note = (
        f"Slurm job {job.job_id} now runs on {job.nodes[0]}, hosted by {', '.join(sorted(hosts))}, "
        f"not on this Pod's Node {node_name}; deleting the Pod"
    )
    return Plan((Event("PlaceholderJobMoved", note, warning=True), DeletePod()))
