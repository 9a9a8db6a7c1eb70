"""What a member's Kubernetes Node says of its machine, and what Slurm says back (issue #51).

Three rules, decided without I/O for one NodeSet's members each pass (sunk.operator.nodeset.plan):

- **A lost machine.** A member whose Node is not Ready (NotReady, or Unknown once the node
  lifecycle controller stops hearing from the kubelet) has its Slurm node marked DOWN, the
  reason `sunk-node: Ready=<status> (<reason>): <message>` from the Node's Ready condition.
  Slurm then requeues or fails the jobs that were running there by their own settings; on
  its own it would wait SlurmdTimeout for the same verdict.
- **A fault condition.** A member whose Node has one of the configured condition types
  (`--node-conditions`: Node Problem Detector's KernelDeadlock, ReadonlyFilesystem...)
  with status "True" is drained with the reason `sunk-node: <Type>: <message>`.
- **Back.** When the Node is Ready and has no such condition again, a member that carries
  one of these `sunk-node: ` reasons is returned: with the health checks on (its Pod runs
  the runner) it is handed to them (sunk.operator.nodeset.health_checks.verify_reason), which lift
  it after a clean run; otherwise it is resumed.

The operator owns only reasons that start with `sunk-node: `. A node drained or downed
under anyone else's reason (an administrator's, Slurm's own "Not responding", the health
checks', the operator's removal path) is left as it is: marking it DOWN would replace
their reason, and lifting it would undo their decision. The one exception is a member only
waiting for the checks' clean run (`sunk-hc: verify: `: a new member, or one handed over):
that wait is no fault, so a lost Node or a fault condition takes it over, and the checks
cannot return it to jobs meanwhile. Members that are leaving, or terminating, are the
removal path's.

The other way round, a member drained by a failing health check (`sunk-hc: <check>: ...`,
not the operator's own `verify` hand-over) shows on its Node as the condition
SlurmHealthCheck=True, its reason the check and its message Slurm's reason, so that
Kubernetes-side tools (remediation, dashboards) see it; it turns False when the drain is
lifted. The operator writes only that one condition type (RBAC: nodes/status patch).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from sunk.kube.nodefilter import node_ready
from sunk.operator.nodeset import health_checks as hc
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset.actions import Action, MarkDown, SetNodeCondition
from sunk.runtime.actions import Drain, Event, Resume
from sunk.slurm.models import SlurmNode

Json = dict[str, Any]
OWN_PREFIX = "sunk-node: "
CONDITION = "SlurmHealthCheck"  # the Node condition that mirrors a check's drain
# Node Problem Detector's default problem conditions (its kernel, systemd and docker
# monitors): each names a fault when its status is "True".
DEFAULT_CONDITIONS = (
    "KernelDeadlock",
    "ReadonlyFilesystem",
    "FrequentKubeletRestart",
    "FrequentContainerdRestart",
)
REASON_MAX = 250  # Slurm keeps a reason whole, but sinfo's column and people read it

# Events (on the NodeSet)
NODE_LOST = "MemberNodeLost"
NODE_FAULT = "MemberNodeFault"
NODE_BACK = "MemberNodeRecovered"


def lost_reason(node: Json) -> str:
    """The DOWN reason for a member whose Node is not Ready."""
    ready = _condition(node, "Ready") or {"status": "Unknown", "reason": "NoReadyCondition"}
    status = ready.get("status") or "Unknown"
    why = ready.get("reason") or "NodeNotReady"
    message = ready.get("message") or "the Node is not Ready"
    return _clip(f"{OWN_PREFIX}Ready={status} ({why}): {message}")


def fault_reason(node: Json, watched: Collection[str]) -> str | None:
    """The drain reason for the first watched condition that is True, in `watched` order."""
    for kind in watched:
        found = _condition(node, kind)
        if found is not None and found.get("status") == "True":
            message = found.get("message") or found.get("reason") or "the condition is True"
            return _clip(f"{OWN_PREFIX}{kind}: {message}")
    return None


def owned(record: SlurmNode) -> bool:
    return record.reason.startswith(OWN_PREFIX)


def is_down(record: SlurmNode) -> bool:
    return record.state.upper() == "DOWN" or "DOWN" in (f.upper() for f in record.flags)


def member_actions(
    nodeset: str, pod: Json, node: Json, record: SlurmNode, settings: m.Settings
) -> list[Action]:
    """What one member's Node asks of its Slurm node this pass."""
    slurm_name = m.slurm_name_of(pod)
    ours = owned(record)
    # Someone else's drain or DOWN stays theirs; a member only waiting for the checks' clean
    # run (a new one, or handed over) is no one's fault, and a Node fault takes it over, or
    # the checks would return it to jobs while its Node says it is not well.
    theirs = record.draining and not ours and not hc.handed_over(record)
    if not node_ready(node):
        if (is_down(record) and ours) or theirs:
            return []  # marked already, or someone else's drain or DOWN: theirs
        reason = lost_reason(node)
        note = f"member {slurm_name}: Node {_name(node)} is lost; its Slurm node is marked DOWN ({reason})"
        return [MarkDown(slurm_name, reason), Event(NODE_LOST, note, warning=True)]
    fault = fault_reason(node, settings.node_conditions)
    if fault is not None:
        if theirs or record.reason == fault:
            return []
        note = f"member {slurm_name}: Node {_name(node)} reports a fault; its Slurm node is drained ({fault})"
        return [Drain(slurm_name, fault), Event(NODE_FAULT, note, warning=True)]
    if not (ours and record.draining):
        return []
    if settings.health_checks_configmap and hc.runs_checks(pod):
        note = f"member {slurm_name}: Node {_name(node)} is well again; it returns once its checks pass"
        return [Drain(slurm_name, hc.verify_reason(nodeset)), Event(hc.VERIFYING, note)]
    return [Resume(slurm_name), Event(NODE_BACK, f"member {slurm_name}: Node {_name(node)} is well again")]


def check_condition(node: Json, record: SlurmNode | None, now: str) -> Action | None:
    """The SlurmHealthCheck condition the member's Node should carry, when it differs."""
    current = _condition(node, CONDITION)
    failed = (
        record is not None
        and hc.owned_by_checks(record)
        and not record.reason.startswith(f"{hc.OWN_PREFIX}{hc.VERIFY}: ")
    )
    if failed:
        assert record is not None
        check = record.reason[len(hc.OWN_PREFIX) :].split(":", 1)[0]
        want = {"status": "True", "reason": _camel(check), "message": record.reason[:1024]}
    elif current is not None and current.get("status") == "True":
        want = {"status": "False", "reason": "NotDrained", "message": "no health check drains its Slurm node"}
    else:
        return None
    if current is not None and all(current.get(k) == v for k, v in want.items()):
        return None
    return SetNodeCondition(
        _name(node), {"type": CONDITION, **want, "lastTransitionTime": now, "lastHeartbeatTime": now}
    )


def actions(
    nodeset: str,
    members: list[Json],
    nodes: Mapping[str, Json],
    records: Mapping[str, SlurmNode],
    settings: m.Settings,
    now: str,
    going: Collection[str] = (),
) -> list[Action]:
    """Every member's actions this pass; `going`: Slurm nodes the removal path has in hand."""
    out: list[Action] = []
    for pod in members:
        node = nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        slurm_name = m.slurm_name_of(pod)
        record = records.get(slurm_name)
        if node is None:
            continue
        condition = check_condition(node, record, now)
        if condition is not None:
            out.append(condition)
        if record is None or slurm_name in going or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        out += member_actions(nodeset, pod, node, record, settings)
    return out


def _condition(node: Json, kind: str) -> Json | None:
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def _name(node: Json) -> str:
    return str((node.get("metadata") or {}).get("name") or "?")


def _clip(reason: str) -> str:
    reason = " ".join(reason.split())  # one line: Slurm's reason is shown in one column
    return reason if len(reason) <= REASON_MAX else reason[: REASON_MAX - 3] + "..."


def _camel(check: str) -> str:
    """A condition reason from a check's name: `disk-space` → `DiskSpace`."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", check) if w]
    reason = "".join(w[:1].upper() + w[1:] for w in words)
    return reason if reason[:1].isalpha() else f"Check{reason}" if reason else "HealthCheckFailed"
