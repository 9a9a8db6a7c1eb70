"""What the Slurm-node controller does for one Slurm node, decided without I/O (R5.3, R9.4).

Two duties: with --drain-cordoned-nodes, a cordoned Node's Slurm node is drained, and
resumed once the Node is uncordoned if sunk drained it; and every drain in force (or a node
Slurm set down) is explained by one Event on each object it concerns: the Pod that caused
it (a Pod outliving KillWait), or else the Node hosting the Slurm node and every Pod of
this scheduler whose job was on the node when it was taken out of use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sunk.runtime.actions import Drain, Resume
from sunk.scheduler.decide.drains import cordon_drain_reason, drain_notice, for_cordon, pod_drain_note
from sunk.scheduler.translate import PodRef
from sunk.slurm.models import SlurmJob, SlurmNode

Json = dict[str, Any]
# A job that ended this long before the drain's reason was set still counts as the drain's:
# Slurm kills the job it drains a node for ("Duplicate jobid") within a second or two, and
# the job's end and the reason's time are each rounded to the second.
DRAIN_SLACK_S = 5


@dataclass(frozen=True)
class DrainEvent:
    """Record the Event `name` (unique per drain and object) with `note` on a Pod
    (`namespace` set; `uid` when known) or on a Node (`namespace` None). `drain` names the
    drain it explains; `mark`: then write that name on the Pod (it is in the cache), so a
    restarted scheduler reads that it was explained there."""

    name: str
    kind: str
    object_name: str
    namespace: str | None
    note: str
    drain: str = ""
    uid: str | None = None
    mark: bool = False


@dataclass(frozen=True)
class Known:
    """These Events of drain `drain` exist already (the Pods' annotations say so): remember
    them, so a Pod that goes later (its annotation with it) is not told again."""

    drain: str
    keys: frozenset[str]


SlurmNodeAction = Drain | Resume | DrainEvent | Known


@dataclass(frozen=True)
class JobOnNode:
    """A job of this scheduler that Slurm lists on the node, and what the Pod cache says of
    its Pod: there (`present`, same UID) and the drain Event its annotation names."""

    ref: PodRef
    job: SlurmJob
    present: bool
    marked: str | None


@dataclass(frozen=True)
class SlurmNodeFacts:
    """What the controller gathers for one Slurm node."""

    node: SlurmNode  # as the last listing saw it
    hosts: frozenset[str]  # the Nodes its slurmd Pods are bound to
    host: Json | None  # the Node object, when exactly one hosts it and the cache has it
    scheduler: str
    drain_cordoned: bool  # --drain-cordoned-nodes
    watched: frozenset[str]  # the namespaces whose Pods this scheduler places ("" = all)
    # The drain this process explains now, and the Events (namespace/name) it recorded for it.
    explained: tuple[str, frozenset[str]] | None = None
    jobs: tuple[JobOnNode, ...] = ()  # gathered only while the node is out of use


def event_key(action: DrainEvent) -> str:
    return f"{action.namespace or 'default'}/{action.name}"


def affected(node: SlurmNode, jobs: tuple[JobOnNode, ...]) -> list[JobOnNode]:
    """The jobs a drain (or a node set down) took: still on the node, or ended since the
    reason was set (less DRAIN_SLACK_S). Without the reason's time, only jobs still there."""
    since = node.reason_changed_at - DRAIN_SLACK_S if node.reason_changed_at else None
    return [
        j
        for j in jobs
        if node.name in j.job.nodes and (j.job.active or (since is not None and j.job.end_time >= since))
    ]


def for_slurm_node(facts: SlurmNodeFacts) -> list[SlurmNodeAction]:
    actions: list[SlurmNodeAction] = []
    node = facts.node
    if facts.drain_cordoned and facts.host is not None:
        host = str(facts.host["metadata"]["name"])
        cordoned = bool((facts.host.get("spec") or {}).get("unschedulable"))
        change = for_cordon(cordoned, host, node)
        if change == "drain":
            actions.append(Drain(node.name, cordon_drain_reason(host)))
        elif change == "resume":
            actions.append(Resume(node.name, host))
    notice = drain_notice(node, facts.scheduler)
    if notice is None:
        return actions
    done = facts.explained[1] if facts.explained and facts.explained[0] == notice.name else frozenset()
    explains: list[DrainEvent] = []
    known: set[str] = set()
    if notice.pod is not None:
        namespace, name = notice.pod
        if "" in facts.watched or namespace in facts.watched:  # else another scheduler's Pod
            explains.append(DrainEvent(notice.name, "Pod", name, namespace, notice.note, notice.name))
    else:
        if len(facts.hosts) == 1:  # several Nodes, or none: Slurm's own view says it all
            host_name = next(iter(facts.hosts))
            explains.append(DrainEvent(notice.name, "Node", host_name, None, notice.note, notice.name))
        for j in affected(node, facts.jobs):
            ref = j.ref
            if not ("" in facts.watched or ref.namespace in facts.watched):
                continue
            name = f"{ref.name}.drained.{notice.drain_id}"
            if j.marked == name:  # explained there before, maybe by a scheduler since restarted
                known.add(f"{ref.namespace}/{name}")
                continue
            note = pod_drain_note(node, notice, j.job)
            explains.append(
                DrainEvent(name, "Pod", ref.name, ref.namespace, note, notice.name, ref.uid, j.present)
            )
    fresh = {event_key(e): e for e in explains if event_key(e) not in done}  # a Pod with two jobs: one
    remember: list[SlurmNodeAction] = [Known(notice.name, frozenset(known))] if known - done else []
    return actions + remember + list(fresh.values())
