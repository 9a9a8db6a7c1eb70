"""A small world for unit tests of the scheduler's controllers: fakes of Kubernetes and
Slurm, the caches the controllers read, and the controllers built on them as the scheduler
builds them."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from sunk.kube.events import Recorder
from sunk.runtime.controller import Outcome
from sunk.scheduler import controllers
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.config import Config
from sunk.scheduler.hooks.auth import HookCredentials
from sunk.scheduler.pods import PodStore
from sunk.scheduler.policy import PERMISSIVE, PolicyFile
from sunk.scheduler.translate import gang
from tests.fakes.clock import FakeClock
from tests.fakes.ports import FakeKube, MemoryCache
from tests.fakes.slurm import FakeSlurm

Json = dict[str, Any]
SCHEDULER = "sunk"
PREFIX = "sunk.coreweave.com/"
NAMESPACE = "ns"
SLURM_NODE_LABEL = "slurm.node"


def pod(
    name: str = "web",
    *,
    uid: str | None = None,
    cpu: str = "1",
    memory: str = "1Gi",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Json:
    """A Pod of this scheduler, valid for Slurm unless told otherwise."""
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid or f"uid-{name}",
            "annotations": dict(annotations or {}),
            "labels": dict(labels or {}),
            "creationTimestamp": "2026-11-24T00:00:00Z",
            "resourceVersion": "1",
        },
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def node(
    name: str, *, cordoned: bool = False, ready: bool = True, allocatable: dict[str, str] | None = None
) -> Json:
    """A Node; without `allocatable` its room is not judged (`sunk.kube.noderoom`)."""
    status: Json = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if allocatable is not None:
        status["allocatable"] = dict(allocatable)
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"kubernetes.io/hostname": name}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": status,
    }


def slurmd_pod(slurm_node: str, on: str, *, requests: dict[str, str] | None = None) -> Json:
    """A NodeSet's member; `requests`: its slurmd container's (none by default)."""
    return {
        "metadata": {
            "name": f"slurmd-{slurm_node}",
            "namespace": "slurm",
            "uid": f"uid-slurmd-{slurm_node}",
            "labels": {SLURM_NODE_LABEL: slurm_node},
        },
        "spec": {
            "nodeName": on,
            "containers": [{"name": "slurmd", "resources": {"requests": dict(requests or {})}}],
        },
        "status": {"phase": "Running"},
    }


@dataclass
class World:
    """Kubernetes and Slurm in memory, and the scheduler's controllers on them."""

    placement: str = "slurm"
    refuse_static_cpu: bool = False
    drain_cordoned: bool = False
    kill_wait_s: int = 30
    clock: FakeClock = field(default_factory=FakeClock)
    kube: FakeKube = field(default_factory=FakeKube)
    slurm: FakeSlurm = field(default_factory=FakeSlurm)
    nodes: MemoryCache = field(default_factory=MemoryCache)
    slurmd: MemoryCache = field(default_factory=MemoryCache)

    def __post_init__(self) -> None:
        # One time for the whole world: the fakes stamp what they write on its clock too.
        self.kube.clock = self.slurm.clock = self.clock
        self.pods = PodStore({NAMESPACE: self.kube.pods})
        config = self._config()
        self.cluster = ClusterView(self.nodes, self.slurmd, config.slurm_node_label)
        self.index = controllers.job_index(self.slurm, config, self.clock)
        self.recorder = Recorder(self.kube, SCHEDULER, "test-replica")
        self.settings = controllers.settings(config)
        built = controllers.build(
            config,
            kube=self.kube,
            slurm=self.slurm,
            pods=self.pods,
            cluster=self.cluster,
            index=self.index,
            recorder=self.recorder,
            script="#!/bin/sh\n",
            hooks=lambda: HookCredentials("https://hooks.test", b"s" * 32),
            policy=PolicyFile(None, PERMISSIVE),  # the tests' Pods name any identity
            clock=self.clock,
        )
        self.pod_controller = built.pods
        self.node_queue = built.node_queue
        self.node_controller = built.slurm_nodes
        self.node_poller = built.node_poller

    def _config(self) -> Config:
        """The scheduler's settings for this world, as its flags would give them."""
        return Config(
            scheduler_name=SCHEDULER,
            slurm_api_base="http://slurmrestd.test",
            slurm_kill_wait_s=self.kill_wait_s,
            watch_namespaces=(NAMESPACE,),
            annotation_prefix=PREFIX,
            slurm_node_label=SLURM_NODE_LABEL,
            placement=self.placement,
            static_cpu_pods="refuse" if self.refuse_static_cpu else "warn",
            drain_cordoned_nodes=self.drain_cordoned,
        )

    # -- the cluster ------------------------------------------------------------------------
    def add_node(
        self,
        name: str,
        *,
        slurm_node: str | None = None,
        cordoned: bool = False,
        ready: bool = True,
        allocatable: dict[str, str] | None = None,
        slurmd_requests: dict[str, str] | None = None,
    ) -> None:
        """A Node hosting the slurmd Pod of Slurm node `slurm_node` (default: the same name)."""
        slurm_node = slurm_node or name
        self.nodes.put(node(name, cordoned=cordoned, ready=ready, allocatable=allocatable))
        self.slurmd.put(slurmd_pod(slurm_node, name, requests=slurmd_requests))
        self.slurm.add_node(slurm_node)

    def cordon(self, name: str, cordoned: bool = True) -> None:
        found = copy.deepcopy(self.nodes.store[name])
        found["spec"]["unschedulable"] = cordoned
        self.nodes.put(found)

    def add_podgroup(self, name: str, min_member: int, timeout_s: int | None = None) -> None:
        """A scheduling.x-k8s.io PodGroup, as the API server serves it."""
        spec: Json = {"minMember": min_member}
        if timeout_s is not None:
            spec["scheduleTimeoutSeconds"] = timeout_s
        self.kube.objects[gang.path(NAMESPACE, name)] = {
            "apiVersion": f"{gang.API_GROUP}/{gang.API_VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": spec,
        }

    def restarted(self) -> World:
        """The scheduler after a restart: the same Kubernetes and Slurm, nothing remembered."""
        return World(
            placement=self.placement,
            refuse_static_cpu=self.refuse_static_cpu,
            drain_cordoned=self.drain_cordoned,
            kill_wait_s=self.kill_wait_s,
            clock=self.clock,
            kube=self.kube,
            slurm=self.slurm,
            nodes=self.nodes,
            slurmd=self.slurmd,
        )

    def finish(self, key: str, phase: str = "Succeeded") -> None:
        """The Pod's containers end on their own."""
        found = copy.deepcopy(self.pod(key))
        found["status"]["phase"] = phase
        self.kube.pods.put(found)

    def remove(self, key: str) -> None:
        """The Pod is gone from the API server."""
        del self.kube.pods.store[key]

    def create(self, manifest: Json) -> str:
        self.kube.pods.put(copy.deepcopy(manifest))
        return f"{manifest['metadata']['namespace']}/{manifest['metadata']['name']}"

    def pod(self, key: str) -> Json:
        found = self.kube.pods.get(key)
        assert found is not None, f"Pod {key} is gone"
        return found

    def job_id(self, key: str) -> int | None:
        raw = (self.pod(key)["metadata"].get("annotations") or {}).get(PREFIX + "job-id")
        return int(raw) if raw else None

    def condition(self, key: str) -> Json | None:
        for condition in self.pod(key).get("status", {}).get("conditions", []):
            if condition["type"] == "PodScheduled":
                return dict(condition)
        return None

    # -- the sources, then one pass ---------------------------------------------------------
    async def list_jobs(self) -> None:
        """A full job listing, as the job poller takes it in."""
        self.index.replace(await self.slurm.jobs(), self.clock.monotonic())
        if not self.index.synced.is_set():  # as the scheduler does once a term's first listing is in
            self.index.note_ids_of_pods((pod for _, pod in self.pods.items()), PREFIX)
        self.index.synced.set()

    async def list_nodes(self) -> None:
        await self.node_poller.list_once()

    async def reconcile(self, key: str, *, listing: bool = True) -> Outcome:
        """One pass of the Pod controller, after a fresh job and node listing (`listing`)."""
        if listing:
            await self.list_jobs()
            await self.list_nodes()
        return await self.pod_controller.reconcile(key)

    async def reconcile_nodes(self) -> dict[str, Outcome]:
        """List Slurm's nodes, then one pass of the Slurm-node controller for each."""
        await self.list_nodes()
        outcomes = {}
        while len(self.node_queue):
            key = str(await self.node_queue.get())
            outcomes[key] = await self.node_controller.reconcile(key)
            self.node_queue.done(key)
        return outcomes
