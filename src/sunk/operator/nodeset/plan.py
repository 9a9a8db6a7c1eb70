"""What the NodeSet controller does for one NodeSet, decided without I/O.

Given the NodeSet, its share of the Nodes (sunk.operator.nodeset.selection), its members and what
Slurm says about their nodes, `plan` returns typed actions in the order they must happen
and the status to write. Every "is it safe?" question fails closed: when Slurm's node list
cannot be read, nothing is created, drained or deleted, and the status says why.

Members that must go (scale-in, a Node cordoned or no longer selected, an outdated
template, one the health checks keep drained, the NodeSet deleted) all take
sunk.operator.nodeset.removal's path: drain, wait for no job, delete the Pod, delete the record. A
drain this controller made is lifted when the member is wanted again (with health checks
on, only by the checks, after a clean run); anyone else's drain is left alone. A deleted
NodeSet keeps a finalizer until its last member and record are gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk.kube.nodefilter import node_ready  # any object's Ready condition: here a Pod's
from sunk.operator.nodeset import checks, confinement, demand, health_checks, times, unhealthy
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset import removal as r
from sunk.operator.nodeset.actions import (
    Action,
    CreatePod,
    DeletePod,
    DeleteSlurmNode,
    LabelBusy,
    PatchStatus,
    SetFinalizer,
)
from sunk.operator.nodeset.hardware import ShapeError, shape, slurm_node_name
from sunk.operator.nodeset.node_faults import actions as node_fault_actions
from sunk.operator.nodeset.orphan_records import ORPHAN_DOWN, down_without_pod  # noqa: F401 (its Event reason, beside the others)
from sunk.operator.nodeset.removal import busy
from sunk.operator.nodeset.rollout import roll_out
from sunk.operator.nodeset.selection import Share
from sunk.operator.nodeset.spec import DrainPolicy, Invalid, NodeSet
from sunk.operator.nodeset.status import (
    Findings,
    changed,
    feasibility_message,
    nodeset_status,
)
from sunk.operator.nodeset.view import SlurmView
from sunk.runtime.actions import Event
from sunk.slurm.models import SlurmNode

Json = dict[str, Any]
RECHECK_S = 5.0
FINALIZER = "sunk.coreweave.com/members-removed-safely"

# Event reasons (the Pod ones follow the DaemonSet controller's)
CREATED = "SuccessfulCreate"
DELETED = "SuccessfulDelete"
INVALID = "InvalidNodeSet"
HELD = "NodeHeldByOtherNodeSet"
INFEASIBLE = "NoFeasibleNodes"
STALE_RECORD = "StaleSlurmNodeDeleted"
RECORD_DELETED = "SlurmNodeDeleted"
FAILED_MEMBER = "FailedMember"


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    after: float | None = None


@dataclass
class _Notes:
    """What the pass found that the status must tell (one line each)."""

    waiting: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    removals: list[Json] = field(default_factory=list)
    rollout: str = ""  # why the roll-out waits, or "" when nothing is out of date
    unlabelled: list[str] = field(default_factory=list)  # members' Nodes missing a topology label
    unconfined: list[str] = field(default_factory=list)  # members whose Node refused confinement
    directory: str | None = None  # why the directory's people could not be read, if so
    health: unhealthy.Review = field(default_factory=unhealthy.Review)  # members a check drained

    def findings(self) -> Findings:
        return Findings(
            tuple(self.waiting),
            tuple(self.removals),
            self.rollout,
            tuple(self.unlabelled),
            tuple(self.unconfined),
            self.directory,
            self.health.since,
            self.health.message,
        )


def plan(
    obj: Json,
    nodeset: NodeSet | Invalid,
    share: Share | None,
    members: list[Json],
    nodes: Mapping[str, Json],
    slurm: SlurmView,
    settings: m.Settings,
    *,
    now: str,
    unseen: frozenset[str] = frozenset(),
    directory_problem: str | None = None,
) -> Plan:
    """`members`: this NodeSet's Pods; `unseen`: member names created by this process that
    the cache does not show yet (never create them twice, never treat their records as stale);
    `directory_problem`: why the last read of the directory failed, if it did."""
    notes = _Notes(directory=directory_problem)
    records = slurm.nodes or {}
    meta = obj.get("metadata") or {}
    deleting = bool(meta.get("deletionTimestamp"))
    if not deleting and FINALIZER not in (meta.get("finalizers") or []):
        notes.actions.append(SetFinalizer(True))
    if deleting:
        return _deleting(obj, nodeset, members, slurm, settings, now, notes)
    if isinstance(nodeset, Invalid):
        problems = list(nodeset.problems)
        notes.actions.append(
            Event(
                INVALID,
                "; ".join(problems),
                warning=True,
                once_as=f"{nodeset.name}.invalid.{nodeset.generation}",
            )
        )
        status = nodeset_status(obj, nodeset.name, None, members, settings, now, slurm, invalid=problems)
        return _finish(obj, notes, status, after=None)

    unknown = [p for p in nodeset.partitions if slurm.partitions is not None and p not in slurm.partitions]
    if unknown:
        declared = ", ".join(sorted(slurm.partitions or ())) or "none"
        problems = [
            f"spec.partitions: {', '.join(repr(p) for p in unknown)} not declared in Slurm "
            f"(declared: {declared}); add it to the chart's `partitions` value"
        ]
        notes.actions.append(
            Event(
                INVALID, problems[0], warning=True, once_as=f"{nodeset.name}.partitions.{nodeset.generation}"
            )
        )
        status = nodeset_status(
            obj, nodeset.name, nodeset, members, settings, now, slurm, invalid=problems, share=share
        )
        return _finish(obj, notes, status, after=RECHECK_S)

    too_short = checks.drain_timeout_too_short(nodeset, slurm)
    if too_short:
        notes.actions.append(
            Event(
                INVALID, too_short, warning=True, once_as=f"{nodeset.name}.drain-timeout.{nodeset.generation}"
            )
        )
        status = nodeset_status(
            obj, nodeset.name, nodeset, members, settings, now, slurm, invalid=[too_short], share=share
        )
        return _finish(obj, notes, status, after=RECHECK_S)

    assert share is not None
    if not slurm.known:
        notes.waiting.append(f"waiting for Slurm: {slurm.problem}; nothing is created or removed meanwhile")
        status = nodeset_status(
            obj, nodeset.name, nodeset, members, settings, now, slurm, share=share, found=notes.findings()
        )
        return _finish(obj, notes, status, after=RECHECK_S)

    _replace_failed(members, notes)
    _create(nodeset, share, nodes, slurm, settings, unseen, notes)
    leaving = _leaving(nodeset, share, members, nodes, slurm, settings, now, notes)
    notes.health = unhealthy.review(obj, members, leaving, len(share.new), slurm, settings, now)
    leaving += notes.health.leaving
    notes.actions += notes.health.actions
    for line, event in checks.gres_mismatches(members, slurm):
        notes.waiting.append(line)
        notes.actions.append(event)
    for line, event in checks.unlabelled_nodes(nodeset.name, members, nodes, settings):
        notes.unlabelled.append(line)
        notes.actions.append(event)
    if settings.confinement:
        refused = confinement.refusals(members)
        notes.unconfined = [line for _, line in refused]
        notes.actions += [
            Event(
                confinement.CONFINEMENT_UNAVAILABLE,
                line,
                warning=True,
                once_as=f"{nodeset.name}.unconfined.{member}",
            )
            for member, line in refused
        ]
    _remove(nodeset.name, nodeset.drain, leaving, slurm, now, notes)
    _resume_kept(nodeset.name, members, leaving, records, settings, notes)
    in_hand = {x.slurm_name for x in leaving}  # lost machines, faults: sunk.operator.nodeset.node_faults
    notes.actions += node_fault_actions(nodeset.name, members, nodes, records, settings, now, in_hand)
    _label_busy(members, slurm, notes)
    _clean_records(nodeset.name, members, share, nodes, slurm, unseen, notes)
    _report_conflicts(nodeset, share, notes)
    status = nodeset_status(
        obj, nodeset.name, nodeset, members, settings, now, slurm, share=share, found=notes.findings()
    )
    if nodeset.demand is not None:
        previous = (obj.get("status") or {}).get("demand") or {}
        decision = demand.decide(
            nodeset, members, records, slurm.jobs or {}, slurm.waiting, previous, times.parse(now)
        )
        status["demand"] = decision.status
        notes.actions += [Event(reason, note) for reason, note in decision.events]
    settled = not notes.waiting and not [a for a in notes.actions if not isinstance(a, Event)]
    pending_members = any(not node_ready(p) for p in members)
    # Demand mode and replacing the unhealthy watch the clock too: an idle member's delay, or
    # a check's drain, runs out with nothing changing.
    asked = status.get("demand", {})
    watching = bool(asked.get("idleSince") or asked.get("waitingJobs") or notes.health.due)
    return _finish(
        obj, notes, status, after=None if settled and not pending_members and not watching else RECHECK_S
    )


def _deleting(
    obj: Json,
    nodeset: NodeSet | Invalid,
    members: list[Json],
    slurm: SlurmView,
    settings: m.Settings,
    now: str,
    notes: _Notes,
) -> Plan:
    """The NodeSet was deleted: every member leaves the job-safe way, then every record
    goes, then the finalizer, so Kubernetes finishes the deletion."""
    name = nodeset.name
    records = slurm.nodes or {}
    if not slurm.known:
        notes.waiting.append(f"deleting: waiting for Slurm ({slurm.problem}); no member is removed meanwhile")
        status = nodeset_status(obj, name, None, members, settings, now, slurm, found=notes.findings())
        return _finish(obj, notes, status, after=RECHECK_S)
    policy = nodeset.drain if isinstance(nodeset, NodeSet) else DrainPolicy()
    leaving = [
        r.Leaving(pod, m.slurm_name_of(pod), (pod.get("spec") or {}).get("nodeName", ""), r.DELETED)
        for pod in members
    ]
    _remove(name, policy, leaving, slurm, now, notes)
    _label_busy(members, slurm, notes)
    _clean_records(name, members, None, {}, slurm, frozenset(), notes)
    left = r.records_of(name, records)
    if not members and not left and FINALIZER in (obj.get("metadata") or {}).get("finalizers", []):
        notes.actions.append(SetFinalizer(False))
    elif not members and left:
        notes.waiting.append(f"deleting: Slurm still lists {', '.join(left)}")
    status = nodeset_status(
        obj, name, None, members, settings, now, slurm, found=notes.findings(), deleting=True
    )
    return _finish(obj, notes, status, after=RECHECK_S)


def _replace_failed(members: list[Json], notes: _Notes) -> None:
    """A member the kubelet gave up on (rejected at admission, or ended) is deleted, so
    the next pass makes a fresh one if its Node still qualifies."""
    for pod in members:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if status.get("phase") in ("Failed", "Succeeded") and not meta.get("deletionTimestamp"):
            why = f"{status.get('reason') or status.get('phase')}: {status.get('message') or 'the Pod ended'}"
            notes.actions.append(
                Event(FAILED_MEMBER, f"member {meta.get('name')} {why}; replacing it", warning=True)
            )
            notes.actions.append(DeletePod(meta["name"], meta.get("uid", ""), f"it ended ({why})"))


def _create(
    nodeset: NodeSet,
    share: Share,
    nodes: Mapping[str, Json],
    slurm: SlurmView,
    settings: m.Settings,
    unseen: frozenset[str],
    notes: _Notes,
) -> None:
    records = slurm.nodes or {}
    for node_name in share.new:
        node = nodes[node_name]
        name = slurm_node_name(nodeset.name, node)
        if name is None or name in unseen:
            continue
        try:
            member_shape = shape(nodeset, node)
        except ShapeError as err:
            notes.waiting.append(str(err))
            notes.actions.append(
                Event(INFEASIBLE, str(err), warning=True, once_as=f"{name}.shape.{nodeset.generation}")
            )
            continue
        record = records.get(name)
        if record is not None:
            if busy(record, slurm.jobs_on(name)):
                notes.waiting.append(
                    f"Slurm node {name} still runs jobs from an earlier Pod; its new Pod waits until they end"
                )
                notes.actions += down_without_pod(nodeset.name, name, record, slurm)
                continue
            # The Pod does not exist, so the record is an earlier Pod's: a new slurmd would
            # register under its old address and srun would fail to reach it.
            why = f"record left by an earlier Pod (address {record.address or 'unknown'})"
            notes.actions.append(DeleteSlurmNode(name, why))
            notes.actions.append(Event(STALE_RECORD, f"deleted Slurm node {name}: {why}"))
        pod = m.member_pod(settings, nodeset, node_name, name, member_shape)
        notes.actions.append(CreatePod(pod))
        notes.actions.append(
            Event(CREATED, f"created Pod {name} on Node {node_name} ({member_shape.conf()})")
        )


def _leaving(
    nodeset: NodeSet,
    share: Share,
    members: list[Json],
    nodes: Mapping[str, Json],
    slurm: SlurmView,
    settings: m.Settings,
    now: str,
    notes: _Notes,
) -> list[r.Leaving]:
    """The members that must go this pass: those on Nodes that no longer qualify, those
    beyond `replicas` (cheapest first, see removal.cost), and the roll-out's next ones."""
    records = slurm.nodes or {}
    by_node = {
        (pod.get("spec") or {}).get("nodeName"): pod
        for pod in members
        if (pod.get("spec") or {}).get("nodeName")
    }
    leaving = [
        r.Leaving(
            by_node[n], m.slurm_name_of(by_node[n]), n, f"moves off a Node that no longer qualifies ({why})"
        )
        for n, why in sorted(share.unfit_members.items())
        if n in by_node
    ]

    def cost(node: str) -> tuple[tuple[int, int, int], str]:
        name = m.slurm_name_of(by_node[node])
        return (r.cost(nodeset.name, _running(by_node[node]), records.get(name), slurm.jobs_on(name)), name)

    kept = [n for n in share.kept if n in by_node]
    extra = len(kept) - share.wanted
    surplus = sorted(kept, key=cost)[: max(0, extra)]
    leaving += [r.Leaving(by_node[n], m.slurm_name_of(by_node[n]), n, r.SCALE_IN) for n in surplus]
    staying = [n for n in kept if n not in surplus]
    rolling = roll_out(
        nodeset, share, [by_node[n] for n in staying], nodes, slurm, cost, times.parse(now), settings
    )
    notes.rollout = rolling.message
    notes.actions += rolling.actions
    return leaving + list(rolling.leaving)


def _remove(
    name: str, policy: DrainPolicy, leaving: list[r.Leaving], slurm: SlurmView, now: str, notes: _Notes
) -> None:
    records = slurm.nodes or {}
    now_s = int(times.parse(now).timestamp())
    for member in leaving:
        step = r.step(
            name,
            member,
            records.get(member.slurm_name),
            slurm.jobs_on(member.slurm_name),
            policy,
            now_s,
            listed_after_write=member.slurm_name not in slurm.rewritten,
        )
        notes.actions += step.actions
        notes.waiting.append(step.message)
        entry: Json = {
            "slurmNode": member.slurm_name,
            "pod": member.pod["metadata"]["name"],
            "node": member.node,
            "cause": member.cause,
            "phase": step.phase,
            "message": step.message,
        }
        if step.jobs:
            entry["jobs"] = list(step.jobs)
        if step.since:
            entry["drainingSince"] = step.since
        notes.removals.append(entry)


def _resume_kept(
    name: str,
    members: list[Json],
    leaving: list[r.Leaving],
    records: Mapping[str, SlurmNode],
    settings: m.Settings,
    notes: _Notes,
) -> None:
    """A member this NodeSet drained that is wanted again (a scale back up, an uncordon, a
    roll-out undone) gets its drain lifted, or with health checks on is handed to them to
    lift after a clean run (sunk.operator.nodeset.health_checks); nobody else's drain is touched."""
    going = {member.slurm_name for member in leaving}
    for pod in members:
        slurm_name = m.slurm_name_of(pod)
        record = records.get(slurm_name)
        if slurm_name in going or pod["metadata"].get("deletionTimestamp") or record is None:
            continue
        checks_on = bool(settings.health_checks_configmap) and health_checks.runs_checks(pod)
        notes.actions += health_checks.wanted_back(name, slurm_name, record, checks_on)


def _label_busy(members: list[Json], slurm: SlurmView, notes: _Notes) -> None:
    """Keep each member's busy label equal to what Slurm lists, so that the chart's
    PodDisruptionBudget refuses to evict a member with jobs. A member Slurm has no record
    of keeps its label (an unknown is not an idle)."""
    records = slurm.nodes or {}
    for pod in members:
        meta = pod.get("metadata") or {}
        record = records.get(m.slurm_name_of(pod))
        if record is None or meta.get("deletionTimestamp"):
            continue
        now_busy = busy(record, slurm.jobs_on(m.slurm_name_of(pod)))
        if (meta.get("labels") or {}).get(m.BUSY_LABEL) != str(now_busy).lower():
            notes.actions.append(LabelBusy(meta["name"], meta.get("uid", ""), now_busy))


def _clean_records(
    name: str,
    members: list[Json],
    share: Share | None,
    nodes: Mapping[str, Json],
    slurm: SlurmView,
    unseen: frozenset[str],
    notes: _Notes,
) -> None:
    """Slurm node records named like this NodeSet's members with no Pod behind them (a
    member removed, or lost with its Node) are deleted once they run no job."""
    records = slurm.nodes or {}
    with_pods = {m.slurm_name_of(p) for p in members}
    new = share.new if share is not None else []
    about_to_be_made = {slurm_node_name(name, nodes[n]) for n in new if n in nodes}
    for record_name in r.records_of(name, records):
        if record_name in with_pods or record_name in unseen or record_name in about_to_be_made:
            continue
        if busy(records[record_name], slurm.jobs_on(record_name)):
            notes.waiting.append(
                f"Slurm node {record_name} has no Pod but still lists jobs: its record is kept until they end"
            )
            notes.actions += down_without_pod(name, record_name, records[record_name], slurm)
            continue
        notes.actions.append(DeleteSlurmNode(record_name, "its Pod is gone"))
        notes.actions.append(Event(RECORD_DELETED, f"deleted Slurm node {record_name}: its Pod is gone"))


def _report_conflicts(nodeset: NodeSet, share: Share, notes: _Notes) -> None:
    for node, other in sorted(share.held_by_others.items()):
        notes.actions.append(
            Event(
                HELD,
                f"Node {node} qualifies but NodeSet {other} holds it (a Node serves one NodeSet at a time)",
                warning=True,
                once_as=f"{nodeset.name}.held.{node}.{other}",
            )
        )
    if share.feasible == 0 or (nodeset.replicas is not None and nodeset.replicas > share.feasible):
        notes.actions.append(
            Event(
                INFEASIBLE,
                feasibility_message(nodeset, share),
                warning=True,
                once_as=f"{nodeset.name}.infeasible.{nodeset.generation}.{share.feasible}",
            )
        )


def _finish(obj: Json, notes: _Notes, status: Json, *, after: float | None) -> Plan:
    actions = list(notes.actions)
    if changed(status, obj.get("status") or {}):
        actions.append(PatchStatus(status))
    return Plan(tuple(actions), after)


def _running(pod: Json) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"
