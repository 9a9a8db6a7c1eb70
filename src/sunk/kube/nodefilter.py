"""Which Nodes may host a Pod, by Kubernetes' own rules (R3.2, R9.3, R9.4): nodeSelector,
required node affinity, NoSchedule/NoExecute taints the Pod does not tolerate, cordoned
Nodes, and readiness. The scheduler turns the answer into Slurm nodes a job excludes; the
operator uses it to choose the Nodes that get a NodeSet's members.
"""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]


def expression_matches(expr: Json, labels: dict[str, str]) -> bool:
    key, op = expr.get("key", ""), expr.get("operator", "")
    values = expr.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _term_matches(term: Json, node: Json) -> bool:
    labels = node.get("metadata", {}).get("labels") or {}
    fields = {"metadata.name": node.get("metadata", {}).get("name", "")}
    expressions = term.get("matchExpressions") or []
    field_expressions = term.get("matchFields") or []
    if not expressions and not field_expressions:
        return False  # an empty term matches nothing, as in kube-scheduler
    return all(expression_matches(e, labels) for e in expressions) and all(
        expression_matches(e, fields) for e in field_expressions
    )


def affinity_allows(pod_spec: Json, node: Json) -> bool:
    labels = node.get("metadata", {}).get("labels") or {}
    selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return True
    return any(_term_matches(term, node) for term in terms)


def _tolerates(toleration: Json, taint: Json) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if toleration.get("operator", "Equal") == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and toleration.get("value", "") == taint.get("value", "")


def untolerated_taints(pod_spec: Json, node: Json) -> list[str]:
    tolerations = pod_spec.get("tolerations") or []
    blocking = []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            blocking.append(f"{taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}")
    return blocking


def cordoned(node: Json) -> bool:
    """Marked unschedulable (`kubectl cordon`): no new Pod goes there."""
    return bool((node.get("spec") or {}).get("unschedulable"))


def node_ready(node: Json) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def why_not(pod_spec: Json, node: Json) -> str | None:
    """None when the Pod may go to `node`; otherwise the reason, in words."""
    name = node.get("metadata", {}).get("name", "?")
    if cordoned(node):
        return f"Node {name} is cordoned"
    if not affinity_allows(pod_spec, node):
        return f"Node {name} does not match the Pod's nodeSelector/affinity"
    taints = untolerated_taints(pod_spec, node)
    if taints:
        return f"Node {name} has taints the Pod does not tolerate: {', '.join(taints)}"
    return None
