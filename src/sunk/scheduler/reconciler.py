"""reconcile(pod key): make the Pod and its placeholder job agree (R2, R3, R4, R8.2).

Each call looks at the current state of both sides and takes at most one step:
refuse an invalid Pod, submit (or adopt) its job, report why it waits, bind it, or clean
up a job whose Pod is gone. Every fact it relies on lives in Kubernetes (annotations,
conditions) or in Slurm (job names carry the Pod UID), so a restart at any moment resumes
where the last process stopped, without a second job for the same Pod.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from sunk import metrics
from sunk.kube import events as ev
from sunk.kube.client import KubeError
from sunk.runtime.controller import Outcome
from sunk.runtime.expectations import Expectations
from sunk.scheduler import decide, policy
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.decide import pod_actions, submission
from sunk.scheduler.gangs import Gangs
from sunk.scheduler.hooks.auth import HookCredentials
from sunk.scheduler.jobs import JobIndex
from sunk.scheduler.placement import Placement
from sunk.scheduler.pods import PodStore
from sunk.scheduler.ports import KubePort, SlurmPort
from sunk.scheduler.translate import PlaceholderJob, PodRef, Settings, gang, pod_of_job_name, translate
from sunk.slurm.dialect import JOB_PATH, mark_environment
from sunk.slurm.errors import SlurmError, SlurmNoAnswer
from sunk.slurm.models import SlurmJob
from sunk.slurm.request import gres_text

log = logging.getLogger(__name__)
Json = dict[str, Any]
# A submission that got no answer is looked for in a listing requested at least this long
# after it, before the Pod is submitted again (slurmrestd may act on it late).
UNANSWERED_GRACE_S = 3.0
# How soon a Pod whose cache lags behind this process's own write is looked at again.
WRITE_UNSEEN_RECHECK_S = 0.2
# Slurm reads on behalf of hook calls in flight at once; beyond that the poller answers.
ASK_WHY_AT_ONCE = 4


class Reconciler:
    """The Pod controller: one Pod key at a time, its Pod and the jobs naming it agree."""

    name = "pods"

    def __init__(
        self,
        *,
        kube: KubePort,
        slurm: SlurmPort,
        pods: PodStore,
        cluster: ClusterView,
        index: JobIndex,
        recorder: ev.Recorder,
        settings: Settings,
        script: str,
        hooks: Callable[[], HookCredentials],
        policy: policy.PolicyFile,
        placement: str = "slurm",
        refuse_static_cpu: bool = False,
    ) -> None:
        self.kube = kube
        self.slurm = slurm
        self.pods = pods
        self.cluster = cluster
        self.index = index
        self.recorder = recorder
        self.settings = settings
        self.script = script
        self.prefix = settings.annotation_prefix
        # Where placeholders reach the hooks API: known once it listens, its CA re-read on
        # renewal, so it is asked for at each submission.
        self.hooks = hooks
        self.policy = policy
        self.placement_policy = placement  # --placement
        self.refuse_static_cpu = refuse_static_cpu
        self.places = Placement(slurm=slurm, cluster=cluster, pods=pods, settings=settings)
        # Jobs are remembered by (job ID, Pod UID): a slurmctld that lost its state hands
        # the same job IDs out again, and what was done to the old job says nothing of the new.
        self._signalled: set[tuple[int, str]] = set()
        # → when Slurm accepted our cancel. A cancel that failed is not recorded (the next
        # pass tries again); one Slurm accepted but lost (a slurmctld crash) is sent again if
        # the job still runs CANCEL_CONFIRM_S later.
        self._cancelled: dict[tuple[int, str], float] = {}
        # Pod UID → when a submission for it got no answer: Slurm may hold a job for it that
        # no listing has shown yet, so it is not submitted again before one has.
        self._unanswered: dict[str, float] = {}
        self._drained: set[int] = set()
        # Pod key → UID of Pods this process asked the API server to delete, until they are
        # gone: the informer may not show the deletion yet, and a second Event saying the
        # same thing (or a second DELETE) would only add load when a thousand jobs end.
        self._deleting: dict[str, str] = {}
        # (job ID, Pod UID) whose placeholder said on the hooks API that Slurm is ending it:
        # a claim to check with Slurm before the Pod goes (a stolen key must not end a Pod).
        self._ending_reported: set[tuple[int, str]] = set()
        self._asking_slurm = 0
        # Pod UID → the job ID this process last wrote on it, until the cache shows it.
        self._job_written: Expectations[int | None] = Expectations()
        self.gangs = Gangs(self)

    def note_unanswered(self, uid: str) -> None:
        """A submission for Pod `uid` got no answer: Slurm may hold a job for it that no
        listing has shown yet."""
        self._unanswered[uid] = time.monotonic()

    def unanswered_since(self, uid: str) -> float:
        """When a submission for Pod `uid` last got no answer (monotonic), or 0."""
        return self._unanswered.get(uid, 0.0)

    def prune(self, live: set[int]) -> None:
        """Forget what was remembered about jobs Slurm no longer lists: nothing here is
        needed after a job is gone, and a process that runs for months must not grow."""
        self._ending_reported = {k for k in self._ending_reported if k[0] in live}
        for key in [k for k in self._cancelled if k[0] not in live]:
            del self._cancelled[key]
        self._signalled = {k for k in self._signalled if k[0] in live}
        self._drained &= live
        for uid in [u for u, at in self._unanswered.items() if time.monotonic() - at > 600]:
            del self._unanswered[uid]
        self.places.prune()
        self._job_written.prune()
        self.gangs.prune()

    # -- small readers --------------------------------------------------------------------
    def _annotation(self, pod: Json, key: str) -> str | None:
        value = ((pod.get("metadata") or {}).get("annotations") or {}).get(self.prefix + key)
        return str(value) if value is not None else None

    def _recorded_job_id(self, pod: Json) -> int | None:
        return decide.recorded_job_id(pod, self.prefix)

    def _current_job(self, pod: Json) -> SlurmJob | None:
        job_id = self._recorded_job_id(pod)
        found = self.index.get(job_id) if job_id is not None else None
        if found is None or found[0].uid != pod["metadata"]["uid"]:
            return None  # never trust a job ID alone: IDs restart when Slurm's state is wiped
        return self.with_group_mark(found[1])

    def with_group_mark(self, job: SlurmJob) -> SlurmJob:
        """A gang's placeholder script runs in the first component only and marks that one
        started; the other components count as started when it is."""
        if job.group_leader is None or job.het_job_offset == 0:
            return job
        leader = self.index.get(job.group_leader)
        return dataclasses.replace(job, started=leader is not None and leader[1].started)

    async def _group_timed_out(self, pod: Json, job: SlurmJob | None) -> bool:
        name = gang.group_of(pod)
        if name is None or job is None or job.group_leader is None or not job.pending:
            return False
        group, _ = await self.gangs.podgroup(pod["metadata"]["namespace"], name)
        leader = self.index.get(job.group_leader)
        submitted = leader[1].submit_time if leader else job.submit_time
        return group is not None and gang.timed_out(group, submitted, time.time())

    # -- the entry point ------------------------------------------------------------------
    async def reconcile(self, key: str) -> Outcome:
        """Gather what the caches know, ask sunk.scheduler.decide, carry the answer out."""
        namespace, name = key.split("/", 1)
        pod = self.pods.get(key)
        if pod is None:
            self._deleting.pop(key, None)
        elif self._job_written.unseen(pod["metadata"]["uid"], self._recorded_job_id(pod)):
            # The cache still shows the job this process just moved the Pod off (a rejected
            # placement, a released group): judged by that copy, the Pod would look ended
            # and its new job unowned.
            return Outcome(requeue_after=WRITE_UNSEEN_RECHECK_S)
        recheck = Outcome()
        for ref, other in self.index.for_key(namespace, name):
            if await self._settle_claim(ref, other, pod):
                recheck = Outcome(requeue_after=decide.CANCEL_CONFIRM_S)
        if pod is None:
            return recheck
        # A cancel to confirm and the Pod's own next look: the sooner wins.
        return recheck.merge(await self._next_step(pod))

    async def _next_step(self, pod: Json) -> Outcome:
        job_id = self._recorded_job_id(pod)
        job = self._current_job(pod)
        needed = self._widenable(pod, job)
        decision = decide.for_pod(
            pod,
            job,
            prefix=self.prefix,
            synced=self.index.synced.is_set(),
            now=time.time(),
            ending_reported=(job_id, pod["metadata"]["uid"]) in self._ending_reported,
            group_timed_out=await self._group_timed_out(pod, job),
            widen_after=None
            if needed is None
            else (decide.PACK_PATIENCE_S if self.placement_policy == "pack" else 0.0),
        )
        step = decision.step
        if step is decide.Step.END_POD:
            assert job is not None
            return await self._job_ending(pod, job)
        if step is decide.Step.CONFIRM_ENDING:
            assert job_id is not None
            return await self._confirm_ending(pod, job_id)
        if step is decide.Step.WAIT:
            return Outcome(requeue_after=decision.after)
        if step is decide.Step.CHECK_BOUND:
            assert job is not None
            return await self._check_still_there(pod, job)
        if step is decide.Step.CONFIRM_MISSING:
            return await self._confirm_missing(pod)
        if step is decide.Step.FIND_OR_SUBMIT:
            group = gang.group_of(pod)
            return await (self.gangs.find_or_submit(pod, group) if group else self._find_or_submit(pod))
        if step is decide.Step.GROUP_TIMED_OUT:
            assert job is not None
            return await self.gangs.timed_out(pod, job)
        if step is decide.Step.BIND:
            assert job is not None
            return await self._bind(pod, job)
        if step is decide.Step.WIDEN:
            assert job is not None and needed is not None
            return await self._widen(pod, job, needed)
        if step in (decide.Step.REPORT_PENDING, decide.Step.REPORT_STARTING):
            assert job is not None
            await self._report_waiting(pod, job)
        return Outcome()

    async def _report_waiting(self, pod: Json, job: SlurmJob) -> None:
        """Say on the Pod why its job has not started. The first time for this job, the
        PlaceholderSubmitted Event follows: written only now, for the few Pods that wait,
        because most are bound within a second and their Scheduled Event names the job."""
        first = not _names_job(ev.scheduled_condition(pod), job.job_id)
        if not await self.recorder.condition(pod, False, *_waiting(job)) or not first:
            return
        if self.placement_policy == "pack" or gang.group_of(pod):
            return  # written at submission: how the job was steered, or which group job it is
        translation = translate(pod, self.settings)
        size = f" ({_size(translation.job)})" if translation.job is not None else ""
        await self.recorder.event(
            pod,
            ev.PLACEHOLDER_SUBMITTED,
            f"Submitted Slurm job {job.job_id}{size}; not started after {decide.TRANSIENT_S:.0f} s",
        )

    async def _settle_claim(self, ref: PodRef, job: SlurmJob, pod: Json | None) -> bool:
        """Carry out decide.for_claim for one job naming this Pod key; True when the job
        must be looked at again until Slurm ends it."""
        verdict = decide.for_claim(
            pod,
            ref,
            job,
            prefix=self.prefix,
            cancelled_at=self._cancelled.get((job.job_id, ref.uid)),
            signalled=(job.job_id, ref.uid) in self._signalled,
            now=time.monotonic(),
            others_running=job.group_leader is not None and self.gangs.others_running(ref, job),
        )
        if verdict is decide.Claim.RELEASE_GROUP:
            if await self._still_claims(ref, job.job_id):
                self._cancelled[(job.job_id, ref.uid)] = time.monotonic()
                await self.gangs.member_left(ref, job)
            return False
        if verdict is decide.Claim.CANCEL:
            # Nothing of the Pod runs any more: cancel; the script's hook call learns at once
            # that the Pod is gone and exits, so the job ends without waiting for KillWait.
            again = (
                " again (Slurm did not act on the first cancel)"
                if (job.job_id, ref.uid) in self._cancelled
                else ""
            )
            if not await self._still_claims(ref, job.job_id):
                return False
            # A gang's job ends as one: cancelling its leader ends every component.
            target = job.group_leader or job.job_id
            log.info("cancelling Slurm job %s of %s%s: its Pod is gone or done", target, ref, again)
            await self.slurm.cancel(target)
            self._cancelled[(job.job_id, ref.uid)] = time.monotonic()
            return not job.ending
        if verdict is decide.Claim.SIGNAL:
            # SIGUSR1, not SIGTERM: the script then knows Slurm is not ending the job, so it
            # holds the node until the Pod is gone with no KillWait deadline and no drain.
            log.info("telling Slurm job %s of %s that its Pod is being deleted", job.job_id, ref)
            await self.slurm.cancel(job.job_id, signal="USR1")
            self._signalled.add((job.job_id, ref.uid))
        return verdict is decide.Claim.RECHECK

    async def _still_claims(self, ref: PodRef, job_id: int) -> bool:
        """Ask Slurm whether `job_id` is still the job of `ref` before cancelling it: the index
        was filled by a listing, and a slurmctld that lost its state since may have given
        that ID to another Pod's new job."""
        found = await self.slurm.job(job_id)
        if found is not None and self.pod_of(found) == ref:
            return True
        log.info("not cancelling job %s: Slurm no longer holds it for %s", job_id, ref)
        if found is not None:
            owner = self.pod_of(found)
            if owner is not None:
                self.index.observe(owner, found)  # the ID's new owner: the old key forgets it
        return False

    # -- Slurm ends the job (R5.2, R5.3) --------------------------------------------------
    async def _job_ending(self, pod: Json, job: SlurmJob) -> Outcome:
        """Delete the Pod, saying why; drain the node if the Pod outlives KillWait."""
        uid = pod["metadata"]["uid"]
        leader = self.index.get(job.group_leader) if job.group_leader else None
        plan = pod_actions.for_ending_job(
            pod,
            job,
            leader[1] if leader else None,
            cancelled_for_pod=(job.job_id, uid) in self._signalled,
            being_deleted=self._being_deleted(pod),
            drained=job.job_id in self._drained,
            kill_wait_s=self.settings.kill_wait_s,
            now=time.time(),
        )
        return await self._carry_out(pod, job, plan)

    async def _carry_out(self, pod: Json, job: SlurmJob, plan: pod_actions.Plan) -> Outcome:
        """Execute a plan's actions in order; each records what it did only once done, so
        a failure (raised to the queue) is tried again on the next pass."""
        ref = PodRef.of(pod)
        for action in plan.actions:
            if isinstance(action, pod_actions.CancelJob):
                log.info("cancelling Slurm job %s of %s: %s", action.job_id, ref, action.why)
                await self.slurm.cancel(action.job_id)
                self._signalled.add((job.job_id, ref.uid))
            elif isinstance(action, pod_actions.Explain):
                await self.recorder.event(pod, action.reason, action.note, warning=True)
            elif isinstance(action, pod_actions.DeletePod):
                await self._delete(pod)
            elif isinstance(action, pod_actions.DrainNode):
                self._drained.add(job.job_id)  # the placeholder script drains too: one try here
                problem = await self.slurm.drain(action.node, action.reason)
                if problem:
                    await self.recorder.event(pod, ev.NODE_DRAINED, problem, warning=True)
        return Outcome(requeue_after=plan.after)

    def report_ending(self, ref: PodRef, job_id: int) -> None:
        """The placeholder script got SIGTERM (Slurm cancels, preempts or times out its job)
        and said so on the hooks API. Only recorded here: the Pod's next pass asks Slurm,
        and the Pod goes once Slurm agrees."""
        self._ending_reported.add((job_id, ref.uid))

    async def _confirm_ending(self, pod: Json, job_id: int) -> Outcome:
        """A placeholder said its job is ending: read that job (a few at a time; when a
        thousand end at once, the next listing answers for the rest) and act on what Slurm
        says, never on the call alone."""
        ref = PodRef.of(pod)
        if self._asking_slurm >= ASK_WHY_AT_ONCE:
            return Outcome(requeue_after=1)
        self._asking_slurm += 1
        try:
            found = await self.slurm.job(job_id)
        except SlurmError as err:
            log.info("cannot read job %s, said to be ending (%s); asking again", job_id, err)
            return Outcome(requeue_after=1)
        finally:
            self._asking_slurm -= 1
        self._ending_reported.discard((job_id, ref.uid))
        if found is not None and self.pod_of(found) == ref:
            self.index.observe(ref, found)
            if decide.slurm_ends(pod, found):
                return await self._job_ending(pod, found)  # says why, deletes, drains if late
            log.warning(
                "the placeholder of job %s said Slurm is ending it, but Slurm says %s; the Pod %s stays",
                job_id,
                found.state,
                ref,
            )
            return Outcome()
        if (pod.get("spec") or {}).get("nodeName"):
            return await self._confirm_missing(pod)
        return Outcome()

    # -- a bound Pod ----------------------------------------------------------------------
    async def _confirm_missing(self, pod: Json) -> Outcome:
        """A bound Pod whose job no listing shows. A listing proves nothing (a partial
        answer, a fail-over, a token for another user): only Slurm saying so about this
        very job does."""
        job_id = self._recorded_job_id(pod)
        if job_id is not None:
            found = await self.slurm.job(job_id)
            if found is not None and self.pod_of(found) == PodRef.of(pod):
                self.index.observe(PodRef.of(pod), found)
                return Outcome(requeue_after=1) if found.ending else await self._check_still_there(pod, found)
        note = f"Slurm job {job_id} no longer exists in Slurm; deleting the Pod"
        await self.recorder.event(pod, ev.JOB_ENDED, note, warning=True)
        await self._delete(pod)
        return Outcome()

    async def _check_still_there(self, pod: Json, job: SlurmJob) -> Outcome:
        # The Slurm node → Node map is built from every slurmd Pod: only for a job that runs.
        running = job.running and len(job.nodes) == 1
        hosts = self.cluster.host_map().get(job.nodes[0], set()) if running else set()
        return await self._carry_out(pod, job, pod_actions.for_bound_pod(pod, job, hosts))

    def _being_deleted(self, pod: Json) -> bool:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        return bool(meta.get("deletionTimestamp")) or self._deleting.get(key) == meta.get("uid")

    async def _delete(self, pod: Json) -> None:
        meta = pod["metadata"]
        try:
            await self.kube.delete_pod(meta["namespace"], meta["name"], meta["uid"])
        except KubeError as err:
            if not (err.not_found or err.conflict):
                raise
        self._deleting[f"{meta['namespace']}/{meta['name']}"] = meta["uid"]

    # -- an unbound Pod -------------------------------------------------------------------
    async def _find_or_submit(self, pod: Json) -> Outcome:
        """No job yet: use one Slurm holds for this Pod (a crash fell between submit and
        annotate), or submit one, unless a submission got no answer and no listing since
        could have shown its job."""
        uid = pod["metadata"]["uid"]
        if await self.adopt(pod):
            self._unanswered.pop(uid, None)
            return Outcome()
        if decide.unanswered_wait(self.unanswered_since(uid), self.index.listed_at, UNANSWERED_GRACE_S):
            return Outcome(requeue_after=1)
        self._unanswered.pop(uid, None)
        return await self.submit(pod)

    async def adopt(self, pod: Json) -> bool:
        """After a restart, a job may exist that the Pod does not name yet: use it."""
        meta = pod["metadata"]
        mine = [
            job
            for ref, job in self.index.for_key(meta["namespace"], meta["name"])
            if ref.uid == meta["uid"] and job.active
        ]
        if not mine:
            return False
        job = max(mine, key=lambda j: j.job_id)
        await self.record_job(pod, job.job_id, self.avoid_nodes(pod))
        metrics.ATTEMPTS.labels("adopted").inc()
        await self.recorder.event(
            pod, ev.PLACEHOLDER_ADOPTED, f"Found existing Slurm job {job.job_id} for this Pod"
        )
        return True

    def pod_of(self, job: SlurmJob) -> PodRef | None:
        """The Pod `job` was submitted for, when this scheduler submitted it."""
        return pod_of_job_name(self.slurm.owner_name(job), self.settings.scheduler_name)

    def avoid_nodes(self, pod: Json) -> tuple[str, ...]:
        raw = self._annotation(pod, "avoid-nodes") or ""
        return tuple(n for n in raw.split(",") if n)

    async def record_job(self, pod: Json, job_id: int | None, avoid: tuple[str, ...]) -> None:
        """Write the Pod's job (None: it has none now) and the nodes its jobs must avoid;
        until the cache shows the new job, the Pod is not judged by the old one."""
        meta = pod["metadata"]
        annotations: dict[str, str | None] = {self.prefix + "job-id": str(job_id) if job_id else None}
        annotations[self.prefix + "avoid-nodes"] = ",".join(avoid) if avoid else None
        await self.kube.patch_pod(
            meta["namespace"], meta["name"], meta["uid"], {"metadata": {"annotations": annotations}}
        )
        self._job_written.expect(meta["uid"], job_id)

    async def refuse(self, pod: Json, reason: str, problems: list[str]) -> Outcome:
        """A final answer (R2.4): Event + condition, and the Pod is never tried again."""
        message = "; ".join(problems)
        metrics.ATTEMPTS.labels("rejected_by_slurm" if reason == ev.REJECTED_BY_SLURM else "refused").inc()
        await self.recorder.event(pod, ev.FAILED_SCHEDULING, message, warning=True)
        await self.recorder.condition(pod, False, reason, message)
        return Outcome()

    async def prepare(self, pod: Json, avoid: tuple[str, ...]) -> PlaceholderJob | Outcome:
        """The job to submit for `pod`, or what was done instead: refused for good (invalid,
        forbidden, unsupported) or told why no node can take it now."""
        vetting = submission.vet(
            pod,
            translate(pod, self.settings),
            self.policy.current(),
            self.slurm.dialect.unsupported,
            prefix=self.prefix,
            refuse_static_cpu=self.refuse_static_cpu,
        )
        if vetting.refusal is not None:
            return await self.refuse(pod, vetting.refusal.reason, list(vetting.refusal.problems))
        for notice in vetting.notices:
            await self.recorder.event(pod, notice.reason, notice.note, warning=True)
        assert vetting.job is not None
        job = vetting.job
        excluded = self._excluded_for(pod)
        message = decide.placement_problem(
            job.options.required_nodes, excluded, avoid, self.cluster.slurm_nodes
        )
        if message:
            if await self.recorder.condition(pod, False, ev.UNSCHEDULABLE, message):
                await self.recorder.event(pod, ev.FAILED_SCHEDULING, message, warning=True)
            return Outcome(requeue_after=5)
        return job.avoiding(tuple(excluded) + avoid)

    def _excluded_for(self, pod: Json) -> dict[str, str]:
        """The Slurm nodes the Pod's own constraints rule out, with why. Only Pods with
        affinity or spread rules gather the Pods already placed."""
        return self.places.excluded_for(pod)

    def environment(self, job: PlaceholderJob) -> dict[str, str]:
        """What the placeholder script of `job` is told (its Pod, the hooks API, its token
        and key)."""
        hooks = self.hooks()
        environment = {
            "PATH": JOB_PATH,
            **mark_environment(self.slurm.dialect, job.request),
            "SUNK_POD": str(job.pod),
            "SUNK_POD_UID": job.pod.uid,
            "SUNK_HOOK_URL": hooks.url,
            "SUNK_HOOK_TOKEN": hooks.token_for(job.pod.uid),
            "SUNK_HOOK_KEY": hooks.key_for(job.pod.uid),
            **({"SUNK_HOOK_CA": hooks.ca_pem} if hooks.ca_pem else {}),
            "SUNK_KILL_WAIT": str(self.settings.kill_wait_s),
        }
        if os.environ.get("SLURM_CONF"):
            environment["SLURM_CONF"] = os.environ["SLURM_CONF"]
        return environment

    async def submit(self, pod: Json, avoid: tuple[str, ...] | None = None) -> Outcome:
        avoid = avoid if avoid is not None else self.avoid_nodes(pod)
        prepared = await self.prepare(pod, avoid)
        if isinstance(prepared, Outcome):
            return prepared
        return await self._submit_prepared(pod, prepared, avoid)

    async def _submit_prepared(self, pod: Json, job: PlaceholderJob, avoid: tuple[str, ...]) -> Outcome:
        packing = decide.Packing()
        if self.placement_policy == "pack":
            packing = decide.pack(job, self.cluster.slurm_node_usage)
            job = dataclasses.replace(job, packed_away=packing.left_out)
        submission = self.slurm.submission(job.request, self.script, self.environment(job))
        try:
            submitted = await self.slurm.submit(submission)
        except SlurmError as err:
            if isinstance(err, SlurmNoAnswer):
                self.note_unanswered(job.pod.uid)
            if err.retryable:
                await self.recorder.condition(pod, False, ev.SLURM_UNAVAILABLE, str(err))
                raise
            return await self.refuse(pod, ev.REJECTED_BY_SLURM, [str(err)])

        job_id = submitted.job_id
        self.index.expect_submitted(job.pod, job_id, job.name, job.options.comment)
        try:
            await self.record_job(pod, job_id, avoid)
        except KubeError as err:
            if not (err.not_found or err.conflict):
                # The API server failed, not the Pod: the job stays recorded in the index,
                # so the retry adopts it instead of submitting again.
                raise
            # The Pod went away or was replaced while we submitted: the job has no owner.
            log.info("Pod %s changed during submit (%s); cancelling job %s", job.pod, err, job_id)
            await self.slurm.cancel(job_id)
            return Outcome()
        metrics.ATTEMPTS.labels("submitted").inc()
        packed = ""
        if packing.towards:  # Slurm takes the first that fits: count the job there for now
            self.cluster.assume(packing.towards[0], job.cpus, job.memory_mib, job.gres)
        if packing.left_out:
            metrics.PACKING.labels("packed").inc()
            more = " …" if len(packing.towards) > 3 else ""
            packed = (
                f"; packed towards the partly used {', '.join(packing.towards[:3])}{more}, "
                f"{len(packing.left_out)} idle node(s) left out (--placement=pack)"
            )
        # Neither a condition nor (but with --placement=pack) an Event yet: most jobs start
        # within a second, and every API write costs every watcher a round. Both come once
        # the job has waited TRANSIENT_S (_report_waiting); a bound Pod's Scheduled Event
        # names its job.
        if self.placement_policy == "pack":
            await self.recorder.event(
                pod, ev.PLACEHOLDER_SUBMITTED, f"Submitted Slurm job {job_id} ({_size(job)}){packed}"
            )
        if submitted.warning:
            # Slurm queued the job but said why it may not start soon: the job stays and
            # waits (its pending reason follows on the condition); the Pod is not refused.
            await self.recorder.event(
                pod,
                ev.SLURM_WARNING,
                f"Slurm accepted job {job_id} but says: {submitted.warning}",
                warning=True,
            )
        return Outcome()

    # -- widening a pending job's excluded nodes (R9.2, R9.4) ------------------------------
    def _widenable(self, pod: Json, job: SlurmJob | None) -> set[str] | None:
        """For a pending job (never a gang's) that leaves out more nodes than the Pod needs
        now (its annotations, constraints, rejected placements, as `prepare` works them
        out): the nodes it needs. Else None. The extra ones were cordoned, not Ready,
        tainted or without a slurmd Pod at submission and are usable again, or were left
        out by --placement=pack; nothing is remembered, so a restarted scheduler widens its
        predecessor's jobs too."""
        if job is None or not job.pending or not job.excluded_nodes or job.group_leader is not None:
            return None
        result = translate(pod, self.settings)
        if result.job is None:
            return None
        excluded = tuple(self._excluded_for(pod)) + self.avoid_nodes(pod)
        needed = set(result.job.avoiding(excluded).excluded_nodes)
        return needed if set(job.excluded_nodes) - needed else None

    async def _widen(self, pod: Json, job: SlurmJob, needed: set[str]) -> Outcome:
        """The job gets back the nodes it no longer needs to leave out."""
        try:
            await self.slurm.set_excluded_nodes(job.job_id, sorted(needed))
        except SlurmError as err:
            # Typically the job started meanwhile (only a pending job's nodes can change):
            # the next pass binds it, or tries again.
            log.info("could not widen Slurm job %s of %s: %s", job.job_id, PodRef.of(pod), err)
            return Outcome(requeue_after=1)
        given_back = sorted(set(job.excluded_nodes) - needed)
        self.index.expect_excluded(job.job_id, tuple(sorted(needed)))
        more = " …" if len(given_back) > 5 else ""
        why = "they can host the Pod now"
        if self.placement_policy == "pack":
            metrics.PACKING.labels("widened").inc()
            why += f" (it waited {decide.PACK_PATIENCE_S:.0f} s for a partly used node, --placement=pack)"
        await self.recorder.event(
            pod,
            ev.PLACEMENT_WIDENED,
            f"Slurm job {job.job_id} may now use {len(given_back)} node(s) it had left out "
            f"({', '.join(given_back[:5])}{more}): {why}",
        )
        return Outcome()

    # -- binding (R4.3, R4.4) -------------------------------------------------------------
    async def placement(self, pod: Json, job: SlurmJob) -> tuple[str | None, str, bool]:
        return await self.places.choose(pod, job)

    async def _bind(self, pod: Json, job: SlurmJob) -> Outcome:
        if job.group_leader is not None and gang.group_of(pod):
            return await self.gangs.bind(pod, job)
        node_name, problem, avoid_node = await self.placement(pod, job)
        if node_name is None:
            return await self._reject(
                pod, job, job.nodes[0] if job.nodes else None, problem, avoid_node=avoid_node
            )
        return await self.bind_to(pod, job, node_name)

    async def bind_to(self, pod: Json, job: SlurmJob, node_name: str, note: str = "") -> Outcome:
        meta = pod["metadata"]
        try:
            await self.kube.bind(meta["namespace"], meta["name"], meta["uid"], node_name)
        except KubeError as err:
            if err.conflict and await self._already_on(pod, node_name):
                return Outcome()
            self.places.forget(meta["uid"])
            raise
        self._observe_bound(pod, job)
        await self.recorder.event(
            pod,
            ev.SCHEDULED,
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {node_name} "
            f"(Slurm job {job.job_id} on node {job.nodes[0]}{_allocation(job)}{note})",
        )
        return Outcome()

    async def _already_on(self, pod: Json, node: str) -> bool:
        meta = pod["metadata"]
        current = await self.kube.get(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
        return bool((current.get("spec") or {}).get("nodeName") == node)

    def _observe_bound(self, pod: Json, job: SlurmJob) -> None:
        metrics.ATTEMPTS.labels("bound").inc()
        now = time.time()
        created = pod["metadata"].get("creationTimestamp")
        if created:
            metrics.CREATE_TO_BOUND.observe(
                now - dt.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
            )
        if job.submit_time:
            metrics.SUBMIT_TO_STARTED.observe(max(0.0, now - job.submit_time))

    async def _reject(
        self, pod: Json, job: SlurmJob, slurm_node: str | None, problem: str, *, avoid_node: bool = True
    ) -> Outcome:
        """Strict node locking: never bind to a doubtful node or allocation; resubmit (without
        the node, when the node is the problem)."""
        metrics.ATTEMPTS.labels("placement_rejected").inc()
        avoid = self.avoid_nodes(pod) + ((slurm_node,) if slurm_node and avoid_node else ())
        what = "submitting a new job that avoids it" if avoid_node else "submitting a new job"
        await self.recorder.event(
            pod,
            ev.NODE_REJECTED,
            f"Slurm started job {job.job_id} on {slurm_node or '?'} but {problem}; {what}",
            warning=True,
        )
        prepared = await self.prepare(pod, avoid)
        if isinstance(prepared, Outcome):
            # No other node can take the Pod now (said on the Pod), or it is refused for good:
            # it stops naming the rejected job before that job is cancelled, so the job's end
            # is not taken for Slurm ending the Pod's job, and it remembers the node.
            await self.record_job(pod, None, avoid)
            outcome = prepared
        else:
            outcome = await self._submit_prepared(pod, prepared, avoid)
        await self.slurm.cancel(job.job_id)
        return outcome


def _size(job: PlaceholderJob) -> str:
    gpus = f", GRES {gres_text(job.gres)}" if job.gres else ""
    return f"{job.cpus} CPU, {job.memory_mib} MiB{gpus}"


def _allocation(job: SlurmJob) -> str:
    """What Slurm gave the job, as its TRES, for the Scheduled Event (without the node count)."""
    tres = ",".join(t for t in job.allocated.split(",") if t and not t.startswith(("node=", "billing=")))
    return f", allocated {tres}" if tres else ""


def _names_job(condition: Json | None, job_id: int) -> bool:
    """Whether a PodScheduled condition already speaks of this job (_waiting's messages)."""
    return bool(condition) and str((condition or {}).get("message", "")).startswith(f"Slurm job {job_id} ")


def _waiting(job: SlurmJob) -> tuple[str, str]:
    """(condition reason, message) for a Pod whose job waits in Slurm or to start (R4.5)."""
    if job.pending:
        return (
            ev.PENDING_IN_SLURM,
            f"Slurm job {job.job_id} is pending ({job.reason}) in partition {job.partition}",
        )
    where = ",".join(job.nodes) or "?"
    return (
        ev.WAITING_FOR_START,
        f"Slurm job {job.job_id} is {job.state} on {where}; waiting for its placeholder script to start",
    )
