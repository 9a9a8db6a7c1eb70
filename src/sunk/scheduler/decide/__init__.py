"""What to do next, decided without I/O (R4, R5, R8.2).

The Pod controller gathers what the caches know (the Pod, the jobs that claim it, what this
process did lately) and asks these functions; it then carries the answer out. Keeping the
decisions here, as plain functions of their inputs, is what lets every branch be tested
with a table of cases (tests/unit/test_decide.py).

The questions answered:
- `for_claim`: a job names this Pod key; may it live?
- `for_pod`: the Pod exists; what is its next step?
- `placement_problem`: before a submit, can any Slurm node host the Pod at all?
- `slurm_node_problem`: at bind time, does Slurm's own view rule the node out?
- `drain_due`: a bound Pod outlives its ending job; when must its node be drained?
- `drain_notice`: a Slurm node is drained (or down); what Event explains it, on which object?
- `group_bind`: a gang's job runs; may its members be bound, all of them?
- `pack`: --placement=pack; which nodes should a new job leave out?
"""

from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from sunk.scheduler.translate import PlaceholderJob, PodRef
from sunk.slurm.models import SlurmJob, SlurmNode, gres_counts

Json = dict[str, Any]
ENDED_PHASES = ("Succeeded", "Failed")
# PodScheduled reasons that are final: the Pod is never tried again (R2.4).
FINAL_REASONS = frozenset({"InvalidForSlurm", "RejectedBySlurm", "ForbiddenByPolicy"})
# A cancelled job that Slurm still runs this long after is cancelled again.
CANCEL_CONFIRM_S = 5.0
# A pending or starting state is reported on the Pod only once it lasts this long.
TRANSIENT_S = 3.0
# Why a job waits in the normal course of things (Slurm has not looked at it yet, jobs of
# higher priority go first, its resources are busy): under a burst most such jobs start
# within TRANSIENT_S, so a condition write (which every Pod watcher receives) waits that
# long. Any other reason (a partition down, a node unavailable, a limit) is said at once.
ORDINARY_WAITS = frozenset({"None", "Priority", "Resources"})
# Drain this long before KillWait ends, leaving Slurm time to act before its SIGKILL.
DRAIN_MARGIN_S = 3
# --placement=pack: a job that left idle nodes out and still waits this long after its
# submission gets them back (the node listing it was packed by may have been stale).
PACK_PATIENCE_S = 5.0


def finished(pod: Json) -> bool:
    """The Pod's containers have all ended for good (phase Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") in ENDED_PHASES


def finally_refused(pod: Json) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition.get("status") == "False" and condition.get("reason") in FINAL_REASONS
    return False


def recorded_job_id(pod: Json, prefix: str) -> int | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(prefix + "job-id")
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


# -- a job that claims a Pod key -------------------------------------------------------------
class Claim(enum.Enum):
    KEEP = "keep"  # the Pod it names owns it (or nothing is to be done now)
    SIGNAL = "signal"  # its Pod is being deleted: ask the script to end, keep the resources
    CANCEL = "cancel"  # its Pod is gone, finished, refused or has another job: end it now
    RECHECK = "recheck"  # cancelled already; look again until Slurm ends it
    RELEASE_GROUP = "release-group"  # a gang's member left before its job started: the
    # job is cancelled and the other members wait for a new one (never deleted for it)


def owns(pod: Json | None, ref: PodRef, job: SlurmJob, prefix: str) -> bool:
    """The live Pod that `job` names still counts on it."""
    if pod is None:
        return False
    meta = pod["metadata"]
    if meta.get("uid") != ref.uid or meta.get("deletionTimestamp"):
        return False
    if finished(pod) or finally_refused(pod):
        return False  # a refused Pod owns no job, whatever Slurm made of the refusal
    recorded = recorded_job_id(pod, prefix)
    return recorded is None or recorded == job.job_id


def holds_job(pod: Json | None, ref: PodRef, job_id: int, prefix: str) -> bool:
    """The Pod `ref` may still run something on job `job_id`'s resources: it exists, has not
    finished, and has not been given another job since (a rejected placement). A Pod being
    deleted still holds its job: its containers may still run. One never bound that names
    no job (a gang's member whose group was given a new job) runs nothing anywhere."""
    if pod is None or pod["metadata"].get("uid") != ref.uid or finished(pod):
        return False
    recorded = recorded_job_id(pod, prefix)
    if recorded is None and not (pod.get("spec") or {}).get("nodeName"):
        return False
    return recorded in (None, job_id)


def for_claim(
    pod: Json | None,
    ref: PodRef,
    job: SlurmJob,
    *,
    prefix: str,
    cancelled_at: float | None,
    signalled: bool,
    now: float,
    others_running: bool = False,
) -> Claim:
    """R5.1 and R8.2 for one active job naming this Pod key. `cancelled_at` is when this
    process's cancel of it was accepted (monotonic), `now` the same clock. For a component
    of a gang's job, `others_running` says another member still runs: a member that
    succeeded waits for them (the group's job ends as one), a member that failed ends it."""
    if not job.active or owns(pod, ref, job, prefix):
        return Claim.KEEP
    group = job.group_leader is not None
    if (
        group
        and others_running
        and pod is not None
        and pod["metadata"].get("uid") == ref.uid
        and (pod.get("status") or {}).get("phase") == "Succeeded"
    ):
        return Claim.KEEP
    gone = pod is None or not holds_job(pod, ref, job.job_id, prefix) or finally_refused(pod)
    if gone:
        if group and job.pending:
            return Claim.RELEASE_GROUP if cancelled_at is None else Claim.KEEP
        # Cancelled even while Slurm is ending it: that stops a requeue.
        if cancelled_at is None:
            return Claim.CANCEL
        if not job.ending and now - cancelled_at >= CANCEL_CONFIRM_S:
            return Claim.CANCEL  # accepted but lost (a slurmctld crash): again
        return Claim.RECHECK if not job.ending else Claim.KEEP
    # The Pod is being deleted: its containers may still run, so the job keeps the node.
    # A gang's member is not signalled: the group's job ends as one once the Pod is gone.
    return Claim.SIGNAL if job.running and not signalled and not group else Claim.KEEP


# -- the Pod's next step ----------------------------------------------------------------------
class Step(enum.Enum):
    NOTHING = "nothing"  # wait for the next event
    WAIT = "wait"  # look again after `Decision.after` seconds
    END_POD = "end-pod"  # Slurm ends (or gave up) the job: the Pod goes, saying why
    CONFIRM_ENDING = "confirm-ending"  # its script says Slurm ends the job: ask Slurm first
    CHECK_BOUND = "check-bound"  # bound: make sure its job still runs where the Pod is
    CONFIRM_MISSING = "confirm-missing"  # bound, but no listing shows its job: ask Slurm
    FIND_OR_SUBMIT = "find-or-submit"  # no job yet: adopt one of its, or submit
    REPORT_PENDING = "report-pending"  # the job waits in Slurm: say why on the Pod
    BIND = "bind"  # the placeholder runs: place the Pod on its node
    REPORT_STARTING = "report-starting"  # the job runs, its script has not marked it yet
    GROUP_TIMED_OUT = "group-timed-out"  # a gang's job waited longer than its PodGroup allows
    WIDEN = "widen"  # a pending job leaves out nodes that can host the Pod now: give them back


@dataclass(frozen=True)
class Decision:
    step: Step
    after: float = 0.0


def for_pod(
    pod: Json,
    job: SlurmJob | None,
    *,
    prefix: str,
    synced: bool,
    now: float,
    ending_reported: bool = False,
    group_timed_out: bool = False,
    widen_after: float | None = None,
) -> Decision:
    """The next step for a live Pod of ours, given its current job (the one its annotation
    names, if the index knows it for this UID) and the wall-clock time `now`.
    `ending_reported`: that job's placeholder script said (on the hooks API) that Slurm is
    ending it. A hook call is a claim, not a fact: the Pod goes only once Slurm agrees.
    `group_timed_out`: the Pod's gang has waited for its job longer than its PodGroup's
    scheduleTimeoutSeconds. `widen_after`: the job leaves out nodes that can host the Pod
    now (a Node uncordoned or Ready again, a slurmd Pod back, or --placement=pack keeping idle
    nodes for whole-node Pods); it gets them back once it has waited that long since its
    submission (0: at once; PACK_PATIENCE_S under --placement=pack)."""
    if finally_refused(pod):
        return Decision(Step.NOTHING)
    bound = bool((pod.get("spec") or {}).get("nodeName"))
    if job is not None and slurm_ends(pod, job):
        return Decision(Step.END_POD)
    if pod["metadata"].get("deletionTimestamp") or finished(pod):
        return Decision(Step.NOTHING)
    if ending_reported:
        return Decision(Step.CONFIRM_ENDING)
    if not synced:
        return Decision(Step.WAIT, 1.0)  # no decision before the first full job listing
    if bound:
        return Decision(Step.CHECK_BOUND if job is not None else Step.CONFIRM_MISSING)
    if job is None:
        return Decision(Step.FIND_OR_SUBMIT)
    if job.pending:
        if group_timed_out:
            return Decision(Step.GROUP_TIMED_OUT)
        if widen_after is not None:
            left = job.submit_time + widen_after - now if job.submit_time else widen_after
            return Decision(Step.WAIT, left) if left > 0 else Decision(Step.WIDEN)
        if job.reason in ORDINARY_WAITS and (wait := transient_for(job.submit_time, now)):
            return Decision(Step.WAIT, wait)
        return Decision(Step.REPORT_PENDING)
    if job.running and job.started:
        return Decision(Step.BIND)
    if job.active:  # CONFIGURING, or RUNNING before the script marked it started
        if wait := transient_for(job.start_time, now):
            return Decision(Step.WAIT, wait)  # the script usually starts within a second
        return Decision(Step.REPORT_STARTING)
    return Decision(Step.NOTHING)


def slurm_ends(pod: Json, job: SlurmJob) -> bool:
    """Slurm is ending the Pod's job, or gave up its resources while the Pod is bound
    (requeued, suspended): either way the Pod must go."""
    bound = bool((pod.get("spec") or {}).get("nodeName"))
    return job.ending or (bound and job.gave_up_resources)


def unanswered_wait(unanswered_at: float, listed_at: float, grace_s: float) -> bool:
    """A submission sent at `unanswered_at` (monotonic; 0: none) got no answer: Slurm may
    hold its job, so nothing is submitted again until a listing requested at least
    `grace_s` later (`listed_at`) could have shown it (R8.2: never two jobs for one Pod)."""
    return bool(unanswered_at) and listed_at < unanswered_at + grace_s


def transient_for(since: int, now: float) -> float:
    """Seconds left before a state entered at `since` (epoch) is worth a condition write;
    0 once it has lasted TRANSIENT_S (or when Slurm gave no time)."""
    if not since:
        return 0.0
    return max(0.0, since + TRANSIENT_S - now)


# -- a gang's job runs -------------------------------------------------------------------------
def group_bind(components: list[SlurmJob]) -> str | None:
    """R9.1: why the members of a gang cannot all be bound now, or None when they can. Every
    component must run on its one node and the script (which runs in the first component
    only) must have marked the job started; Slurm starts all components at once, so this
    holds for all of them or none, and no member is bound before the others can be."""
    offsets = sorted(c.het_job_offset for c in components)
    if not components or offsets != list(range(len(components))):
        return f"the listing shows components {offsets} of the group's job, not all of them"
    leader = min(components, key=lambda c: c.het_job_offset)
    if not all(c.running for c in components):
        return "not every component of the group's job runs yet"
    if not leader.started:
        return "the group's placeholder script has not started yet"
    if any(len(c.nodes) != 1 for c in components):
        return "a component of the group's job holds more than one node"
    return None


# -- --placement=pack (R9.2) ---------------------------------------------------------------------
@dataclass(frozen=True)
class Packing:
    """Where --placement=pack steers a job: `towards` are the partly used nodes with room
    for it (Slurm's pick among them), `left_out` the idle nodes it may not use."""

    left_out: tuple[str, ...] = ()
    towards: tuple[str, ...] = ()


def pack(job: PlaceholderJob, nodes: list[SlurmNode]) -> Packing:
    """When some partly used node the job may use has room for it (CPUs, memory, each GRES,
    as the last node listing saw them), the idle nodes are left out of the job, so they stay
    whole for whole-node Pods; with no such node nothing is. Slurm makes the final choice
    among the rest, by its own rules and plans (e.g. a node its backfill keeps for a
    waiting job). Narrower steering, best fit to one node, was measured and waited longer
    (docs/benchmarks.md). A job that names its nodes, a reservation, node features or a
    whole node is left to Slurm alone (sunk cannot judge those fits)."""
    options = job.options
    if options.required_nodes or options.reservation or options.constraints or options.exclusive:
        return Packing()
    partitions = set((options.partition or "").split(",")) - {""}
    ruled_out = set(job.excluded_nodes)
    usable = [
        node
        for node in nodes
        if node.name not in ruled_out
        and not node.draining
        and (not partitions or partitions & set(node.partitions))
    ]
    towards = tuple(sorted(node.name for node in usable if node.in_use and _has_room(node, job)))
    if not towards:
        return Packing()
    return Packing(tuple(sorted(node.name for node in usable if not node.in_use)), towards)


def _has_room(node: SlurmNode, job: PlaceholderJob) -> bool:
    if node.cpus - node.alloc_cpus < job.cpus:
        return False
    if node.memory_mib and node.memory_mib - node.alloc_memory_mib < job.memory_mib:
        return False
    return all(node.free_gres(name) >= count for name, count in job.gres)


# -- where a Pod may go, and when its node must be drained -----------------------------------
def placement_problem(
    required: tuple[str, ...],
    excluded: dict[str, str],
    avoid: tuple[str, ...],
    slurm_nodes: set[str],
    largest: str | None = None,
) -> str | None:
    """Why no job should be submitted for the Pod now (R4.3), or None. `excluded` maps the
    Slurm nodes the Pod's own constraints rule out to the reason; `avoid` lists nodes where
    a placement was rejected before; `required` are the nodes the Pod insists on;
    `largest`, the Slurm node on the Node with the most allocatable: when no node can host
    the Pod, its reason comes first, so a Pod too big for every Node hears what the largest
    lacks."""
    ruled_out = set(excluded) | set(avoid)
    unusable_required = sorted(set(required) & ruled_out)
    if unusable_required:
        why = "; ".join(
            f"{n}: {excluded.get(n, 'a placement there was rejected before')}" for n in unusable_required
        )
        return f"required Slurm node(s) cannot host this Pod ({why})"
    if slurm_nodes and not slurm_nodes - ruled_out:
        reasons = sorted({excluded.get(n, f"a placement on {n} was rejected before") for n in slurm_nodes})
        if largest in excluded:
            lead = excluded[largest]
            reasons = [f"{lead} (the largest Node)"] + [r for r in reasons if r != lead]
        return "no Slurm node can host this Pod: " + "; ".join(reasons[:5])
    return None


def slurm_node_problem(name: str, state: SlurmNode | None) -> str | None:
    """Why Slurm's own view rules node `name` out for a binding (unknown, down, draining),
    or None (R4.3)."""
    if state is None:
        return f"Slurm does not know node {name}"
    if state.draining:
        flags = "+".join((state.state, *state.flags))
        return f"Slurm node {name} is {flags} ({state.reason or 'no reason given'})"
    return None


_MIB_PER = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}


def allocation_problem(
    job: SlurmJob, cpus: int, memory_mib: int, gres: tuple[tuple[str, int], ...]
) -> str | None:
    """Why the job's allocation cannot hold the Pod (R4.3, issue #12), or None: fewer CPUs,
    less memory or fewer GRES than the Pod asks for (say, its owner shrank the pending job
    with `scontrol update`). Slurm may give more (whole cores); that is fine. What Slurm
    does not report is not judged."""
    tres = dict(part.split("=", 1) for part in job.allocated.split(",") if "=" in part)
    short = []
    if tres.get("cpu", "").isdigit() and int(tres["cpu"]) < cpus:
        short.append(f"{tres['cpu']} CPUs for {cpus}")
    memory = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)", tres.get("mem", ""))
    if memory:
        mib = float(memory[1]) * _MIB_PER[memory[2] or "M"]
        if mib < memory_mib:
            short.append(f"{tres['mem']} of memory for {memory_mib} MiB")
    held: dict[str, int] = {}
    for key, value in tres.items():  # "gres/gpu=2", "gres/gpu:a100=2" when Slurm tracks GRES as TRES
        if key.startswith("gres/") and value.isdigit():
            held[key[5:]] = max(held.get(key[5:], 0), int(value))
    from_detail: dict[str, int] = {}
    for name, count in (pair for detail in job.gres_detail for pair in gres_counts(detail)):
        base = name.split(":", 1)[0]
        from_detail[name] = from_detail.get(name, 0) + count
        if base != name:
            from_detail[base] = from_detail.get(base, 0) + count  # a typed GPU is also a GPU
    for name, count in from_detail.items():
        held[name] = max(held.get(name, 0), count)
    if held:  # Slurm reports the job's GRES: judge them
        for name, count in gres:
            if held.get(name, 0) < count:
                short.append(f"{held.get(name, 0)} {name} for {count}")
    if not short:
        return None
    given = ", ".join(short)
    return (
        f"Slurm job {job.job_id} was given {given} the Pod requests (was the job changed after submission?)"
    )


def drain_due(job: SlurmJob, bound: bool, kill_wait_s: int, now: float) -> float | None:
    """R5.3 for a Pod still there while Slurm ends its job: None when no drain can be due
    (never bound, or the job is over and its resources freed), else the seconds left before
    the node must be drained (0: now), DRAIN_MARGIN_S before Slurm's KillWait SIGKILL."""
    if not bound or not job.active or not job.end_time or not job.nodes:
        return None
    return max(0.0, job.end_time + kill_wait_s - DRAIN_MARGIN_S - now)


# -- a cordoned Node (--drain-cordoned-nodes) ---------------------------------------------------
def cordon_drain_reason(node_name: str) -> str:
    return f"sunk: Node {node_name} is cordoned in Kubernetes"


def for_cordon(cordoned: bool, node_name: str, slurm_node: SlurmNode) -> str | None:
    """R9.4: "drain" a Slurm node whose Node is cordoned, "resume" one sunk drained for that
    reason once the Node is uncordoned, else None. A drain someone else made (an admin,
    Slurm, a Pod outliving KillWait) is never resumed here."""
    ours = slurm_node.reason == cordon_drain_reason(node_name)
    if cordoned and not slurm_node.drained:
        return "drain"
    if not cordoned and slurm_node.drained and ours:
        return "resume"
    return None


# -- a drained Slurm node ---------------------------------------------------------------------
# The reason sunk gives a node it drains (the scheduler, or the placeholder script as root,
# which writes the same words) because a Pod outlived its job's KillWait.
_KILL_WAIT_DRAIN = re.compile(
    r"^sunk: Pod (?P<namespace>[^/\s]+)/(?P<name>\S+) still running at KillWait \(job (?P<job>\d+)\)"
)


def kill_wait_drain_reason(ref: PodRef, job_id: int) -> str:
    return f"sunk: Pod {ref.namespace}/{ref.name} still running at KillWait (job {job_id})"


@dataclass(frozen=True)
class DrainNotice:
    """The Event that explains one drain. `pod` is (namespace, name) when a Pod outliving
    KillWait caused it (the Event goes on that Pod), else None (it goes on the Node hosting
    the Slurm node, and on the Pods whose jobs it took: see `pod_drain_note`). `name` is the
    same for one drain whoever sees it, so a restarted scheduler, or a second look, records
    nothing new; `drain_id` is its part that names the drain, for the Pods' Events."""

    name: str
    pod: tuple[str, str] | None
    note: str
    drain_id: str = ""
    state: str = "drained"  # or "down": how the notes say the node was taken out of use


def out_of_use(node: SlurmNode) -> str | None:
    """How `node` is out of use: "drained" (drained or draining, by an administrator, sunk,
    or Slurm itself: "Duplicate jobid", "Kill task failed", "Prolog error"), "down" (DOWN or
    FAIL with a reason: Slurm's "Not responding", or an administrator's), else None."""
    if node.drained:
        return "drained"
    words = {node.state.upper(), *(f.upper() for f in node.flags)}
    if words & {"DOWN", "FAIL"} and node.reason:
        return "down"
    return None


def drain_notice(node: SlurmNode, scheduler: str) -> DrainNotice | None:
    """R5.3: every drain gets an Event from the scheduler, whoever made it: sunk itself, its
    placeholder script, an administrator, or Slurm (e.g. "Duplicate jobid" after slurmctld
    lost state, or a node set DOWN as "Not responding")."""
    state = out_of_use(node)
    if state is None:
        return None
    digest = hashlib.sha256(f"{scheduler}|{node.name}|{node.reason}|{node.reason_changed_at}".encode())
    suffix = digest.hexdigest()[:16]
    resume = f"scontrol update nodename={node.name} state=resume"
    ours = _KILL_WAIT_DRAIN.match(node.reason)
    if ours:
        return DrainNotice(
            name=f"{ours['name']}.drained.{suffix}",
            pod=(ours["namespace"], ours["name"]),
            note=(
                f"Slurm node {node.name} was drained: this Pod still ran when job {ours['job']} reached "
                f"KillWait, so Slurm could not be trusted to free it; once the node is checked: {resume}"
            ),
            drain_id=suffix,
        )
    base = re.sub(r"[^a-z0-9.-]", "-", node.name.lower()).strip(".-") or "node"
    return DrainNotice(
        name=f"{base}.drained.{suffix}",
        pod=None,
        note=(
            f"Slurm node {node.name} is {state} ({node.reason or 'no reason given'}); no Pod is placed "
            f"there until it is resumed: {resume}"
        ),
        drain_id=suffix,
        state=state,
    )


def pod_drain_note(node: SlurmNode, notice: DrainNotice, job: SlurmJob) -> str:
    """The note on a Pod whose job `job` was on `node` when Slurm (or an administrator) took
    the node out of use: the Pod's own history then says why its job ended or its node
    takes no more work."""
    was = "runs" if job.active else "ran"
    return (
        f"Slurm node {node.name}, where this Pod's job {job.job_id} {was}, is {notice.state} "
        f"({node.reason or 'no reason given'}); no Pod is placed there until it is resumed: "
        f"scontrol update nodename={node.name} state=resume"
    )
