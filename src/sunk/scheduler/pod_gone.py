"""Whether a placeholder may end: its Pod, and every other member of its gang, no longer
needs the job's resources (R5.1 to R5.3); and when one still does, why, in words."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from sunk.runtime.ports import Clock
from sunk.scheduler.decide.claims import holds_job
from sunk.scheduler.decide.pod_state import view
from sunk.scheduler.hooks.server import PodGoneWaiters
from sunk.scheduler.pods import PodStore
from sunk.scheduler.translate import PodRef

Json = dict[str, Any]
# (Pod, its job ID) for every member whose Pod must be gone before job `job_id` may end.
Members = Callable[[PodRef, int], list[tuple[PodRef, int]]]


def why_held(pod: Json) -> str:
    """What keeps a Pod that holds its job there, as the API server shows it (a predicate
    of the Pod: "its Pod " + this reads as a sentence)."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase") or "unknown"
    node = spec.get("nodeName")
    where = f" on Node {node}" if node else ""
    if not meta.get("deletionTimestamp"):
        return (
            f"has not been deleted (phase {phase}{where}); the scheduler deletes it once Slurm "
            "shows its job ending"
        )
    finalizers = meta.get("finalizers") or []
    waiting_on = f"; finalizers {', '.join(finalizers)}" if finalizers else ""
    return (
        f"is terminating (phase {phase}{where}, grace period {meta.get('deletionGracePeriodSeconds')} s, "
        f"to be gone by {meta['deletionTimestamp']}{waiting_on}): its containers have not been "
        "reported stopped"
    )


class PodGone:
    def __init__(
        self, pods: PodStore, members: Members, waiters: PodGoneWaiters, prefix: str, clock: Clock
    ) -> None:
        self._clock = clock
        self._pods = pods
        self._members = members
        self._waiters = waiters
        self._prefix = prefix

    def _holding(self, member: PodRef, job_id: int) -> bool:
        pod = self._pods.get(f"{member.namespace}/{member.name}")
        return holds_job(view(pod, self._prefix) if pod is not None else None, member, job_id)

    async def wait(self, ref: PodRef, job_id: int, within: float) -> bool:
        """True once no member holds the job, waiting up to `within` seconds for the
        DELETED events."""
        deadline = self._clock.monotonic() + within
        for member, member_job in self._members(ref, job_id):
            holding = partial(self._holding, member, member_job)
            if not await self._waiters.wait(
                member.uid, holding, max(0.0, deadline - self._clock.monotonic())
            ):
                return False
        return True

    def why_waiting(self, ref: PodRef, job_id: int) -> str:
        for member, member_job in self._members(ref, job_id):
            pod = self._pods.get(f"{member.namespace}/{member.name}")
            if pod is not None and holds_job(view(pod, self._prefix), member, member_job):
                who = "its Pod" if member == ref else f"its gang's member {member}"
                return f"{who} {why_held(pod)}"
        return "no Pod holds it any more: the next call is answered gone"
