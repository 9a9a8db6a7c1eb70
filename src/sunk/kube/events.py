"""Events (events.k8s.io/v1) and the PodScheduled condition: what users see in
`kubectl describe pod`. Reasons follow kube-scheduler's where one exists."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
import uuid
from typing import Any, Protocol

from sunk.kube.client import KubeError

log = logging.getLogger(__name__)
Json = dict[str, Any]

# Event reasons
SCHEDULED = "Scheduled"
FAILED_SCHEDULING = "FailedScheduling"
PLACEHOLDER_SUBMITTED = "PlaceholderSubmitted"
PLACEHOLDER_ADOPTED = "PlaceholderAdopted"
PLACEHOLDER_READOPTED = "PlaceholderReadopted"
NODE_REJECTED = "PlacementRejected"
JOB_ENDED = "PlaceholderJobEnded"
JOB_MOVED = "PlaceholderJobMoved"
NODE_DRAINED = "NodeDrained"
STATIC_CPU = "StaticCPUPinning"
IGNORED_ANNOTATION = "IgnoredAnnotation"
SLURM_WARNING = "SlurmWarning"
RULE_NOT_HONOURED = "SchedulingRuleNotHonoured"
GROUP_TIMED_OUT = "PodGroupTimedOut"
GROUP_RELEASED = "PodGroupReleased"
PLACEMENT_WIDENED = "PlacementWidened"

# PodScheduled condition reasons. The first three are final: the Pod is never retried.
INVALID = "InvalidForSlurm"
REJECTED_BY_SLURM = "RejectedBySlurm"
FORBIDDEN = "ForbiddenByPolicy"
PENDING_IN_SLURM = "PendingInSlurm"
WAITING_FOR_START = "WaitingForPlaceholder"
UNSCHEDULABLE = "Unschedulable"
SLURM_UNAVAILABLE = "SlurmUnavailable"
WAITING_FOR_GROUP = "WaitingForPodGroup"
# Also an Event reason: the job runs on a node whose Node the kubelet has no room on yet.
WAITING_FOR_ROOM = "WaitingForNodeRoom"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_name(wanted: str) -> str:
    """`wanted` as a valid Event name (a DNS subdomain: lowercase letters, digits, '-' and
    '.', at most 253): kept when it already is one, else cleaned and suffixed with a digest,
    so two different wishes never share a name and the same wish always gets the same."""
    safe = re.sub(r"[^a-z0-9.-]+", "-", wanted.lower()).strip("-.")
    if safe == wanted and len(safe) <= 200:
        return safe
    return f"{safe[:180].strip('-.')}.{hashlib.sha256(wanted.encode()).hexdigest()[:10]}"


def event_object(
    regarding: Json,
    reason: str,
    note: str,
    component: str,
    instance: str,
    *,
    warning: bool = False,
    name: str | None = None,
    action: str = "Scheduling",
) -> Json:
    """An events.k8s.io/v1 Event about `regarding`; a given `name` makes it unique (a second
    create of the same name is refused with a conflict)."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": event_name(name) if name else f"{regarding['name']}.{uuid.uuid4().hex[:12]}",
            "namespace": regarding.get("namespace") or "default",
        },
        "eventTime": _now(),
        "reportingController": component,
        "reportingInstance": instance,
        "action": action,
        "reason": reason,
        "note": note[:1024],
        "type": "Warning" if warning else "Normal",
        "regarding": {k: v for k, v in regarding.items() if v is not None},
    }


class EventWriter(Protocol):
    """The two writes a `Recorder` makes: `KubeClient` and the test fakes have both."""

    async def create_event(self, namespace: str, event: Json) -> None: ...

    async def patch_pod_status(self, namespace: str, name: str, status: Json) -> Json: ...


class Recorder:
    def __init__(self, client: EventWriter, component: str, instance: str) -> None:
        self._client = client
        self._component = component
        self._instance = instance

    async def event(
        self,
        pod: Json,
        reason: str,
        note: str,
        *,
        warning: bool = False,
        explains: bool = False,
        name: str | None = None,
    ) -> None:
        """Best effort: a lost Event must never stop a scheduling decision. Except the one
        that says why the Pod is about to be deleted (`explains`): while the API server
        cannot be reached, that failure is raised, so the deletion waits for the Event's
        next try instead of leaving a Pod deleted with no word why (a fault run saw it: the
        Event failed as kube-apiserver went down, the deletion landed as it came back).
        `name`: as for `event_on`."""
        meta = pod["metadata"]
        regarding = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        await self.event_on(regarding, reason, note, warning=warning, name=name, raise_unreachable=explains)

    async def event_on(
        self,
        regarding: Json,
        reason: str,
        note: str,
        *,
        warning: bool = False,
        name: str | None = None,
        raise_unreachable: bool = False,
    ) -> bool:
        """An Event about any object (a Pod, a Node). A given `name` makes the Event unique:
        whichever process records it first wins, and a restarted scheduler seeing the same
        fact again adds nothing. True once the Event exists; a failure is logged, not raised."""
        namespace = regarding.get("namespace") or "default"  # cluster-scoped objects' Events
        event = event_object(
            regarding, reason, note, self._component, self._instance, warning=warning, name=name
        )
        try:
            await self._client.create_event(namespace, event)
        except KubeError as err:
            if name is not None and err.conflict:
                return True  # recorded already, by this process before a restart or by another
            if raise_unreachable and (err.unreachable or err.status >= 500):
                raise
            log.warning(
                "could not record event %s on %s %s: %s", reason, regarding["kind"], regarding["name"], err
            )
            return False
        return True

    async def condition(self, pod: Json, status: bool, reason: str, message: str) -> bool:
        """Set PodScheduled, skipping the write when nothing would change; True if written."""
        if not condition_changes(pod, status, reason, message):
            return False
        meta = pod["metadata"]
        condition = {
            "type": "PodScheduled",
            "status": "True" if status else "False",
            "reason": reason,
            "message": message[:1024],
            "lastTransitionTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        await self._client.patch_pod_status(meta["namespace"], meta["name"], {"conditions": [condition]})
        return True


def condition_changes(pod: Json, status: bool, reason: str, message: str) -> bool:
    """Whether setting PodScheduled so would change what the Pod shows."""
    current = scheduled_condition(pod)
    return not (
        current
        and current.get("status") == ("True" if status else "False")
        and current.get("reason") == reason
        and current.get("message") == message
    )


def scheduled_condition(pod: Json) -> Json | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return dict(condition)
    return None
