"""Re-adopting a PodGroup as a whole (issue #53 point 2).

A PodGroup's members share one heterogeneous job and live and die as one. When slurmctld
loses that job, each member's pass finds its own component gone; the first to come takes
the group's lock and judges every bound member: each must have its own evidence that
Slurm lost its component (`Readopter.evidence`) and a healthy Slurm node still hosted by
its Node. Then one new heterogeneous job takes the group back, a component pinned to each
member's node, with what was left of the group's time limit, under IDs asked for (never
Slurm's counter: a lost component's processes may still run under the IDs it would give);
once every component runs on its node, each member names its own. If any member fails the
check, or Slurm cannot start the new job at once, every member goes, each told why: the
group is re-adopted whole or not at all. Whoever ends the new job first ends the group
(each member then names its ended component, and ends with it on its own pass). Every
write is handed as a typed action to the Pod controller's executor (`executor`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sunk.kube import events as ev
from sunk.kube.client import KubeError
from sunk.metrics import kube_scheduler
from sunk.runtime.actions import CancelJob, Event
from sunk.runtime.controller import Outcome
from sunk.runtime.ports import Clock
from sunk.scheduler.decide import actions, pod_actions, pod_state, submission
from sunk.scheduler.pod.memory import WRITE_UNSEEN_RECHECK_S
from sunk.scheduler.pod.readopting import POLL_S, START_WITHIN_S, Ended, Readopter
from sunk.scheduler.pods import PodStore
from sunk.scheduler.translate import PodRef, gang, translate
from sunk.slurm.dialect import Submission, group_submission
from sunk.slurm.errors import SlurmError, SlurmRejected, SlurmUnavailable
from sunk.slurm.models import SlurmJob

log = logging.getLogger(__name__)
Json = dict[str, Any]
# A member's node has not registered with a just restarted slurmctld: look again this soon.
REGISTER_WAIT_S = 1.0


@dataclass(frozen=True)
class GroupRefused:
    """The group cannot be re-adopted (`why`): every member goes, with what it lost."""

    why: str
    members: tuple[tuple[Json, actions.Readopt], ...]


class GroupReadoption:
    def __init__(self, readopter: Readopter, pods: PodStore, clock: Clock) -> None:
        self.readopter = readopter
        self.pods = pods
        self.clock = clock
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def carry_out(
        self,
        pod: Json,
        action: actions.Readopt,
        said: actions.Said,
        execute: Callable[[PodRef, Json, SlurmJob | None, actions.PodPlan, actions.Said], Awaitable[Outcome]],
    ) -> Outcome:
        """The Pod controller's step for a PodGroup's member whose job Slurm lost: the
        whole group is re-adopted, or every member goes (`execute`, the controller's own
        executor, carries each member's plan out), each told why."""
        result = await self.readopt(pod, action, said)
        if result is None:
            return Outcome()
        if isinstance(result, float):
            return Outcome(requeue_after=result)
        if isinstance(result, Ended):
            plan = pod_actions.readopted_job_ended(action, result.job, self.clock.now())
            return await execute(PodRef.of(pod), pod, result.job, plan, said)
        for member, lost in result.members:
            await execute(
                PodRef.of(member), member, None, pod_actions.readoption_failed(lost, result.why), said
            )
        return Outcome()

    async def readopt(
        self, pod: Json, action: actions.Readopt, said: actions.Said
    ) -> GroupRefused | Ended | float | None:
        """None once every member names its component of a new running job (or another
        member's pass did it first); `Ended` when Slurm ended the new job first; a delay
        when a member's node has not registered yet; else `GroupRefused`."""
        assert action.group is not None
        meta = pod["metadata"]
        async with self._locks[f"{meta['namespace']}/{action.group}"]:
            current = self.pods.get(f"{meta['namespace']}/{meta['name']}")
            if current is None or self._job_id(current) != action.old_job:
                return None  # another member's pass re-adopted (or ended) the group meanwhile
            members = self._bound_members(meta["namespace"], action.group)
            written = self.readopter.executor.memory.job_written
            if any(written.unseen(m["metadata"]["uid"], self._job_id(m)) for m in [current, *members]):
                # This process recorded a newer job on a member that the cache does not show
                # yet (a pass re-adopted or ended the group meanwhile): judged by that copy,
                # the member would be re-adopted a second time.
                return WRITE_UNSEEN_RECHECK_S
            judged: list[tuple[Json, actions.Readopt]] = []
            for member in members:
                verdict = await self._judge(member, action.group)
                if isinstance(verdict, float):
                    return verdict
                if isinstance(verdict, str):
                    return self._refused(verdict, members, judged)
                judged.append((member, verdict))
            return await self._submit(action.group, judged, said)

    def _job_id(self, pod: Json) -> int | None:
        return pod_state.recorded_job_id(pod, self.readopter.settings.annotation_prefix)

    def _bound_members(self, namespace: str, group: str) -> list[Json]:
        """The group's live, bound Pods of this scheduler, by name."""
        found = []
        for key, pod in self.pods.items():
            if not key.startswith(namespace + "/") or gang.group_of(pod) != group:
                continue
            if pod["metadata"].get("deletionTimestamp") or pod_state.finished(pod):
                continue
            if (pod.get("spec") or {}).get("nodeName"):
                found.append(pod)
        return sorted(found, key=lambda p: str(p["metadata"]["name"]))

    async def _judge(self, member: Json, group: str) -> actions.Readopt | str | float:
        """What re-adopting `member` takes, or why it cannot be, or a delay (its node has
        not registered again with slurmctld yet)."""
        name = member["metadata"]["name"]
        job_id = self._job_id(member)
        known = self.readopter.index.get(job_id) if job_id is not None else None
        pending_again = False
        if known is not None and known[0].uid == member["metadata"]["uid"] and known[1].active:
            if job_id is None or not pod_actions.reverted(member, known[1]):
                return f"member {name}'s job {job_id} is still in Slurm ({known[1].state})"
            # PENDING again: Slurm lost its start, not the job; the member's record is the
            # evidence, at any age (nothing was purged), as for a single Pod.
            pending_again = True
            found = await self.readopter.reverted_evidence(member, job_id)
        else:
            found = await self.readopter.evidence(member)
        if found.last is not None and found.node is not None and pod_actions.not_registered(found.node):
            return REGISTER_WAIT_S
        now = self.clock.now()
        problem = pod_actions.why_not_readopted(member, found.last, found.node, set(found.hosts), now)
        if problem is not None:
            state = (
                "is PENDING again although it had started" if pending_again else "no longer exists in Slurm"
            )
            return f"member {name}'s job {job_id} {state}{problem}"
        assert found.last is not None
        left = pod_actions.time_left_min(found.last, now)
        return actions.Readopt(
            found.last.job_id, found.last.nodes[0], left, group, pending_again=pending_again
        )

    def _refused(
        self, why: str, members: list[Json], judged: list[tuple[Json, actions.Readopt]]
    ) -> GroupRefused:
        """Every member goes: the group is re-adopted whole or not at all."""
        lost = dict((id(m), a) for m, a in judged)
        everyone = []
        for member in members:
            job_id = self._job_id(member) or 0
            everyone.append((member, lost.get(id(member)) or actions.Readopt(job_id, "its node", None)))
        return GroupRefused(f"its PodGroup is re-adopted whole or not at all, and {why}", tuple(everyone))

    async def _submit(
        self, group: str, judged: list[tuple[Json, actions.Readopt]], said: actions.Said
    ) -> GroupRefused | Ended | None:
        """One new heterogeneous job for the whole group; every member names its component."""
        members = [member for member, _ in judged]
        every = tuple(judged)
        if not self.readopter.executor.ids.choosing:
            why = "Slurm does not let this scheduler choose job IDs here, and a lost job's ID may come back"
            return GroupRefused(f"its PodGroup {group} cannot be re-adopted: {why}", every)
        limits = [a.time_limit_min for _, a in judged if a.time_limit_min is not None]
        limit = min(limits) if limits else None
        parts: list[Submission] = []
        names: list[tuple[PodRef, str, str]] = []
        for i, (member, lost) in enumerate(judged):
            vetting = submission.vet(
                member,
                translate(member, self.readopter.settings),
                self.readopter.policy.current(),
                self.readopter.slurm.dialect.unsupported,
                prefix=self.readopter.settings.annotation_prefix,
                refuse_static_cpu=False,
            )
            if vetting.job is None:
                problems = "; ".join(vetting.refusal.problems if vetting.refusal else ())
                why = f"member {member['metadata']['name']} would no longer be accepted ({problems})"
                return GroupRefused(f"its PodGroup is re-adopted whole or not at all, and {why}", every)
            job = vetting.job
            request = dataclasses.replace(
                job.request, required_nodes=(lost.node,), excluded_nodes=(), time_limit_min=limit, hold=True
            )
            parts.append(self.readopter.executor.part(job, request=request, runs_script=i == 0))
            names.append((job.pod, job.name, request.comment))
        try:
            answer = await self.readopter.executor.submit_new(
                group_submission(parts), len(parts), counter_ok=False
            )
        except SlurmError as err:
            if err.retryable:
                raise
            return GroupRefused(f"Slurm refused a new job for its PodGroup {group} ({err})", every)
        leader = answer.job_id
        components = self._by_offset(leader, len(parts))
        handing_over = self.readopter.executor.memory.handing_over
        handing_over.update(components)  # the members' own passes leave them alone until recorded
        for offset, (ref, name, comment) in enumerate(names):
            self.readopter.index.expect_submitted(ref, leader + offset, name, comment)
        handed = False
        try:
            await self._release(leader, len(parts))
            started = await self._started(leader, [lost.node for _, lost in judged])
            if isinstance(started, str):
                return GroupRefused(f"its PodGroup {group} cannot be re-adopted: {started}", every)
            if isinstance(started, Ended):
                # Each member names its ended component and ends with it on its own pass.
                handed = True
                for member, component_id in zip(members, self._by_offset(leader, len(members)), strict=True):
                    await self._record(member, component_id, None)
                return started
            handed = True
            for (member, lost), component in zip(judged, started, strict=True):
                if await self._record(
                    member, component.job_id, component.start_time or int(self.clock.now())
                ):
                    what = "the start of job" if lost.pending_again else "job"
                    note = (
                        f"Slurm lost {what} {lost.old_job} (slurmctld restarted without it) "
                        "while this Pod ran; "
                        f"component {component.job_id} of its PodGroup {group}'s new job {leader} holds its "
                        f"resources on {lost.node} again"
                    )
                    said.append(Event(ev.PLACEHOLDER_READOPTED, note, pod=member))
            kube_scheduler.attempt("readopted", len(members))
            return None
        finally:
            handing_over.difference_update(components)
            if not handed:
                why = f"PodGroup {group}'s new job, not handed to its members"
                uids = [member["metadata"]["uid"] for member in members]
                await self.readopter.executor.cancel_job(CancelJob(leader, why), *uids)

    async def _release(self, leader: int, count: int) -> None:
        """Let every component start (submitted held, as a re-adopted job is, until all is
        in place). A release of the leader may release the whole job, and a component
        someone cancelled cannot be released: a refusal is only logged, and what Slurm then
        shows of the job decides."""
        for offset in range(count):
            try:
                await self.readopter.executor.release_held(actions.ReleaseHeld(leader + offset))
            except SlurmRejected as err:
                log.info("release of component %s of job %s: %s", leader + offset, leader, err)

    @staticmethod
    def _by_offset(leader: int, count: int) -> list[int]:
        return [leader + offset for offset in range(count)]

    async def _started(self, leader: int, nodes: list[str]) -> list[SlurmJob] | Ended | str:
        """The new job's components once each runs on its member's node, by offset; `Ended`
        when Slurm ended one first; else why not. A new job Slurm lost whole is tried again
        (raised as a Slurm error that may pass), as for a single Pod."""
        deadline = self.clock.monotonic() + START_WITHIN_S
        while True:
            components = sorted(await self.readopter.slurm.job_group(leader), key=lambda j: j.het_job_offset)
            ended = next((j for j in components if j.ending), None)
            if ended is not None:
                return Ended(ended)
            if len(components) == len(nodes) and all(
                j.running and j.nodes == (node,) for j, node in zip(components, nodes, strict=True)
            ):
                return components
            if len(components) != len(nodes) or self.clock.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL_S)
        if not components:  # slurmctld restarted again before it saved the new job
            raise SlurmUnavailable(f"Slurm lost the group's new job {leader} too (slurmctld restarted again)")
        if len(components) != len(nodes):
            return f"Slurm lost part of its new job {leader}"
        waiting = ", ".join(sorted({j.reason for j in components if j.pending})) or "not started"
        return f"Slurm did not start its new job {leader} on the members' nodes at once ({waiting})"

    async def _record(self, member: Json, job_id: int, started_at: int | None) -> bool:
        """The member names its component; False when it went meanwhile (its component is
        then a claim whose Pod is gone, settled as any)."""
        try:
            await self.readopter.executor.record_job(
                actions.RecordJob(
                    member,
                    job_id,
                    pod_state.avoid_nodes(member, self.readopter.settings.annotation_prefix),
                    started_at,
                )
            )
        except KubeError as err:
            if err.not_found or err.conflict:
                log.info("member %s went while its group was re-adopted (%s)", PodRef.of(member), err)
                return False
            raise
        return True
