"""Members the node health checks drained, as Kubernetes sees them, and their replacement
(issue #51).

A failing check drains its member's Slurm node under `sunk-hc: <check>: ...`
(sunk.operator.nodeset.health_checks), and that fact would otherwise stay inside Slurm. Each pass
finds those members (the operator's own `verify` hand-over is no failure) and:

- tells Kubernetes: a HealthCheckFailed Event on the member's Pod when a drain is new (or
  names another check), a HealthCheckPassed one when the checks lifted it. "New" is read
  from the status the last pass wrote (each member's `unhealthySince`), so the plan stays
  pure and writes one Event per drain, not one per pass; the Event's name keeps a pass
  retried after a failed status write from writing it twice.
- dates each drain, for the status and for replacement: Slurm's time of the reason, kept
  from pass to pass in the status when another check takes over the reason (Slurm's time
  then restarts); the pass's own time when Slurm gives none; never before the Pod was made
  (a record an earlier Pod left says nothing of this one).
- replaces a member drained for longer than `health_replace_after_s`, through the job-safe
  removal path (sunk.operator.nodeset.removal), and only once Slurm lists no job on it: its drain
  is the checks', so no job is ever cancelled or cut short for it. At most
  `health_replace_max_unavailable` members of a NodeSet are away at once, counting every
  member not ready for any reason (about to be made, starting, terminating), so a check
  that fails everywhere (a bad script, a storage outage) replaces members one slot at a
  time and never empties the NodeSet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk.kube.nodefilter import node_ready  # any object's Ready condition: here a Pod's
from sunk.operator.nodeset import health_checks as hc
from sunk.operator.nodeset import members as m
from sunk.operator.nodeset import removal as r
from sunk.operator.nodeset import times
from sunk.operator.nodeset.actions import Action
from sunk.operator.nodeset.view import SlurmView
from sunk.runtime.actions import Event
from sunk.slurm.models import SlurmNode

Json = dict[str, Any]
SINCE = "unhealthySince"  # a status member entry's field: when a check drained it

# Events, and the NodeSet condition
FAILED = "HealthCheckFailed"
PASSED = "HealthCheckPassed"
REPLACING = "ReplacingUnhealthyMember"
HEALTHY = "Healthy"


@dataclass(frozen=True)
class Review:
    """What one pass found of the members the checks drained, and does about them."""

    since: Mapping[str, str] = field(default_factory=dict)  # Slurm node → when a check drained it
    message: str = ""  # the Healthy condition's while some member is drained by a check
    leaving: tuple[r.Leaving, ...] = ()  # replaced this pass, or their replacement goes on
    actions: tuple[Action, ...] = ()
    due: bool = False  # a member becomes old enough to replace with nothing else changing


def failing(record: SlurmNode | None) -> bool:
    """Drained by a failing check (not by the operator's hand-over, waiting for a clean run)."""
    return (
        record is not None
        and hc.owned_by_checks(record)
        and not record.reason.startswith(f"{hc.OWN_PREFIX}{hc.VERIFY}:")
    )


def review(
    obj: Json,
    members: list[Json],
    leaving: list[r.Leaving],
    new: int,
    slurm: SlurmView,
    settings: m.Settings,
    now: str,
) -> Review:
    """`obj`: the NodeSet, with the status the last pass wrote; `leaving`: members going
    for another cause; `new`: members about to be made this pass (away, like starting ones)."""
    nodeset, records = obj["metadata"]["name"], slurm.nodes or {}
    before = {e.get("slurmNode"): e for e in (obj.get("status") or {}).get("members") or []}
    going = {x.slurm_name for x in leaving}
    since: dict[str, str] = {}
    actions: list[Action] = []
    sick: list[tuple[Json, SlurmNode]] = []
    for pod in sorted(members, key=m.slurm_name_of):
        name = m.slurm_name_of(pod)
        record, was = records.get(name), before.get(name) or {}
        if record is None:
            continue  # replaced, or not registered yet: nothing passed or failed
        if not failing(record):
            if was.get(SINCE) and not record.drained and not _terminating(pod):
                actions.append(_passed(nodeset, pod, name, was))
            continue
        since[name] = _since(was, record, pod, now)
        sick.append((pod, record))
        if not was.get(SINCE) or was.get("reason") != record.reason:
            actions.append(_failed(nodeset, pod, name, record))
    replaced, more, waits, due = _replacements(
        nodeset, sick, since, members, going, new, slurm, settings, now
    )
    lines = [f"member {rec.name}: {rec.reason} (since {since[rec.name]})" for _, rec in sick]
    return Review(since, "; ".join(lines + waits), tuple(replaced), tuple(actions + more), due)


def _replacements(
    nodeset: str,
    sick: list[tuple[Json, SlurmNode]],
    since: Mapping[str, str],
    members: list[Json],
    going: set[str],
    new: int,
    slurm: SlurmView,
    settings: m.Settings,
    now: str,
) -> tuple[list[r.Leaving], list[Action], list[str], bool]:
    """The members to replace, oldest drain first, the Events saying so, what waits and why,
    and whether one is not old enough yet."""
    after, budget = settings.health_replace_after_s, settings.health_replace_max_unavailable
    if after <= 0 or budget <= 0:
        return [], [], [], False
    away = new + sum(1 for pod in members if _terminating(pod) or not node_ready(pod))
    slots = budget - away
    cause = f"replaces a member its health checks have drained for over {_duration(after)}"
    leaving: list[r.Leaving] = []
    actions: list[Action] = []
    waits: list[str] = []
    due = False
    for pod, record in sorted(sick, key=lambda s: (since[s[1].name], s[1].name)):
        name = record.name
        age = (times.parse(now) - times.parse(since[name])).total_seconds()
        if name in going:
            continue
        if age < after:
            due = True
            continue
        member = r.Leaving(pod, name, (pod.get("spec") or {}).get("nodeName", ""), cause)
        if _terminating(pod):
            leaving.append(member)  # its replacement is under way (counted as away above)
        elif r.busy(record, slurm.jobs_on(name)):
            waits.append(f"{name} is replaced once its jobs end")
        elif slots <= 0:
            waits.append(f"{name} waits to be replaced: {away} members are away (maxUnavailable {budget})")
        else:
            slots -= 1
            leaving.append(member)
            note = (
                f"replacing member {name}: its health checks have drained it since {since[name]} "
                f"({record.reason}) and it runs no job; NodeSet {nodeset} makes a new one"
            )
            actions.append(
                Event(REPLACING, note, warning=True, once_as=f"{nodeset}.replace.{name}.{since[name]}")
            )
    return leaving, actions, waits, due


def _failed(nodeset: str, pod: Json, name: str, record: SlurmNode) -> Event:
    """A drain (or another check's reason) the last status did not show; named after the
    drain, so a pass retried before its status was written does not say it twice."""
    return Event(
        FAILED,
        f"member {name} was drained by its health checks: {record.reason}; "
        "it takes no new job until they pass",
        warning=True,
        once_as=f"{nodeset}.unhealthy.{name}.{record.reason_changed_at}.{record.reason}",
        pod=pod,
    )


def _passed(nodeset: str, pod: Json, name: str, was: Json) -> Event:
    """The checks lifted the drain the last status showed."""
    return Event(
        PASSED,
        f"member {name} passed its health checks and is back in service "
        f"(drained since {was[SINCE]}: {was.get('reason', '')})",
        once_as=f"{nodeset}.healthy.{name}.{was[SINCE]}",
        pod=pod,
    )


def _since(was: Json, record: SlurmNode, pod: Json, now: str) -> str:
    """When the member's check drain began (see the module's docstring)."""
    stamped = times.stamp(record.reason_changed_at) if record.reason_changed_at else None
    carried = was.get(SINCE) if was.get("reason") != record.reason else None
    began = str(carried or stamped or was.get(SINCE) or now)
    return max(began, str((pod.get("metadata") or {}).get("creationTimestamp") or ""))


def _terminating(pod: Json) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _duration(seconds: int) -> str:
    """30m, 1h30m, 90s as 1m30s: as the chart's values are written."""
    h, rest = divmod(seconds, 3600)
    mins, s = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((h, "h"), (mins, "m"), (s, "s")) if n) or "0s"
