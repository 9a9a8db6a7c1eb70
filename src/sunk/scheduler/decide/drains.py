"""When a Slurm node is taken out of use, and how that is said (R5.3, R9.4): the drain due
when a bound Pod outlives its job's KillWait (`drain_due`), the drain that follows a
cordon (`for_cordon`), and the Event that explains any drain or DOWN node, whoever made
it (`drain_notice`, `pod_drain_note`). Apart from the Pod's step because the Slurm-node
controller asks these too."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from sunk.scheduler.translate import PodRef
from sunk.slurm.models import SlurmJob, SlurmNode

# Drain this long before KillWait ends, leaving Slurm time to act before its SIGKILL.
DRAIN_MARGIN_S = 3


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
