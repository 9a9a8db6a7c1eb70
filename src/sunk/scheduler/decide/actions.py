"""The scheduler's typed actions: one word per idea for every plan its controllers carry
out (the Pod controller's `pod_plan` and `pod_actions`, the Slurm-node controller's
`slurm_node`). Where an action means what one of the operator's means, it has that
action's name. The last few are the Pod controller's steps that read Slurm or the API
server on the way: its executor hands each to the collaborator that owns it."""

from __future__ import annotations

from dataclasses import dataclass

from sunk.scheduler.decide import Step


@dataclass(frozen=True)
class CancelJob:
    """Cancel `job_id` (and remember it was done for this Pod: never twice)."""

    job_id: int
    why: str  # for the log


@dataclass(frozen=True)
class DeletePod:
    """Delete the plan's Pod (its UID as precondition); once asked, never asked again."""


@dataclass(frozen=True)
class Drain:
    """Take `node` out of use in Slurm, saying why."""

    node: str
    reason: str


@dataclass(frozen=True)
class Resume:
    """Put `node` back in use; `host` is its uncordoned Node, for the log."""

    node: str
    host: str


@dataclass(frozen=True)
class Event:
    """An Event on the plan's Pod."""

    reason: str
    note: str
    warning: bool = False


@dataclass(frozen=True)
class SetCondition:
    """PodScheduled=False with this reason and message."""

    reason: str
    message: str


@dataclass(frozen=True)
class Widen:
    """The pending job's excluded nodes become `nodes`, giving back `given_back`."""

    job_id: int
    nodes: tuple[str, ...]
    given_back: tuple[str, ...]


@dataclass(frozen=True)
class ConfirmEnding:
    """The job's script said Slurm ends it: read the job and end the Pod only if Slurm agrees."""

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


@dataclass(frozen=True)
class FindOrSubmit:
    """No job yet: adopt one Slurm holds for the Pod, or submit one."""


@dataclass(frozen=True)
class Bind:
    """The job runs and its script started: check its node strictly, then bind (or resubmit)."""


@dataclass(frozen=True)
class ForGroup:
    """The step is the PodGroup's (`step`: FIND_OR_SUBMIT, BIND or GROUP_TIMED_OUT): done by
    the PodGroup steps, under the group's lock."""

    group: str
    step: Step


PodAction = CancelJob | Event | DeletePod | Drain | SetCondition | Widen
Handover = ConfirmEnding | ConfirmMissing | Readopt | FindOrSubmit | Bind | ForGroup


@dataclass(frozen=True)
class Plan:
    """A Pod's actions in the order they must happen (a hand-over, if any, last), and when
    to look at the Pod again."""

    actions: tuple[PodAction | Handover, ...] = ()
    after: float | None = None
