"""The next step of a live Pod of ours (R4, R5, R8.2): `for_pod`, and what it weighs (is Slurm
ending the job, is a state worth reporting yet, may a submission be sent again). The
planner `pod_plan` turns the step into actions."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from sunk.scheduler.decide.pod_state import PodView
from sunk.slurm.models import SlurmJob

# A pending or starting state is reported on the Pod only once it lasts this long.
TRANSIENT_S = 3.0
# Why a job waits in the normal course of things (Slurm has not looked at it yet, jobs of
# higher priority go first, its resources are busy): under a burst most such jobs start
# within TRANSIENT_S, so a condition write (which every Pod watcher receives) waits that
# long. Any other reason (a partition down, a node unavailable, a limit) is said at once.
ORDINARY_WAITS = frozenset({"None", "Priority", "Resources"})


class Step(enum.Enum):
    NOTHING = "nothing"  # wait for the next event
    WAIT = "wait"  # look again after `Decision.after` seconds
    END_POD = "end-pod"  # Slurm ends (or gave up) the job: the Pod goes, saying why
    CONFIRM_ENDING = "confirm-ending"  # its script says Slurm ends the job: ask Slurm first
    CHECK_BOUND = "check-bound"  # bound: make sure its job still runs where the Pod is
    CONFIRM_MISSING = "confirm-missing"  # bound, but no listing shows its job: ask Slurm
    FIND_OR_SUBMIT = "find-or-submit"  # no job yet: adopt one of its, or submit
    REPORT_PENDING = "report-pending"  # the job waits in Slurm: say why on the Pod
    BIND = "bind"  # the placeholder runs: place the Pod on its node
    REPORT_STARTING = "report-starting"  # the job runs, its script has not marked it yet
    GROUP_TIMED_OUT = "group-timed-out"  # a gang's job waited longer than its PodGroup allows
    WIDEN = "widen"  # a pending job leaves out nodes that can host the Pod now: give them back
    LOST_START = "lost-start"  # unbound, its job PENDING though its script started: replace it


@dataclass(frozen=True)
class Decision:
    step: Step
    after: float = 0.0


def for_pod(
    pod: PodView,
    job: SlurmJob | None,
    *,
    synced: bool,
    now: float,
    ending_reported: bool = False,
    group_timed_out: bool = False,
    widen_after: float | None = None,
) -> Decision:
    """The next step for a live Pod of ours, given its current job (the one its annotation
    names, if the index knows it for this UID) and the wall-clock time `now`.
    `ending_reported`: that job's placeholder script said (on the hooks API) that Slurm is
    ending it. A hook call is a claim, not a fact: the Pod goes only once Slurm agrees.
    `group_timed_out`: the Pod's gang has waited for its job longer than its PodGroup's
    scheduleTimeoutSeconds. `widen_after`: the job leaves out nodes that can host the Pod
    now (a Node uncordoned or Ready again, a slurmd Pod back, or --placement=pack keeping idle
    nodes for whole-node Pods); it gets them back once it has waited that long since its
    submission (0: at once; PACK_PATIENCE_S under --placement=pack)."""
    if pod.refused:
        return Decision(Step.NOTHING)
    bound = pod.bound
    if job is not None and slurm_ends(bound, job):
        return Decision(Step.END_POD)
    if pod.deleting or pod.finished:
        return Decision(Step.NOTHING)
    if ending_reported:
        return Decision(Step.CONFIRM_ENDING)
    if not synced:
        return Decision(Step.WAIT, 1.0)  # no decision before the first full job listing
    if bound:
        return Decision(Step.CHECK_BOUND if job is not None else Step.CONFIRM_MISSING)
    if job is None:
        return Decision(Step.FIND_OR_SUBMIT)
    if job.pending and job.started and not job.restarts:
        return Decision(Step.LOST_START)
    if job.pending:
        if group_timed_out:
            return Decision(Step.GROUP_TIMED_OUT)
        if widen_after is not None:
            left = job.submit_time + widen_after - now if job.submit_time else widen_after
            return Decision(Step.WAIT, left) if left > 0 else Decision(Step.WIDEN)
        if job.reason in ORDINARY_WAITS and (wait := transient_for(job.submit_time, now)):
            return Decision(Step.WAIT, wait)
        return Decision(Step.REPORT_PENDING)
    if job.running and job.started:
        return Decision(Step.BIND)
    if job.active:  # CONFIGURING, or RUNNING before the script marked it started
        if wait := transient_for(job.start_time, now):
            return Decision(Step.WAIT, wait)  # the script usually starts within a second
        return Decision(Step.REPORT_STARTING)
    return Decision(Step.NOTHING)


def slurm_ends(bound: bool, job: SlurmJob) -> bool:
    """Slurm is ending the Pod's job, or gave up its resources while the Pod is `bound`
    (requeued, suspended): either way the Pod must go."""
    return job.ending or (bound and job.gave_up_resources)


def unanswered_wait(unanswered_at: float, listed_at: float, grace_s: float) -> bool:
    """A submission sent at `unanswered_at` (monotonic; 0: none) got no answer: Slurm may
    hold its job, so nothing is submitted again until a listing requested at least
    `grace_s` later (`listed_at`) could have shown it (R8.2: never two jobs for one Pod)."""
    return bool(unanswered_at) and listed_at < unanswered_at + grace_s


def transient_for(since: int, now: float) -> float:
    """Seconds left before a state entered at `since` (epoch) is worth a condition write;
    0 once it has lasted TRANSIENT_S (or when Slurm gave no time)."""
    if not since:
        return 0.0
    return max(0.0, since + TRANSIENT_S - now)
