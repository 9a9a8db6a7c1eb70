"""What a Pod's own object says of it, read once per pass (`view`) and then by every other
question: whether its containers ended for good, whether it was refused for good, and which
job it records. Kept apart so the claims, the Pod's step and the planners read a Pod the
same way, from one `PodView` instead of each from the object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sunk.scheduler.translate import gang
from sunk.scheduler.translate.job import PodRef

Json = dict[str, Any]
ENDED_PHASES = ("Succeeded", "Failed")
# PodScheduled reasons that are final: the Pod is never tried again (R2.4).
FINAL_REASONS = frozenset({"InvalidForSlurm", "RejectedBySlurm", "ForbiddenByPolicy"})


def finished(pod: Json) -> bool:
    """The Pod's containers have all ended for good (phase Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") in ENDED_PHASES


def finally_refused(pod: Json) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition.get("status") == "False" and condition.get("reason") in FINAL_REASONS
    return False


def recorded_job_id(pod: Json, prefix: str) -> int | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(prefix + "job-id")
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


def avoid_nodes(pod: Json, prefix: str) -> tuple[str, ...]:
    """The Slurm nodes where a placement of the Pod was rejected for good (its annotation)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(prefix + "avoid-nodes")
    return tuple(n for n in str(raw or "").split(",") if n)


@dataclass(frozen=True)
class PodView:
    """What a live Pod's own object says, read once per pass by the Pod controller."""

    ref: PodRef
    job_id: int | None  # the job its annotation names
    refused: bool  # refused for good
    group: str | None  # the PodGroup it belongs to
    bound: bool  # it has a Node
    avoid: tuple[str, ...]  # where a placement of its was rejected for good
    finished: bool = False  # its containers ended for good
    deleting: bool = False  # its deletion was asked (deletionTimestamp)
    succeeded: bool = False  # phase Succeeded


def view(pod: Json, prefix: str) -> PodView:
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return PodView(
        # Built here, not by PodRef.of: one read of the object, in one module.
        PodRef(meta.get("namespace", "default"), meta.get("name", ""), meta.get("uid", "")),
        recorded_job_id(pod, prefix),
        finally_refused(pod),
        gang.group_of(pod),
        bool((pod.get("spec") or {}).get("nodeName")),
        avoid_nodes(pod, prefix),
        finished=phase in ENDED_PHASES,
        deleting=bool(meta.get("deletionTimestamp")),
        succeeded=phase == "Succeeded",
    )
