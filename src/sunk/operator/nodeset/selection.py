"""Which Nodes each NodeSet gets: at most one slurmd Pod per Node, one NodeSet per Node.

A Node qualifies for a NodeSet when it matches the nodeSelector and required node affinity,
every NoSchedule/NoExecute taint is tolerated, it is Ready and not cordoned, it has an IPv4
internal address (for the member's name), and the slurmd container's requests fit beside
the Pods already bound there. A Node that hosts a member keeps it while the member could
stay: selection and taints still allow it and it is not cordoned (a cordon is the first
step of a Node's maintenance, so its member is drained and goes once idle); Readiness and
fit no longer matter, nor do the taints the node lifecycle controller puts on a Node that
is not Ready (not-ready, unreachable): a lost machine's member is marked DOWN and comes
back with it (sunk.operator.nodeset.node_faults).

The assignment is computed for every NodeSet at once, from the caches alone, and comes out
the same whoever computes it: Nodes held by a member stay with their NodeSet; free Nodes
are offered to NodeSets oldest first, each taking what it still needs. So two NodeSets
that select the same Node never both take it, even while the caches lag behind a write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sunk.kube.nodefilter import affinity_allows, cordoned, node_ready, untolerated_taints
from sunk.kube.quantity import QuantityError, parse_quantity
from sunk.kube.resources import Requests, pod_requests
from sunk.operator.nodeset.hardware import slurm_node_name
from sunk.operator.nodeset.spec import NodeSet

Json = dict[str, Any]
NODESET_LABEL = "sunk.coreweave.com/nodeset"
# Readiness as taints (the node lifecycle controller's): no reason for a member to leave.
READINESS_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# The taint the node lifecycle controller adds to a cordoned Node, a moment after the cordon.
CORDON_TAINT = "node.kubernetes.io/unschedulable"


@dataclass
class Share:
    """One NodeSet's part of the assignment."""

    wanted: int = 0  # members it should have
    kept: list[str] = field(default_factory=list)  # Nodes whose member may stay (maybe more than wanted)
    new: list[str] = field(default_factory=list)  # free Nodes it takes for new members
    feasible: int = 0  # Nodes that qualify and no other NodeSet holds
    held_by_others: dict[str, str] = field(default_factory=dict)  # Node -> the NodeSet holding it
    unfit: dict[str, str] = field(default_factory=dict)  # Node -> why it does not qualify
    unfit_members: dict[str, str] = field(default_factory=dict)  # Node -> why its member must go


def member_nodeset(pod: Json) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(NODESET_LABEL)


def holders(members: Iterable[Json]) -> dict[str, str]:
    """Node -> the NodeSet whose member (even one terminating) is bound there."""
    held: dict[str, str] = {}
    for pod in members:
        node, owner = (pod.get("spec") or {}).get("nodeName"), member_nodeset(pod)
        if node and owner:
            held.setdefault(node, owner)
    return held


def _untolerated(nodeset: NodeSet, node: Json, *, ignored: tuple[str, ...] = ()) -> list[str]:
    """The NodeSet's untolerated taints on `node`, leaving out `ignored` keys and, on a
    cordoned Node, the cordon's own taint: a cordon is named as a cordon, whether or not the
    node lifecycle controller has added its taint yet (the reason a drain gives must not
    depend on which of the two writes the operator saw first)."""
    skip = (*ignored, CORDON_TAINT) if cordoned(node) else ignored
    return [t for t in untolerated_taints(nodeset.selection, node) if t.split("=", 1)[0] not in skip]


def may_stay(nodeset: NodeSet, node: Json) -> str | None:
    """Why a member already on `node` no longer belongs there, or None."""
    name = node.get("metadata", {}).get("name", "?")
    if not affinity_allows(nodeset.selection, node):
        return f"Node {name} no longer matches nodeSelector/affinity"
    taints = _untolerated(nodeset, node, ignored=READINESS_TAINTS)
    if taints:
        return f"Node {name} has taints the NodeSet does not tolerate: {', '.join(taints)}"
    if cordoned(node):
        return f"Node {name} is cordoned"
    return None


def not_selected(nodeset: NodeSet, node: Json) -> str | None:
    """Why the NodeSet's selection leaves `node` out (selectors, affinity, taints), or None."""
    if not affinity_allows(nodeset.selection, node):
        return "does not match nodeSelector/affinity"
    taints = _untolerated(nodeset, node)
    if taints:
        return f"has taints not tolerated: {', '.join(taints)}"
    return None


def why_not(nodeset: NodeSet, node: Json, bound: Iterable[Json]) -> str | None:
    """None when a new member may go to `node`; otherwise why not, in words. `bound`: the
    Pods bound to that Node (excluding this NodeSet's own member there)."""
    selection = not_selected(nodeset, node)
    if selection:
        return selection
    if cordoned(node):
        return "is cordoned"
    if not node_ready(node):
        return "is not Ready"
    if slurm_node_name(nodeset.name, node) is None:
        return "has no IPv4 InternalIP to name its Slurm node after"
    short = shortfall(nodeset.requests, node, bound)
    if short:
        return f"has too little free {short} for the slurmd Pod"
    return None


def shortfall(wanted: Requests, node: Json, bound: Iterable[Json]) -> str | None:
    """The first resource the Node lacks for `wanted` beside the `bound` Pods, or None."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    used = Requests()
    for pod in bound:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        requests, _ = pod_requests(pod.get("spec") or {})
        used += requests
    free_cpu = _quantity(allocatable.get("cpu")) - used.cpu
    free_memory = _quantity(allocatable.get("memory")) - used.memory
    if wanted.cpu > free_cpu:
        return "cpu"
    if wanted.memory > free_memory:
        return "memory"
    taken = dict(used.devices)
    for resource, count in wanted.devices:
        if count > _quantity(allocatable.get(resource)) - taken.get(resource, Decimal(0)):
            return resource
    return None


def assign(
    nodesets: list[NodeSet],
    nodes: Mapping[str, Json],
    pods_by_node: Mapping[str, list[Json]],
    members: Iterable[Json],
) -> dict[str, Share]:
    """Each NodeSet's Nodes (by NodeSet name). `members`: every NodeSet's Pods."""
    held = holders(members)
    shares = {ns.name: Share() for ns in nodesets}
    taken = dict(held)  # Node -> NodeSet, growing as free Nodes are handed out
    for nodeset in sorted(nodesets, key=lambda ns: (ns.created, ns.name)):
        share = shares[nodeset.name]
        for n, owner in held.items():
            if owner == nodeset.name:
                why = may_stay(nodeset, nodes[n]) if n in nodes else f"Node {n} is gone"
                if why is not None:
                    share.unfit_members[n] = why
        kept = sorted(
            n for n, owner in held.items() if owner == nodeset.name and n not in share.unfit_members
        )
        offered: list[str] = []
        for name in sorted(nodes):
            if held.get(name) == nodeset.name:
                continue
            selection = not_selected(nodeset, nodes[name])
            if selection is not None:
                share.unfit[name] = selection
                continue
            if name in taken:  # said before its room: the holder's own member fills it
                share.held_by_others[name] = taken[name]
                continue
            others = [p for p in pods_by_node.get(name, []) if member_nodeset(p) != nodeset.name]
            problem = why_not(nodeset, nodes[name], others)
            if problem is not None:
                share.unfit[name] = problem
            else:
                offered.append(name)
        share.feasible = len(kept) + len(offered)
        share.wanted = share.feasible if nodeset.replicas is None else nodeset.replicas
        if nodeset.deleting:
            share.wanted = 0
        share.kept = kept
        share.new = offered[: max(0, share.wanted - len(kept))]
        for name in share.new:
            taken[name] = nodeset.name
    return shares


def _quantity(value: object) -> Decimal:
    try:
        return parse_quantity(value if value is not None else 0)
    except QuantityError:
        return Decimal(0)
