"""Binding a Pod to the Node that hosts its job's Slurm node (R4.3, R4.4): the one step
both the Pod controller and the PodGroup steps end with. Which Node, and whether it may be
used, is `placement.Placement`'s strict check; this has the binding written (`BindPod`) and
says what its `Scheduled` Event must tell; the Pod controller's executor writes both."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sunk import metrics
from sunk.kube import events as ev
from sunk.kube.client import KubeError
from sunk.metrics import kube_scheduler
from sunk.runtime.actions import Event
from sunk.runtime.controller import Outcome
from sunk.runtime.ports import Clock
from sunk.scheduler.decide.actions import BindPod, Said
from sunk.scheduler.placement import Choice, Placement
from sunk.scheduler.pod_executor import PodExecutor
from sunk.scheduler.ports import KubePort
from sunk.slurm.models import SlurmJob

Json = dict[str, Any]


class Binder:
    def __init__(self, *, kube: KubePort, executor: PodExecutor, places: Placement, clock: Clock) -> None:
        self.kube = kube  # read only: whether a conflicting binding is this one, done before
        self.executor = executor
        self.clock = clock
        self.places = places

    async def target(self, pod: Json, job: SlurmJob, company: list[tuple[str, Json]] | None = None) -> Choice:
        """The Node to bind to, or the problem and whether to avoid the Slurm node
        (`company`: a group's members placed before it, see `Placement.choose`)."""
        return await self.places.choose(pod, job, company)

    async def bind_to(self, pod: Json, job: SlurmJob, node_name: str, said: Said, note: str = "") -> Outcome:
        meta = pod["metadata"]
        try:
            await self.executor.bind_pod(BindPod(pod, node_name))
        except KubeError as err:
            if err.conflict and await self._already_on(pod, node_name):
                return Outcome()
            self.places.forget(meta["uid"])
            raise
        _observe_bound(pod, job, self.clock.now())
        said.append(
            Event(
                ev.SCHEDULED,
                f"Successfully assigned {meta['namespace']}/{meta['name']} to {node_name} "
                f"(Slurm job {job.job_id} on node {job.nodes[0]}{_allocation(job)}{note})",
                pod=pod,
            )
        )
        return Outcome()

    async def _already_on(self, pod: Json, node: str) -> bool:
        meta = pod["metadata"]
        current = await self.kube.get(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
        return bool((current.get("spec") or {}).get("nodeName") == node)


def _observe_bound(pod: Json, job: SlurmJob, now: float) -> None:
    kube_scheduler.attempt("bound")
    created = pod["metadata"].get("creationTimestamp")
    if created:
        kube_scheduler.bound_after(
            now - dt.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
        )
    if job.submit_time:
        metrics.SUBMIT_TO_STARTED.observe(max(0.0, now - job.submit_time))


def _allocation(job: SlurmJob) -> str:
    """What Slurm gave the job, as its TRES, for the Scheduled Event (without the node count)."""
    tres = ",".join(t for t in job.allocated.split(",") if t and not t.startswith(("node=", "billing=")))
    return f", allocated {tres}" if tres else ""
