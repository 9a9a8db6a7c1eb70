"""topology.conf from Node labels, kept right as members come and go.

Slurm places a multi-node job better when it knows which nodes share a switch (tree) or a
fast-interconnect block (block), but our Slurm nodes appear and disappear with their Pods,
so a hand-written topology.conf would be wrong within a day. The cluster's operator names
the Node labels that describe the network (chart values `slurm.topology`); this writer
turns the members' Nodes' labels into topology.conf and stores it as the `topology.conf`
key of the Slurm configuration ConfigMap, which slurmctld's apply-config sidecar applies
with a reconfigure like any other change. The chart never renders that key, so a Helm
upgrade leaves the operator's content alone.

- tree: labels from the leaf switch up, e.g. [leaf label, spine label]: a member goes under
  the switch `<label name>-<value>` of its Node's first label, each switch under the one
  of its members' next label.
- block: one label; a member goes in block `<label name>-<value>`.

A member whose Node lacks one of the labels makes the whole file wait: Slurm would treat
that node as unreachable, and a half-right topology is worse than the last right one. Its
NodeSet says so (condition TopologyLabeled, an UnknownTopologyLabel Warning naming the
Node and the label); the previous topology.conf stays.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sunk.kube.client import KubeError
from sunk.operator.nodeset.members import SLURM_NODE_LABEL
from sunk.operator.nodeset.selection import NODESET_LABEL

log = logging.getLogger(__name__)
Json = dict[str, Any]

KEY = "topology.conf"
PLUGINS = ("tree", "block")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Member:
    slurm_name: str
    nodeset: str
    node: str
    node_labels: Mapping[str, str]


@dataclass(frozen=True)
class Missing:
    member: Member
    label: str


@dataclass
class Rendered:
    text: str
    missing: list[Missing] = field(default_factory=list)


def switch_name(label: str, value: str) -> str:
    """`<label name>-<value>`: readable, and distinct across levels whose labels differ."""
    return _UNSAFE.sub("_", f"{label.rsplit('/', 1)[-1]}-{value}")


def render(plugin: str, labels: Sequence[str], members: Iterable[Member]) -> Rendered:
    """topology.conf for `members`, or what is missing to write one."""
    members = sorted(members, key=lambda m: m.slurm_name)
    missing = [Missing(m, label) for m in members for label in labels if not m.node_labels.get(label)]
    if missing:
        return Rendered("", missing)
    header = f"# Written by the sunk operator from the Node labels {', '.join(labels)}; do not edit.\n"
    if plugin == "block":
        blocks: dict[str, list[str]] = {}
        for m in members:
            blocks.setdefault(switch_name(labels[0], m.node_labels[labels[0]]), []).append(m.slurm_name)
        return Rendered(
            header + "".join(f"BlockName={b} Nodes={','.join(n)}\n" for b, n in sorted(blocks.items()))
        )
    lines: list[str] = []
    children: dict[str, set[str]] = {}
    for m in members:
        leaf = switch_name(labels[0], m.node_labels[labels[0]])
        children.setdefault(leaf, set()).add(m.slurm_name)
    lines += [f"SwitchName={s} Nodes={','.join(sorted(n))}\n" for s, n in sorted(children.items())]
    for level in range(1, len(labels)):
        parents: dict[str, set[str]] = {}
        for m in members:
            below = switch_name(labels[level - 1], m.node_labels[labels[level - 1]])
            parents.setdefault(switch_name(labels[level], m.node_labels[labels[level]]), set()).add(below)
        lines += [f"SwitchName={s} Switches={','.join(sorted(c))}\n" for s, c in sorted(parents.items())]
    return Rendered(header + "".join(lines))


def members_of(pods: Iterable[Json], nodes: Mapping[str, Json], namespace: str, release: str) -> list[Member]:
    """The release's slurmd Pods placed on a Node, as Slurm nodes with their Node's labels."""
    found: list[Member] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if (
            meta.get("namespace") != namespace
            or labels.get("app.kubernetes.io/instance") != release
            or not labels.get(SLURM_NODE_LABEL)
            or not node
            or node not in nodes
        ):
            continue
        node_labels = (nodes[node].get("metadata") or {}).get("labels") or {}
        found.append(Member(labels[SLURM_NODE_LABEL], labels.get(NODESET_LABEL, ""), node, node_labels))
    return found


class TopologyKube(Protocol):
    async def get(self, path: str) -> Json: ...

    async def patch_merge(self, path: str, patch: Json) -> Json: ...


@dataclass
class TopologyWriter:
    """The one writer of the ConfigMap's topology.conf key. A missing label is reported on
    the member's NodeSet by the NodeSet controller (condition TopologyLabeled, an Event);
    here it only holds the file."""

    kube: TopologyKube
    namespace: str
    configmap: str
    plugin: str
    labels: Sequence[str]

    async def step(self, members: list[Member]) -> str:
        rendered = render(self.plugin, self.labels, members)
        if rendered.missing:
            first = rendered.missing[0]
            return f"topology.conf kept: Node {first.member.node} has no label {first.label}"
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{self.configmap}"
        try:
            current = ((await self.kube.get(path)).get("data") or {}).get(KEY)
            if current == rendered.text:
                return "topology.conf up to date"
            await self.kube.patch_merge(path, {"data": {KEY: rendered.text}})
        except KubeError as err:
            return f"cannot write topology.conf: {err}"
        return f"topology.conf written for {len(members)} nodes"


async def run_forever(writer: TopologyWriter, members: Any, interval_s: float) -> None:
    """Rewrites topology.conf whenever the members or their Nodes' labels change (checked
    every `interval_s`; `members()` reads the caches)."""
    said = ""
    while True:
        outcome = await writer.step(members())
        if outcome != said:
            log.info("%s", outcome)
            said = outcome
        await asyncio.sleep(interval_s)
