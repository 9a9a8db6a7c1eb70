"""Carrying out gang placement (R9.1): one heterogeneous Slurm job per PodGroup.

Each member Pod gets one component of the group's job; the component carries the member's
identity as any placeholder does, so everything that follows one Pod and its job (the
index, adoption after a restart, Events, the drain at KillWait) works per member. What
this module adds is what concerns the group as a whole, always under the group's lock:
submitting once enough members are here, binding all members together, and giving the
members back their freedom (cancelling the job) when the group times out, loses a member
before it starts, or a placement is rejected. What to do is decided from data alone by
sunk.scheduler.decide.group_plan (on sunk.scheduler.translate.gang and sunk.scheduler.decide:
when a group may be submitted, whether its members agree on one Slurm identity, whether it
timed out, whether all members may be bound); this module gathers the facts under the
group's lock and carries the plan's actions out through the Pod controller's executor,
which makes every write (`executor`), reading what a member's job is decided from as
the Pod controller does (`submitting.SubmitReader`, `decide.submit_plan`) and checking each
member's node with the same strict check (`placement.Placement.choose`). What the members
are told goes to the pass's `Said` list, written by that executor too. A member beyond its
group's job is handed back to the Pod controller, which submits it as a single Pod.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import replace
from typing import Any

from sunk.kube import events as ev
from sunk.kube.client import KubeError
from sunk.metrics import kube_scheduler
from sunk.runtime.actions import CancelJob, Event
from sunk.runtime.controller import Outcome
from sunk.runtime.ports import Clock
from sunk.scheduler.decide import bind_plan, group_plan, pod_state, submit_plan
from sunk.scheduler.decide.actions import (
    Attempt,
    BindMember,
    BindPod,
    CheckNodes,
    GroupPlan,
    RecordJob,
    ReleaseGroup,
    Said,
    SetCondition,
    SubmitAlone,
    SubmitGroup,
)
from sunk.scheduler.decide.group_plan import GROUP_WAIT_S
from sunk.scheduler.jobs import JobIndex
from sunk.scheduler.pod.executor import PodExecutor
from sunk.scheduler.pod.memory import Memory
from sunk.scheduler.pod.placement import Placement
from sunk.scheduler.pod.submitting import SubmitReader
from sunk.scheduler.pods import PodStore
from sunk.scheduler.ports import KubePort, SlurmPort
from sunk.scheduler.translate import PlaceholderJob, PodRef, gang
from sunk.slurm.dialect import group_submission
from sunk.slurm.errors import SlurmError, SlurmNoAnswer
from sunk.slurm.models import SlurmJob

log = logging.getLogger(__name__)
Json = dict[str, Any]
# How long a PodGroup read from the API server is used before it is read again.
GROUP_TTL_S = 5.0


class Gangs:
    """The PodGroup steps. The Pod controller hands a member's key here when the member
    belongs to a group; the steps read, check nodes and write as it does."""

    def __init__(
        self,
        *,
        kube: KubePort,
        slurm: SlurmPort,
        executor: PodExecutor,
        pods: PodStore,
        index: JobIndex,
        memory: Memory,
        reader: SubmitReader,
        places: Placement,
        clock: Clock,
    ) -> None:
        self.kube = kube  # read only: the PodGroups
        self.slurm = slurm  # read only: a submitted group's components
        self.executor = executor
        self.pods = pods
        self.index = index
        self.memory = memory
        self.reader = reader
        self.places = places
        self.clock = clock
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._groups: dict[str, tuple[float, gang.PodGroup | None, str | None]] = {}
        # Group key → monotonic time before which no new job is submitted for it (after a
        # timeout, the PodGroup's own timeout: the cluster is busy, do not ask at once).
        self._retry_at: dict[str, float] = {}

    def prune(self) -> None:
        now = self.clock.monotonic()
        for key in [k for k, (at, _, _) in self._groups.items() if now - at > 60]:
            del self._groups[key]
        for key in [k for k, at in self._retry_at.items() if at < now]:
            del self._retry_at[key]
        for key in [k for k, lock in self._locks.items() if not lock.locked()]:
            del self._locks[key]

    # -- readers --------------------------------------------------------------------------
    async def podgroup(self, namespace: str, name: str) -> tuple[gang.PodGroup | None, str | None]:
        key = f"{namespace}/{name}"
        cached = self._groups.get(key)
        now = self.clock.monotonic()
        if cached is not None and now - cached[0] < GROUP_TTL_S:
            return cached[1], cached[2]
        try:
            found, problem = gang.parse(await self.kube.get(gang.path(namespace, name)))
        except KubeError as err:
            if not err.not_found:
                raise
            found, problem = (
                None,
                (
                    f"PodGroup {key} does not exist: create it (scheduling.x-k8s.io/v1alpha1, minMember), "
                    "or drop the label scheduling.x-k8s.io/pod-group; the CRD comes with the chart "
                    "(podGroups.installCRD=true)"
                ),
            )
        self._groups[key] = (now, found, problem)
        return found, problem

    def components(self, leader: int) -> list[tuple[PodRef, SlurmJob]]:
        """The components of one heterogeneous job the index knows, by offset."""
        found = [(ref, job) for ref, job in self.index.items() if job.het_job_id == leader]
        return sorted(found, key=lambda pair: pair[1].het_job_offset)

    def others_running(self, ref: PodRef, job: SlurmJob) -> bool:
        """Another member of this job's group is there and has not finished."""
        assert job.group_leader is not None
        for other, _ in self.components(job.group_leader):
            pod = self.pods.get(f"{other.namespace}/{other.name}")
            mine = pod is not None and pod["metadata"].get("uid") == other.uid
            if other.uid != ref.uid and mine and pod is not None and not pod_state.finished(pod):
                return True
        return False

    def _members_waiting(self, namespace: str, name: str) -> tuple[list[Json], bool]:
        """(members with no job yet, whether some member has one): the live, unbound,
        not refused Pods of ours that join the group."""
        waiting, placed = [], False
        for key in self.pods.all_keys():
            if not key.startswith(namespace + "/"):
                continue
            pod = self.pods.get(key)
            if pod is None or gang.group_of(pod) != name or pod["metadata"].get("deletionTimestamp"):
                continue
            if pod_state.finished(pod) or pod_state.finally_refused(pod):
                continue
            has_job = (pod.get("spec") or {}).get("nodeName") or any(
                ref.uid == pod["metadata"]["uid"] and job.active
                for ref, job in self.index.for_key(namespace, pod["metadata"]["name"])
            )
            if has_job:
                placed = True
            else:
                waiting.append(pod)
        return sorted(waiting, key=lambda p: str(p["metadata"]["name"])), placed

    # -- submitting -----------------------------------------------------------------------
    async def find_or_submit(self, pod: Json, name: str, said: Said) -> Outcome | SubmitAlone:
        """A member with no job: adopt its component, or, once the group has its members,
        submit one job for all of them (whichever member's turn comes first does it). A
        member beyond the group's job (`SubmitAlone`) goes back to the Pod controller."""
        namespace = pod["metadata"]["namespace"]
        key = f"{namespace}/{name}"
        async with self._locks[key]:
            adoptable = self.reader.adoptable(pod)
            if adoptable is not None:
                adopt, adopted = submit_plan.adoption(adoptable, self.reader.avoid(pod))
                await self.executor.apply(PodRef.of(pod), pod, None, (adopt,))
                said.append(replace(adopted, pod=pod))
                return Outcome()
            group, problem = await self.podgroup(namespace, name)
            facts = group_plan.SubmitFacts(pod, group, problem)
            if group is not None:
                facts = self._submit_facts(pod, group, namespace, name)
            plan = group_plan.for_submit(facts)
            if plan.actions and isinstance(plan.actions[0], SubmitAlone):
                return plan.actions[0]
            return await self._carry_out(pod, plan, said)

    def _submit_facts(
        self, pod: Json, group: gang.PodGroup, namespace: str, name: str
    ) -> group_plan.SubmitFacts:
        """What the caches and this process's memory say of an existing group's members."""
        members, placed = self._members_waiting(namespace, name)
        return group_plan.SubmitFacts(
            pod,
            group,
            waiting=tuple(members),
            placed=placed,
            retry_in=self._retry_at.get(f"{namespace}/{name}", 0.0) - self.clock.monotonic(),
            unanswered=any(self.reader.unanswered(p["metadata"]["uid"]) for p in members),
        )

    async def _carry_out(self, pod: Json, plan: GroupPlan, said: Said) -> Outcome:
        """The group's actions, in order; what the members are told goes to `said`."""
        for action in plan.actions:
            if isinstance(action, Event | SetCondition | Attempt):
                said.append(action)
            elif isinstance(action, SubmitGroup):
                return await self._submit(action.group, action.members, said)
            elif isinstance(action, ReleaseGroup):
                return await self.release(action, said)
            elif isinstance(action, BindMember):
                bound = BindPod(action.pod, action.node, action.job.submit_time or None)
                if await self.executor.bind_pod(bound) is None:  # else on that Node already
                    said.append(bind_plan.scheduled(action.pod, action.job, action.node, action.note))
        return Outcome(requeue_after=plan.after)

    async def _submit(self, group: gang.PodGroup, members: tuple[Json, ...], said: Said) -> Outcome:
        jobs: list[PlaceholderJob] = []
        for pod in members:
            prepared = submit_plan.prepare(
                pod, self.reader.inputs(pod), self.reader.rules, self.reader.avoid(pod)
            )
            said += prepared.said
            if prepared.job is None:
                return Outcome(requeue_after=GROUP_WAIT_S)  # that member says why; the rest wait
            jobs.append(prepared.job)
        disagree = group_plan.identity(group, members, jobs)
        if disagree is not None:
            return await self._carry_out(members[0], disagree, said)
        # The batch script runs in the first component only, so only it needs the script's
        # environment (its Pod, the hooks API, its key); Slurm wants one for each.
        parts = [self.executor.part(job, runs_script=i == 0) for i, job in enumerate(jobs)]
        try:
            submitted = await self.executor.submit_new(group_submission(parts), len(parts))
        except SlurmError as err:
            if isinstance(err, SlurmNoAnswer):
                for job in jobs:
                    self.memory.note_unanswered(job.pod.uid)
            if err.retryable:
                said += [SetCondition(ev.SLURM_UNAVAILABLE, str(err), pod) for pod in members]
                raise
            for pod in members:
                said += submit_plan.refusal(pod, ev.REJECTED_BY_SLURM, [f"PodGroup {group}: {err}"])
            return Outcome()
        leader = submitted.job_id
        try:
            components = {
                ref.uid: job
                for job in await self.slurm.job_group(leader)
                if (ref := self.index.owner_of(job))
            }
        except SlurmError:
            components = {}
        if len(components) != len(jobs):
            # The job exists; the next listing shows its components and each member adopts
            # its own. Until then no member is submitted again.
            for job in jobs:
                self.memory.note_unanswered(job.pod.uid)
            return Outcome(requeue_after=1)
        for job in jobs:
            self.index.observe(job.pod, components[job.pod.uid])
        for pod, job in zip(members, jobs, strict=True):
            try:
                await self.executor.record_job(
                    RecordJob(pod, components[job.pod.uid].job_id, self.reader.avoid(pod))
                )
            except KubeError as err:
                if not (err.not_found or err.conflict):
                    raise  # the index holds the components: the retry adopts them
                message = (
                    f"member {job.pod.name} went away while its PodGroup {group}'s job was submitted; "
                    "that job was cancelled and the group waits for its members again"
                )
                return await self.release(ReleaseGroup(leader, ev.GROUP_RELEASED, message, str(group)), said)
        kube_scheduler.attempt("submitted", len(jobs))
        ordered = [components[job.pod.uid] for job in jobs]
        said += group_plan.submitted(group, members, jobs, ordered, leader, submitted.warning)
        return Outcome()

    # -- giving the members back ------------------------------------------------------------
    async def release(self, action: ReleaseGroup, said: Said) -> Outcome:
        """Cancel the group's job and let its live members wait for a new one, saying why.
        The members stop naming the job before it is cancelled, so none of them is deleted
        for its ending; should this process stop in between, the members adopt the job
        again and the next pass comes to the same decision."""
        avoid = dict(action.avoid)
        members = []
        for ref, _ in self.components(action.leader):
            pod = self.pods.get(f"{ref.namespace}/{ref.name}")
            if (
                pod is None
                or pod["metadata"].get("uid") != ref.uid
                or pod["metadata"].get("deletionTimestamp")
            ):
                continue
            if (pod.get("spec") or {}).get("nodeName"):
                continue  # bound already: its job ending deletes it (never happens before all are)
            avoided = self.reader.avoid(pod) + ((avoid[ref.uid],) if ref.uid in avoid else ())
            try:
                await self.executor.record_job(RecordJob(pod, None, avoided))
            except KubeError as err:
                if not (err.not_found or err.conflict):
                    raise
                continue
            members.append(pod)
        if avoid:
            kube_scheduler.attempt("placement_rejected")
        of = f"PodGroup {action.group}: " if action.group else ""  # a claim's release knows only the job
        await self.executor.cancel_job(CancelJob(action.leader, of + action.message))
        self.index.expect_cancelled(action.leader)
        if action.group is not None and action.retry_after:
            self._retry_at[action.group] = self.clock.monotonic() + action.retry_after
        said += group_plan.released(members, action)
        return Outcome(requeue_after=action.retry_after or 1)

    async def timed_out(self, pod: Json, job: SlurmJob, said: Said) -> Outcome:
        name = gang.group_of(pod)
        leader = job.group_leader
        if name is None or leader is None:
            return Outcome()
        namespace = pod["metadata"]["namespace"]
        async with self._locks[f"{namespace}/{name}"]:
            group, _ = await self.podgroup(namespace, name)
            current = self.index.get(leader)
            return await self._carry_out(
                pod, group_plan.for_timeout(group, current[1] if current else None), said
            )

    # -- binding all members together --------------------------------------------------------
    async def bind_members(self, pod: Json, job: SlurmJob, said: Said) -> Outcome:
        """The group's job runs: check every member's node, then bind them all; if any one
        cannot go where Slurm put it, none is bound and the group gets a new job."""
        leader = job.group_leader
        assert leader is not None
        namespace = pod["metadata"]["namespace"]
        key = f"{namespace}/{gang.group_of(pod)}"
        async with self._locks[key]:
            components = self.components(leader)
            members = []
            for ref, _ in components:
                member = self.pods.get(f"{ref.namespace}/{ref.name}")
                members.append(
                    member if member is not None and member["metadata"].get("uid") == ref.uid else None
                )
            facts = group_plan.BindFacts(
                key, leader, tuple(self.index.with_group_mark(c) for _, c in components), tuple(members)
            )
            plan = group_plan.for_bind(facts)
            if isinstance(plan.actions[0] if plan.actions else None, CheckNodes):
                plan = group_plan.for_bind(replace(facts, targets=await self._targets(facts)))
            if any(isinstance(action, ReleaseGroup) for action in plan.actions):
                return await self._carry_out(pod, plan, said)
        # The bindings themselves, plain API calls, happen outside the group's lock.
        return await self._carry_out(pod, plan, said)

    async def _targets(self, facts: group_plan.BindFacts) -> tuple[group_plan.Target, ...]:
        """Each unbound member's Node (the strict check), up to the first that cannot go."""
        targets: list[group_plan.Target] = []
        for member, component in zip(facts.members, facts.components, strict=True):
            assert member is not None
            if (member.get("spec") or {}).get("nodeName"):
                continue
            # A member refused for want of room is remembered on it (its next job avoids the
            # node) when it lacks room beside the slurmd Pods and the members checked before
            # it alone, as Slurm's count never shows: Slurm would put the group there again.
            # Room that other Pods hold for now (terminating ones too) is waited for.
            company = [(t.node, t.pod) for t in targets if t.node]
            choice = await self.places.choose(member, component, company=company)
            targets.append(
                group_plan.Target(
                    member,
                    component,
                    choice.node,
                    choice.problem,
                    remember=choice.remember,
                    waits_on=choice.waits_on,
                )
            )
            if choice.node is None:
                # None is bound: the members checked before stop counting as placed.
                for checked in targets[:-1]:
                    self.places.forget(checked.pod["metadata"]["uid"])
                break
        return tuple(targets)
