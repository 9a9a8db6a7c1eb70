"""May a job that names a Pod key live (R5.1, R8.2)? Whether the Pod owns its job, whether
it still holds the job's resources, and what becomes of a job it does not own (`for_claim`,
planned by `claim_plan`). Apart from the Pod's own step because a job can name a Pod that
is gone, or one that has moved on to another job."""

from __future__ import annotations

import enum

from sunk.scheduler.decide.pod_state import PodView
from sunk.scheduler.translate.job import PodRef
from sunk.slurm.models import SlurmJob

# A cancelled job that Slurm still runs this long after is cancelled again.
CANCEL_CONFIRM_S = 5.0


class Claim(enum.Enum):
    KEEP = "keep"  # the Pod it names owns it (or nothing is to be done now)
    SIGNAL = "signal"  # its Pod is being deleted: ask the script to end, keep the resources
    CANCEL = "cancel"  # its Pod is gone, finished, refused or has another job: end it now
    RECHECK = "recheck"  # cancelled already; look again until Slurm ends it
    RELEASE_GROUP = "release-group"  # a gang's member left before its job started: the
    # job is cancelled and the other members wait for a new one (never deleted for it)


def owns(pod: PodView | None, ref: PodRef, job: SlurmJob) -> bool:
    """The live Pod that `job` names still counts on it."""
    if pod is None:
        return False
    if pod.ref.uid != ref.uid or pod.deleting:
        return False
    if pod.finished or pod.refused:
        return False  # a refused Pod owns no job, whatever Slurm made of the refusal
    return pod.job_id is None or pod.job_id == job.job_id


def holds_job(pod: PodView | None, ref: PodRef, job_id: int) -> bool:
    """The Pod `ref` may still run something on job `job_id`'s resources: it exists, has not
    finished, and has not been given another job since (a rejected placement). A Pod being
    deleted still holds its job: its containers may still run. One never bound that names
    no job (a gang's member whose group was given a new job) runs nothing anywhere."""
    if pod is None or pod.ref.uid != ref.uid or pod.finished:
        return False
    if pod.job_id is None and not pod.bound:
        return False
    return pod.job_id in (None, job_id)


def for_claim(
    pod: PodView | None,
    ref: PodRef,
    job: SlurmJob,
    *,
    cancelled_at: float | None,
    signalled: bool,
    now: float,
    others_running: bool = False,
) -> Claim:
    """R5.1 and R8.2 for one active job naming this Pod key. `cancelled_at` is when this
    process's cancel of it was accepted (monotonic), `now` the same clock. For a component
    of a gang's job, `others_running` says another member still runs: a member that
    succeeded waits for them (the group's job ends as one), a member that failed ends it."""
    if not job.active or owns(pod, ref, job):
        return Claim.KEEP
    group = job.group_leader is not None
    if group and others_running and pod is not None and pod.ref.uid == ref.uid and pod.succeeded:
        return Claim.KEEP
    gone = pod is None or not holds_job(pod, ref, job.job_id) or pod.refused
    if gone:
        if group and job.pending:
            return Claim.RELEASE_GROUP if cancelled_at is None else Claim.KEEP
        # Cancelled even while Slurm is ending it: that stops a requeue.
        if cancelled_at is None:
            return Claim.CANCEL
        if not job.ending and now - cancelled_at >= CANCEL_CONFIRM_S:
            return Claim.CANCEL  # accepted but lost (a slurmctld crash): again
        return Claim.RECHECK if not job.ending else Claim.KEEP
    # The Pod is being deleted: its containers may still run, so the job keeps the node.
    # A gang's member is not signalled: the group's job ends as one once the Pod is gone.
    return Claim.SIGNAL if job.running and not signalled and not group else Claim.KEEP
