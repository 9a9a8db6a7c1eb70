"""Taking a running Pod's resources back after Slurm lost its job (R8.2, issue #34).

A slurmctld killed before it saved its state comes back without the jobs it started in its
last seconds. Their Pods still run, and Slurm now counts their resources as free: deleting
the Pods (as sunk did) turned every slurmctld crash into an outage of the Pods it had just
started. `decide.pod_actions.for_missing_job` decides from this process's own evidence
whether a job was lost rather than ended; this carries out its `Readopt`: one new job for
the same Pod, pinned to the Slurm node the Pod runs on, with what was left of its time
limit.

The trap: a slurmctld restarted from older state hands out job IDs again, and the lost
job's processes may still run on that node under the very ID the new job gets. slurmd then
refuses to launch it ("Duplicate jobid") and Slurm drains the node. So the new job asks for
an ID above every one this scheduler has seen (`job_ids.FreshIds`, as every submission
does), and is submitted held and released only once its ID is known to be new. Where Slurm
does not let the scheduler choose (22.05's REST API), a job whose ID is not higher than any
seen is cancelled (it never ran) and another submitted, up to TRIES times.

Every write (the submission, its release, a cancel, the Pod's new job) is handed as a
typed action to the Pod controller's executor (`executor`); this module reads Slurm
and decides what comes next from each answer.

Whoever ends the new job before it runs for the Pod (a user's `scancel` of the job squeue
shows for the Pod, Slurm failing it) ends the Pod with it, as for any job of a Pod: the
scheduler never takes that end for its own cancel and submits again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from sunk.kube import events as ev
from sunk.kube.client import KubeError
from sunk.metrics import kube_scheduler
from sunk.runtime.actions import CancelJob, Event
from sunk.runtime.ports import Clock
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.decide import actions, pod_actions, pod_state, submission
from sunk.scheduler.jobs import JobIndex
from sunk.scheduler.pod.executor import PodExecutor
from sunk.scheduler.policy import PolicyFile
from sunk.scheduler.ports import SlurmPort
from sunk.scheduler.translate import PodRef, Settings, translate
from sunk.slurm.errors import SlurmError, SlurmRejected, SlurmUnavailable
from sunk.slurm.models import SlurmJob, SlurmNode

log = logging.getLogger(__name__)
Json = dict[str, Any]


@dataclass(frozen=True)
class Evidence:
    """What says whether Slurm lost a bound Pod's job rather than ended it: `last`, the job
    as last known running (None: nothing says it was lost), and its Slurm node as Slurm
    shows it now with the Nodes hosting it."""

    last: SlurmJob | None
    node: SlurmNode | None = None
    hosts: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Ended:
    """Slurm ended the Pod's new job before it ran for the Pod, and not on this scheduler's
    word (a user's scancel, a launch failure): the Pod ends with it, saying why."""

    job: SlurmJob


# Slurm starts a released job pinned to a node with room within a second or two (a few
# more just after slurmctld restarted, while its nodes register again); one not running by
# then cannot have the node's resources "at once", and the Pod goes.
START_WITHIN_S = 10.0
POLL_S = 0.2
# New jobs given an ID handed out before, before the Pod goes: each try moves one ID on,
# and a slurmctld loses only the jobs of its last seconds, so the IDs to move past are few.
TRIES = 10


class Readopter:
    def __init__(
        self,
        *,
        slurm: SlurmPort,
        executor: PodExecutor,
        index: JobIndex,
        settings: Settings,
        policy: PolicyFile,
        cluster: ClusterView,
        clock: Clock,
    ) -> None:
        self.slurm = slurm  # read only: the new job, its node
        self.executor = executor
        self.clock = clock
        self.cluster = cluster
        self.index = index
        self.settings = settings
        self.policy = policy

    async def evidence(self, pod: Json) -> Evidence:
        """For a bound Pod whose job Slurm has no record of: this process's own listings say
        it saw the job run lately; else, for a job it never saw (restarted since), the
        Pod's own record of when the job ran (`pod_actions.recorded_run`)."""
        job_id = pod_state.recorded_job_id(pod, self.settings.annotation_prefix)
        if job_id is None:
            return Evidence(None)
        last = self.index.lost_job(job_id, pod["metadata"]["uid"])
        if last is None and job_id not in self.index.vanished:
            last = self._recorded_run(pod, job_id)
        if last is None or len(last.nodes) != 1:
            return Evidence(last)
        node = await self.slurm.node(last.nodes[0])
        hosts = self.cluster.host_map().get(node.name, set()) if node is not None else set()
        return Evidence(last, node, frozenset(hosts))

    async def reverted_evidence(self, pod: Json, job_id: int) -> Evidence:
        """For a bound Pod whose job is PENDING again (`pod_actions.reverted`): the job as the
        Pod records its run, at any age (Slurm still holds the job, so nothing was purged),
        on the one Slurm node its Node hosts, and that node as Slurm shows it now."""
        last = self._recorded_run(pod, job_id, max_age_s=float("inf"))
        if last is None:
            return Evidence(None)
        node = await self.slurm.node(last.nodes[0])
        hosts = self.cluster.host_map().get(node.name, set()) if node is not None else set()
        return Evidence(last, node, frozenset(hosts))

    def _recorded_run(self, pod: Json, job_id: int, **limits: float) -> SlurmJob | None:
        """The Pod's lost job as the Pod records it, on the one Slurm node its Node hosts."""
        node_name = (pod.get("spec") or {}).get("nodeName")
        hosted = [name for name, hosts in self.cluster.host_map().items() if node_name in hosts]
        translated = translate(pod, self.settings).job
        if len(hosted) != 1 or translated is None:
            return None
        limit = translated.request.time_limit_min
        prefix = self.settings.annotation_prefix
        return pod_actions.recorded_run(
            pod, job_id, hosted[0], limit, prefix=prefix, now=self.clock.now(), **limits
        )

    async def readopt(self, pod: Json, action: actions.Readopt, said: actions.Said) -> str | Ended | None:
        """None once the Pod names a new running job on `action.node` (told in `said`), or
        is gone (its job cancelled); `Ended` when Slurm ended the new job first (not this
        scheduler); else why Slurm could not give the node's resources back, in words that
        follow "cannot be re-adopted: ". A Slurm error that may pass is raised (the pass is
        tried again); every job submitted here and not handed to the Pod is cancelled."""
        ref = PodRef.of(pod)
        vetting = submission.vet(
            pod,
            translate(pod, self.settings),
            self.policy.current(),
            self.slurm.dialect.unsupported,
            prefix=self.settings.annotation_prefix,
            refuse_static_cpu=False,  # a running Pod is never refused for what it was let in with
        )
        if vetting.job is None:
            problems = vetting.refusal.problems if vetting.refusal else ()
            return "the Pod would no longer be accepted (" + "; ".join(problems) + ")"
        placeholder = vetting.job
        request = dataclasses.replace(
            placeholder.request,
            required_nodes=(action.node,),
            excluded_nodes=(),
            time_limit_min=action.time_limit_min,
            hold=True,
        )
        held = self.executor.part(placeholder, request=request)
        self.index.note_id(action.old_job)  # the lost job's ID is handed out before, whoever saw it
        job_id = 0
        try:
            for _ in range(TRIES):
                # Seen before this submission is sent: jobs other workers submit meanwhile
                # get higher IDs than this one and say nothing of it.
                highest = self.index.highest_id
                try:
                    job_id = (await self.executor.submit_new(held)).job_id
                except SlurmError as err:
                    if err.retryable:
                        raise
                    return f"Slurm refused a new job there ({err})"
                fresh = job_id > highest
                self.index.expect_submitted(ref, job_id, placeholder.name, request.comment)
                if fresh:
                    break
                log.info("job %s for %s has an ID handed out before; cancelling it, held", job_id, ref)
                ended = await self._ended(ref, job_id)
                if ended is not None:
                    job_id = 0
                    return ended
                await self._cancel(ref, job_id)
                job_id = 0
            else:
                return f"Slurm gave {TRIES} new jobs in a row an ID it had handed out before (of a lost job)"
            try:
                await self.executor.release_held(actions.ReleaseHeld(job_id))
            except SlurmRejected:
                ended = await self._ended(ref, job_id)
                if ended is None:
                    raise
                job_id = 0
                return ended
            job, why = await self._started(job_id, action.node)
            if isinstance(why, Ended):
                job_id = 0
                return why
            if job is None:
                return why
            if not await self._record(pod, job):
                return None  # the Pod is gone: nothing to re-adopt for, and its job is cancelled
            job_id = 0
        finally:
            if job_id:
                await self._cancel(ref, job_id)
        kube_scheduler.attempt("readopted")
        left = f", {action.time_limit_min} min left of its time limit" if action.time_limit_min else ""
        lost = "the start of " if action.pending_again else ""
        moved = f" and started it again on {action.moved_to}" if action.moved_to else ""
        note = (
            f"Slurm lost {lost}job {action.old_job} (slurmctld restarted without it){moved} "
            "while this Pod ran; "
            f"job {job.job_id} holds its resources on {action.node} again{left}"
        )
        said.append(Event(ev.PLACEHOLDER_READOPTED, note, pod=pod))
        return None

    async def _ended(self, ref: PodRef, job_id: int) -> Ended | None:
        """The new job, when Slurm has ended it (or is ending it) though this scheduler never
        cancelled it: a user's scancel of the job squeue shows for the Pod."""
        job = await self.slurm.job(job_id)
        if job is None or not job.ending or self.index.owner_of(job) != ref:
            return None
        log.info("new job %s of %s ended in Slurm (%s) before it ran", job_id, ref, job.state)
        self.index.observe(ref, job)
        return Ended(job)

    async def _started(self, job_id: int, node: str) -> tuple[SlurmJob | None, str | Ended]:
        """The released job once it runs on `node`, or (None, why not), or (None, `Ended`)
        when Slurm ended it first. slurmctld may restart again meanwhile: a job it shows
        held again lost its release (restored from state saved before it), and is released
        again; a job it lost as well is no reason to end the Pod (the evidence for the first
        loss still holds), so the pass is tried again, with a new job."""
        deadline = self.clock.monotonic() + START_WITHIN_S
        job: SlurmJob | None = None
        while True:
            job = await self.slurm.job(job_id)
            if job is not None and job.running and job.nodes == (node,):
                return job, ""
            if job is None or not job.pending or self.clock.monotonic() >= deadline:
                break
            if job.reason == "JobHeldUser":
                log.info("new job %s is held again (slurmctld lost its release): releasing it again", job_id)
                await self.executor.release_held(actions.ReleaseHeld(job_id))
            await asyncio.sleep(POLL_S)
        if job is None:
            raise SlurmUnavailable(f"Slurm lost the new job {job_id} too (slurmctld restarted again)")
        if job.ending:
            return None, Ended(job)  # never cancelled here: someone else, or Slurm itself
        if job.pending:
            return None, f"Slurm did not start a new job on {node} at once ({job.reason})"
        return None, f"Slurm's new job {job_id} is {job.state} on {','.join(job.nodes) or '?'}"

    async def _record(self, pod: Json, job: SlurmJob) -> bool:
        """The Pod names its new job; False when the Pod went meanwhile (the job is then
        cancelled by the caller)."""
        try:
            avoid = pod_state.avoid_nodes(pod, self.settings.annotation_prefix)
            started = job.start_time or int(self.clock.now())
            await self.executor.record_job(actions.RecordJob(pod, job.job_id, avoid, started))
        except KubeError as err:
            if err.not_found or err.conflict:
                log.info("Pod %s went while its job was re-adopted (%s)", PodRef.of(pod), err)
                return False
            raise
        self.index.observe(PodRef.of(pod), job)
        return True

    async def _cancel(self, ref: PodRef, job_id: int) -> None:
        why = f"a re-adopted job of {ref} not handed to it"
        await self.executor.cancel_job(CancelJob(job_id, why), ref.uid)
