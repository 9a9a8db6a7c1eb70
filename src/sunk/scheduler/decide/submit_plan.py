"""A Pod's placeholder job, decided without I/O (R2, R3, R4.3, R8.2, R9.2): whether the Pod
may have one at all, whether a node can take it now, what is submitted, and what follows
Slurm's answer.

The Pod controller reads what this needs just before (`SubmitInputs`: the translation,
the namespace's policy, the nodes the Pod's constraints rule out) and carries the answer
out through its executor; the PodGroup steps use `prepare` and `refusal` for each member
of a group they submit as one job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sunk.kube import events as ev
from sunk.runtime.actions import Event
from sunk.scheduler import policy
from sunk.scheduler.decide import submission
from sunk.scheduler.decide.actions import (
    AdoptJob,
    Attempt,
    Plan,
    PodPlan,
    RecordJob,
    Report,
    SetCondition,
    SubmitPod,
)
from sunk.scheduler.decide.packing import pack
from sunk.scheduler.decide.problems import placement_problem
from sunk.scheduler.translate import PlaceholderJob, Translation
from sunk.slurm.models import SlurmNode
from sunk.slurm.request import JobRequest, gres_text

if TYPE_CHECKING:
    from sunk.scheduler.ports import SubmitAnswer

Json = dict[str, Any]
# How soon a Pod no node can take now is looked at again.
NO_NODE_RECHECK_S = 5.0
ORPHANED = "its Pod changed during submit"


@dataclass(frozen=True)
class SubmitRules:
    """The scheduler's settings a submission is decided by."""

    prefix: str  # --annotation-prefix
    unsupported: Callable[[JobRequest], list[str]]  # what this REST version cannot express
    refuse_static_cpu: bool  # --static-cpu-pods=refuse
    pack: bool  # --placement=pack


@dataclass(frozen=True)
class SubmitInputs:
    """What a submission is decided from, read just before it."""

    translation: Translation
    policy: policy.Policy  # the namespace trust policy in force
    # Slurm node → why the job leaves it out: the Pod's own constraints, and a node a
    # rejected placement leaves out only while its problem lasts.
    excluded: Mapping[str, str]
    slurm_nodes: AbstractSet[str]
    # The Slurm node on the Node with the most allocatable: asked only when no node can
    # take the Pod, so its reason is said first.
    largest: Callable[[], str | None]
    usage: Sequence[SlurmNode] = ()  # the last node listing (--placement=pack)

    def leaving_out(self, nodes: Mapping[str, str]) -> SubmitInputs:
        """The same, with `nodes` (Slurm node → why) left out besides."""
        return dataclasses.replace(self, excluded={**self.excluded, **nodes})


@dataclass(frozen=True)
class NewJobFacts:
    """What a Pod without a job is planned from."""

    pod: Json
    avoid: tuple[str, ...]  # where a placement of its was rejected before (its annotation)
    adoptable: int | None  # the newest active job Slurm holds for the Pod's UID
    unanswered: bool  # a submission got no answer and no listing since could show its job
    inputs: SubmitInputs | None  # read unless the Pod adopts a job or waits


@dataclass(frozen=True)
class Prepared:
    """The job to submit (None: the Pod was refused, or no node can take it now), what the
    Pod is told either way, and when it is looked at again."""

    job: PlaceholderJob | None
    said: tuple[Report, ...] = ()
    after: float | None = None


def refusal(pod: Json, reason: str, problems: Sequence[str]) -> tuple[Report, ...]:
    """A final answer (R2.4): an Event and the condition; the Pod is never tried again."""
    message = "; ".join(problems)
    result = "rejected_by_slurm" if reason == ev.REJECTED_BY_SLURM else "refused"
    return (
        Attempt(result),
        Event(ev.FAILED_SCHEDULING, message, warning=True, pod=pod),
        SetCondition(reason, message, pod),
    )


def prepare(pod: Json, inputs: SubmitInputs, rules: SubmitRules, avoid: tuple[str, ...]) -> Prepared:
    """The job to submit for `pod`, or why none: refused for good (invalid, forbidden,
    unsupported) or no node can take it now (said once per change of the reason)."""
    vetting = submission.vet(
        pod,
        inputs.translation,
        inputs.policy,
        rules.unsupported,
        prefix=rules.prefix,
        refuse_static_cpu=rules.refuse_static_cpu,
    )
    if vetting.refusal is not None:
        return Prepared(None, refusal(pod, vetting.refusal.reason, vetting.refusal.problems))
    said: tuple[Report, ...] = tuple(
        Event(notice.reason, notice.note, warning=True, pod=pod) for notice in vetting.notices
    )
    assert vetting.job is not None
    job = vetting.job
    excluded = dict(inputs.excluded)
    required = job.options.required_nodes
    if placement_problem(required, excluded, avoid, inputs.slurm_nodes) is None:
        return Prepared(job.avoiding(tuple(excluded) + avoid), said)
    # Said again with the largest Node's reason first (found only when needed).
    message = placement_problem(required, excluded, avoid, inputs.slurm_nodes, inputs.largest())
    assert message is not None
    if ev.condition_changes(pod, False, ev.UNSCHEDULABLE, message):
        said += (
            SetCondition(ev.UNSCHEDULABLE, message, pod),
            Event(ev.FAILED_SCHEDULING, message, warning=True, pod=pod),
        )
    return Prepared(None, said, NO_NODE_RECHECK_S)


def for_new_job(facts: NewJobFacts, rules: SubmitRules) -> PodPlan:
    """A Pod without a job: adopt the one Slurm holds for it (a crash fell between the
    submission and its record), wait for a listing after a submission that got no answer,
    or submit one."""
    if facts.adoptable is not None:
        return Plan(adoption(facts.adoptable, facts.avoid))
    if facts.unanswered:
        return Plan(after=1)
    assert facts.inputs is not None
    prepared = prepare(facts.pod, facts.inputs, rules, facts.avoid)
    if prepared.job is None:
        return Plan(prepared.said, after=prepared.after)
    return Plan(
        (*prepared.said, submitting(prepared.job, facts.avoid, facts.inputs.usage, pack_on=rules.pack))
    )


def adoption(job_id: int, avoid: tuple[str, ...]) -> tuple[AdoptJob, Event]:
    """The Pod names `job_id`, which Slurm already holds for it, and is told so."""
    return AdoptJob(job_id, avoid), Event(
        ev.PLACEHOLDER_ADOPTED, f"Found existing Slurm job {job_id} for this Pod"
    )


def submitting(
    job: PlaceholderJob, avoid: tuple[str, ...], usage: Sequence[SlurmNode], *, pack_on: bool
) -> SubmitPod:
    """The submission of `job`; under --placement=pack steered towards partly used nodes."""
    if not pack_on:
        return SubmitPod(job, avoid)
    packing = pack(job, list(usage))
    return SubmitPod(dataclasses.replace(job, packed_away=packing.left_out), avoid, packing)


def answered(pod: Json, action: SubmitPod, answer: SubmitAnswer | str, *, pack_on: bool) -> tuple[Any, ...]:
    """What follows Slurm's answer to `action`: a refusal (str) refuses the Pod for good;
    a job ID is recorded on the Pod. Neither a condition nor (but with --placement=pack) an
    Event yet: most jobs start within a second, and every API write costs every watcher a
    round. Both come once the job has waited (`pod_plan.waiting`); a bound Pod's Scheduled
    Event names its job."""
    if isinstance(answer, str):
        return refusal(pod, ev.REJECTED_BY_SLURM, [answer])
    job, job_id = action.job, answer.job_id
    then: list[Any] = [RecordJob(pod, job_id, action.avoid, orphan_why=ORPHANED), Attempt("submitted")]
    if pack_on:
        towards, left_out = action.packing.towards, action.packing.left_out
        packed = ""
        if left_out:
            more = " …" if len(towards) > 3 else ""
            packed = (
                f"; packed towards the partly used {', '.join(towards[:3])}{more}, "
                f"{len(left_out)} idle node(s) left out (--placement=pack)"
            )
        then.append(Event(ev.PLACEHOLDER_SUBMITTED, f"Submitted Slurm job {job_id} ({size(job)}){packed}"))
    if answer.warning:
        # Slurm queued the job but said why it may not start soon: the job stays and waits
        # (its pending reason follows on the condition); the Pod is not refused.
        note = f"Slurm accepted job {job_id} but says: {answer.warning}"
        then.append(Event(ev.SLURM_WARNING, note, warning=True))
    return tuple(then)


def size(job: PlaceholderJob) -> str:
    """A job's size in words, for the Events that name it."""
    gpus = f", GRES {gres_text(job.gres)}" if job.gres else ""
    return f"{job.cpus} CPU, {job.memory_mib} MiB{gpus}"
