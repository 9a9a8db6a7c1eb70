"""What the NodeSet controller does for one NodeSet, decided without I/O.

Given the NodeSet, its share of the Nodes (sunk.operator.selection), its members and what
Slurm says about their nodes, `plan` returns typed actions in the order they must happen
and the status to write. Every "is it safe?" question fails closed: when Slurm's node list
cannot be read, nothing is created, drained or deleted, and the status says why.

Scaling in (and a member whose Node no longer qualifies) removes only members that run no
job: an idle member is drained with a reason naming the NodeSet, and deleted once Slurm
shows it drained and still idle; its Slurm node record goes after its Pod. A busy member
stays and the status says so. A drain this controller made is lifted when the member is
wanted again; anyone else's drain is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk.operator import members as m
from sunk.operator.hardware import ShapeError, shape, slurm_node_name
from sunk.operator.nodeset import API_VERSION, KIND, Invalid, NodeSet
from sunk.operator.selection import Share
from sunk.slurm.models import SlurmNode
from sunk.translate.nodefilter import node_ready  # any object's Ready condition: here a Pod's

Json = dict[str, Any]
RECHECK_S = 5.0
DRAIN_PREFIX = "sunk: NodeSet"

# Event reasons (the Pod ones follow the DaemonSet controller's)
CREATED = "SuccessfulCreate"
DELETED = "SuccessfulDelete"
INVALID = "InvalidNodeSet"
HELD = "NodeHeldByOtherNodeSet"
INFEASIBLE = "NoFeasibleNodes"
STALE_RECORD = "StaleSlurmNodeDeleted"
RECORD_DELETED = "SlurmNodeDeleted"
FAILED_MEMBER = "FailedMember"
DRAINING = "DrainingForScaleIn"


@dataclass(frozen=True)
class SlurmView:
    """Slurm's nodes and partitions as the last listing saw them; None while unknown."""

    nodes: Mapping[str, SlurmNode] | None = None
    partitions: frozenset[str] | None = None
    problem: str = "Slurm's nodes have not been listed yet"

    @property
    def known(self) -> bool:
        return self.nodes is not None and self.partitions is not None


@dataclass(frozen=True)
class CreatePod:
    pod: Json


@dataclass(frozen=True)
class DeletePod:
    name: str
    uid: str
    why: str


@dataclass(frozen=True)
class DeleteSlurmNode:
    name: str
    why: str


@dataclass(frozen=True)
class Drain:
    name: str
    reason: str


@dataclass(frozen=True)
class Resume:
    name: str


@dataclass(frozen=True)
class Event:
    reason: str
    note: str
    warning: bool = False
    once_as: str | None = None  # a name that makes the Event unique (recorded once)


@dataclass(frozen=True)
class PatchStatus:
    status: Json


Action = CreatePod | DeletePod | DeleteSlurmNode | Drain | Resume | Event | PatchStatus


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    after: float | None = None


@dataclass
class _Notes:
    """What the pass found that the status must tell (one line each)."""

    waiting: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)


def drain_reason(nodeset: str) -> str:
    return f"{DRAIN_PREFIX} {nodeset} scales in"


def busy(record: SlurmNode) -> bool:
    """Slurm has handed out some of it, or a job is still finishing there."""
    words = {record.state.upper(), *(f.upper() for f in record.flags)}
    return record.in_use or bool(words & {"ALLOCATED", "MIXED", "COMPLETING"})


def slurm_state(record: SlurmNode | None) -> str:
    """The member's state as sinfo would count it."""
    if record is None:
        return "unregistered"
    words = {record.state.upper(), *(f.upper() for f in record.flags)}
    if "DOWN" in words or "NOT_RESPONDING" in words:
        return "down"
    if record.drained:
        return "draining" if busy(record) else "drained"
    return record.state.lower() if record.state.lower() in ("idle", "allocated", "mixed") else "unknown"


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
) -> Plan:
    """`members`: this NodeSet's Pods; `unseen`: member names created by this process that
    the cache does not show yet (never create them twice, never treat their records as stale)."""
    notes = _Notes()
    records = slurm.nodes or {}
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
        status = _status(obj, nodeset.name, None, members, records, settings, now, slurm, invalid=problems)
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
        status = _status(
            obj, nodeset.name, nodeset, members, records, settings, now, slurm, invalid=problems, share=share
        )
        return _finish(obj, notes, status, after=RECHECK_S)

    assert share is not None
    if not slurm.known:
        notes.waiting.append(f"waiting for Slurm: {slurm.problem}; nothing is created or removed meanwhile")
        status = _status(
            obj, nodeset.name, nodeset, members, records, settings, now, slurm, share=share, notes=notes
        )
        return _finish(obj, notes, status, after=RECHECK_S)

    by_node: dict[str, Json] = {}
    for pod in members:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            by_node[node] = pod
    _replace_failed(members, notes)
    _create(nodeset, share, nodes, records, settings, unseen, notes)
    _remove_surplus(nodeset, share, by_node, records, notes)
    _clean_records(nodeset, members, share, nodes, records, unseen, notes)
    _report_conflicts(nodeset, share, notes)
    status = _status(
        obj, nodeset.name, nodeset, members, records, settings, now, slurm, share=share, notes=notes
    )
    settled = not notes.waiting and not [a for a in notes.actions if not isinstance(a, Event)]
    pending_members = any(not node_ready(p) for p in members)
    return _finish(obj, notes, status, after=None if settled and not pending_members else RECHECK_S)


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
    records: Mapping[str, SlurmNode],
    settings: m.Settings,
    unseen: frozenset[str],
    notes: _Notes,
) -> None:
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
            if busy(record):
                notes.waiting.append(
                    f"Slurm node {name} still runs jobs from an earlier Pod; its new Pod waits until they end"
                )
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


def _remove_surplus(
    nodeset: NodeSet,
    share: Share,
    by_node: dict[str, Json],
    records: Mapping[str, SlurmNode],
    notes: _Notes,
) -> None:
    """Members beyond `replicas`, and members whose Node no longer qualifies, go, idle
    ones only; the others are kept and reported. Unregistered or unready ones go first."""
    kept = [n for n in share.kept if n in by_node]
    leaving = [n for n in by_node if n not in share.kept]
    extra = len(kept) - share.wanted
    if extra > 0:

        def cost(node: str) -> tuple[int, str]:
            pod = by_node[node]
            record = records.get(_slurm_name(pod))
            rank = 0 if not _running(pod) else 1 if record is not None and not busy(record) else 2
            return (rank, node)

        leaving += sorted(kept, key=cost, reverse=False)[:extra]
    for node in kept:
        if node in leaving:
            continue
        name = _slurm_name(by_node[node])
        record = records.get(name)
        if record is not None and record.reason == drain_reason(nodeset.name):
            notes.actions.append(Resume(name))  # wanted again: lift our own drain only
    for node in leaving:
        pod = by_node[node]
        meta = pod.get("metadata") or {}
        name = _slurm_name(pod)
        if meta.get("deletionTimestamp"):
            notes.waiting.append(f"member {name} is terminating")
            continue
        record = records.get(name)
        if record is None:
            if _running(pod):
                notes.waiting.append(f"member {name} runs but Slurm lists no node {name}: kept until it does")
            else:
                notes.actions.append(
                    DeletePod(meta["name"], meta.get("uid", ""), "not needed and not started")
                )
            continue
        if busy(record):
            notes.waiting.append(
                f"member {name} is not needed but runs jobs: kept (busy members are not removed yet)"
            )
            continue
        if not record.drained:
            notes.actions.append(Drain(name, drain_reason(nodeset.name)))
            notes.actions.append(Event(DRAINING, f"draining idle member {name} before removing it"))
            continue
        notes.actions.append(DeletePod(meta["name"], meta.get("uid", ""), "not needed; drained and idle"))
        notes.actions.append(
            Event(DELETED, f"deleted Pod {name} on Node {node}: not needed, drained and idle")
        )


def _clean_records(
    nodeset: NodeSet,
    members: list[Json],
    share: Share,
    nodes: Mapping[str, Json],
    records: Mapping[str, SlurmNode],
    unseen: frozenset[str],
    notes: _Notes,
) -> None:
    """Slurm node records named like this NodeSet's members with no Pod behind them (a
    member removed, or lost with its Node) are deleted once they run no job."""
    pattern = re.compile(rf"^{re.escape(nodeset.name)}-\d{{3}}-\d{{3}}$")
    with_pods = {_slurm_name(p) for p in members}
    about_to_be_made = {slurm_node_name(nodeset.name, nodes[n]) for n in share.new if n in nodes}
    for name, record in sorted(records.items()):
        if not pattern.match(name) or name in with_pods or name in unseen or name in about_to_be_made:
            continue
        if busy(record):
            notes.waiting.append(
                f"Slurm node {name} has no Pod but still lists jobs: its record is kept until they end"
            )
            continue
        notes.actions.append(DeleteSlurmNode(name, "its Pod is gone"))
        notes.actions.append(Event(RECORD_DELETED, f"deleted Slurm node {name}: its Pod is gone"))


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
                _feasibility_message(nodeset, share),
                warning=True,
                once_as=f"{nodeset.name}.infeasible.{nodeset.generation}.{share.feasible}",
            )
        )


def _feasibility_message(nodeset: NodeSet, share: Share) -> str:
    wanted = "every qualifying Node" if nodeset.replicas is None else f"{nodeset.replicas} replicas"
    reasons = [f"{n} {why}" for n, why in sorted(share.unfit.items())[:5]]
    reasons += [f"{n} is held by NodeSet {o}" for n, o in sorted(share.held_by_others.items())[:5]]
    more = len(share.unfit) + len(share.held_by_others) - len(reasons)
    tail = f" (and {more} more)" if more > 0 else ""
    return f"{wanted} asked, {share.feasible} Nodes qualify: {'; '.join(reasons) or 'no Nodes'}{tail}"


# -- status ------------------------------------------------------------------------------------
def _status(
    obj: Json,
    name: str,
    nodeset: NodeSet | None,
    members: list[Json],
    records: Mapping[str, SlurmNode],
    settings: m.Settings,
    now: str,
    slurm: SlurmView,
    *,
    invalid: list[str] | None = None,
    share: Share | None = None,
    notes: _Notes | None = None,
) -> Json:
    live = [p for p in members if not (p.get("metadata") or {}).get("deletionTimestamp")]
    counts = dict.fromkeys(("idle", "allocated", "mixed", "draining", "drained", "down", "unknown"), 0)
    listed = []
    for pod in sorted(members, key=lambda p: _slurm_name(p)):
        record = records.get(_slurm_name(pod)) if slurm.nodes is not None else None
        state = slurm_state(record) if slurm.nodes is not None else "unknown"
        if state in counts:
            counts[state] += 1
        entry = {
            "slurmNode": _slurm_name(pod),
            "node": (pod.get("spec") or {}).get("nodeName", ""),
            "pod": pod["metadata"]["name"],
            "state": state,
        }
        if record is not None and record.reason:
            entry["reason"] = record.reason
        listed.append(entry)
    ready = sum(1 for p in live if node_ready(p))
    previous = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}
    generation = (obj.get("metadata") or {}).get("generation")
    conditions: list[Json] = []

    def condition(kind: str, ok: bool, reason: str, message: str) -> None:
        value = "True" if ok else "False"
        before = previous.get(kind) or {}
        since = before.get("lastTransitionTime") if before.get("status") == value else now
        conditions.append(
            {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message,
                "lastTransitionTime": since or now,
                "observedGeneration": generation,
            }
        )

    summary = "Ready"
    if invalid:
        condition("Valid", False, "InvalidSpec", "; ".join(invalid))
        summary = "Invalid: " + invalid[0]
    else:
        condition("Valid", True, "SpecValid", "the spec is valid")
    condition(
        "SlurmReachable",
        slurm.known,
        "Listed" if slurm.known else "SlurmUnavailable",
        "Slurm answers" if slurm.known else slurm.problem,
    )
    if nodeset is not None and share is not None and not invalid:
        enough = share.feasible > 0 and (nodeset.replicas is None or nodeset.replicas <= share.feasible)
        if nodeset.replicas == 0:
            enough = True
        condition(
            "Feasible",
            enough,
            "EnoughNodes" if enough else ("NoFeasibleNodes" if share.feasible == 0 else "NotEnoughNodes"),
            f"{share.feasible} Nodes qualify" if enough else _feasibility_message(nodeset, share),
        )
        waiting = notes.waiting if notes else []
        failing = _failing(members)
        all_ready = ready == share.wanted and len(live) == share.wanted and not waiting and not failing
        all_ready = all_ready and all(e["state"] in ("idle", "allocated", "mixed") for e in listed)
        message = "; ".join(failing + waiting) or (
            f"{ready} of {share.wanted} members ready and registered"
            if not all_ready
            else f"{ready} members ready"
        )
        condition(
            "Ready",
            all_ready,
            "MembersReady" if all_ready else ("MembersFailing" if failing else "Progressing"),
            message,
        )
        if not all_ready:
            summary = message
        if not enough:
            summary = _feasibility_message(nodeset, share)
        if not slurm.known:
            summary = f"waiting for Slurm: {slurm.problem}"
    status: Json = {
        "observedGeneration": generation,
        "replicas": len(live),
        "ready": ready,
        "feasible": share.feasible if share is not None else 0,
        "selector": m.selector_string(settings, name),
        "partitions": ",".join(nodeset.partitions) if nodeset is not None else "",
        "summary": summary[:300],
        "slurm": counts,
        "members": listed,
        "conditions": conditions,
    }
    return status


def _failing(members: list[Json]) -> list[str]:
    """Members whose containers cannot start (a bad image, a crash loop), one line each."""
    lines = []
    for pod in members:
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in (
                "ErrImagePull",
                "ImagePullBackOff",
                "InvalidImageName",
                "CrashLoopBackOff",
                "CreateContainerConfigError",
                "ErrImageNeverPull",
            ):
                name = pod["metadata"]["name"]
                lines.append(f"member {name}: {waiting['reason']}: {waiting.get('message', '')}".strip())
    return lines


def _finish(obj: Json, notes: _Notes, status: Json, *, after: float | None) -> Plan:
    actions = list(notes.actions)
    if _comparable(status) != _comparable(obj.get("status") or {}):
        actions.append(PatchStatus(status))
    return Plan(tuple(actions), after)


def _comparable(status: Json) -> Json:
    return {
        **status,
        "conditions": [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
        ],
    }


def _slurm_name(pod: Json) -> str:
    meta = pod.get("metadata") or {}
    return str((meta.get("labels") or {}).get(m.SLURM_NODE_LABEL) or meta.get("name") or "")


def _running(pod: Json) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def regarding(obj: Json) -> Json:
    """The NodeSet as an Event's subject."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
