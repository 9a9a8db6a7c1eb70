"""The scheduler's typed actions: one word per idea for every plan its controllers carry
out (the Pod controller's `pod_plan`, `pod_actions` and `claim_plan`, the PodGroup steps'
`group_plan`, the Slurm-node controller's `slurm_node`). Where an action means what one of
the operator's means, it is the same class, from `sunk.runtime.actions`: `Drain`, `Resume`,
`CancelJob` and `Event`. `RecordJob`, `ReleaseHeld` and `BindPod` are also the writes the
remaining collaborators (re-adoption, the PodGroup steps) ask the executor for in the
middle of a step. The last few are the Pod controller's steps that read Slurm or the API
server on the way: `FindOrSubmit` and `Bind` are read by the controller, which plans
again (`submit_plan`, `bind_plan`); the others it hands to the collaborator that owns them.

Events and PodScheduled reports (`Event`, `SetCondition`) are written by the Pod
controller's executor alone: its collaborators (readopter, group re-adoption, PodGroup
steps) add the ones their step calls for to the pass's `Said` list instead of writing
them, so what a Pod is told has one writer and one vocabulary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sunk.runtime.actions import CancelJob, Drain, Event
from sunk.scheduler.decide.packing import Packing
from sunk.scheduler.decide.steps import Step
from sunk.scheduler.translate import PlaceholderJob
from sunk.scheduler.translate.gang import PodGroup
from sunk.slurm.models import SlurmJob

Json = dict[str, Any]


@dataclass(frozen=True)
class SignalJob:
    """Send `signal` to the job's placeholder script without ending the job (remembered:
    sent once). USR1 tells the script its Pod is being deleted: it holds the node until the
    Pod is gone, with no KillWait deadline and no drain."""

    job_id: int
    signal: str
    why: str  # for the log


@dataclass(frozen=True)
class ConfirmClaim:
    """Before the actions that follow, ask Slurm whether `job_id` is still the claiming Pod's
    job; if not, they are dropped: the index was filled by a listing, and a slurmctld that
    lost its state since may have given that ID to another Pod's new job."""

    job_id: int


@dataclass(frozen=True)
class ReleaseGroup:
    """Cancel a gang's job (`leader`, the ID that ends every component) and let its live,
    unbound members wait for a new one, telling them `reason` and `message`: the group
    timed out, a member left before the start, or a member's node was rejected (`avoid`:
    member UID → the Slurm node its next job must avoid). Members stop naming the job before
    it is cancelled, so none is deleted for its ending. `group` ("namespace/name") submits
    no new job for `retry_after` seconds."""

    leader: int
    reason: str
    message: str
    group: str | None = None
    retry_after: float = 0.0
    avoid: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SubmitAlone:
    """A PodGroup's member beyond the group (its job exists): it gets a job of its own."""


@dataclass(frozen=True)
class SubmitGroup:
    """One heterogeneous job for these members of PodGroup `group`, in this order (the first
    component runs the placeholder script)."""

    group: PodGroup
    members: tuple[Json, ...]


@dataclass(frozen=True)
class CheckNodes:
    """The group's job runs: check each unbound member's node strictly, then plan again."""


@dataclass(frozen=True)
class BindMember:
    """Bind `pod` to Node `node`, where its component `job` runs (`note` ends the Event)."""

    pod: Json
    job: SlurmJob
    node: str
    note: str = ""


@dataclass(frozen=True)
class DeletePod:
    """Delete the plan's Pod (its UID as precondition); once asked, never asked again."""


@dataclass(frozen=True)
class SetCondition:
    """PodScheduled=False with this reason and message on `pod` (None: the plan's Pod);
    nothing is written when the Pod shows that already."""

    reason: str
    message: str
    pod: Json | None = None


@dataclass(frozen=True)
class Widen:
    """The pending job's excluded nodes become `nodes`, giving back `given_back`."""

    job_id: int
    nodes: tuple[str, ...]
    given_back: tuple[str, ...]


@dataclass(frozen=True)
class RecordJob:
    """Write on `pod` the job it names (None: none now), the nodes its jobs must avoid and,
    for a re-adopted job, when it started (epoch); until the cache shows the job, the Pod is
    not judged by the old one. `orphan_why`: the job was submitted for the Pod in this pass;
    should the Pod be gone or replaced, the job is cancelled for this reason and the plan
    stops there."""

    pod: Json
    job_id: int | None
    avoid: tuple[str, ...]
    started_at: int | None = None
    orphan_why: str = ""


@dataclass(frozen=True)
class AdoptJob:
    """The Pod names `job_id`, a job Slurm already holds for it (a crash fell between a
    submission and its record on the Pod)."""

    job_id: int
    avoid: tuple[str, ...]


@dataclass(frozen=True)
class SubmitPod:
    """Submit the plan's Pod's placeholder `job` (its nodes to avoid: `avoid`; where
    --placement=pack steers it: `packing`). The executor answers with the job ID Slurm gave,
    or Slurm's refusal; `submit_plan.answered` says what follows."""

    job: PlaceholderJob
    avoid: tuple[str, ...]
    packing: Packing = field(default_factory=Packing)


@dataclass(frozen=True)
class Attempt:
    """Count one scheduling attempt of a Pod with this result (kube-scheduler's
    `schedule_attempts_total`, which dashboards built for it read)."""

    result: str


@dataclass(frozen=True)
class ReleaseHeld:
    """Let the held job `job_id` start (a re-adopted job, once its ID is known to be new)."""

    job_id: int


@dataclass(frozen=True)
class BindPod:
    """Bind `pod` to Node `node` through the binding subresource; `submitted_at`: when its
    job was submitted (epoch), for the submit-to-started metric. A conflict because the Pod
    is on that Node already stops the plan; any other failure forgets the placement."""

    pod: Json
    node: str
    submitted_at: float | None = None


@dataclass(frozen=True)
class ConfirmEnding:
    """The job's script said Slurm ends it: read the job and end the Pod only if Slurm agrees."""

    job_id: int


@dataclass(frozen=True)
class ConfirmReverted:
    """A bound Pod's job is PENDING again, or runs on another Node's Slurm node, never
    requeued (a slurmctld restarted from state saved before it started): read it; re-adopt
    the Pod, or it goes."""

    job_id: int


@dataclass(frozen=True)
class ConfirmMissing:
    """A bound Pod whose job no listing shows: read the job; the Pod goes if Slurm has none."""


@dataclass(frozen=True)
class Readopt:
    """Slurm lost the bound Pod's running job `old_job` (no end, no record): submit a new
    one pinned to `node`, where the Pod runs, for `time_limit_min` (what was left), held
    until its ID is known to be free there; the Pod then names it."""

    old_job: int
    node: str
    time_limit_min: int | None
    # The Pod's PodGroup: the whole group is re-adopted with one new job, or none of it.
    group: str | None = None
    # Slurm still holds `old_job`, PENDING again: it lost the job's start, not the job.
    pending_again: bool = False
    # ... and has started it again on this other Slurm node ("" when it has not).
    moved_to: str = ""


@dataclass(frozen=True)
class FindOrSubmit:
    """No job yet: adopt `adoptable`, a job Slurm already holds for the Pod (a crash fell
    between a submission and its record), or read what a submission needs (the namespace's
    policy, the nodes the Pod's constraints rule out) and plan it
    (`submit_plan.for_new_job`). `avoid`: the nodes the Pod avoids (its annotation)."""

    adoptable: int | None = None
    avoid: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReplaceLostStart:
    """The unbound Pod's job is PENDING, never requeued, yet its placeholder marked it
    started: slurmctld lost its start (restarted from state saved before it) while the
    first run's processes still run on that node. Started there again, slurmd would refuse
    it ("Duplicate jobid") and Slurm would drain the node; so a new job is submitted for the
    Pod and this one cancelled, before Slurm's next scheduling pass if the scheduler is first."""

    job_id: int


@dataclass(frozen=True)
class Bind:
    """The job runs and its script started: read its node's state and check it strictly
    (`Placement.choose`), then plan the binding or the resubmission (`bind_plan`).
    `avoid`: the nodes the Pod avoids (its annotation), for a resubmission."""

    avoid: tuple[str, ...] = ()


@dataclass(frozen=True)
class ForGroup:
    """The step is the PodGroup's (`step`: FIND_OR_SUBMIT, BIND or GROUP_TIMED_OUT): done by
    the PodGroup steps, under the group's lock."""

    group: str
    step: Step


Report = Event | SetCondition | Attempt
# What a collaborator's step calls for telling Pods (and the attempts metric), in order,
# for the executor to write.
Said = list[Report]
# What the Pod controller's executor carries out of a plan as it stands.
Effect = (
    CancelJob
    | SignalJob
    | Event
    | DeletePod
    | Drain
    | SetCondition
    | Widen
    | Attempt
    | AdoptJob
    | RecordJob
    | SubmitPod
    | BindPod
)
PodAction = ConfirmClaim | Effect
Handover = (
    ConfirmEnding
    | ConfirmMissing
    | ConfirmReverted
    | Readopt
    | FindOrSubmit
    | ReplaceLostStart
    | Bind
    | ForGroup
    | ReleaseGroup
)
GroupAction = SubmitAlone | SubmitGroup | CheckNodes | BindMember | ReleaseGroup | Report


Act = TypeVar("Act")


@dataclass(frozen=True)
class Plan(Generic[Act]):
    """Actions in the order they must happen (a hand-over, if any, last), and when to look
    at the key again."""

    actions: tuple[Act, ...] = ()
    after: float | None = None


# The Pod controller's plans (`pod_plan`, `pod_actions`, `claim_plan`) and the PodGroup
# steps' (`group_plan`): each executor is handed only the actions it carries out.
PodPlan = Plan[PodAction | Handover]
GroupPlan = Plan[GroupAction]
