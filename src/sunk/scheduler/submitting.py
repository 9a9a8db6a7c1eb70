"""Giving a Pod its placeholder job (R2, R3, R8.2): vet the Pod, submit its job or adopt
one Slurm already holds for it, and have the job recorded on the Pod. Both the Pod controller and
the PodGroup steps are handed this; a group submits its members' jobs as one, but vets,
records and refuses each member as a single Pod. What the Pod must be told (Events, the
PodScheduled condition) is added to the pass's `Said` list, and what must be written (the
submission, the job's annotations, the cancel of a job no Pod took) is handed as a typed
action to the Pod controller's executor (`pod_executor`), which writes it all."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

from sunk import metrics
from sunk.kube import events as ev
from sunk.kube.client import KubeError
from sunk.metrics import kube_scheduler
from sunk.runtime.actions import CancelJob, Event
from sunk.runtime.controller import Outcome
from sunk.scheduler import policy
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.decide import submission
from sunk.scheduler.decide.actions import RecordJob, Said, SetCondition
from sunk.scheduler.decide.packing import Packing, pack
from sunk.scheduler.decide.pod_plan import size
from sunk.scheduler.decide.problems import placement_problem
from sunk.scheduler.hooks.auth import HookCredentials
from sunk.scheduler.job_ids import FreshIds
from sunk.scheduler.jobs import JobIndex
from sunk.scheduler.memory import Memory
from sunk.scheduler.placement import Placement
from sunk.scheduler.pod_executor import PodExecutor
from sunk.scheduler.ports import SlurmPort
from sunk.scheduler.translate import PlaceholderJob, PodRef, Settings, pod_of_job_name, translate
from sunk.slurm.dialect import JOB_PATH, mark_environment
from sunk.slurm.errors import SlurmError, SlurmNoAnswer
from sunk.slurm.models import SlurmJob

log = logging.getLogger(__name__)
Json = dict[str, Any]


class Submitter:
    def __init__(
        self,
        *,
        executor: PodExecutor,
        slurm: SlurmPort,
        cluster: ClusterView,
        index: JobIndex,
        places: Placement,
        memory: Memory,
        settings: Settings,
        script: str,
        hooks: Callable[[], HookCredentials],
        policy: policy.PolicyFile,
        placement: str = "slurm",
        refuse_static_cpu: bool = False,
    ) -> None:
        self.executor = executor
        self.slurm = slurm
        self.cluster = cluster
        self.index = index
        # Every job this scheduler submits (a Pod's, a group's, a re-adopted one) asks for
        # an ID never handed out before, where Slurm lets it.
        self.ids = FreshIds(slurm, index, executor.submit_job)
        self.places = places
        self.memory = memory
        self.settings = settings
        self.prefix = settings.annotation_prefix
        self.script = script
        # Where placeholders reach the hooks API: known once it listens, its CA re-read on
        # renewal, so it is asked for at each submission.
        self.hooks = hooks
        self.policy = policy
        self.placement_policy = placement  # --placement
        self.refuse_static_cpu = refuse_static_cpu

    def pod_of(self, job: SlurmJob) -> PodRef | None:
        """The Pod `job` was submitted for, when this scheduler submitted it."""
        return pod_of_job_name(self.slurm.owner_name(job), self.settings.scheduler_name)

    def avoid_nodes(self, pod: Json) -> tuple[str, ...]:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(self.prefix + "avoid-nodes")
        return tuple(n for n in str(raw or "").split(",") if n)

    def excluded_for(self, pod: Json) -> dict[str, str]:
        """The Slurm nodes the Pod's own constraints rule out, with why (never a Node that
        is only busy now: see `Placement.excluded_for`). Only Pods with affinity or spread
        rules gather the Pods already placed."""
        return self.places.excluded_for(pod)

    async def adopt(self, pod: Json, said: Said) -> bool:
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
        await self.executor.record_job(RecordJob(pod, job.job_id, self.avoid_nodes(pod)))
        kube_scheduler.attempt("adopted")
        said.append(
            Event(ev.PLACEHOLDER_ADOPTED, f"Found existing Slurm job {job.job_id} for this Pod", pod=pod)
        )
        return True

    def refuse(self, pod: Json, reason: str, problems: list[str], said: Said) -> Outcome:
        """A final answer (R2.4): Event + condition, and the Pod is never tried again."""
        message = "; ".join(problems)
        kube_scheduler.attempt("rejected_by_slurm" if reason == ev.REJECTED_BY_SLURM else "refused")
        said += [
            Event(ev.FAILED_SCHEDULING, message, warning=True, pod=pod),
            SetCondition(reason, message, pod),
        ]
        return Outcome()

    def prepare(
        self,
        pod: Json,
        avoid: tuple[str, ...],
        said: Said,
        leave_out: dict[str, str] | None = None,
    ) -> PlaceholderJob | Outcome:
        """The job to submit for `pod`, or what was done instead: refused for good (invalid,
        forbidden, unsupported) or told why no node can take it now. `leave_out`: Slurm
        nodes this job leaves out besides, with why (not remembered on the Pod)."""
        vetting = submission.vet(
            pod,
            translate(pod, self.settings),
            self.policy.current(),
            self.slurm.dialect.unsupported,
            prefix=self.prefix,
            refuse_static_cpu=self.refuse_static_cpu,
        )
        if vetting.refusal is not None:
            return self.refuse(pod, vetting.refusal.reason, list(vetting.refusal.problems), said)
        said += [Event(notice.reason, notice.note, warning=True, pod=pod) for notice in vetting.notices]
        assert vetting.job is not None
        job = vetting.job
        excluded = {**self.excluded_for(pod), **(leave_out or {})}
        message = placement_problem(job.options.required_nodes, excluded, avoid, self.cluster.slurm_nodes)
        if message:  # said again with the largest Node's reason first (found only when needed)
            message = placement_problem(
                job.options.required_nodes, excluded, avoid, self.cluster.slurm_nodes, self.cluster.largest()
            )
            assert message is not None
            if ev.condition_changes(pod, False, ev.UNSCHEDULABLE, message):
                said += [
                    SetCondition(ev.UNSCHEDULABLE, message, pod),
                    Event(ev.FAILED_SCHEDULING, message, warning=True, pod=pod),
                ]
            return Outcome(requeue_after=5)
        return job.avoiding(tuple(excluded) + avoid)

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

    async def submit_pod(self, pod: Json, said: Said) -> Outcome:
        avoid = self.avoid_nodes(pod)
        prepared = self.prepare(pod, avoid, said)
        if isinstance(prepared, Outcome):
            return prepared
        return await self._submit_prepared(pod, prepared, avoid, said)

    async def _submit_prepared(
        self, pod: Json, job: PlaceholderJob, avoid: tuple[str, ...], said: Said
    ) -> Outcome:
        packing = Packing()
        if self.placement_policy == "pack":
            packing = pack(job, self.cluster.slurm_node_usage)
            job = dataclasses.replace(job, packed_away=packing.left_out)
        submission = self.slurm.submission(job.request, self.script, self.environment(job))
        try:
            submitted = await self.ids.submit_new(submission)
        except SlurmError as err:
            if isinstance(err, SlurmNoAnswer):
                self.memory.note_unanswered(job.pod.uid)
            if err.retryable:
                said.append(SetCondition(ev.SLURM_UNAVAILABLE, str(err), pod))
                raise
            return self.refuse(pod, ev.REJECTED_BY_SLURM, [str(err)], said)

        job_id = submitted.job_id
        self.index.expect_submitted(job.pod, job_id, job.name, job.options.comment)
        try:
            await self.executor.record_job(RecordJob(pod, job_id, avoid))
        except KubeError as err:
            if not (err.not_found or err.conflict):
                # The API server failed, not the Pod: the job stays recorded in the index,
                # so the retry adopts it instead of submitting again.
                raise
            # The Pod went away or was replaced while we submitted: the job has no owner.
            log.info("Pod %s changed during submit (%s)", job.pod, err)
            await self.executor.cancel_job(CancelJob(job_id, "its Pod changed during submit"))
            return Outcome()
        kube_scheduler.attempt("submitted")
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
        # the job has waited TRANSIENT_S (the Pod controller's waiting report); a bound
        # Pod's Scheduled Event names its job.
        if self.placement_policy == "pack":
            note = f"Submitted Slurm job {job_id} ({size(job)}){packed}"
            said.append(Event(ev.PLACEHOLDER_SUBMITTED, note, pod=pod))
        if submitted.warning:
            # Slurm queued the job but said why it may not start soon: the job stays and
            # waits (its pending reason follows on the condition); the Pod is not refused.
            note = f"Slurm accepted job {job_id} but says: {submitted.warning}"
            said.append(Event(ev.SLURM_WARNING, note, warning=True, pod=pod))
        return Outcome()

    async def reject_placement(
        self,
        pod: Json,
        job: SlurmJob,
        slurm_node: str | None,
        problem: str,
        said: Said,
        *,
        avoid_node: bool = True,
        remember: bool = True,
    ) -> Outcome:
        """Strict node locking: never bind to a doubtful node or allocation; resubmit (without
        the node, when the node is the problem). `remember`: the Pod avoids the node from now
        on (its `avoid-nodes` annotation); else the new job leaves it out, and later jobs and
        widenings only while `excluded_for` still finds the problem (a slurmd Pod that
        leaves no room may be made smaller)."""
        kube_scheduler.attempt("placement_rejected")
        avoiding = bool(slurm_node) and avoid_node
        avoid = self.avoid_nodes(pod) + ((slurm_node,) if slurm_node and avoiding and remember else ())
        leave_out = {slurm_node: problem} if slurm_node and avoiding and not remember else {}
        what = "submitting a new job that avoids it" if avoid_node else "submitting a new job"
        note = f"Slurm started job {job.job_id} on {slurm_node or '?'} but {problem}; {what}"
        said.append(Event(ev.NODE_REJECTED, note, warning=True, pod=pod))
        prepared = self.prepare(pod, avoid, said, leave_out)
        if isinstance(prepared, Outcome):
            # No other node can take the Pod now (said on the Pod), or it is refused for good:
            # it stops naming the rejected job before that job is cancelled, so the job's end
            # is not taken for Slurm ending the Pod's job, and it remembers the node.
            await self.executor.record_job(RecordJob(pod, None, avoid))
            outcome = prepared
        else:
            outcome = await self._submit_prepared(pod, prepared, avoid, said)
        await self.executor.cancel_job(CancelJob(job.job_id, f"its placement was rejected: {problem}"))
        return outcome
