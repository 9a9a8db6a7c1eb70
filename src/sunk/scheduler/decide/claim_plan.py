"""The Pod controller's planner for a job that names a Pod key (R5.1, R8.2, R9.1): from
what one pass gathered about the claim, the typed actions that settle it, decided without
I/O.

`claims.for_claim` says whether the job may live; this turns the answer into writes. A
cancel or a group's release is always preceded by `ConfirmClaim` (Slurm is asked whether
the ID is still that Pod's job), and a plan that cancels or must see Slurm end the job asks
to look again after CANCEL_CONFIRM_S.
"""

from __future__ import annotations

from dataclasses import dataclass

from sunk.kube import events as ev
from sunk.runtime.actions import CancelJob
from sunk.scheduler.decide.actions import ConfirmClaim, Plan, PodPlan, ReleaseGroup, SignalJob
from sunk.scheduler.decide.claims import CANCEL_CONFIRM_S, Claim, for_claim
from sunk.scheduler.decide.pod_state import PodView
from sunk.scheduler.translate.job import PodRef
from sunk.slurm.models import SlurmJob

# How soon a job being handed over to its Pod is looked at again.
HANDOVER_RECHECK_S = 1.0


@dataclass(frozen=True)
class ClaimFacts:
    """One job the index lists for a Pod key, and what this process knows of it."""

    ref: PodRef  # the Pod the job names
    job: SlurmJob
    pod: PodView | None  # the Pod the cache holds under that key, if any
    cancelled_at: float | None = None  # monotonic time this process's cancel was accepted
    signalled: bool = False  # this process signalled (or cancelled) it for the Pod already
    others_running: bool = False  # a gang's job: another member is there and not finished
    # this process is handing the job over to its Pod (a PodGroup's re-adoption, between
    # its submission and its record on the members): left alone meanwhile
    handing_over: bool = False


def plan(facts: ClaimFacts, *, now: float) -> PodPlan:
    """`now` is the monotonic clock `cancelled_at` was taken on."""
    job, ref = facts.job, facts.ref
    if facts.handing_over:
        return Plan(after=HANDOVER_RECHECK_S)
    verdict = for_claim(
        facts.pod,
        ref,
        job,
        cancelled_at=facts.cancelled_at,
        signalled=facts.signalled,
        now=now,
        others_running=facts.others_running,
    )
    if verdict is Claim.RELEASE_GROUP:
        assert job.group_leader is not None
        message = (
            f"member {ref.name} left before the group's Slurm job {job.group_leader} started; that job "
            "was cancelled and the group waits for its members again"
        )
        return Plan((ConfirmClaim(job.job_id), ReleaseGroup(job.group_leader, ev.GROUP_RELEASED, message)))
    if verdict is Claim.CANCEL:
        # Nothing of the Pod runs any more: cancel; the script's hook call learns at once
        # that the Pod is gone and exits, so the job ends without waiting for KillWait. A
        # gang's job ends as one: cancelling its leader ends every component.
        again = " again (Slurm did not act on the first cancel)" if facts.cancelled_at is not None else ""
        cancel = CancelJob(
            job.group_leader or job.job_id, f"its Pod is gone or done{again}", settles_claim=True
        )
        return Plan((ConfirmClaim(job.job_id), cancel), after=None if job.ending else CANCEL_CONFIRM_S)
    if verdict is Claim.SIGNAL:
        # SIGUSR1, not SIGTERM: the script then knows Slurm is not ending the job.
        return Plan((SignalJob(job.job_id, "USR1", "its Pod is being deleted"),))
    if verdict is Claim.RECHECK:
        return Plan(after=CANCEL_CONFIRM_S)
    return Plan()
