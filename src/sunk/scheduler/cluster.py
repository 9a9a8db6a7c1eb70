"""Where a Pod may go: Slurm nodes, the Nodes hosting them, and the Pod's own constraints.

A Slurm node maps to the Node its slurmd Pod is bound to. Anything ambiguous (no slurmd
Pod, or two on different Nodes) means "not usable": the scheduler never guesses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sunk.kube import noderoom
from sunk.kube.nodefilter import affinity_allows, node_ready, why_not
from sunk.kube.resources import Requests
from sunk.runtime.ports import Cache
from sunk.scheduler.translate import podaffinity
from sunk.slurm.models import SlurmNode

Json = dict[str, Any]


@dataclass(frozen=True)
class Room:
    """What a Pod asks of a Node and what the Pods counted there hold, in the kubelet's
    count (`placement.Placement.room`)."""

    wanted: Requests
    held: Mapping[str, noderoom.Tally]  # Node name → what the counted Pods there request

    def shortfall(self, node: Json) -> str | None:
        """Why the Pod would not fit on `node`, or None."""
        name = node.get("metadata", {}).get("name", "")
        return noderoom.shortfall(node, self.wanted, self.held.get(name) or noderoom.Tally())


@dataclass(frozen=True)
class Target:
    slurm_node: str
    node: Json | None
    problem: str | None
    # False: the problem may pass (no room in the kubelet's count), so a Pod refused there
    # is not told to avoid the node for good (the `avoid-nodes` annotation): it waits for
    # the room, or leaves the node out of its next job only while the problem lasts
    # (`Placement.choose` says which).
    lasting: bool = True


class ClusterView:
    def __init__(self, nodes: Cache, slurmd_pods: Cache, slurm_node_label: str) -> None:
        self.nodes = nodes
        self.slurmd_pods = slurmd_pods
        self.slurm_node_label = slurm_node_label
        self.slurm_nodes: set[str] = set()
        # The last node listing, with what Slurm has handed out of each (--placement=pack).
        self.slurm_node_usage: list[SlurmNode] = []
        self._by_name: dict[str, SlurmNode] = {}

    def record_slurm_nodes(self, nodes: list[SlurmNode]) -> None:
        """A fresh node listing (the Slurm-node poller's, its one writer)."""
        self.slurm_nodes = {n.name for n in nodes}
        self.slurm_node_usage = nodes
        self._by_name = {n.name: n for n in nodes}

    def slurm_node(self, name: str) -> SlurmNode | None:
        """The node as the last listing saw it."""
        return self._by_name.get(name)

    def node(self, name: str) -> Json | None:
        """A Node from the cache."""
        return self.nodes.get(name)

    def assume(self, slurm_node: str, cpus: int, memory_mib: int, gres: tuple[tuple[str, int], ...]) -> None:
        """Count a job just steered to `slurm_node` (--placement=pack) until the next node
        listing, so Pods submitted meanwhile do not all aim at the same room."""
        self.slurm_node_usage = [
            node.taking(cpus, memory_mib, gres) if node.name == slurm_node else node
            for node in self.slurm_node_usage
        ]

    def host_map(self) -> dict[str, set[str]]:
        mapping: dict[str, set[str]] = {}
        for pod in self.slurmd_pods.store.values():
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            name = (meta.get("labels") or {}).get(self.slurm_node_label) or spec.get("hostname")
            if name and spec.get("nodeName") and not meta.get("deletionTimestamp"):
                mapping.setdefault(name, set()).add(spec["nodeName"])
        return mapping

    def largest(self) -> str | None:
        """The Slurm node whose Node has the most allocatable (cpu, then memory; the first
        name on a tie), of those hosted by exactly one Node; None when there is none."""
        best: tuple[tuple[Decimal, Decimal], str] | None = None
        for slurm_node, hosts in sorted(self.host_map().items()):
            node = self.nodes.get(next(iter(hosts))) if len(hosts) == 1 else None
            if node is not None and (best is None or noderoom.size(node) > best[0]):
                best = (noderoom.size(node), slurm_node)
        return best[1] if best is not None else None

    def target(
        self,
        slurm_node: str,
        pod: Json,
        placed: list[Json] | None,
        mapping: dict[str, set[str]] | None = None,
        room: Room | None = None,
    ) -> Target:
        """The Node for `slurm_node`, or why the Pod must not be placed there (R4.3, R9.3).
        `placed`: the Pods already on Nodes, for the Pod's affinity and spread rules (None:
        it has none, `Translation.pod_rules`);
        `room`: whether the Pod fits there in the kubelet's count (None: not checked)."""
        pod_spec = pod.get("spec") or {}
        hosts = set((mapping or self.host_map()).get(slurm_node, ()))
        if not hosts:
            return Target(slurm_node, None, f"no slurmd Pod for Slurm node {slurm_node} is bound to a Node")
        if len(hosts) > 1:
            return Target(
                slurm_node,
                None,
                f"Slurm node {slurm_node} maps to several Nodes: {', '.join(sorted(hosts))}",
            )
        host = hosts.pop()
        node = self.nodes.get(host)
        if node is None:
            return Target(slurm_node, None, f"Node {host} hosting Slurm node {slurm_node} does not exist")
        if not node_ready(node):
            return Target(slurm_node, node, f"Node {host} is not Ready")
        problem = why_not(pod_spec, node)
        if problem is None and room is not None:
            short = room.shortfall(node)
            if short is not None:
                return Target(slurm_node, node, short, lasting=False)
        if problem is None and placed is not None:
            candidates = [
                n
                for names in (mapping or self.host_map()).values()
                if len(names) == 1
                and (n := self.nodes.get(next(iter(names)))) is not None
                and affinity_allows(pod_spec, n)
            ]
            problem = podaffinity.problem(pod, node, self.nodes.store, placed, candidates)
        return Target(slurm_node, node, problem)

    def excluded_for(self, pod: Json, placed: list[Json] | None, room: Room | None = None) -> dict[str, str]:
        """Slurm nodes the Pod must avoid, each with the reason (`placed` as for `target`)."""
        mapping = self.host_map()
        excluded = {}
        for slurm_node in sorted(self.slurm_nodes | set(mapping)):
            problem = self.target(slurm_node, pod, placed, mapping, room).problem
            if problem:
                excluded[slurm_node] = problem
        return excluded
