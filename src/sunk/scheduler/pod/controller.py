"""reconcile(pod key): make the Pod and its placeholder job agree (R2, R3, R4, R8.2).

Each call looks at the current state of both sides and takes at most one step:
refuse an invalid Pod, submit (or adopt) its job, report why it waits, bind it, or clean
up a job whose Pod is gone. Every fact it relies on lives in Kubernetes (annotations,
conditions) or in Slurm (job names carry the Pod UID), so a restart at any moment resumes
where the last process stopped, without a second job for the same Pod.

A pass first settles every job naming the Pod key (`decide.claim_plan`), then gathers
what the caches and this process's memory say of the Pod (`PodFacts`); `decide.pod_plan`
returns the step's typed actions, and `_carry_out` takes them in order through the
executor (`executor.PodExecutor`, the one file of the Pod path that writes to
Kubernetes or Slurm). A step that needs a fresh read returns one read action: the
controller reads (`submitting.SubmitReader` for a submission, `placement.Placement` for
the strict node check before a binding) and plans again (`decide.submit_plan`,
`decide.bind_plan`); a submission's answer is planned on (`submit_plan.answered`) before
the rest of the plan goes on. Confirming a hook call's claim, re-adoption and the PodGroup
steps are handed to the collaborators that own them, which hand their writes to the same
executor and say what the Pods must be told, which the executor writes once the step is
done or has failed.
"""

from __future__ import annotations

import logging
from typing import Any

from sunk.runtime.controller import Outcome
from sunk.runtime.ports import Clock
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.decide import (
    actions,
    bind_plan,
    claim_plan,
    pod_actions,
    pod_plan,
    pod_state,
    steps,
    submit_plan,
)
from sunk.scheduler.jobs import JobIndex, PodJobs
from sunk.scheduler.pod.executor import PodExecutor
from sunk.scheduler.pod.gangs import Gangs
from sunk.scheduler.pod.group_readopting import GroupReadoption
from sunk.scheduler.pod.memory import WRITE_UNSEEN_RECHECK_S, Memory
from sunk.scheduler.pod.placement import Placement
from sunk.scheduler.pod.readopting import Ended, Readopter
from sunk.scheduler.pod.submitting import SubmitReader
from sunk.scheduler.pods import PodStore
from sunk.scheduler.ports import SlurmPort
from sunk.scheduler.translate import PodRef, Settings, gang, translate
from sunk.slurm.errors import SlurmError
from sunk.slurm.models import SlurmJob

log = logging.getLogger(__name__)
Json = dict[str, Any]
# Slurm reads on behalf of hook calls in flight at once; beyond that the poller answers.
ASK_WHY_AT_ONCE = 4


class PodController:
    """The Pod controller: one Pod key at a time, its Pod and the jobs naming it agree."""

    name = "pods"

    def __init__(
        self,
        *,
        slurm: SlurmPort,
        executor: PodExecutor,
        pods: PodStore,
        cluster: ClusterView,
        index: JobIndex,
        settings: Settings,
        memory: Memory,
        reader: SubmitReader,
        places: Placement,
        gangs: Gangs,
        readopter: Readopter,
        group_readoption: GroupReadoption,
        clock: Clock,
        placement: str = "slurm",
    ) -> None:
        self.clock = clock
        self.slurm = slurm  # read only: what a claim, an ending or a missing job is now
        self.executor = executor
        self.pods = pods
        self.cluster = cluster
        self.index = index
        self.settings = settings
        self.prefix = settings.annotation_prefix
        self.memory = memory
        self.reader = reader  # what a submission is decided from
        self.places = places  # the strict node check before a binding
        self.gangs = gangs
        self.readopter = readopter
        self.group_readoption = group_readoption
        self.rules = pod_plan.Rules(settings, pack=placement == "pack")
        self._asking_slurm = 0

    def prune(self, live: set[int]) -> None:
        """After every job listing: forget what concerned jobs Slurm no longer lists."""
        self.memory.prune(live)
        self.places.prune()
        self.gangs.prune()

    async def _group_timed_out(self, view: pod_state.PodView, jobs: PodJobs) -> bool:
        job = jobs.job
        if view.group is None or job is None or job.group_leader is None or not job.pending:
            return False
        group, _ = await self.gangs.podgroup(view.ref.namespace, view.group)
        submitted = jobs.leader.submit_time if jobs.leader else job.submit_time
        return group is not None and gang.timed_out(group, submitted, self.clock.now())

    # -- the entry point ------------------------------------------------------------------
    async def reconcile(self, key: str) -> Outcome:
        """Gather what the caches know, ask sunk.scheduler.decide, carry the answer out."""
        namespace, name = key.split("/", 1)
        pod = self.pods.get(key)
        if pod is None:
            self.memory.deleting.pop(key, None)
            recheck = Outcome()
            for ref, other in self.index.for_key(namespace, name):
                recheck = recheck.merge(await self._settle_claim(ref, other, None, None))
            return recheck
        view = pod_state.view(pod, self.prefix)
        if self.memory.job_written.unseen(view.ref.uid, view.job_id):
            # The cache still shows the job this process just moved the Pod off (a rejected
            # placement, a released group): judged by that copy, the Pod would look ended
            # and its new job unowned.
            return Outcome(requeue_after=WRITE_UNSEEN_RECHECK_S)
        if self.memory.refused.unseen(view.ref.uid, view.refused):
            return Outcome(requeue_after=WRITE_UNSEEN_RECHECK_S)  # refused already: no second word
        jobs = self.index.of_pod(view.ref, view.job_id)
        recheck = Outcome()  # a cancel to confirm: the job is looked at until Slurm ends it
        for ref, other in jobs.claims:
            recheck = recheck.merge(await self._settle_claim(ref, other, pod, view))
        # A cancel to confirm and the Pod's own next look: the sooner wins.
        return recheck.merge(await self._step(pod, view, jobs))

    async def _step(self, pod: Json, view: pod_state.PodView, jobs: PodJobs) -> Outcome:
        """The Pod's own step: gather, plan, carry out."""
        facts = await self._gather(pod, view, jobs)
        plan = pod_plan.plan(facts, self.rules, synced=self.index.synced.is_set(), now=self.clock.now())
        return await self._execute(view.ref, pod, facts.job, plan)

    async def _replan(self, pod: Json, view: pod_state.PodView) -> Outcome:
        """Plan the Pod's step again on a job Slurm just confirmed (now in the index). A
        plan that would ask Slurm again is left to the next pass: one read per pass."""
        jobs = self.index.of_pod(view.ref, view.job_id)
        if jobs.job is None:
            return Outcome(requeue_after=1)
        return await self._step(pod, view, jobs)

    async def _gather(self, pod: Json, view: pod_state.PodView, jobs: PodJobs) -> pod_plan.PodFacts:
        """What the caches and this process's memory say about a live Pod."""
        uid, job = view.ref.uid, jobs.job
        hosts: set[str] = set()
        if job is not None and view.bound and job.running and len(job.nodes) == 1:
            # The Slurm node → Node map is built from every slurmd Pod: only for a job that runs.
            hosts = self.cluster.host_map().get(job.nodes[0], set())
        needed = self._widenable(pod, job)
        return pod_plan.PodFacts(
            pod,
            view,
            job,
            leader=jobs.leader,
            group_timed_out=await self._group_timed_out(view, jobs),
            ending_reported=(view.job_id, uid) in self.memory.ending_reported,
            cancelled_for_pod=job is not None and (job.job_id, uid) in self.memory.signalled,
            being_deleted=self._being_deleted(pod),
            drained=job is not None and job.job_id in self.memory.drained,
            hosts=frozenset(hosts),
            needed=frozenset(needed) if needed is not None else None,
            claims=tuple(jobs.claims),
        )

    async def _settle_claim(
        self, ref: PodRef, job: SlurmJob, pod: Json | None, view: pod_state.PodView | None
    ) -> Outcome:
        """One job naming this Pod key: `claim_plan` says whether it may live and how it ends."""
        facts = claim_plan.ClaimFacts(
            ref,
            job,
            view,
            cancelled_at=self.memory.cancelled.get((job.job_id, ref.uid)),
            signalled=(job.job_id, ref.uid) in self.memory.signalled,
            others_running=job.group_leader is not None and self.gangs.others_running(ref, job),
            handing_over=job.job_id in self.memory.handing_over,
        )
        plan = claim_plan.plan(facts, now=self.clock.monotonic())
        return await self._execute(ref, pod, job, plan)

    async def _still_claims(self, ref: PodRef, job_id: int) -> bool:
        """Ask Slurm whether `job_id` is still the job of `ref` (`ConfirmClaim`)."""
        found = await self.slurm.job(job_id)
        if found is not None and self.index.owner_of(found) == ref:
            return True
        log.info("not cancelling job %s: Slurm no longer holds it for %s", job_id, ref)
        if found is not None:
            owner = self.index.owner_of(found)
            if owner is not None:
                self.index.observe(owner, found)  # the ID's new owner: the old key forgets it
        return False

    async def _execute(
        self, ref: PodRef, pod: Json | None, job: SlurmJob | None, plan: actions.PodPlan
    ) -> Outcome:
        """Carry a plan's actions out in order; each records what it did only once done, so
        a failure (raised to the queue) is tried again on the next pass. A step done by a
        collaborator ends the plan with that collaborator's answer; what it says the Pods
        must be told is written here once it is done (or has failed). `pod` is None only
        for a claim whose Pod is gone: such a plan neither tells nor deletes it."""
        said: actions.Said = []
        try:
            return await self._carry_out(ref, pod, job, plan, said)
        finally:
            for report in said:
                await self.executor.tell(pod, report)

    async def _carry_out(
        self, ref: PodRef, pod: Json | None, job: SlurmJob | None, plan: actions.PodPlan, said: actions.Said
    ) -> Outcome:
        deleting = any(isinstance(action, actions.DeletePod) for action in plan.actions)
        # A run of effects goes to the executor at once; a submission's answer is planned on
        # here before the rest goes on, so it ends a run.
        effects: list[actions.Effect] = []
        for action in (*plan.actions, None):
            if isinstance(action, actions.Effect) and not isinstance(action, actions.SubmitPod):
                effects.append(action)
                continue
            if effects:
                stop = await self.executor.apply(ref, pod, job, effects, deleting=deleting)
                effects = []
                if stop is not None:
                    return stop
            if action is None:
                break
            if isinstance(action, actions.ConfirmClaim):
                if not await self._still_claims(ref, action.job_id):
                    return Outcome()
            elif isinstance(action, actions.SubmitPod):
                assert pod is not None
                answer = await self.executor.submit_pod(pod, action)
                then = submit_plan.answered(pod, action, answer, pack_on=self.reader.rules.pack)
                await self._carry_out(ref, pod, job, actions.Plan(then), said)  # the rest goes on
            else:
                return await self._hand_over(ref, pod, job, action, said)
        return Outcome(requeue_after=plan.after)

    async def _hand_over(
        self,
        ref: PodRef,
        pod: Json | None,
        job: SlurmJob | None,
        action: actions.Handover,
        said: actions.Said,
    ) -> Outcome:
        """The steps that read Slurm or the API server on the way, each done by whom owns it."""
        if isinstance(action, actions.ReleaseGroup):  # a member left before the start
            assert job is not None
            self.memory.cancelled[(job.job_id, ref.uid)] = self.clock.monotonic()
            await self.gangs.release(action, said)
            return Outcome()
        assert pod is not None  # every other step is about a live Pod
        if isinstance(action, actions.ConfirmEnding):
            return await self._confirm_ending(ref, pod, action.job_id)
        if isinstance(action, actions.ConfirmMissing):
            return await self._confirm_missing(ref, pod)
        if isinstance(action, actions.ConfirmReverted):
            return await self._confirm_reverted(ref, pod, action.job_id)
        if isinstance(action, actions.Readopt) and action.group is not None:
            return await self.group_readoption.carry_out(pod, action, said, self._carry_out)
        if isinstance(action, actions.Readopt):
            why = await self.readopter.readopt(pod, action, said)
            if why is None:
                return Outcome()
            if isinstance(why, Ended):  # never this scheduler's cancel: the Pod ends with it
                plan = pod_actions.readopted_job_ended(action, why.job, self.clock.now())
                return await self._carry_out(ref, pod, why.job, plan, said)
            return await self._carry_out(ref, pod, job, pod_actions.readoption_failed(action, why), said)
        if isinstance(action, actions.ReplaceLostStart):
            assert job is not None
            plan = bind_plan.rejected(
                pod,
                job,
                None,
                bind_plan.LOST_START,
                self.reader.avoid(pod),
                self.reader.inputs(pod),
                self.reader.rules,
                avoid_node=False,
            )
            return await self._carry_out(ref, pod, job, plan, said)
        if isinstance(action, actions.FindOrSubmit):
            return await self._carry_out(ref, pod, None, self._new_job_plan(pod, action), said)
        if isinstance(action, actions.ForGroup) and action.step is steps.Step.FIND_OR_SUBMIT:
            done = await self.gangs.find_or_submit(pod, action.group, said)
            if isinstance(done, actions.SubmitAlone):  # a member beyond its group's job
                alone = actions.FindOrSubmit(avoid=self.reader.avoid(pod))
                return await self._carry_out(ref, pod, None, self._new_job_plan(pod, alone), said)
            return done
        assert job is not None  # binding and a group's timeout are about the Pod's job
        if isinstance(action, actions.Bind):
            return await self._bind(ref, pod, job, action.avoid, said)
        if action.step is steps.Step.GROUP_TIMED_OUT:
            return await self.gangs.timed_out(pod, job, said)
        return await self.gangs.bind_members(pod, job, said)

    def report_ending(self, ref: PodRef, job_id: int) -> None:
        """The placeholder script got SIGTERM (Slurm cancels, preempts or times out its job)
        and said so on the hooks API. Only recorded here: the Pod's next pass asks Slurm,
        and the Pod goes once Slurm agrees."""
        self.memory.ending_reported.add((job_id, ref.uid))

    async def _confirm_ending(self, ref: PodRef, pod: Json, job_id: int) -> Outcome:
        """A placeholder said its job is ending: read that job (a few at a time; when a
        thousand end at once, the next listing answers for the rest) and act on what Slurm
        says, never on the call alone: where Slurm ends it, the Pod's step is planned again
        on Slurm's answer (it says why, deletes the Pod, drains if late)."""
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
        self.memory.ending_reported.discard((job_id, ref.uid))
        view = pod_state.view(pod, self.prefix)
        if found is not None and self.index.owner_of(found) == ref:
            self.index.observe(ref, found)
            if steps.slurm_ends(view.bound, found):
                return await self._replan(pod, view)
            log.warning(
                "the placeholder of job %s said Slurm is ending it, but Slurm says %s; the Pod %s stays",
                job_id,
                found.state,
                ref,
            )
            return Outcome()
        if view.bound:
            return await self._confirm_missing(ref, pod)
        return Outcome()

    # -- a bound Pod ----------------------------------------------------------------------
    async def _confirm_missing(self, ref: PodRef, pod: Json) -> Outcome:
        """A bound Pod whose job no listing shows. A listing proves nothing (a partial
        answer, a fail-over, a token for another user): only Slurm saying so about this
        very job does. A job Slurm still holds is checked as any bound Pod's is."""
        view = pod_state.view(pod, self.prefix)
        job_id = view.job_id
        if job_id is not None:
            found = await self.slurm.job(job_id)
            if found is not None and self.index.owner_of(found) == ref:
                self.index.observe(ref, found)
                return Outcome(requeue_after=1) if found.ending else await self._replan(pod, view)
        # Slurm has no record of it: lost or ended (the readopter weighs the evidence).
        evidence = await self.readopter.evidence(pod)
        plan = pod_actions.for_missing_job(
            pod,
            job_id,
            evidence.last,
            node=evidence.node,
            hosts=set(evidence.hosts),
            group=view.group,
            now=self.clock.now(),
        )
        return await self._execute(ref, pod, None, plan)

    async def _confirm_reverted(self, ref: PodRef, pod: Json, job_id: int) -> Outcome:
        """A bound Pod's job looks PENDING again: read it; if Slurm says so, re-adopt."""
        found = await self.slurm.job(job_id)
        if found is None or self.index.owner_of(found) != ref:
            return await self._confirm_missing(ref, pod)
        self.index.observe(ref, found)
        if not pod_actions.lost_start(pod, found, self._hosts_of(found)):
            return Outcome(requeue_after=WRITE_UNSEEN_RECHECK_S)  # it moved on: judged again
        got = await self.readopter.reverted_evidence(pod, job_id)
        plan = pod_actions.for_reverted_job(
            pod, found, got.last, node=got.node, hosts=set(got.hosts), now=self.clock.now()
        )
        return await self._execute(ref, pod, found, plan)

    def _hosts_of(self, job: SlurmJob) -> set[str]:
        """The Nodes hosting the one Slurm node a running job has (the Slurm node → Node map
        is built from every slurmd Pod: only for a job that runs)."""
        if not job.running or len(job.nodes) != 1:
            return set()
        return set(self.cluster.host_map().get(job.nodes[0], set()))

    def _being_deleted(self, pod: Json) -> bool:
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        return bool(meta.get("deletionTimestamp")) or self.memory.deleting.get(key) == meta.get("uid")

    # -- an unbound Pod -------------------------------------------------------------------
    def _new_job_plan(self, pod: Json, action: actions.FindOrSubmit) -> actions.PodPlan:
        """No job yet: use one Slurm holds for this Pod (a crash fell between submit and
        annotate), or submit one, unless a submission got no answer and no listing since
        could have shown its job."""
        return submit_plan.for_new_job(self.reader.new_job(pod, action), self.reader.rules)

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
        excluded = tuple(self.places.excluded_for(pod, result.pod_rules)) + self.reader.avoid(pod)
        needed = set(result.job.avoiding(excluded).excluded_nodes)
        return needed if set(job.excluded_nodes) - needed else None

    # -- binding (R4.3, R4.4) -------------------------------------------------------------
    async def _bind(
        self, ref: PodRef, pod: Json, job: SlurmJob, avoid: tuple[str, ...], said: actions.Said
    ) -> Outcome:
        """Check the job's node strictly (a fresh read of it, under its lock), then plan; a
        rejected placement's new job is planned from the inputs read only then."""
        choice = await self.places.choose(pod, job)
        rejects = choice.node is None and choice.waits_on is None
        inputs = self.reader.inputs(pod) if rejects else None
        plan = bind_plan.for_choice(pod, job, choice, avoid, inputs, self.reader.rules)
        return await self._carry_out(ref, pod, job, plan, said)
