"""What the Slurm-node controller does for one Slurm node, decided without I/O (R5.3, R9.4).

Two duties: with --drain-cordoned-nodes, a cordoned Node's Slurm node is drained, and
resumed once the Node is uncordoned if sunk drained it; and every drain in force is
explained by one Event, on the Pod that caused it or on the Node hosting the Slurm node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sunk.decide import cordon_drain_reason, drain_notice, for_cordon
from sunk.slurm.models import SlurmNode

Json = dict[str, Any]


@dataclass(frozen=True)
class Drain:
    node: str
    reason: str


@dataclass(frozen=True)
class Resume:
    node: str
    host: str  # the uncordoned Node, for the log


@dataclass(frozen=True)
class Explain:
    """Record the Event `name` (unique per drain) with `note` on a Pod (`namespace` set)
    or on a Node (`namespace` None)."""

    name: str
    kind: str
    object_name: str
    namespace: str | None
    note: str


SlurmNodeAction = Drain | Resume | Explain


@dataclass(frozen=True)
class SlurmNodeFacts:
    """What the controller gathers for one Slurm node."""

    node: SlurmNode  # as the last listing saw it
    hosts: frozenset[str]  # the Nodes its slurmd Pods are bound to
    host: Json | None  # the Node object, when exactly one hosts it and the cache has it
    scheduler: str
    drain_cordoned: bool  # --drain-cordoned-nodes
    watched: frozenset[str]  # the namespaces whose Pods this scheduler places ("" = all)
    explained: str | None  # the drain Event this process recorded last for the node


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
    if notice is None or notice.name == facts.explained:
        return actions
    if notice.pod is not None:
        namespace, name = notice.pod
        if "" in facts.watched or namespace in facts.watched:  # else another scheduler's Pod
            actions.append(Explain(notice.name, "Pod", name, namespace, notice.note))
    elif len(facts.hosts) == 1:  # several Nodes, or none: Slurm's own view says it all
        actions.append(Explain(notice.name, "Node", next(iter(facts.hosts)), None, notice.note))
    return actions
