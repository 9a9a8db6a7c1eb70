"""The Pod controller's executor: every write its path makes to Kubernetes or Slurm.

The Pod controller plans (`decide.pod_plan`, `submit_plan`, `bind_plan`, `claim_plan`) and
its remaining collaborators (re-adoption, the PodGroup steps, job IDs) read and decide;
what they decide to write comes here as a typed action (`decide.actions`) and is carried
out as it stands. A handler decides nothing of the Pod: it makes the write, records in
`Memory` that this process made it (so a later pass neither repeats it nor judges the Pod
by a cache that does not show it yet), and keeps one fixed rule of its write (a
submission that may pass is said on the Pod and raised; a job recorded on a Pod gone
meanwhile is cancelled; a binding that failed no longer counts as placed). A handler that
answers (a submission's job ID, or Slurm's refusal) answers the caller, who plans on.
Keeping the writes in one file lets a reader find who writes what in one place, and
`tests/unit/test_layering.py` fails when another scheduler module calls a port's write
method. The Slurm-node controller is a controller of its own and keeps its drains and
resumes in its own file (`slurmnodes`).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from sunk import metrics
from sunk.kube import events as ev
from sunk.kube.client import KubeError
from sunk.metrics import kube_scheduler
from sunk.runtime.actions import CancelJob, Drain, Event
from sunk.runtime.controller import Outcome
from sunk.runtime.ports import Clock
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.decide import actions, pod_state
from sunk.scheduler.decide.pod_actions import STARTED_AT
from sunk.scheduler.hooks.auth import HookCredentials
from sunk.scheduler.jobs import JobIndex
from sunk.scheduler.pod.job_ids import TRIES, FreshIds
from sunk.scheduler.pod.memory import Memory
from sunk.scheduler.pod.placement import Placement
from sunk.scheduler.ports import KubePort, SlurmPort, SubmitAnswer
from sunk.scheduler.translate import PlaceholderJob, PodRef, Settings
from sunk.slurm.dialect import JOB_PATH, Submission, mark_environment, with_job_ids
from sunk.slurm.errors import SlurmError, SlurmNoAnswer, SlurmRejected
from sunk.slurm.models import SlurmJob
from sunk.slurm.request import JobRequest

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
        places: Placement,
        cluster: ClusterView,
        settings: Settings,
        script: str,
        hooks: Callable[[], HookCredentials],
        clock: Clock,
        placement: str = "slurm",
    ) -> None:
        self.kube = kube
        self.slurm = slurm
        self.recorder = recorder
        self.index = index
        self.memory = memory
        self.places = places  # a binding that failed no longer counts as placed
        self.cluster = cluster  # --placement=pack: a steered job counts on its node at once
        self.settings = settings
        self.prefix = settings.annotation_prefix
        self.script = script
        # Where placeholders reach the hooks API: known once it listens, its CA re-read on
        # renewal, so it is asked for at each submission.
        self.hooks = hooks
        self.clock = clock
        self.placement_policy = placement  # --placement
        # Every job this scheduler submits (a Pod's, a group's, a re-adopted one) asks for
        # an ID never handed out before, where Slurm lets it.
        self.ids = FreshIds(slurm, index)

    # -- a plan's effects, for the Pod controller's loop ------------------------------------
    async def apply(
        self,
        ref: PodRef,
        pod: Json | None,
        job: SlurmJob | None,
        effects: Sequence[actions.Effect],
        *,
        deleting: bool = False,
    ) -> Outcome | None:
        """A run of a plan's effects, in order; an Outcome when the plan must stop there
        (Slurm would not widen, the Pod is bound already, the Pod went while its job was
        submitted). `deleting`: the plan deletes the Pod, so its Events say why and must be
        written first (an unreachable API server is raised, not skipped)."""
        for action in effects:
            stop = await self._apply(ref, pod, job, action, deleting=deleting)
            if stop is not None:
                return stop
        return None

    async def _apply(
        self, ref: PodRef, pod: Json | None, job: SlurmJob | None, action: actions.Effect, *, deleting: bool
    ) -> Outcome | None:
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
        elif isinstance(action, Event | actions.SetCondition | actions.Attempt):
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
        elif isinstance(action, actions.AdoptJob):
            assert pod is not None
            await self.record_job(actions.RecordJob(pod, action.job_id, action.avoid))
            self.memory.answered(ref.uid)
            kube_scheduler.attempt("adopted")
        elif isinstance(action, actions.RecordJob):
            return await self._record_submitted(action)
        elif isinstance(action, actions.BindPod):
            return await self.bind_pod(action)
        return None

    async def tell(self, pod: Json | None, report: actions.Report, *, explains: bool = False) -> None:
        """Write an Event or the PodScheduled condition on the report's Pod (else the plan's),
        or count an attempt: the scheduler's one place that tells Pods anything (but the
        Slurm-node controller's drain Events)."""
        if isinstance(report, actions.Attempt):
            kube_scheduler.attempt(report.result)
            return
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

    async def _widen(self, ref: PodRef, action: actions.Widen) -> Outcome | None:
        """The job gets back the nodes it no longer needs to leave out; an Outcome (look
        again) when Slurm would not change them."""
        try:
            await self.slurm.set_excluded_nodes(action.job_id, list(action.nodes))
        except SlurmError as err:
            # Typically the job started meanwhile (only a pending job's nodes can change):
            # the next pass binds it, or tries again.
            log.info("could not widen Slurm job %s of %s: %s", action.job_id, ref, err)
            return Outcome(requeue_after=1)
        self.index.expect_excluded(action.job_id, action.nodes)
        if self.placement_policy == "pack":
            metrics.PACKING.labels("widened").inc()
        return None

    # -- submitting -------------------------------------------------------------------------
    def environment(self, job: PlaceholderJob) -> dict[str, str]:
        """What the placeholder script of `job` is told (its Pod, the hooks API, its token
        and key)."""
        ref = job.pod
        environment = {
            "PATH": JOB_PATH,
            **mark_environment(self.slurm.dialect, job.request),
            "SUNK_POD": f"{ref.namespace}/{ref.name}",
            "SUNK_POD_UID": ref.uid,
            **self.hooks().environment_for(ref.uid),
            "SUNK_KILL_WAIT": str(self.settings.kill_wait_s),
        }
        if os.environ.get("SLURM_CONF"):
            environment["SLURM_CONF"] = os.environ["SLURM_CONF"]
        return environment

    def part(
        self, job: PlaceholderJob, *, request: JobRequest | None = None, runs_script: bool = True
    ) -> Submission:
        """`job` (as `request`, when given) as Slurm's REST API takes it; only the component
        that runs the script gets its environment (Slurm wants one for each)."""
        environment = self.environment(job) if runs_script else {"PATH": JOB_PATH}
        return self.slurm.submission(request or job.request, self.script, environment)

    async def submit_pod(self, pod: Json, action: actions.SubmitPod) -> SubmitAnswer | str:
        """Submit a Pod's placeholder: Slurm's answer, or its refusal in words. A failure
        that may pass (Slurm unreachable, busy, no answer) is said on the Pod and raised for
        the queue to try again; a submission that got no answer is remembered, so the Pod is
        not submitted again before a listing could show its job."""
        job = action.job
        self.memory.answered(job.pod.uid)
        try:
            answer = await self.submit_new(self.part(job))
        except SlurmError as err:
            if isinstance(err, SlurmNoAnswer):
                self.memory.note_unanswered(job.pod.uid)
            if err.retryable:
                await self.tell(pod, actions.SetCondition(ev.SLURM_UNAVAILABLE, str(err), pod))
                raise
            return str(err)
        self.index.expect_submitted(job.pod, answer.job_id, job.name, job.options.comment)
        if action.packing.towards:  # Slurm takes the first that fits: count the job there for now
            self.cluster.assume(action.packing.towards[0], job.cpus, job.memory_mib, job.gres)
        if action.packing.left_out:
            metrics.PACKING.labels("packed").inc()
        return answer

    async def submit_new(
        self, submission: Submission, components: int = 1, *, counter_ok: bool = True
    ) -> SubmitAnswer:
        """Submit under the next unclaimed IDs (`components` of them for a heterogeneous
        job), as `job_ids.FreshIds` chooses them; raises as `SlurmPort.submit` does."""
        for _ in range(TRIES):
            first = self.ids.next(components, counter_ok=counter_ok)
            if first is None:
                return await self.slurm.submit(submission)
            try:
                return await self.slurm.submit(with_job_ids(submission, first))
            except SlurmRejected as err:
                if not self.ids.asks_again(err, first):
                    raise
        raise self.ids.gave_up()

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

    async def _record_submitted(self, action: actions.RecordJob) -> Outcome | None:
        """Record a job on its Pod; a job submitted in this pass whose Pod went away or was
        replaced meanwhile has no owner: it is cancelled and the plan stops. A failure of the
        API server is raised: the job stays in the index, so the retry adopts it instead of
        submitting again."""
        try:
            await self.record_job(action)
        except KubeError as err:
            if not action.orphan_why or not (err.not_found or err.conflict):
                raise
            log.info(
                "Pod %s/%s changed during submit (%s)",
                action.pod["metadata"]["namespace"],
                action.pod["metadata"]["name"],
                err,
            )
            assert action.job_id is not None
            await self.cancel_job(CancelJob(action.job_id, action.orphan_why))
            return Outcome()
        return None

    async def cancel_job(self, action: CancelJob, *uids: str) -> None:
        """Cancel a job a step submitted and did not hand to a Pod (or a group's job it
        releases); `uids`: the Pods for whom the cancel is remembered as settling it."""
        log.info("cancelling Slurm job %s: %s", action.job_id, action.why)
        await self.slurm.cancel(action.job_id)
        for uid in uids:
            self.memory.cancelled[(action.job_id, uid)] = self.clock.monotonic()

    async def release_held(self, action: actions.ReleaseHeld) -> None:
        await self.slurm.release_job(action.job_id)

    # -- binding ----------------------------------------------------------------------------
    async def bind_pod(self, action: actions.BindPod) -> Outcome | None:
        """Bind; a conflict because the Pod is on that Node already (a pass before this one
        bound it) stops the plan, any other failure forgets the placement and is raised."""
        meta = action.pod["metadata"]
        try:
            await self.kube.bind(meta["namespace"], meta["name"], meta["uid"], action.node)
        except KubeError as err:
            if err.conflict and await self._already_on(action.pod, action.node):
                return Outcome()
            self.places.forget(meta["uid"])
            raise
        now = self.clock.now()
        kube_scheduler.attempt("bound")
        created = meta.get("creationTimestamp")
        if created:
            kube_scheduler.bound_after(
                now - dt.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
            )
        if action.submitted_at:
            metrics.SUBMIT_TO_STARTED.observe(max(0.0, now - action.submitted_at))
        return None

    async def _already_on(self, pod: Json, node: str) -> bool:
        meta = pod["metadata"]
        current = await self.kube.get(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
        return bool((current.get("spec") or {}).get("nodeName") == node)
