"""What a NodeSet plan asks for, in order: typed, so the plan stays pure and the controller
is the only place that talks to Kubernetes and Slurm. A drain, a resume, a job's cancel and
an Event mean here what they mean to the scheduler: those are the shared
`sunk.runtime.actions`, named in `Action` with the operator's own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sunk.runtime.actions import CancelJob, Drain, Event, Resume

Json = dict[str, Any]


@dataclass(frozen=True)
class CreatePod:
    pod: Json


@dataclass(frozen=True)
class DeletePod:
    """Delete a member Pod. `idle_on`: its Slurm node, when it goes because that node was
    seen drained and idle: the controller reads Slurm again just before the deletion and
    keeps the Pod unless that read still shows it so (NodeSetController.confirm_idle).
    `grace_s`: the grace period to delete with, where the Pod's own must not apply."""

    name: str
    uid: str
    why: str
    idle_on: str = ""
    grace_s: int | None = None  # 0: at once (a member stuck terminating); None: the Pod's own


@dataclass(frozen=True)
class DeleteSlurmNode:
    node: str
    why: str


@dataclass(frozen=True)
class MarkDown:
    """Mark a Slurm node DOWN (its machine is lost: sunk.operator.nodeset.node_faults)."""

    node: str
    reason: str


@dataclass(frozen=True)
class SetNodeCondition:
    """Write one condition on a Kubernetes Node's status (merged by type; others stay)."""

    node: str
    condition: Json


@dataclass(frozen=True)
class LabelBusy:
    """Mark a member busy or idle in Kubernetes (what the chart's PodDisruptionBudget reads)."""

    name: str
    uid: str
    busy: bool


@dataclass(frozen=True)
class SetFinalizer:
    """Add (present) or remove the NodeSet's finalizer, so that its deletion waits until
    every member left the job-safe way."""

    present: bool


@dataclass(frozen=True)
class PatchStatus:
    status: Json


Action = (
    CreatePod
    | DeletePod
    | DeleteSlurmNode
    | Drain
    | Resume
    | MarkDown
    | SetNodeCondition
    | LabelBusy
    | CancelJob
    | SetFinalizer
    | Event
    | PatchStatus
)
