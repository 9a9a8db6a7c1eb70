"""Fakes of the components' ports: one Kubernetes API with informers' caches for both the
scheduler (`sunk.scheduler.ports.KubePort`) and the operator (`OperatorKube`), and
slurmrestd as the scheduler speaks to it; the cache and the failure schedule serve the
operator's Slurm fake too."""

from __future__ import annotations

import copy
import itertools
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sunk.kube.client import KubeError
from sunk.slurm.dataparser import DataParser
from sunk.slurm.dialect import Dialect, Submission
from sunk.slurm.errors import SlurmError, SlurmJobGone, SlurmNoAnswer, SlurmRejected
from sunk.slurm.models import SlurmJob, SlurmNode
from sunk.slurm.request import JobRequest

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
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time()))
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

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """A bound Pod is marked for deletion (its kubelet ends it; at once without
        `graceful_deletes`); an unbound one goes."""
        self.failures.check("delete_pod")
        pod = copy.deepcopy(self._pod(namespace, name, uid))
        self.calls.append(("delete_pod", f"{namespace}/{name}"))
        if self.hide_deletes:
            return
        if self.graceful_deletes and (pod.get("spec") or {}).get("nodeName"):
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


@dataclass
class FakeSubmitResult:
    job_id: int
    warning: str | None = None


@dataclass
class FakeSlurm:
    """slurmrestd with one data_parser dialect. Jobs are kept as the raw records slurmrestd
    would list and parsed by the real dialect; tests move them along with `start`, `end`."""

    dialect: Dialect = field(default_factory=lambda: DataParser("v0.0.42"))
    raw_jobs: dict[int, Json] = field(default_factory=dict)
    raw_nodes: dict[str, Json] = field(default_factory=dict)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    failures: Failures = field(default_factory=Failures)
    next_id: int = 100
    submit_warning: str | None = None
    # Jobs a listing leaves out (a partial answer); a read of the one job still finds them.
    unlisted: set[int] = field(default_factory=set)
    # How many of the next cancels Slurm accepts and then loses (a slurmctld crash).
    lost_cancels: int = 0
    # How many of the next submits Slurm carries out but whose answer is lost (SlurmNoAnswer).
    lost_answers: int = 0
    # Slurm nodes another job holds: a released job pinned to one waits for Resources.
    taken: set[str] = field(default_factory=set)
    # False: slurmctld refuses a submission that asks for its job ID (a token of neither
    # root nor SlurmUser).
    ids_may_be_chosen: bool = True

    def fail(self, call: str, error: SlurmError, times: int = 1) -> None:
        self.failures.fail(call, error, times)

    # -- the port -------------------------------------------------------------------------
    def submission(self, job: JobRequest, script: str, environment: dict[str, str]) -> Submission:
        return self.dialect.submission(job, script, environment)

    def owner_name(self, job: SlurmJob) -> str:
        return self.dialect.owner_name(job)

    async def submit(self, submission: Submission) -> FakeSubmitResult:
        self.failures.check("submit")
        specs = submission.body.get("jobs") or [submission.body["job"]]
        chosen = [spec["job_id"] for spec in specs if "job_id" in spec]
        if chosen and not self.ids_may_be_chosen:
            raise SlurmJobGone("Slurm refused to submit a job: Invalid job id specified", 2017)
        if any(job_id in self.raw_jobs for job_id in chosen):
            raise SlurmRejected("Slurm refused to submit a job: Duplicate job id", 2011, retryable=True)
        leader = chosen[0] if chosen else self.next_id
        for offset, spec in enumerate(specs):
            # An ID asked for is given as it is, and Slurm's counter stays where it was.
            job_id = spec["job_id"] if chosen else self.next_id
            self.next_id += 0 if chosen else 1
            raw: Json = {
                "job_id": job_id,
                "name": spec.get("name", ""),
                "admin_comment": spec.get("admin_comment", ""),
                "comment": spec.get("comment", ""),
                "user_id": int(spec.get("user_id", 0)),
                "group_id": int(spec.get("group_id", 0)),
                "partition": spec.get("partition", "batch"),
                "job_state": ["PENDING"],
                "state_reason": "None",
                "submit_time": {"set": True, "number": int(time.time())},
                "excluded_nodes": ",".join(spec.get("excluded_nodes") or []),
                "required_nodes": ",".join(spec.get("required_nodes") or []),
                "time_limit": spec.get("time_limit", {"set": False}),
                "extra": "",
            }
            if spec.get("hold"):
                raw["state_reason"] = "JobHeldUser"
            if len(specs) > 1:
                raw["het_job_id"] = leader
                raw["het_job_offset"] = offset
            self.raw_jobs[job_id] = raw
        self.calls.append(("submit", leader, submission))
        if self.lost_answers:
            self.lost_answers -= 1
            raise SlurmNoAnswer("read timeout: slurmrestd took the request but sent no answer")
        return FakeSubmitResult(leader, self.submit_warning)

    async def jobs(self) -> list[SlurmJob]:
        self.failures.check("jobs")
        listed = [raw for raw in self.raw_jobs.values() if raw["job_id"] not in self.unlisted]
        return [self.dialect.parse_job(raw) for raw in listed]

    async def job(self, job_id: int) -> SlurmJob | None:
        self.failures.check("job")
        raw = self.raw_jobs.get(job_id)
        return self.dialect.parse_job(raw) if raw else None

    async def job_group(self, job_id: int) -> list[SlurmJob]:
        self.failures.check("job_group")
        return [
            self.dialect.parse_job(raw)
            for raw in self.raw_jobs.values()
            if raw["job_id"] == job_id or raw.get("het_job_id") == job_id
        ]

    async def cancel(self, job_id: int, *, signal: str | None = None) -> None:
        self.failures.check("cancel")
        self.calls.append(("cancel", job_id, signal))
        if signal is None and self.lost_cancels:
            self.lost_cancels -= 1
        elif signal is None:
            for raw in self.raw_jobs.values():
                if raw["job_id"] == job_id or raw.get("het_job_id") == job_id:
                    raw["job_state"] = ["CANCELLED"]

    async def set_excluded_nodes(self, job_id: int, nodes: list[str]) -> None:
        self.failures.check("set_excluded_nodes")
        self.calls.append(("set_excluded_nodes", job_id, tuple(nodes)))
        self.raw_jobs[job_id]["excluded_nodes"] = ",".join(nodes)

    async def release_job(self, job_id: int) -> None:
        """A held job may start: one pinned to a node with room starts there at once (its
        script has not marked it yet), else it waits for Resources."""
        self.failures.check("release_job")
        self.calls.append(("release_job", job_id))
        raw = self.raw_jobs[job_id]
        if raw["job_state"] != ["PENDING"]:  # a job someone ended meanwhile
            raise SlurmRejected("Slurm refused to release it: Job/step already completing or completed", 2021)
        node = raw.get("required_nodes", "")
        usable = node in self.raw_nodes and "DRAIN" not in self.raw_nodes[node]["state"]
        if node and usable and node not in self.taken:
            self.start(job_id, node, started=False)
            raw["state_reason"] = "None"
        else:
            raw["state_reason"] = "Resources"

    async def nodes(self) -> list[SlurmNode]:
        self.failures.check("nodes")
        return [self.dialect.parse_node(raw) for raw in self.raw_nodes.values()]

    async def node(self, name: str) -> SlurmNode | None:
        self.failures.check("node")
        raw = self.raw_nodes.get(name)
        return self.dialect.parse_node(raw) if raw else None

    async def drain(self, node: str, reason: str) -> str | None:
        try:
            self.failures.check("drain")
        except SlurmError as err:
            return f"could not drain {node}: {err}"
        self.calls.append(("drain", node, reason))
        raw = self.raw_nodes.setdefault(node, {"name": node, "state": ["IDLE"]})
        raw["state"] = [*raw["state"], "DRAIN"]
        raw["reason"] = reason
        raw["reason_changed_at"] = int(time.time())
        return None

    async def resume(self, node: str) -> str | None:
        try:
            self.failures.check("resume")
        except SlurmError as err:
            return f"could not resume {node}: {err}"
        self.calls.append(("resume", node))
        raw = self.raw_nodes[node]
        raw["state"] = [s for s in raw["state"] if s != "DRAIN"]
        raw["reason"] = ""
        return None

    # -- what a test does to Slurm ----------------------------------------------------------
    def add_node(self, name: str, *, cpus: int = 8, memory_mib: int = 16384, state: str = "IDLE") -> None:
        self.raw_nodes[name] = {
            "name": name,
            "state": [state],
            "cpus": cpus,
            "real_memory": memory_mib,
            "partitions": ["batch"],
        }

    def start(self, job_id: int, node: str, *, started: bool = True) -> None:
        """Slurm starts the job on `node`; `started`: its script marked it started."""
        raw = self.raw_jobs[job_id]
        raw["job_state"] = ["RUNNING"]
        raw["nodes"] = node
        raw["start_time"] = {"set": True, "number": int(time.time())}
        raw["extra"] = ": started" if started else ""

    def end(self, job_id: int, state: str = "CANCELLED", reason: str = "None") -> None:
        raw = self.raw_jobs[job_id]
        raw["job_state"] = [state]
        raw["state_reason"] = reason
        raw["end_time"] = {"set": True, "number": int(time.time())}

    def end_group(self, leader: int, state: str = "CANCELLED") -> None:
        """`scancel` of a heterogeneous job's leader: every component ends."""
        for raw in list(self.raw_jobs.values()):
            if raw["job_id"] == leader or raw.get("het_job_id") == leader:
                self.end(raw["job_id"], state)

    def set_drained(self, node: str, reason: str = "bad DIMM") -> None:
        """An administrator drains `node` (no call of the port)."""
        raw = self.raw_nodes[node]
        raw["state"] = [*raw["state"], "DRAIN"]
        raw["reason"] = reason
        raw["reason_changed_at"] = int(time.time())

    def drains(self) -> list[tuple[str, str]]:
        return [(call[1], call[2]) for call in self.calls if call[0] == "drain"]

    def wait(self, job_id: int, reason: str) -> None:
        """The job stays pending, Slurm says why."""
        self.raw_jobs[job_id]["state_reason"] = reason

    def restart_without(self, *job_ids: int, next_id: int | None = None) -> None:
        """slurmctld restarted from state saved before `job_ids` ran: it has no record of
        them, and hands out job IDs again from `next_id` (default: the lowest lost one)."""
        for job_id in job_ids:
            del self.raw_jobs[job_id]
        self.next_id = next_id if next_id is not None else min(job_ids)

    def submitted(self) -> list[int]:
        return [call[1] for call in self.calls if call[0] == "submit"]

    def cancelled(self) -> list[tuple[int, str | None]]:
        return [(call[1], call[2]) for call in self.calls if call[0] == "cancel"]
