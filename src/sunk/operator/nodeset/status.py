"""A NodeSet's status, made without I/O from what one pass of its plan found: members
counted by their Slurm state and those a health check drained, removals under way, and the
Valid, SlurmReachable, Feasible, TopologyLabeled, Confined, DirectoryRead,
HealthChecksConfigured, Healthy, Ready and UpToDate conditions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk.kube.nodefilter import node_ready  # any object's Ready condition: here a Pod's
from sunk.operator.nodeset import confinement, health_checks, unhealthy
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset.selection import Share
from sunk.operator.nodeset.spec import NodeSet
from sunk.operator.nodeset.view import SlurmView, slurm_state

Json = dict[str, Any]
UNKNOWN_TOPOLOGY_LABEL = "UnknownTopologyLabel"
DIRECTORY_READ = "DirectoryRead"


@dataclass(frozen=True)
class Findings:
    """What a pass found that the status must tell, one line each."""

    waiting: tuple[str, ...] = ()
    removals: tuple[Json, ...] = ()
    rollout: str = ""  # why the roll-out waits, or "" when nothing is out of date
    unlabelled: tuple[str, ...] = ()  # members' Nodes missing a topology label
    unconfined: tuple[str, ...] = ()  # members whose Node refused confinement
    directory: str | None = None  # why the directory's people could not be read, if so
    unhealthy: Mapping[str, str] = field(default_factory=dict)  # members a check drained → since when
    health: str = ""  # what the Healthy condition says of them


def nodeset_status(
    obj: Json,
    name: str,
    nodeset: NodeSet | None,
    members: list[Json],
    settings: m.Settings,
    now: str,
    slurm: SlurmView,
    *,
    invalid: list[str] | None = None,
    share: Share | None = None,
    found: Findings | None = None,
    deleting: bool = False,
) -> Json:
    """The status to write: counts, members, removals, conditions and a one-line summary."""
    records = slurm.nodes or {}
    live = [p for p in members if not (p.get("metadata") or {}).get("deletionTimestamp")]
    counts = dict.fromkeys(("idle", "allocated", "mixed", "draining", "drained", "down", "unknown"), 0)
    listed = []
    sick = found.unhealthy if found else {}
    if slurm.nodes is None:  # unknown is not healthy: what the last listing showed stands
        sick = {e["slurmNode"]: e[unhealthy.SINCE] for e in _previous_members(obj) if unhealthy.SINCE in e}
    for pod in sorted(members, key=lambda p: m.slurm_name_of(p)):
        record = records.get(m.slurm_name_of(pod)) if slurm.nodes is not None else None
        state = slurm_state(record) if slurm.nodes is not None else "unknown"
        if state in counts:
            counts[state] += 1
        entry = {
            "slurmNode": m.slurm_name_of(pod),
            "node": (pod.get("spec") or {}).get("nodeName", ""),
            "pod": pod["metadata"]["name"],
            "state": state,
        }
        if record is not None and record.reason:
            entry["reason"] = record.reason
        if entry["slurmNode"] in sick:
            entry[unhealthy.SINCE] = sick[entry["slurmNode"]]
        listed.append(entry)
    sick = {e["slurmNode"]: e[unhealthy.SINCE] for e in listed if unhealthy.SINCE in e}  # members only
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
            f"{share.feasible} Nodes qualify" if enough else feasibility_message(nodeset, share),
        )
        waiting = list(found.waiting) if found else []
        failing = _failing(members)
        all_ready = ready == share.wanted and len(live) == share.wanted and not waiting and not failing
        all_ready = all_ready and all(e["state"] in ("idle", "allocated", "mixed") for e in listed)
        message = "; ".join(failing + waiting) or (
            f"{ready} of {share.wanted} members ready and registered"
            if not all_ready
            else f"{ready} members ready"
        )
        if settings.topology_labels:
            unlabelled = found.unlabelled if found else ()
            condition(
                "TopologyLabeled",
                not unlabelled,
                UNKNOWN_TOPOLOGY_LABEL if unlabelled else "LabelsPresent",
                "; ".join(unlabelled) or "every member's Node carries the topology labels",
            )
        if settings.confinement:
            unconfined = found.unconfined if found else ()
            condition(
                confinement.CONFINED,
                not unconfined,
                confinement.CONFINEMENT_UNAVAILABLE if unconfined else "CgroupsWritable",
                "; ".join(unconfined) or "every member's slurmd may confine its jobs",
            )
        if settings.people_configmap:
            problem = found.directory if found else None
            condition(
                DIRECTORY_READ,
                problem is None,
                "PeopleCurrent" if problem is None else "DirectoryUnreadable",
                f"members know the directory's people (ConfigMap {settings.people_configmap})"
                if problem is None
                else f"{problem}; members keep the people last read (ConfigMap {settings.people_configmap})",
            )
        if settings.health_checks_configmap and slurm.nodes is not None:
            problems = health_checks.config_problems(records, [e["slurmNode"] for e in listed])
            condition(
                health_checks.CONFIGURED,
                not problems,
                "ChecksMisconfigured" if problems else "ChecksRunnable",
                "; ".join(problems)[:1000] or "every member runs all of its health checks",
            )
        if settings.health_checks_configmap or sick:  # a check's drain outlives turning them off
            condition(
                unhealthy.HEALTHY,
                not sick,
                "HealthChecksFailing" if sick else "HealthChecksPassing",
                (found.health if found else "")
                or "; ".join(f"member {n} (since {t})" for n, t in sick.items())
                or "no member is drained by a health check",
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
            summary = feasibility_message(nodeset, share)
        if not slurm.known:
            summary = f"waiting for Slurm: {slurm.problem}"
    if nodeset is not None and not invalid:
        rollout = found.rollout if found else ""
        condition(
            "UpToDate",
            not rollout,
            "TemplateCurrent" if not rollout else "RollingOut",
            rollout or "every member runs the current template",
        )
    if deleting:
        summary = "Deleting: " + ("; ".join(found.waiting) if found and found.waiting else "members removed")
    status: Json = {
        "observedGeneration": generation,
        "replicas": len(live),
        "ready": ready,
        "feasible": share.feasible if share is not None else 0,
        "selector": m.selector_string(settings, name),
        "partitions": ",".join(nodeset.partitions) if nodeset is not None else "",
        "summary": summary[:300],
        "slurm": counts,
        "unhealthy": len(sick),
        "members": listed,
        "removals": list(found.removals) if found else [],
        "updated": _updated(nodeset, live, settings),
        "conditions": conditions,
    }
    return status


def _previous_members(obj: Json) -> list[Json]:
    return list((obj.get("status") or {}).get("members") or [])


def _updated(nodeset: NodeSet | None, live: list[Json], settings: m.Settings) -> int:
    """Members made from the current template."""
    if nodeset is None:
        return 0
    current = m.template_hash(nodeset, settings)
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


def feasibility_message(nodeset: NodeSet, share: Share) -> str:
    wanted = "every qualifying Node" if nodeset.replicas is None else f"{nodeset.replicas} replicas"
    reasons = [f"{n} {why}" for n, why in sorted(share.unfit.items())[:5]]
    reasons += [f"{n} is held by NodeSet {o}" for n, o in sorted(share.held_by_others.items())[:5]]
    more = len(share.unfit) + len(share.held_by_others) - len(reasons)
    tail = f" (and {more} more)" if more > 0 else ""
    return f"{wanted} asked, {share.feasible} Nodes qualify: {'; '.join(reasons) or 'no Nodes'}{tail}"


def changed(status: Json, previous: Json) -> bool:
    """Whether `status` says something `previous` did not (a condition's transition time
    alone is not a change)."""
    return _comparable(status) != _comparable(previous)


def _comparable(status: Json) -> Json:
    return {
        **status,
        "conditions": [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
        ],
    }
