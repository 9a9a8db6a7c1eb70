"""The fake of the components' Kubernetes port: one API server with informers' caches for
both the scheduler (`sunk.scheduler.ports.KubePort`) and the operator (`OperatorKube`);
the failure schedule serves the Slurm fake (`tests.fakes.slurm`) too."""

from __future__ import annotations

import copy
import itertools
import time
from collections import defaultdict
from typing import Any

from sunk.kube.client import KubeError
from sunk.runtime.ports import Clock, SystemClock

Json = dict[str, Any]
_uids = itertools.count(1)  # the uids of the Pods the fake creates


class MemoryCache:
    """An informer's store, filled by hand or by a fake's writes."""

    def __init__(self, objects: list[Json] | None = None) -> None:
        self.store: dict[str, Json] = {}
        for obj in objects or []:
            self.put(obj)

    def put(self, obj: Json) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        self.store[key] = obj

    def get(self, key: str) -> Json | None:
        return self.store.get(key)


class Failures:
    """Errors queued per call name: the next calls of that name raise them, in order."""

    def __init__(self) -> None:
        self._queued: defaultdict[str, list[Exception]] = defaultdict(list)

    def fail(self, call: str, error: Exception, times: int = 1) -> None:
        self._queued[call].extend([error] * times)

    def check(self, call: str) -> None:
        if self._queued[call]:
            raise self._queued[call].pop(0)


class FakeKube:
    """The API server as both components write to it (the scheduler's `KubePort`, the
    operator's `OperatorKube`). Writes land in the informers' caches at once (`pods`,
    `nodesets`, `nodes`, as a watch would bring them); every write is also logged in
    `calls`, a Pod's under its `namespace/name` key.

    `graceful_deletes`: deleting a Pod bound to a Node marks it (its kubelet ends it, see
    `delete_by_user`), as the API server does; the operator's world turns it off, its
    kubelet stand-in ending a deleted member at once."""

    def __init__(
        self,
        pods: MemoryCache | None = None,
        nodesets: MemoryCache | None = None,
        nodes: MemoryCache | None = None,
        *,
        graceful_deletes: bool = True,
    ) -> None:
        self.pods = pods if pods is not None else MemoryCache()
        self.nodesets = nodesets if nodesets is not None else MemoryCache()
        self.nodes = nodes if nodes is not None else MemoryCache()
        self.objects: dict[str, Json] = {}  # path → object, for get() (PodGroups)
        self.events: list[Json] = []
        self.calls: list[tuple[str, ...]] = []
        self.failures = Failures()
        self.graceful_deletes = graceful_deletes
        self.clock: Clock = SystemClock()  # what bindings are dated with (a test world hands its own)
        self.hide_creates = False  # created Pods do not reach the cache (a lagging watch)
        self.hide_deletes = False  # deleted Pods stay in the cache as they were (a lagging watch)
        self._hidden: set[str] = set()

    def fail(self, call: str, error: Exception | None = None, times: int = 1) -> None:
        """Make the next `times` calls of `call` fail (by default: the API server unreachable)."""
        self.failures.fail(call, error or KubeError(0, "ClientConnectorError: connection refused"), times)

    def _pod(self, namespace: str, name: str, uid: str | None = None) -> Json:
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is None:
            raise KubeError(404, f'pods "{name}" not found')
        if uid is not None and pod["metadata"].get("uid") != uid:
            raise KubeError(409, f"Precondition failed: UID in precondition: {uid}")
        return pod

    def _replace(self, pod: Json) -> Json:
        pod = copy.deepcopy(pod)
        meta = pod["metadata"]
        meta["resourceVersion"] = str(int(meta.get("resourceVersion") or "0") + 1)
        self.pods.put(pod)
        return pod

    def _nodeset(self, path: str) -> tuple[str, Json]:
        """The NodeSet at `path` (`.../namespaces/NS/nodesets/NAME`): its cache key and itself."""
        parts = path.strip("/").split("/")
        key = f"{parts[parts.index('namespaces') + 1]}/{parts[-1]}"
        obj = self.nodesets.get(key)
        if obj is None:
            raise KubeError(404, "not found")
        return key, obj

    # -- Pods ---------------------------------------------------------------------------------
    async def get(self, path: str) -> Json:
        self.failures.check("get")
        if path not in self.objects:
            raise KubeError(404, f"{path} not found")
        return copy.deepcopy(self.objects[path])

    async def create_pod(self, namespace: str, pod: Json) -> Json:
        self.failures.check("create_pod")
        name = pod["metadata"]["name"]
        self.calls.append(("create_pod", f"{namespace}/{name}"))
        if self.pods.get(f"{namespace}/{name}") is not None or f"{namespace}/{name}" in self._hidden:
            raise KubeError(409, f'pods "{name}" already exists')
        made = copy.deepcopy(pod)
        made["metadata"].update(uid=f"uid-{next(_uids)}", resourceVersion="1")
        made["status"] = {"phase": "Pending"}
        if self.hide_creates:
            self._hidden.add(f"{namespace}/{name}")
        else:
            self.pods.put(made)
        return made

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.failures.check("bind")
        pod = copy.deepcopy(self._pod(namespace, name, uid))
        if (pod.get("spec") or {}).get("nodeName"):
            raise KubeError(409, f"pod {name} is already assigned to node {pod['spec']['nodeName']}")
        pod.setdefault("spec", {})["nodeName"] = node
        # As the API server's binding does: PodScheduled turns True, dated now.
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock.now()))
        status = pod.setdefault("status", {})
        others = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
        status["conditions"] = [*others, scheduled]
        self._replace(pod)
        self.calls.append(("bind", f"{namespace}/{name}", node))

    async def patch_pod(self, namespace: str, name: str, uid: str, patch: Json) -> Json:
        """A merge patch of the Pod's annotations (the scheduler's) and labels (the operator's)."""
        self.failures.check("patch_pod")
        pod = copy.deepcopy(self._pod(namespace, name, uid))
        for field_name in ("annotations", "labels"):
            values = pod["metadata"].setdefault(field_name, {})
            for key, value in ((patch.get("metadata") or {}).get(field_name) or {}).items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
        self.calls.append(("patch_pod", f"{namespace}/{name}"))
        return self._replace(pod)

    async def patch_pod_status(self, namespace: str, name: str, status: Json) -> Json:
        self.failures.check("patch_pod_status")
        pod = copy.deepcopy(self._pod(namespace, name))
        conditions = pod.setdefault("status", {}).setdefault("conditions", [])
        for new in status.get("conditions") or []:
            conditions[:] = [c for c in conditions if c.get("type") != new["type"]] + [new]
        self.calls.append(("patch_pod_status", f"{namespace}/{name}"))
        return self._replace(pod)

    async def delete_pod(self, namespace: str, name: str, uid: str, *, grace_s: int | None = None) -> None:
        """A bound Pod is marked for deletion (its kubelet ends it; at once without
        `graceful_deletes` or with `grace_s` 0); an unbound one goes."""
        self.failures.check("delete_pod")
        pod = copy.deepcopy(self._pod(namespace, name, uid))
        self.calls.append(
            ("delete_pod", f"{namespace}/{name}" + ("" if grace_s is None else f" grace {grace_s}"))
        )
        if self.hide_deletes:
            return
        if self.graceful_deletes and grace_s != 0 and (pod.get("spec") or {}).get("nodeName"):
            pod["metadata"].setdefault("deletionTimestamp", "2026-11-24T00:00:00Z")
            self._replace(pod)
        else:
            del self.pods.store[f"{namespace}/{name}"]

    async def create_event(self, namespace: str, event: Json) -> None:
        self.failures.check("create_event")
        name = event["metadata"]["name"]
        if any((e["metadata"]["name"], e["metadata"]["namespace"]) == (name, namespace) for e in self.events):
            raise KubeError(409, f'events "{name}" already exists')
        self.events.append(event)

    # -- NodeSets and Nodes (the operator's) ---------------------------------------------------
    async def patch_status(self, path: str, status: Json) -> Json:
        self.failures.check("patch_status")
        self.calls.append(("patch_status", path.rsplit("/", 1)[-1]))
        _, obj = self._nodeset(path)
        obj["status"] = copy.deepcopy(status)
        return obj

    async def patch_merge(self, path: str, patch: Json) -> Json:
        """Only what the operator patches: a NodeSet's finalizers, guarded by resourceVersion.
        A deleted NodeSet whose last finalizer goes leaves the cache, as in the API server."""
        self.failures.check("patch_merge")
        self.calls.append(("patch_merge", path.rsplit("/", 1)[-1]))
        key, obj = self._nodeset(path)
        meta = patch["metadata"]
        if meta.get("resourceVersion") not in (None, obj["metadata"].get("resourceVersion")):
            raise KubeError(409, "the object has been modified")
        obj["metadata"]["finalizers"] = list(meta["finalizers"])
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"].get("resourceVersion") or 0) + 1)
        if obj["metadata"].get("deletionTimestamp") and not obj["metadata"]["finalizers"]:
            self.nodesets.store.pop(key)
        return obj

    async def patch_node_status(self, name: str, status: Json) -> Json:
        """A strategic merge of conditions by type, as the API server does."""
        self.failures.check("patch_node_status")
        self.calls.append(("patch_node_status", name))
        node = self.nodes.get(name)
        if node is None:
            raise KubeError(404, f'nodes "{name}" not found')
        conditions = node.setdefault("status", {}).setdefault("conditions", [])
        for condition in status.get("conditions") or []:
            kept = [c for c in conditions if c.get("type") != condition["type"]]
            conditions[:] = [*kept, copy.deepcopy(condition)]
        return node

    # -- what a test asks ---------------------------------------------------------------
    def reasons(self, name: str | None = None) -> list[str]:
        """The reasons of the Events recorded (about the object `name`, if given), in order."""
        return [e["reason"] for e in self.events if name is None or e["regarding"]["name"] == name]

    def notes(self, reason: str) -> list[str]:
        return [e["note"] for e in self.events if e["reason"] == reason]

    def delete_by_user(self, namespace: str, name: str) -> None:
        """`kubectl delete pod`: a bound Pod gets its deletion timestamp, an unbound one goes."""
        pod = copy.deepcopy(self._pod(namespace, name))
        if (pod.get("spec") or {}).get("nodeName"):
            pod["metadata"]["deletionTimestamp"] = "2026-11-24T00:00:00Z"
            self._replace(pod)
        else:
            del self.pods.store[f"{namespace}/{name}"]
