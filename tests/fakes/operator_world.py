"""The NodeSet controller's world in memory: Nodes, Pods and NodeSets in informer caches,
fakes of its two ports, and a kubelet and slurmd stand-in that move members along."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from sunk.kube.events import Recorder
from sunk.operator import members as m
from sunk.operator.app import SlurmPoller
from sunk.operator.controller import NodeSetController
from sunk.operator.features import in_conf
from sunk.operator.hardware import gres_in_conf
from sunk.operator.nodeset import API_VERSION
from sunk.operator.view import SlurmView
from sunk.runtime.controller import Outcome
from sunk.slurm.diag import SlurmDiag
from sunk.slurm.errors import SlurmError, SlurmUnavailable
from sunk.slurm.models import SlurmJob, SlurmNode
from tests.fakes.ports import Failures, FakeKube, MemoryCache

Json = dict[str, Any]
NAMESPACE = "slurm"
SETTINGS = m.Settings("slurm", "slurm-controller.slurm.svc.cluster.local:6817", "slurm-auth")
IMAGE = "registry.example/slurmd:24.11"
NOW = "2026-11-24T12:00:00Z"
NOW_S = 1795521600  # NOW in epoch seconds


class FakeOperatorSlurm:
    """slurmctld's node records and partitions; every call logged in `calls`."""

    def __init__(self, partitions: tuple[str, ...] = ("batch",)) -> None:
        self.records: dict[str, SlurmNode] = {}
        self.running: dict[int, SlurmJob] = {}
        self.partition_names = set(partitions)
        self.max_time_min: dict[str, int | None] = {}  # MaxTime by partition; absent: none
        self.calls: list[tuple[str, ...]] = []
        self.failures = Failures()
        self.clock = NOW_S  # what slurmctld stamps a drain with (epoch seconds)
        self.statistics = SlurmDiag(server_thread_count=1)  # what /diag answers

    def fail(self, call: str, error: SlurmError | None = None, times: int = 1) -> None:
        self.failures.fail(call, error or SlurmUnavailable("slurmrestd is down"), times)

    async def nodes(self) -> list[SlurmNode]:
        self.failures.check("nodes")
        return list(self.records.values())

    async def partitions(self) -> dict[str, int | None]:
        self.failures.check("partitions")
        return {name: self.max_time_min.get(name) for name in sorted(self.partition_names)}

    async def jobs(self) -> list[SlurmJob]:
        self.failures.check("jobs")
        return list(self.running.values())

    async def diag(self) -> SlurmDiag:
        self.failures.check("diag")
        return self.statistics

    async def cancel(self, job_id: int) -> None:
        self.failures.check("cancel")
        self.calls.append(("cancel", str(job_id)))
        job = self.running.pop(job_id, None)
        if job is not None and not any(job.nodes[0] in j.nodes for j in self.running.values()):
            self.end_jobs(job.nodes[0])

    async def delete_node(self, name: str) -> None:
        self.failures.check("delete_node")
        self.calls.append(("delete_node", name))
        self.records.pop(name, None)

    async def drain(self, node: str, reason: str) -> str | None:
        self.calls.append(("drain", node, reason))
        record = self.records[node]
        self.records[node] = replace(
            record, flags=(*record.flags, "DRAIN"), reason=reason, reason_changed_at=self.clock
        )
        return None

    async def resume(self, node: str) -> str | None:
        """Lifts a drain and a DOWN alike, as `scontrol update state=resume` does."""
        self.calls.append(("resume", node))
        record = self.records[node]
        state = "idle" if record.state.lower() == "down" else record.state
        flags = tuple(f for f in record.flags if f not in ("DRAIN", "NOT_RESPONDING"))
        self.records[node] = replace(record, state=state, flags=flags, reason="")
        return None

    async def mark_down(self, node: str, reason: str) -> str | None:
        """DOWN under `reason`; a drain flag stays (slurmctld keeps it), a COMPLETING one
        goes (slurmctld ends the work of a node it marks DOWN)."""
        self.calls.append(("mark_down", node, reason))
        record = self.records[node]
        flags = tuple(f for f in record.flags if f != "COMPLETING")
        self.records[node] = replace(
            record, state="down", flags=flags, reason=reason, reason_changed_at=self.clock
        )
        return None

    def register(
        self,
        name: str,
        *,
        address: str = "10.1.0.9",
        state: str = "IDLE",
        alloc_cpus: int = 0,
        gres: tuple[tuple[str, int], ...] = (),
        features: tuple[str, ...] = (),
    ) -> None:
        self.records[name] = SlurmNode(
            name,
            state.lower(),
            (),
            "",
            cpus=4,
            alloc_cpus=alloc_cpus,
            address=address,
            gres=gres,
            features=features,
        )

    def run_job(self, name: str, *, end_time: int = 0) -> int:
        """A job starts on node `name`; returns its ID."""
        job_id = 100 + len(self.running) + len(self.calls)
        while job_id in self.running:
            job_id += 1
        self.running[job_id] = SlurmJob(
            job_id, f"job-{job_id}", "RUNNING", "", (name,), "", 0, 0, "batch", 60, 1, end_time=end_time
        )
        words = self.records[name].flags
        self.records[name] = replace(self.records[name], state="allocated", alloc_cpus=1, flags=words)
        return job_id

    def queue_job(self, partition: str = "batch", reason: str = "Resources", constraint: str = "") -> int:
        """A job that waits in `partition` (asking for the features of `constraint`); returns its ID."""
        job_id = 500 + len(self.running)
        while job_id in self.running:
            job_id += 1
        self.running[job_id] = SlurmJob(
            job_id, f"job-{job_id}", "PENDING", reason, (), "", 0, 0, partition, 60, 1, features=constraint
        )
        return job_id

    def end_jobs(self, name: str) -> None:
        for job_id in [j for j, job in self.running.items() if name in job.nodes]:
            del self.running[job_id]
        self.records[name] = replace(self.records[name], state="idle", alloc_cpus=0)

    def drain_as_admin(self, name: str, reason: str = "bad DIMM") -> None:
        record = self.records[name]
        self.records[name] = replace(record, flags=(*record.flags, "DRAIN"), reason=reason)


def node(
    name: str,
    address: str,
    *,
    labels: dict[str, str] | None = None,
    cpu: str = "4",
    memory: str = "8Gi",
    taints: list[Json] | None = None,
    ready: bool = True,
    cordoned: bool = False,
    extra: dict[str, str] | None = None,
) -> Json:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": cordoned},
        "status": {
            "addresses": [{"type": "InternalIP", "address": address}],
            "allocatable": {"cpu": cpu, "memory": memory, **(extra or {})},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def nodeset(name: str, *, created: str = "2026-01-01T00:00:00Z", generation: int = 1, **spec: Any) -> Json:
    spec.setdefault("partitions", ["batch"])
    spec.setdefault("resources", {"limits": {"cpu": "2", "memory": "2Gi"}})
    return {
        "apiVersion": API_VERSION,
        "kind": "NodeSet",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"ns-uid-{name}",
            "generation": generation,
            "creationTimestamp": created,
        },
        "spec": spec,
    }


@dataclass
class OperatorWorld:
    """Caches, fakes, the app's Slurm poller and a controller wired together; `kubelet()`
    and `slurmd()` play the parts that make a created member Run and register."""

    nodes: MemoryCache = field(default_factory=MemoryCache)
    pods: MemoryCache = field(default_factory=MemoryCache)
    nodesets: MemoryCache = field(default_factory=MemoryCache)
    slurm: FakeOperatorSlurm = field(default_factory=FakeOperatorSlurm)
    now: str = NOW
    settings: m.Settings = SETTINGS
    refreshes: int = 0
    directory_problem: str | None = None  # what the people sync says of its last read

    def __post_init__(self) -> None:
        # The operator's own poller, the only writer of the view (`poll` runs one listing).
        self.poller = SlurmPoller(self.slurm, interval=10.0, changed=lambda: None)
        self.kube = FakeKube(self.pods, self.nodesets, self.nodes, graceful_deletes=False)
        self.controller = self.new_controller()

    def restarted_with(self, settings: m.Settings) -> OperatorWorld:
        """The same cluster and Slurm, with an operator restarted under other flags."""
        return OperatorWorld(
            nodes=self.nodes, pods=self.pods, nodesets=self.nodesets, slurm=self.slurm, settings=settings
        )

    def new_controller(self) -> NodeSetController:
        """A fresh controller on the same world (an operator restart)."""
        return NodeSetController(
            self.kube,
            self.slurm,
            lambda: self.poller.view,
            nodesets=self.nodesets,
            nodes=self.nodes,
            pods=self.pods,
            settings=self.settings,
            default_image=IMAGE,
            recorder=Recorder(self.kube, "sunk-operator", "test"),
            clock=lambda: self.now,
            refresh=self.refresh,
            directory_problem=lambda: self.directory_problem,
        )

    def add_node(self, name: str, address: str, **kw: Any) -> None:
        self.nodes.put(node(name, address, **kw))

    def add_nodeset(self, name: str, **kw: Any) -> None:
        self.nodesets.put(nodeset(name, **kw))

    def spec(self, name: str) -> Json:
        """The NodeSet's spec, to change in place (as `kubectl edit` would)."""
        obj = self.nodesets.get(f"{NAMESPACE}/{name}")
        assert obj is not None
        obj["metadata"]["generation"] += 1
        spec: Json = obj["spec"]
        return spec

    def delete_nodeset(self, name: str) -> None:
        """As the API server does: gone at once without finalizers, else marked."""
        obj = self.nodesets.get(f"{NAMESPACE}/{name}")
        assert obj is not None
        if obj["metadata"].get("finalizers"):
            obj["metadata"]["deletionTimestamp"] = self.now
        else:
            self.nodesets.store.pop(f"{NAMESPACE}/{name}")

    def status(self, name: str) -> Json:
        return (self.nodesets.get(f"{NAMESPACE}/{name}") or {}).get("status") or {}

    def condition(self, name: str, kind: str) -> Json:
        return next(c for c in self.status(name)["conditions"] if c["type"] == kind)

    def members(self, nodeset_name: str | None = None) -> dict[str, Json]:
        return {
            pod["metadata"]["name"]: pod
            for pod in self.pods.store.values()
            if nodeset_name is None
            or pod["metadata"]["labels"].get("sunk.coreweave.com/nodeset") == nodeset_name
        }

    @property
    def view(self) -> SlurmView:
        """The poller's view of Slurm, as the controller reads it."""
        return self.poller.view

    @view.setter
    def view(self, view: SlurmView) -> None:
        self.poller.view = view

    async def poll(self) -> None:
        """The Slurm poller's listing."""
        await self.poller.poll_once()

    async def refresh(self) -> None:
        """The poller's listing on the controller's request; `refreshes` counts them."""
        self.refreshes += 1
        await self.poll()

    async def reconcile(self, name: str) -> Outcome:
        await self.poll()
        return await self.controller.reconcile(f"{NAMESPACE}/{name}")

    async def settle(self, *names: str, rounds: int = 4) -> None:
        """Reconcile, run the kubelet and slurmd, and again, until nothing more happens."""
        for _ in range(rounds):
            for name in names:
                await self.reconcile(name)
            self.kubelet()
            self.slurmd()
            self.first_checks()

    def kubelet(self) -> None:
        """Every member Pod runs and is ready."""
        for pod in self.pods.store.values():
            pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}

    def first_checks(self) -> None:
        """Every member registered drained for its first health check run has had a clean
        one: the runner lifts that drain itself (scontrol, not the operator's call). The
        operator's own hand-overs (`sunk-hc: verify: NodeSet ...`) stay for a test to lift."""
        for name, record in list(self.slurm.records.items()):
            if record.drained and record.reason == m.FIRST_CHECK_REASON:
                flags = tuple(f for f in record.flags if f != "DRAIN")
                self.slurm.records[name] = replace(record, flags=flags, reason="")

    def slurmd(self) -> None:
        """Every running member registers (its record appears, idle, with the GRES of its
        `--conf`; drained when its `--conf` says State=DRAIN, as slurmctld makes it)."""
        for pod in self.pods.store.values():
            name = pod["metadata"]["labels"].get(m.SLURM_NODE_LABEL)
            if name and pod["status"].get("phase") == "Running" and name not in self.slurm.records:
                conf = pod["metadata"]["annotations"].get(m.SLURMD_CONF, "")
                self.slurm.register(
                    name,
                    address=f"10.64.0.{len(self.slurm.records) + 2}",
                    gres=tuple(gres_in_conf(conf)),
                    features=tuple(sorted(in_conf(conf))),
                )
                args = [a for c in pod["spec"].get("containers") or [] for a in c.get("args") or []]
                registered = args[args.index("--conf") + 1] if "--conf" in args[:-1] else ""
                drained = re.search(r'(?:^| )State=DRAIN Reason="([^"]*)"', registered)
                if drained:
                    self.slurm.drain_as_admin(name, drained.group(1))
