"""A started job's Pod, decided without I/O once its node was checked (R4.3, R4.4): bind it,
let it wait for the kubelet's room, or reject the placement and submit again.

The node check itself (`pod.placement.Placement.choose`) reads Slurm's view of the node and
holds the node's lock while it counts the room; its answer, a `Choice`, is what this plans
from. The PodGroup steps bind their members with the same `BindPod` and `scheduled` Event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from sunk.kube import events as ev
from sunk.runtime.actions import CancelJob, Event
from sunk.scheduler.decide import pod_actions
from sunk.scheduler.decide.actions import Attempt, BindPod, Plan, PodPlan, RecordJob
from sunk.scheduler.decide.submit_plan import SubmitInputs, SubmitRules, prepare, submitting
from sunk.slurm.models import SlurmJob

Json = dict[str, Any]
LOST_START = (
    "Slurm lists it PENDING again although its placeholder had started: slurmctld lost "
    "its start (a restart) while it ran, and would start it again where it still runs"
)


class Choice(NamedTuple):
    """The Node a started job's Pod goes to, or why not and what its next job avoids."""

    node: str | None
    problem: str = ""
    avoid_node: bool = False  # the Slurm node is the problem: the next job leaves it out
    remember: bool = True  # ... and the Pod remembers it (avoid-nodes); False: only while it lasts
    # The Node (`waits_on`) has room for the Pod beside the slurmd Pods, but other Pods hold
    # it for now (ended, preempted or still running): the job keeps its node and the Pod is
    # bound once they are gone.
    waits_on: str | None = None


def for_choice(
    pod: Json,
    job: SlurmJob,
    choice: Choice,
    avoid: tuple[str, ...],
    inputs: SubmitInputs | None,
    rules: SubmitRules,
) -> PodPlan:
    """Bind to the Node chosen, wait for its room, or reject the placement (`inputs`, read
    only then, for the new job)."""
    if choice.waits_on is not None:
        return pod_actions.waiting_for_room(pod, job, choice.waits_on, choice.problem)
    if choice.node is None:
        assert inputs is not None
        slurm_node = job.nodes[0] if job.nodes else None
        return rejected(
            pod,
            job,
            slurm_node,
            choice.problem,
            avoid,
            inputs,
            rules,
            avoid_node=choice.avoid_node,
            remember=choice.remember,
        )
    return Plan((BindPod(pod, choice.node, job.submit_time or None), scheduled(pod, job, choice.node)))


def scheduled(pod: Json, job: SlurmJob, node: str, note: str = "") -> Event:
    """The Scheduled Event of a bound Pod: its Node, and the job and allocation behind it."""
    meta = pod["metadata"]
    return Event(
        ev.SCHEDULED,
        f"Successfully assigned {meta['namespace']}/{meta['name']} to {node} "
        f"(Slurm job {job.job_id} on node {job.nodes[0]}{_allocation(job)}{note})",
        pod=pod,
    )


def rejected(
    pod: Json,
    job: SlurmJob,
    slurm_node: str | None,
    problem: str,
    avoid: tuple[str, ...],
    inputs: SubmitInputs,
    rules: SubmitRules,
    *,
    avoid_node: bool = True,
    remember: bool = True,
) -> PodPlan:
    """Strict node locking: never bind to a doubtful node or allocation; submit again
    (without the node, when the node is the problem). `remember`: the Pod avoids the node
    from now on (its `avoid-nodes` annotation); else the new job leaves it out, and later
    jobs and widenings only while the Pod's constraints still rule it out. The Pod stops
    naming the rejected job (a new one, or none) before that job is cancelled, so its end
    is not taken for Slurm ending the Pod's job."""
    avoiding = bool(slurm_node) and avoid_node
    avoided = avoid + ((slurm_node,) if slurm_node and avoiding and remember else ())
    leave_out: Mapping[str, str] = {slurm_node: problem} if slurm_node and avoiding and not remember else {}
    what = "submitting a new job that avoids it" if avoid_node else "submitting a new job"
    note = f"Slurm started job {job.job_id} on {slurm_node or '?'} but {problem}; {what}"
    told = (Attempt("placement_rejected"), Event(ev.NODE_REJECTED, note, warning=True, pod=pod))
    if leave_out:
        inputs = inputs.leaving_out(leave_out)
    prepared = prepare(pod, inputs, rules, avoided)
    # Remembered as settling the job's claim: a cancel a slurmctld crash lost is sent again.
    cancel = CancelJob(job.job_id, f"its placement was rejected: {problem}", settles_claim=True)
    if prepared.job is None:
        # No other node can take the Pod now (said on the Pod), or it is refused for good.
        return Plan((*told, *prepared.said, RecordJob(pod, None, avoided), cancel), prepared.after)
    new_job = submitting(prepared.job, avoided, inputs.usage, pack_on=rules.pack)
    return Plan((*told, *prepared.said, new_job, cancel))


def _allocation(job: SlurmJob) -> str:
    """What Slurm gave the job, as its TRES, for the Scheduled Event (without the node count)."""
    tres = ",".join(t for t in job.allocated.split(",") if t and not t.startswith(("node=", "billing=")))
    return f", allocated {tres}" if tres else ""
