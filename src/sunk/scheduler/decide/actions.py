"""The scheduler's typed actions: one word per idea for every plan its controllers carry
out (the Pod controller's `pod_actions`, the Slurm-node controller's `slurm_node`). Where
an action means what one of the operator's means, it has that action's name."""

from __future__ import annotations

from dataclasses import dataclass


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
