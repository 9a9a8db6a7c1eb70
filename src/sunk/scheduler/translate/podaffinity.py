"""Pod affinity, anti-affinity and topology spread, decided before Slurm chooses (R9.3).

Slurm knows nothing of the Pods around a node, so these rules become Slurm nodes to exclude:
for each candidate Node, would binding the Pod there break a required rule, counting the
Pods this scheduler has already bound (or is binding)? The same check runs again when the
job has started, under the node's lock, so two Pods placed at once cannot both take the one
place a rule left. Pure functions of the Pod, the Node and the Pods around it.

Honoured: required podAffinity and podAntiAffinity (any topology key: hostname, zone...),
with `labelSelector` and `namespaces`; topologySpreadConstraints with
`whenUnsatisfiable: DoNotSchedule`. What is not (preferred terms, `ScheduleAnyway`,
`namespaceSelector`, `matchLabelKeys`, `minDomains`) is listed by `not_honoured` so the
Pod's Event can say so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sunk.kube.nodefilter import expression_matches

Json = dict[str, Any]


def selector_matches(selector: Json | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector; a missing selector matches nothing, an empty one everything."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def _labels(obj: Json) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _matching(term: Json, pod: Json, others: Iterable[Json]) -> list[Json]:
    """The Pods `term` (an affinity term or spread constraint) is about."""
    namespaces = set(term.get("namespaces") or [pod["metadata"].get("namespace")])
    return [
        other
        for other in others
        if other["metadata"].get("namespace") in namespaces
        and selector_matches(term.get("labelSelector"), _labels(other))
    ]


def _required(pod: Json, kind: str) -> list[Json]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def _spread(pod: Json) -> list[Json]:
    constraints = (pod.get("spec") or {}).get("topologySpreadConstraints") or []
    return [c for c in constraints if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"]


def read(pod: Json) -> tuple[bool, tuple[str, ...]]:
    """Whether the Pod has rules sunk applies (`has_rules`), and those it does not
    (`not_honoured`): what its translation carries."""
    return has_rules(pod), tuple(not_honoured(pod))


def has_rules(pod: Json) -> bool:
    return bool(_required(pod, "podAffinity") or _required(pod, "podAntiAffinity") or _spread(pod))


def problem(
    pod: Json, node: Json, nodes: Mapping[str, Json], placed: list[Json], candidates: list[Json]
) -> str | None:
    """Why binding `pod` to `node` breaks a required rule, or None. `nodes` maps Node names
    to Nodes (for topology labels), `placed` are the Pods already on a Node (spec.nodeName),
    the Pod itself excluded; `candidates` are the Nodes the Pod could go to at all (hosting
    a Slurm node, matching its node selector and affinity): the spread's domains."""
    name = node["metadata"]["name"]
    where = _labels(node)

    def value_of(other: Json, key: str) -> str | None:
        host = nodes.get((other.get("spec") or {}).get("nodeName") or "")
        return _labels(host).get(key) if host else None

    for term in _required(pod, "podAntiAffinity"):
        key = term.get("topologyKey", "")
        if key not in where:
            continue  # the Node is in no such domain: nothing to be apart from
        clash = [o for o in _matching(term, pod, placed) if value_of(o, key) == where[key]]
        if clash:
            return (
                f"Node {name} shares {key}={where[key]} with Pod {clash[0]['metadata']['name']}, "
                "which the Pod's required anti-affinity keeps it apart from"
            )
    for term in _required(pod, "podAffinity"):
        key = term.get("topologyKey", "")
        matching = _matching(term, pod, placed)
        if not matching and selector_matches(term.get("labelSelector"), _labels(pod)):
            continue  # the first of a group that wants to be together may go anywhere
        if key not in where or not any(value_of(o, key) == where[key] for o in matching):
            return f"Node {name} has no Pod the Pod's required affinity wants to share {key} with"
    for constraint in _spread(pod):
        key = constraint.get("topologyKey", "")
        if key not in where:
            return f"Node {name} has no {key} label, which the Pod's topology spread counts by"
        counts = {_labels(n)[key]: 0 for n in candidates if key in _labels(n)}
        counts.setdefault(where[key], 0)
        for other in _matching(constraint, pod, placed):
            value = value_of(other, key)
            if value in counts:
                counts[value] += 1
        skew = counts[where[key]] + 1 - min(counts.values())
        if skew > int(constraint.get("maxSkew", 1)):
            return (
                f"Node {name} is in {key}={where[key]}, which already has {counts[where[key]]} matching "
                f"Pods against {min(counts.values())} elsewhere (maxSkew {constraint.get('maxSkew', 1)})"
            )
    return None


def not_honoured(pod: Json) -> list[str]:
    """The Pod's inter-Pod rules sunk does not apply, in words, for an Event."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    left = []
    for kind in ("podAffinity", "podAntiAffinity"):
        if (affinity.get(kind) or {}).get("preferredDuringSchedulingIgnoredDuringExecution"):
            left.append(f"preferred {kind} (only required terms are applied)")
        for term in _required(pod, kind):
            if term.get("namespaceSelector") is not None:
                left.append(f"namespaceSelector of a required {kind} term (only namespaces is applied)")
            if term.get("matchLabelKeys") or term.get("mismatchLabelKeys"):
                left.append(f"matchLabelKeys/mismatchLabelKeys of a required {kind} term")
    for constraint in (pod.get("spec") or {}).get("topologySpreadConstraints") or []:
        if constraint.get("whenUnsatisfiable") == "ScheduleAnyway":
            left.append("topologySpreadConstraints with whenUnsatisfiable: ScheduleAnyway")
        if constraint.get("minDomains") or constraint.get("matchLabelKeys"):
            left.append("minDomains/matchLabelKeys of a topology spread constraint")
    return sorted(set(left))
