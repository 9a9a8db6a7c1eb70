"""The one job-safe path a member takes when it must go, whatever the cause.

A member goes when the NodeSet scales in, when its Node is cordoned or no longer fits the
selection, when its template is out of date (a roll-out), and when the NodeSet is deleted.
Each time the same steps, one per pass, each taken only on a Slurm listing that shows the
previous one done:

1. drain its Slurm node, the reason naming the NodeSet and the cause (a node someone else
   drained stays drained under their reason; sunk never rewrites or lifts it, except a
   drain that only waits for the health checks' next clean run, which the runner would
   lift under a going member: that one is replaced by the NodeSet's);
2. wait until Slurm lists neither an allocation nor a job on it (no timeout by default;
   with `spec.drain.timeout` it is reported, or its jobs cancelled, once the drain is older);
3. delete the Pod;
4. delete the Slurm node record (sunk.operator.nodeset.plan, once the Pod is gone).

A member Slurm has no record of while its Pod runs is not touched: that is a listing sunk
cannot trust, not an idle node. Which members go first when only some must (scale-in, a
roll-out's budget) is `cost`: see its docstring.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk.operator.nodeset import confinement, times
from sunk.operator.nodeset.actions import Action, DeletePod
from sunk.operator.nodeset.spec import CANCEL_JOBS, DrainPolicy
from sunk.runtime.actions import CancelJob, Drain, Event
from sunk.slurm.models import SlurmJob, SlurmNode

Json = dict[str, Any]
DRAIN_PREFIX = "sunk: NodeSet"
VERIFY_PREFIX = "sunk-hc: verify: "  # sunk.operator.nodeset.health_checks.verify_reason's

SCALE_IN = "scales in"
ROLL_OUT = "replaces members with an outdated template"
HARDWARE = "replaces members whose Node's resources changed"
DELETED = "is being deleted"

# Event reasons
DRAINING = "DrainingMember"
DELETED_EVENT = "SuccessfulDelete"
DRAIN_TIMED_OUT = "DrainTimedOut"
JOB_CANCELLED = "JobCancelledAfterDrainTimeout"
STUCK_TERMINATING = "MemberStuckTerminating"
# How long a deleted member may stay while Slurm shows its node drained and idle before it
# is deleted again without grace (see _terminating): far above the few seconds its preStop
# hook takes to see that, well below the hour of its grace period.
STUCK_TERMINATING_S = 120


def drain_reason(nodeset: str, cause: str) -> str:
    return f"{DRAIN_PREFIX} {nodeset} {cause}"


def drained_by(nodeset: str, record: SlurmNode) -> bool:
    """Drained by this NodeSet (whatever the cause), not by an administrator or Slurm."""
    return record.drained and record.reason.startswith(f"{DRAIN_PREFIX} {nodeset} ")


def lifted_soon(record: SlurmNode) -> bool:
    """Drained only until the health checks' next clean run (`sunk-hc: verify: ...`: a new
    member's first run, or the operator's hand-over of a member wanted back): the runner
    inside the member lifts it at any moment, so it keeps no job away from a going member."""
    return record.drained and record.reason.startswith(VERIFY_PREFIX)


def busy(record: SlurmNode, jobs: tuple[SlurmJob, ...] = ()) -> bool:
    """Slurm has handed out some of it, a job is finishing there, or a job lists it."""
    words = {record.state.upper(), *(f.upper() for f in record.flags)}
    return bool(jobs) or record.in_use or bool(words & {"ALLOCATED", "MIXED", "COMPLETING"})


def waits_on_jobs(records: Mapping[str, SlurmNode], jobs: Mapping[str, tuple[SlurmJob, ...]]) -> bool:
    """Some member a NodeSet drains still has work on it (step 2 above): the end of that work
    is what its next step waits for, so Slurm is listed more often until it ends (issue #55:
    SlurmPoller), and the Pod goes about a second after the job rather than up to a whole
    poll interval later."""
    return any(
        record.drained and record.reason.startswith(f"{DRAIN_PREFIX} ") and busy(record, jobs.get(name, ()))
        for name, record in records.items()
    )


def jobs_by_node(jobs: list[SlurmJob]) -> dict[str, tuple[SlurmJob, ...]]:
    """Node name → the jobs that hold it now (started and not yet ended)."""
    held: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        if job.active and not job.pending:
            for node in job.nodes:
                held.setdefault(node, []).append(job)
    return {node: tuple(sorted(js, key=lambda j: j.job_id)) for node, js in held.items()}


@dataclass(frozen=True)
class Leaving:
    """A member that must go, and why (one of the causes above, or its Node's problem)."""

    pod: Json
    slurm_name: str
    node: str
    cause: str


@dataclass
class Step:
    """What one pass does for a leaving member: actions and what the status shows."""

    actions: list[Action] = field(default_factory=list)
    phase: str = "Draining"
    message: str = ""
    jobs: tuple[int, ...] = ()
    since: str = ""


def cost(
    nodeset: str, running: bool, record: SlurmNode | None, jobs: tuple[SlurmJob, ...]
) -> tuple[int, int, int]:
    """Which members go first when only some must: lower goes first.

    Members that never started; then the ones this NodeSet already drains, idle before busy
    (a removal under way is finished, not switched: a member that became idle elsewhere
    meanwhile does not make the operator lift one drain and make another); then idle ones;
    then idle ones someone else drained (kept for whoever is looking into them); then busy
    ones: the fewest jobs, then the one whose last job is due to end soonest. Ties: by Slurm
    node name. The controller drains only on a listing begun after the pass that chose
    (NodeSetController.reconcile), so "idle" here is never older than the scale-in."""
    if not running or record is None:
        return (0, 0, 0)
    ours = drained_by(nodeset, record)
    if ours:
        return (2, len(jobs), _last_end(jobs)) if busy(record, jobs) else (1, 0, 0)
    if not busy(record, jobs):
        return (4, 0, 0) if record.drained else (3, 0, 0)
    return (5, len(jobs), _last_end(jobs))


def _last_end(jobs: tuple[SlurmJob, ...]) -> int:
    ends = [job.end_time or 2**62 for job in jobs]  # no end known: as late as can be
    return max(ends, default=0)


def step(
    nodeset: str,
    leaving: Leaving,
    record: SlurmNode | None,
    jobs: tuple[SlurmJob, ...],
    policy: DrainPolicy,
    now_s: int,
    *,
    listed_after_write: bool,
) -> Step:
    """The next step for one leaving member (at most one of the path's steps per pass).

    `listed_after_write`: False when this operator drained or resumed the node after the
    listing began. Such a listing may show our drain while Slurm has lifted it since (a
    scale back up resumed the node and a job landed there), so the Pod is not deleted on it."""
    meta = leaving.pod.get("metadata") or {}
    name = leaving.slurm_name
    if meta.get("deletionTimestamp"):
        return _terminating(nodeset, leaving, record, jobs, now_s, listed_after_write=listed_after_write)
    # A member whose container refused to confine jobs never started slurmd (its phase
    # stays Running through the crash loop): no record will ever come.
    running = (leaving.pod.get("status") or {}).get("phase") == "Running"
    running = running and not confinement.refusals([leaving.pod])
    if record is None:
        if running:
            return Step(
                phase="Waiting",
                message=f"member {name} runs but Slurm lists no node {name}: kept until it does",
            )
        done = Step(phase="Deleting", message=f"member {name} never started; deleting it")
        done.actions.append(DeletePod(meta["name"], meta.get("uid", ""), f"{leaving.cause}; not started"))
        return done
    if not record.drained or lifted_soon(record):
        drain = Step(message=f"draining member {name}: NodeSet {nodeset} {leaving.cause}")
        drain.actions += [
            Drain(name, drain_reason(nodeset, leaving.cause)),
            Event(DRAINING, _draining_note(nodeset, name, leaving.cause, jobs)),
        ]
        drain.jobs = tuple(j.job_id for j in jobs)
        return drain
    if busy(record, jobs):
        return _wait_for_jobs(nodeset, leaving, record, jobs, policy, now_s)
    if not listed_after_write:
        return Step(message=f"member {name} drains: waits for a Slurm listing newer than its drain")
    gone = Step(phase="Deleting", message=f"deleting member {name}: drained and idle")
    gone.actions += [
        DeletePod(
            meta["name"],
            meta.get("uid", ""),
            f"NodeSet {nodeset} {leaving.cause}; drained and idle",
            idle_on=name,
        ),
        Event(
            DELETED_EVENT,
            f"deleted Pod {meta['name']} on Node {leaving.node}: NodeSet {nodeset} {leaving.cause}; "
            "its Slurm node was drained and idle",
        ),
    ]
    return gone


def deleted_at(meta: Json) -> int | None:
    """When a Pod's deletion was asked, in epoch seconds. The API server sets
    `deletionTimestamp` to the end of the grace period (the time the kubelet kills what is
    left), not to the moment of the request: a member's hour of grace must be taken off."""
    end = times.epoch(str(meta.get("deletionTimestamp")))
    grace = meta.get("deletionGracePeriodSeconds")
    return None if end is None else end - (grace if isinstance(grace, int) else 0)


def _terminating(
    nodeset: str,
    leaving: Leaving,
    record: SlurmNode | None,
    jobs: tuple[SlurmJob, ...],
    now_s: int,
    *,
    listed_after_write: bool,
) -> Step:
    """A deleted member whose Pod is still there. Its preStop hook keeps slurmd running
    until the hook itself sees the node idle; a hook that cannot reach slurmctld (its
    member cut off from it) waits out the whole grace period, an hour by default, holding
    the Node and the roll-out. Once Slurm, as the operator reads it, has shown the node
    drained and without work for STUCK_TERMINATING_S, the hook has nothing left to guard:
    the Pod is deleted again without grace (after the same fresh read as any deletion)."""
    meta = leaving.pod.get("metadata") or {}
    name = leaving.slurm_name
    waiting = Step(phase="Deleting", message=f"member {name} is terminating")
    since = deleted_at(meta)
    if since is None or now_s - since < STUCK_TERMINATING_S or record is None or not listed_after_write:
        return waiting
    if not record.drained or lifted_soon(record) or busy(record, jobs):
        return waiting
    age = now_s - since
    waiting.message = (
        f"member {name} is still terminating {age} s after its deletion while Slurm lists it idle"
    )
    waiting.actions += [
        DeletePod(
            meta["name"],
            meta.get("uid", ""),
            f"still terminating {age} s after its deletion; drained and idle",
            idle_on=name,
            grace_s=0,
        ),
        Event(
            STUCK_TERMINATING,
            f"Pod {meta['name']} on Node {leaving.node} was still terminating {age} s after its deletion "
            f"(NodeSet {nodeset} {leaving.cause}) although Slurm lists its node {name} drained with no job "
            f"({record.state.lower()}); its preStop hook waits while it cannot read that itself. "
            "Deleting the Pod without grace.",
            warning=True,
            once_as=f"{name}.stuck.{meta.get('uid', '')}",
        ),
    ]
    return waiting


def _wait_for_jobs(
    nodeset: str,
    leaving: Leaving,
    record: SlurmNode,
    jobs: tuple[SlurmJob, ...],
    policy: DrainPolicy,
    now_s: int,
) -> Step:
    name = leaving.slurm_name
    ids = tuple(j.job_id for j in jobs)
    listed = (
        f"job{'s' if len(ids) > 1 else ''} {', '.join(str(i) for i in ids)}"
        if ids
        else "a job still completing"
    )
    wait = Step(jobs=ids, message=f"member {name} drains: waits for {listed}")
    ours = drained_by(nodeset, record)
    if ours and record.reason_changed_at:
        wait.since = times.stamp(record.reason_changed_at)
    if not record.reason.startswith(DRAIN_PREFIX):
        wait.message += f" (drained by someone else: {record.reason or 'no reason given'})"
    timeout = policy.timeout_s
    if timeout is None or not ours or not record.reason_changed_at:
        return wait
    late = now_s - record.reason_changed_at - timeout
    if late < 0:
        return wait
    wait.phase = "DrainTimedOut"
    if policy.on_timeout == CANCEL_JOBS:
        wait.message = f"member {name} drained for longer than spec.drain.timeout: cancelling {listed}"
        for job in jobs:
            why = f"its node {name} must go (NodeSet {nodeset} {leaving.cause}) and spec.drain.timeout passed"
            wait.actions.append(CancelJob(job.job_id, why))
            wait.actions.append(
                Event(
                    JOB_CANCELLED,
                    f"cancelled Slurm job {job.job_id} ({job.name}): {why}",
                    warning=True,
                    once_as=f"{nodeset}.cancel.{job.job_id}",
                )
            )
        return wait
    wait.message = f"member {name} drained for longer than spec.drain.timeout; still waits for {listed}"
    wait.actions.append(
        Event(
            DRAIN_TIMED_OUT,
            f"Slurm node {name} has drained for longer than spec.drain.timeout and still runs {listed}; "
            "it is kept until they end (set spec.drain.onTimeout: CancelJobs to end them)",
            warning=True,
            once_as=f"{nodeset}.timeout.{name}.{record.reason_changed_at}",
        )
    )
    return wait


def _draining_note(nodeset: str, name: str, cause: str, jobs: tuple[SlurmJob, ...]) -> str:
    if not jobs:
        return f"draining member {name} (NodeSet {nodeset} {cause}); it is idle and goes next"
    ids = ", ".join(str(j.job_id) for j in jobs)
    return f"draining member {name} (NodeSet {nodeset} {cause}); it goes once its jobs end: {ids}"


def records_of(nodeset: str, records: Mapping[str, SlurmNode]) -> list[str]:
    """Slurm node names shaped like this NodeSet's members (<name>-ddd-ddd)."""
    prefix = f"{nodeset}-"
    return sorted(
        n
        for n in records
        if n.startswith(prefix)
        and len(rest := n[len(prefix) :]) == 7
        and rest[3] == "-"
        and rest[:3].isdigit()
        and rest[4:].isdigit()
    )
