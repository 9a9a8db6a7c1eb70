"""The Pod controller's planner: from the facts one pass gathered about a Pod, the typed
actions of its next step, in order, decided without I/O (R4, R5, R8.2, R9).

`steps.for_pod` names the step; this turns it into what to do. Steps that are a few
writes (a job Slurm ends, a bound Pod whose job moved, a waiting report, a widening) come
out as those writes (`decide.actions`, `SetCondition`, `Widen`); steps that read Slurm or
the API server on the way (submitting, binding, confirming what a hook call claimed, the
PodGroup steps) come out as one action each, which the controller hands to the
collaborator that does them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sunk.kube import events as ev
from sunk.runtime.actions import Event
from sunk.scheduler.decide import packing, pod_actions, steps
from sunk.scheduler.decide.actions import (
    Bind,
    ConfirmEnding,
    ConfirmMissing,
    FindOrSubmit,
    ForGroup,
    Plan,
    PodPlan,
    ReplaceLostStart,
    SetCondition,
    Widen,
)
from sunk.scheduler.decide.pod_state import PodView
from sunk.scheduler.decide.submit_plan import size
from sunk.scheduler.translate import PodRef, Settings, translate
from sunk.slurm.models import SlurmJob

Json = dict[str, Any]


@dataclass(frozen=True)
class PodFacts:
    """What one pass gathered about a live Pod from the caches and this process's memory."""

    pod: Json
    view: PodView  # what the object says, read once: its job ID, group, rejected placements
    job: SlurmJob | None  # the job it names, if the index holds it for the Pod's UID
    leader: SlurmJob | None = None  # the first component of that job's group, if any
    group_timed_out: bool = False
    ending_reported: bool = False  # its job's script said on the hooks API that Slurm ends it
    cancelled_for_pod: bool = False  # this process cancelled (or signalled) the job for the Pod
    being_deleted: bool = False  # deletion asked, by anyone or this process
    drained: bool = False  # this process drained the job's node already
    hosts: frozenset[str] = frozenset()  # bound, job running: the Nodes hosting its node
    needed: frozenset[str] | None = None  # a pending job leaves out more than this: widen
    claims: tuple[tuple[PodRef, SlurmJob], ...] = ()  # every job the index names for its key


@dataclass(frozen=True)
class Rules:
    """The scheduler's settings the planner reads."""

    settings: Settings
    pack: bool  # --placement=pack


def plan(facts: PodFacts, rules: Rules, *, synced: bool, now: float) -> PodPlan:
    pod, job, seen = facts.pod, facts.job, facts.view
    group = seen.group
    decision = steps.for_pod(
        seen,
        job,
        synced=synced,
        now=now,
        ending_reported=facts.ending_reported,
        group_timed_out=facts.group_timed_out,
        widen_after=None if facts.needed is None else (packing.PACK_PATIENCE_S if rules.pack else 0.0),
    )
    step = decision.step
    if step is steps.Step.WAIT:
        return Plan(after=decision.after)
    if step is steps.Step.CONFIRM_MISSING:
        return Plan((ConfirmMissing(),))
    if step is steps.Step.FIND_OR_SUBMIT:
        return Plan((ForGroup(group, step),) if group else (FindOrSubmit(adoptable(facts), seen.avoid),))
    if step is steps.Step.NOTHING:
        return Plan()
    if step is steps.Step.CONFIRM_ENDING:
        assert seen.job_id is not None
        return Plan((ConfirmEnding(seen.job_id),))
    assert job is not None  # every other step is about the Pod's job
    reverted = pod_actions.reverted(pod, job) and not facts.being_deleted
    if step is steps.Step.END_POD and reverted:
        # Slurm lost its start: re-adopt it (a PodGroup's member: the whole group, or none).
        return pod_actions.for_reverted(job, group)
    if step is steps.Step.END_POD:
        return pod_actions.for_ending_job(
            pod,
            job,
            facts.leader,
            cancelled_for_pod=facts.cancelled_for_pod,
            being_deleted=facts.being_deleted,
            drained=facts.drained,
            kill_wait_s=rules.settings.kill_wait_s,
            now=now,
        )
    if step is steps.Step.CHECK_BOUND and facts.being_deleted:
        return Plan()  # this process deleted it already, saying why: once is enough
    if step is steps.Step.CHECK_BOUND:
        return pod_actions.for_bound_pod(pod, job, set(facts.hosts), readoptable=not group)
    if step is steps.Step.LOST_START:
        # A PodGroup's member waits with its group's job as before (its group is one job).
        return Plan((ReplaceLostStart(job.job_id),)) if not group else Plan(waiting(pod, job, group, rules))
    if step is steps.Step.GROUP_TIMED_OUT:
        assert group is not None
        return Plan((ForGroup(group, step),))
    if step is steps.Step.BIND:
        in_group = group if job.group_leader is not None else None
        return Plan((ForGroup(in_group, step),) if in_group else (Bind(seen.avoid),))
    if step is steps.Step.WIDEN:
        assert facts.needed is not None
        return Plan(widening(job, facts.needed, pack=rules.pack))
    return Plan(waiting(pod, job, group, rules))


def adoptable(facts: PodFacts) -> int | None:
    """The newest active job Slurm holds for the Pod's UID, which it does not name yet."""
    uid = facts.view.ref.uid
    return max((job.job_id for ref, job in facts.claims if ref.uid == uid and job.active), default=None)


def widening(job: SlurmJob, needed: frozenset[str], *, pack: bool) -> tuple[Widen | Event, ...]:
    """The job gets back the nodes it no longer needs to leave out, and the Pod says which."""
    given_back = tuple(sorted(set(job.excluded_nodes) - needed))
    more = " …" if len(given_back) > 5 else ""
    why = "they can host the Pod now"
    if pack:
        why += f" (it waited {packing.PACK_PATIENCE_S:.0f} s for a partly used node, --placement=pack)"
    note = (
        f"Slurm job {job.job_id} may now use {len(given_back)} node(s) it had left out "
        f"({', '.join(given_back[:5])}{more}): {why}"
    )
    return (Widen(job.job_id, tuple(sorted(needed)), given_back), Event(ev.PLACEMENT_WIDENED, note))


def waiting(pod: Json, job: SlurmJob, group: str | None, rules: Rules) -> tuple[SetCondition | Event, ...]:
    """Say on the Pod why its job has not started, when that changed. The first time for
    this job, the PlaceholderSubmitted Event follows: written only now, for the few Pods
    that wait, because most are bound within a second and their Scheduled Event names the
    job. Under --placement=pack and for a PodGroup's member it was written at submission
    (how the job was steered, or which group job it is)."""
    reason, message = waiting_condition(job)
    if not ev.condition_changes(pod, False, reason, message):
        return ()
    first = not _names_job(ev.scheduled_condition(pod), job.job_id)
    if not first or rules.pack or group:
        return (SetCondition(reason, message),)
    translation = translate(pod, rules.settings)
    sized = f" ({size(translation.job)})" if translation.job is not None else ""
    note = f"Submitted Slurm job {job.job_id}{sized}; not started after {steps.TRANSIENT_S:.0f} s"
    return (SetCondition(reason, message), Event(ev.PLACEHOLDER_SUBMITTED, note))


def _names_job(condition: Json | None, job_id: int) -> bool:
    """Whether a PodScheduled condition already speaks of this job (waiting's messages)."""
    return bool(condition) and str((condition or {}).get("message", "")).startswith(f"Slurm job {job_id} ")


def waiting_condition(job: SlurmJob) -> tuple[str, str]:
    """(condition reason, message) for a Pod whose job waits in Slurm or to start (R4.5)."""
    if job.pending:
        return (
            ev.PENDING_IN_SLURM,
            f"Slurm job {job.job_id} is pending ({job.reason}) in partition {job.partition}",
        )
    where = ",".join(job.nodes) or "?"
    return (
        ev.WAITING_FOR_START,
        f"Slurm job {job.job_id} is {job.state} on {where}; waiting for its placeholder script to start",
    )
