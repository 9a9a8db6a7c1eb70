"""The actions both components plan with the same meaning: one class and one set of field
names for each, so that a drain, a resume, a cancel or an Event reads the same in the
scheduler's plans and the operator's, and a reader who knows one knows the other.

Each component keeps its own vocabulary (`sunk.scheduler.decide.actions`,
`sunk.operator.nodeset.actions`) for what only it does, and names these in its unions; its executor
still decides how each is carried out (what it logs, what it remembers). Where only one
component needs a field, the shared class carries it with a default that means "nothing
more" to the other:

- `Resume.host`: the scheduler logs the uncordoned Node it resumes for; the operator has no
  such Node to name, and leaves it empty.
- `CancelJob.settles_claim`: the scheduler remembers a cancel that settles a gone Pod's
  claim, to send it again if Slurm lost it; the operator's cancels (the jobs on a member it
  removes) settle no claim, and leave it False.
- `Event.pod`: the Pod the Event is about; None means the object the plan is about, which
  is the scheduler's Pod and the operator's NodeSet (the operator names a member here).
- `Event.once_as`: a name that makes the Event unique. The operator names most of its
  Events; the scheduler names none of those it writes on Pods (its drain Events, named,
  are the Slurm-node controller's own `DrainEvent`), and leaves it None.

What only shares a name stays with its component: the two `DeletePod`s (the operator
names the member and why; the scheduler deletes the plan's Pod) and the scheduler's
`SetCondition` against the operator's `SetNodeCondition`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class Drain:
    """Take Slurm node `node` out of use, with `reason` as Slurm's reason for it."""

    node: str
    reason: str


@dataclass(frozen=True)
class Resume:
    """Put Slurm node `node` back in use; `host`: the Kubernetes Node it was taken out of
    use for, named in the log ("" when there is none to name)."""

    node: str
    host: str = ""


@dataclass(frozen=True)
class CancelJob:
    """Cancel Slurm job `job_id`; `why` is for the log. `settles_claim`: the cancel ends a
    job whose Pod is gone, so the scheduler remembers when, and sends it again if a
    slurmctld crash lost it."""

    job_id: int
    why: str
    settles_claim: bool = False


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event: `reason` and `note`, a Warning if `warning`. `pod`: the Pod it is
    about (None: the object the plan is about). `once_as`: a name that makes the Event
    unique, so it is recorded once however often the plan asks for it."""

    reason: str
    note: str
    warning: bool = False
    pod: Json | None = None
    once_as: str | None = None
