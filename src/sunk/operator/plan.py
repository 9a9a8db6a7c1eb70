"""What the NodeSet controller does for one NodeSet, decided without I/O.

Given the NodeSet, its share of the Nodes (sunk.operator.selection), its members and what
Slurm says about their nodes, `plan` returns typed actions in the order they must happen
and the status to write. Every "is it safe?" question fails closed: when Slurm's node list
cannot be read, nothing is created, drained or deleted, and the status says why.

Members that must go (scale-in, a Node cordoned or no longer selected, an outdated
template, the NodeSet deleted) all take sunk.operator.removal's path: drain, wait for no
job, delete the Pod, delete the record. A drain this controller made is lifted when the
member is wanted again; anyone else's drain is left alone. A deleted NodeSet keeps a
finalizer until its last member and record are gone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk.operator import confinement, demand, features
from sunk.operator import members as m
from sunk.operator import removal as r
from sunk.operator.actions import (
    Action,
    CreatePod,
    DeletePod,
    DeleteSlurmNode,
    Event,
    LabelBusy,
    PatchStatus,
    Resume,
    SetFinalizer,
)
from sunk.operator.hardware import ShapeError, gres_in_conf, shape, slurm_node_name
from sunk.operator.nodeset import API_VERSION, CANCEL_JOBS, KIND, ON_DELETE, DrainPolicy, Invalid, NodeSet
from sunk.operator.removal import busy
from sunk.operator.selection import Share
from sunk.slurm.models import SlurmJob, SlurmNode
from sunk.translate.nodefilter import node_ready  # any object's Ready condition: here a Pod's

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
GRES_MISMATCH = "GresMismatch"
FEATURE_IN_USE = "FeatureInUse"
UNKNOWN_TOPOLOGY_LABEL = "UnknownTopologyLabel"


@dataclass(frozen=True)
class SlurmView:
    """Slurm's nodes, partitions and running jobs as the last listing saw them; None while
    unknown. `jobs`: node name → the jobs holding it."""

    nodes: Mapping[str, SlurmNode] | None = None
    partitions: frozenset[str] | None = None
    jobs: Mapping[str, tuple[SlurmJob, ...]] | None = None
    waiting: Mapping[str, tuple[SlurmJob, ...]] = field(default_factory=dict)  # partition → queued jobs
    asking: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # feature → pending job IDs
    max_time_min: Mapping[str, int | None] = field(default_factory=dict)  # partition → MaxTime (None: none)
    problem: str = "Slurm's nodes have not been listed yet"
    listed_at: float = field(default=0.0, compare=False)  # time.monotonic() of the listing
    # Nodes this operator drained or resumed after the listing began: their drain there may be
    # out of date, so none of them is deleted on it (NodeSetController.view_now).
    rewritten: frozenset[str] = frozenset()

    @property
    def known(self) -> bool:
        return self.nodes is not None and self.partitions is not None and self.jobs is not None

    def jobs_on(self, name: str) -> tuple[SlurmJob, ...]:
        return (self.jobs or {}).get(name, ())


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

    too_short = _drain_timeout_too_short(nodeset, slurm)
    if too_short:
        notes.actions.append(
            Event(
                INVALID, too_short, warning=True, once_as=f"{nodeset.name}.drain-timeout.{nodeset.generation}"
            )
        )
        status = _status(
            obj,
            nodeset.name,
            nodeset,
            members,
            records,
            settings,
            now,
            slurm,
            invalid=[too_short],
            share=share,
        )
        return _finish(obj, notes, status, after=RECHECK_S)

    assert share is not None
    if not slurm.known:
        notes.waiting.append(f"waiting for Slurm: {slurm.problem}; nothing is created or removed meanwhile")
        status = _status(
            obj, nodeset.name, nodeset, members, records, settings, now, slurm, share=share, notes=notes
        )
        return _finish(obj, notes, status, after=RECHECK_S)

    _replace_failed(members, notes)
    _create(nodeset, share, nodes, slurm, settings, unseen, notes)
    leaving = _leaving(nodeset, share, members, nodes, slurm, now, notes)
    _check_gres(members, slurm, notes)
    _check_topology_labels(nodeset.name, members, nodes, settings, notes)
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
    _resume_kept(nodeset.name, members, leaving, records, notes)
    _label_busy(members, slurm, notes)
    _clean_records(nodeset.name, members, share, nodes, slurm, unseen, notes)
    _report_conflicts(nodeset, share, notes)
    status = _status(
        obj, nodeset.name, nodeset, members, records, settings, now, slurm, share=share, notes=notes
    )
    if nodeset.demand is not None:
        previous = (obj.get("status") or {}).get("demand") or {}
        decision = demand.decide(
            nodeset, members, records, slurm.jobs or {}, slurm.waiting, previous, _parse_now(now)
        )
        status["demand"] = decision.status
        notes.actions += [Event(reason, note) for reason, note in decision.events]
    settled = not notes.waiting and not [a for a in notes.actions if not isinstance(a, Event)]
    pending_members = any(not node_ready(p) for p in members)
    # Demand mode watches the clock too: an idle member's delay runs out with nothing changing.
    watching = bool(status.get("demand", {}).get("idleSince")) or bool(
        status.get("demand", {}).get("waitingJobs")
    )
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
        status = _status(obj, name, None, members, records, settings, now, slurm, notes=notes)
        return _finish(obj, notes, status, after=RECHECK_S)
    policy = nodeset.drain if isinstance(nodeset, NodeSet) else DrainPolicy()
    leaving = [
        r.Leaving(pod, _slurm_name(pod), (pod.get("spec") or {}).get("nodeName", ""), r.DELETED)
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
    status = _status(obj, name, None, members, records, settings, now, slurm, notes=notes, deleting=True)
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
            by_node[n], _slurm_name(by_node[n]), n, f"moves off a Node that no longer qualifies ({why})"
        )
        for n, why in sorted(share.unfit_members.items())
        if n in by_node
    ]

    def cost(node: str) -> tuple[tuple[int, int, int], str]:
        name = _slurm_name(by_node[node])
        return (r.cost(nodeset.name, _running(by_node[node]), records.get(name), slurm.jobs_on(name)), name)

    kept = [n for n in share.kept if n in by_node]
    extra = len(kept) - share.wanted
    surplus = sorted(kept, key=cost)[: max(0, extra)]
    leaving += [r.Leaving(by_node[n], _slurm_name(by_node[n]), n, r.SCALE_IN) for n in surplus]
    staying = [n for n in kept if n not in surplus]
    leaving += _roll_out(nodeset, share, [by_node[n] for n in staying], nodes, slurm, cost, now, notes)
    return leaving


def _outdated(nodeset: NodeSet, current: str, pod: Json, nodes: Mapping[str, Json]) -> str | None:
    """Why a member no longer matches what it would be made as now: its template changed
    (a roll-out), or its Node's resources did (a GPU gone, more memory), so that its
    `--conf` would differ and Slurm would hand out what the Node does not have."""
    annotations = pod["metadata"].get("annotations") or {}
    if annotations.get(m.TEMPLATE_HASH) != current:
        return r.ROLL_OUT
    node = nodes.get((pod.get("spec") or {}).get("nodeName", ""))
    if node is None:
        return None
    try:
        conf = shape(nodeset, node).conf()
    except ShapeError:
        return None  # reported where members are made
    return r.HARDWARE if annotations.get(m.SLURMD_CONF, conf) != conf else None


def _roll_out(
    nodeset: NodeSet,
    share: Share,
    staying: list[Json],
    nodes: Mapping[str, Json],
    slurm: SlurmView,
    cost: Any,
    now: str,
    notes: _Notes,
) -> list[r.Leaving]:
    """Members that are out of date (`_outdated`), replaced through the removal path at most
    maxUnavailable at a time; one that cannot be drained now is skipped and reported."""
    records = slurm.nodes or {}
    current = m.template_hash(nodeset)  # once per pass, not once per member
    causes = {p["metadata"]["name"]: c for p in staying if (c := _outdated(nodeset, current, p, nodes))}
    outdated = [p for p in staying if p["metadata"]["name"] in causes]
    if not outdated:
        return []
    if nodeset.update.type == ON_DELETE:
        notes.rollout = (
            f"{len(outdated)} members run an outdated template (OnDelete: delete them to replace them)"
        )
        return []

    def in_progress(pod: Json) -> bool:
        record = records.get(_slurm_name(pod))
        return bool(pod["metadata"].get("deletionTimestamp")) or (
            record is not None and r.drained_by(nodeset.name, record)
        )

    def available(pod: Json) -> bool:
        record = records.get(_slurm_name(pod))
        return (
            node_ready(pod) and record is not None and slurm_state(record) in ("idle", "allocated", "mixed")
        )

    def why_skipped(pod: Json) -> str | None:
        """Why an outdated member cannot start its replacement now (then it is skipped,
        reported, and does not hold up the others: a roll-out never wedges on it)."""
        record = records.get(_slurm_name(pod))
        if record is None:
            return "not registered"
        if record.drained or slurm_state(record) == "down":
            return record.reason or slurm_state(record)
        return None

    held = _features_held(nodeset, outdated, nodes, slurm)
    if held:
        said = "; ".join(
            f"feature {f} is asked for by pending jobs {', '.join(map(str, ids))}" for f, ids in held.items()
        )
        notes.rollout = (
            f"roll-out of {len(outdated)} members held: {said}, and the new template drops it; "
            "put the feature back, or wait until those jobs run or are cancelled"
        )
        notes.actions.append(
            Event(FEATURE_IN_USE, notes.rollout, warning=True, once_as=f"{nodeset.name}.features.{said}")
        )
        # Replacements already under way finish; no new one starts.
        return [
            r.Leaving(p, _slurm_name(p), p["spec"]["nodeName"], causes[p["metadata"]["name"]])
            for p in outdated
            if in_progress(p)
        ]
    going = [p for p in outdated if in_progress(p)]
    window = nodeset.update.window
    if window is not None and not window.open_at(_parse_now(now)):
        ahead = f"{len(going)} being replaced; " if going else ""
        notes.rollout = (
            f"{len(outdated)} outdated members; {ahead}the others wait for the maintenance window "
            f"({window.describe()})"
        )
        return [
            r.Leaving(p, _slurm_name(p), p["spec"]["nodeName"], causes[p["metadata"]["name"]]) for p in going
        ]
    candidates = [p for p in outdated if not in_progress(p)]
    skipped = [f"{_slurm_name(p)} ({why})" for p in candidates if (why := why_skipped(p))]
    ready = sum(1 for p in staying if available(p) and not in_progress(p))
    slots = nodeset.update.budget(share.wanted) - max(0, share.wanted - ready - len(skipped))
    for pod in sorted(candidates, key=lambda p: cost(p["spec"]["nodeName"])):
        if slots > 0 and why_skipped(pod) is None:
            going.append(pod)
            slots -= 1
    waiting = len(outdated) - len(going) - len(skipped)
    parts = [f"{len(going)} of {len(outdated)} outdated members being replaced"]
    if waiting:
        parts.append(f"{waiting} wait for maxUnavailable {nodeset.update.max_unavailable}")
    if skipped:
        parts.append(f"skipped until they can be drained: {', '.join(skipped)}")
    notes.rollout = "; ".join(parts)
    return [r.Leaving(p, _slurm_name(p), p["spec"]["nodeName"], causes[p["metadata"]["name"]]) for p in going]


def _drain_timeout_too_short(nodeset: NodeSet, slurm: SlurmView) -> str | None:
    """With onTimeout CancelJobs, a timeout shorter than a partition's MaxTime could end
    jobs that are still within their time limit: refused, so the platform never kills a
    job Slurm would have let run."""
    policy = nodeset.drain
    if policy.timeout_s is None or policy.on_timeout != CANCEL_JOBS:
        return None
    for partition in nodeset.partitions:
        if partition not in slurm.max_time_min:
            continue
        limit = slurm.max_time_min[partition]
        if limit is None or limit * 60 > policy.timeout_s:
            shown = "UNLIMITED" if limit is None else f"{limit} min"
            return (
                f"spec.drain.timeout: {policy.timeout_s} s is shorter than partition {partition}'s MaxTime "
                f"({shown}), so onTimeout CancelJobs could end jobs still within their time limit; "
                "raise the timeout above MaxTime, or use onTimeout: Report"
            )
    return None


def _features_held(
    nodeset: NodeSet, outdated: list[Json], nodes: Mapping[str, Json], slurm: SlurmView
) -> dict[str, tuple[int, ...]]:
    """Features the roll-out would take off these members that no other Slurm node offers
    and pending jobs ask for (those jobs would wait for ever)."""
    dropped: set[str] = set()
    for pod in outdated:
        node = nodes.get((pod.get("spec") or {}).get("nodeName", ""))
        if node is None:
            continue
        try:
            now = set(shape(nodeset, node).features)
        except ShapeError:
            continue
        dropped |= features.in_conf((pod["metadata"].get("annotations") or {}).get(m.SLURMD_CONF, "")) - now
    leaving = {_slurm_name(p) for p in outdated}
    elsewhere = {f for name, rec in (slurm.nodes or {}).items() if name not in leaving for f in rec.features}
    return features.held_back(dropped, elsewhere, slurm.asking)


def _check_topology_labels(
    name: str, members: list[Json], nodes: Mapping[str, Json], settings: m.Settings, notes: _Notes
) -> None:
    """Every member's Node must carry the labels topology.conf is written from; the
    operator's topology writer keeps the last file until they do."""
    for pod in members:
        node_name = (pod.get("spec") or {}).get("nodeName", "")
        node = nodes.get(node_name)
        if node is None:
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        for label in settings.topology_labels:
            if not labels.get(label):
                line = f"Node {node_name} has no label {label}, which slurm.topology.labels names"
                notes.unlabelled.append(line)
                notes.actions.append(
                    Event(
                        UNKNOWN_TOPOLOGY_LABEL,
                        line + "; topology.conf stays as it was until the Node is labelled",
                        warning=True,
                        once_as=f"{name}.topology.{node_name}.{label}",
                    )
                )


def _check_gres(members: list[Json], slurm: SlurmView, notes: _Notes) -> None:
    """Slurm's record of a member must show the GPUs its `--conf` gave it: a record that
    differs (a slurmd that detected other devices, a record left by an older Pod) would let
    Slurm hand out GPUs the Node does not have, or hide ones it has."""
    records = slurm.nodes or {}
    for pod in members:
        record = records.get(_slurm_name(pod))
        conf = (pod["metadata"].get("annotations") or {}).get(m.SLURMD_CONF, "")
        if record is None or pod["metadata"].get("deletionTimestamp"):
            continue
        wanted = sorted((name, count) for name, count in gres_in_conf(conf) if name.split(":")[0] == "gpu")
        listed = sorted((name, count) for name, count in record.gres if name.split(":")[0] == "gpu")
        if wanted != listed:
            said = ", ".join(f"{n}:{c}" for n, c in listed) or "none"
            meant = ", ".join(f"{n}:{c}" for n, c in wanted) or "none"
            line = f"Slurm node {record.name} lists GPUs {said} but its Node gives {meant}"
            notes.waiting.append(line)
            notes.actions.append(
                Event(GRES_MISMATCH, line, warning=True, once_as=f"{record.name}.gres.{said}.{meant}")
            )


def _remove(
    name: str, policy: DrainPolicy, leaving: list[r.Leaving], slurm: SlurmView, now: str, notes: _Notes
) -> None:
    records = slurm.nodes or {}
    now_s = int(_parse_now(now).timestamp())
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
    name: str, members: list[Json], leaving: list[r.Leaving], records: Mapping[str, SlurmNode], notes: _Notes
) -> None:
    """A member this NodeSet drained that is wanted again (a scale back up, an uncordon, a
    roll-out undone) gets its drain lifted; nobody else's drain is ever touched."""
    going = {member.slurm_name for member in leaving}
    for pod in members:
        slurm_name = _slurm_name(pod)
        record = records.get(slurm_name)
        if slurm_name in going or pod["metadata"].get("deletionTimestamp") or record is None:
            continue
        if r.drained_by(name, record):
            notes.actions.append(Resume(slurm_name))


def _label_busy(members: list[Json], slurm: SlurmView, notes: _Notes) -> None:
    """Keep each member's busy label equal to what Slurm lists, so that the chart's
    PodDisruptionBudget refuses to evict a member with jobs. A member Slurm has no record
    of keeps its label (an unknown is not an idle)."""
    records = slurm.nodes or {}
    for pod in members:
        meta = pod.get("metadata") or {}
        record = records.get(_slurm_name(pod))
        if record is None or meta.get("deletionTimestamp"):
            continue
        now_busy = busy(record, slurm.jobs_on(_slurm_name(pod)))
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
    with_pods = {_slurm_name(p) for p in members}
    new = share.new if share is not None else []
    about_to_be_made = {slurm_node_name(name, nodes[n]) for n in new if n in nodes}
    for record_name in r.records_of(name, records):
        if record_name in with_pods or record_name in unseen or record_name in about_to_be_made:
            continue
        if busy(records[record_name], slurm.jobs_on(record_name)):
            notes.waiting.append(
                f"Slurm node {record_name} has no Pod but still lists jobs: its record is kept until they end"
            )
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
    deleting: bool = False,
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
        if settings.topology_labels:
            unlabelled = notes.unlabelled if notes else []
            condition(
                "TopologyLabeled",
                not unlabelled,
                UNKNOWN_TOPOLOGY_LABEL if unlabelled else "LabelsPresent",
                "; ".join(unlabelled) or "every member's Node carries the topology labels",
            )
        if settings.confinement:
            unconfined = notes.unconfined if notes else []
            condition(
                confinement.CONFINED,
                not unconfined,
                confinement.CONFINEMENT_UNAVAILABLE if unconfined else "CgroupsWritable",
                "; ".join(unconfined) or "every member's slurmd may confine its jobs",
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
    if nodeset is not None and not invalid:
        rollout = notes.rollout if notes else ""
        condition(
            "UpToDate",
            not rollout,
            "TemplateCurrent" if not rollout else "RollingOut",
            rollout or "every member runs the current template",
        )
    if deleting:
        summary = "Deleting: " + ("; ".join(notes.waiting) if notes and notes.waiting else "members removed")
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
        "removals": notes.removals if notes else [],
        "updated": _updated(nodeset, live),
        "conditions": conditions,
    }
    return status


def _updated(nodeset: NodeSet | None, live: list[Json]) -> int:
    """Members made from the current template."""
    if nodeset is None:
        return 0
    current = m.template_hash(nodeset)
    return sum(
        1 for pod in live if (pod["metadata"].get("annotations") or {}).get(m.TEMPLATE_HASH) == current
    )


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


def _parse_now(now: str) -> dt.datetime:
    return dt.datetime.strptime(now, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


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
