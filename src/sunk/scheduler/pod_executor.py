"""The Pod controller's executor: every write its path makes to Kubernetes or Slurm.

The Pod controller and its collaborators (submitting, binding, re-adoption, the PodGroup
steps, job IDs) read the caches and Slurm and decide; what they decide to write comes here
as a typed action (`decide.actions`) and is carried out as it stands. A handler decides
nothing: it makes the write, records in `Memory` that this process made it (so a later
pass neither repeats it nor judges the Pod by a cache that does not show it yet), and
raises what the port raised, for the caller that knows what a refusal means. A handler
that answers (a submission's job ID) answers for the step that asked, which goes on with
it. Keeping the writes in one file lets a reader find who writes what in one place, and
`tests/unit/test_layering.py` fails when another scheduler module calls a port's write
method. The Slurm-node controller is a controller of its own and keeps its drains and
resumes in its own file (`slurmnodes`).
"""

from __future__ import annotations

import logging
from typing import Any

from sunk import metrics
from sunk.kube import events as ev
from sunk.kube.client import KubeError
from sunk.runtime.actions import CancelJob, Drain, Event
from sunk.runtime.ports import Clock
from sunk.scheduler.decide import actions, pod_state
from sunk.scheduler.decide.pod_actions import STARTED_AT
from sunk.scheduler.jobs import JobIndex
from sunk.scheduler.memory import Memory
from sunk.scheduler.ports import KubePort, SlurmPort, SubmitAnswer
from sunk.scheduler.translate import PodRef
from sunk.slurm.errors import SlurmError
from sunk.slurm.models import SlurmJob

log = logging.getLogger(__name__)
Json = dict[str, Any]


class PodExecutor:
    """Carries out the Pod path's writes, one typed action at a time."""

    def __init__(
        self,
        *,
        kube: KubePort,
        slurm: SlurmPort,
        recorder: ev.Recorder,
        index: JobIndex,
        memory: Memory,
        prefix: str,
        clock: Clock,
        placement: str = "slurm",
    ) -> None:
        self.kube = kube
        self.slurm = slurm
        self.recorder = recorder
        self.index = index
        self.memory = memory
        self.prefix = prefix
        self.clock = clock
        self.placement_policy = placement  # --placement, for the packing metric

    # -- a plan's effects, for the Pod controller's loop ------------------------------------
    async def apply(
        self,
        ref: PodRef,
        pod: Json | None,
        job: SlurmJob | None,
        action: actions.Effect,
        *,
        deleting: bool = False,
    ) -> bool:
        """One effect of a Pod controller's plan; False when the plan must stop here (Slurm
        would not widen). `deleting`: the plan deletes the Pod, so its Events say why and
        must be written first (an unreachable API server is raised, not skipped)."""
        if isinstance(action, CancelJob):
            assert job is not None
            log.info("cancelling Slurm job %s of %s: %s", action.job_id, ref, action.why)
            await self.slurm.cancel(action.job_id)
            if action.settles_claim:
                self.memory.cancelled[(job.job_id, ref.uid)] = self.clock.monotonic()
            else:
                self.memory.signalled.add((job.job_id, ref.uid))
        elif isinstance(action, actions.SignalJob):
            log.info("telling Slurm job %s of %s that %s", action.job_id, ref, action.why)
            await self.slurm.cancel(action.job_id, signal=action.signal)
            self.memory.signalled.add((action.job_id, ref.uid))
        elif isinstance(action, Event | actions.SetCondition):
            await self.tell(pod, action, explains=deleting)
        elif isinstance(action, actions.DeletePod):
            assert pod is not None
            await self._delete(pod)
        elif isinstance(action, Drain):
            assert job is not None
            self.memory.drained.add(job.job_id)  # the placeholder script drains too: one try here
            problem = await self.slurm.drain(action.node, action.reason)
            if problem:
                await self.tell(pod, Event(ev.NODE_DRAINED, problem, warning=True))
        elif isinstance(action, actions.Widen):
            return await self._widen(ref, action)
        return True

    async def tell(self, pod: Json | None, report: actions.Report, *, explains: bool = False) -> None:
        """Write an Event or the PodScheduled condition on the report's Pod (else the plan's):
        the scheduler's one place that tells Pods anything (but the Slurm-node controller's
        drain Events)."""
        target = report.pod if report.pod is not None else pod
        assert target is not None
        if isinstance(report, Event):
            await self.recorder.event(
                target,
                report.reason,
                report.note,
                warning=report.warning,
                explains=explains,
                name=report.once_as,
            )
        else:
            written = await self.recorder.condition(target, False, report.reason, report.message)
            if written and report.reason in pod_state.FINAL_REASONS:
                self.memory.refused.expect(target["metadata"]["uid"], True)

    async def _delete(self, pod: Json) -> None:
        meta = pod["metadata"]
        try:
            await self.kube.delete_pod(meta["namespace"], meta["name"], meta["uid"])
        except KubeError as err:
            if not (err.not_found or err.conflict):
                raise
        self.memory.deleting[f"{meta['namespace']}/{meta['name']}"] = meta["uid"]

    async def _widen(self, ref: PodRef, action: actions.Widen) -> bool:
        """The job gets back the nodes it no longer needs to leave out; False when Slurm
        would not change them."""
        try:
            await self.slurm.set_excluded_nodes(action.job_id, list(action.nodes))
        except SlurmError as err:
            # Typically the job started meanwhile (only a pending job's nodes can change):
            # the next pass binds it, or tries again.
            log.info("could not widen Slurm job %s of %s: %s", action.job_id, ref, err)
            return False
        self.index.expect_excluded(action.job_id, action.nodes)
        if self.placement_policy == "pack":
            metrics.PACKING.labels("widened").inc()
        return True

    # -- the writes a collaborator's step asks for on the way -------------------------------
    async def submit_job(self, action: actions.SubmitJob) -> SubmitAnswer:
        return await self.slurm.submit(action.submission)

    async def record_job(self, action: actions.RecordJob) -> None:
        meta = action.pod["metadata"]
        annotations: dict[str, str | None] = {
            self.prefix + "job-id": str(action.job_id) if action.job_id else None,
            self.prefix + "avoid-nodes": ",".join(action.avoid) if action.avoid else None,
        }
        if action.started_at is not None:
            annotations[self.prefix + STARTED_AT] = str(action.started_at)
        await self.kube.patch_pod(
            meta["namespace"], meta["name"], meta["uid"], {"metadata": {"annotations": annotations}}
        )
        self.memory.job_written.expect(meta["uid"], action.job_id)

    async def cancel_job(self, action: CancelJob, *uids: str) -> None:
        """Cancel a job a step submitted and did not hand to a Pod (or a group's job it
        releases); `uids`: the Pods for whom the cancel is remembered as settling it."""
        log.info("cancelling Slurm job %s: %s", action.job_id, action.why)
        await self.slurm.cancel(action.job_id)
        for uid in uids:
            self.memory.cancelled[(action.job_id, uid)] = self.clock.monotonic()

    async def release_held(self, action: actions.ReleaseHeld) -> None:
        await self.slurm.release_job(action.job_id)

    async def bind_pod(self, action: actions.BindPod) -> None:
        meta = action.pod["metadata"]
        await self.kube.bind(meta["namespace"], meta["name"], meta["uid"], action.node)
