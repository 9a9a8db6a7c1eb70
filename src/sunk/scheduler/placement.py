"""Where a started job's Pod goes (R4.3, R4.4, R9.3): the strict check of the node Slurm
chose, under that node's lock, and the Pods being bound, which affinity and spread rules
count until the informer shows their binding.

This is the one owner of what binding remembers: the node locks, the bindings in flight
(kube-scheduler's "assume") and Slurm's view of each node, read at most every
NODE_STATE_TTL_S so a burst of bindings on one node shares one read.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from typing import Any

from sunk.scheduler import decide
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.decide import finished
from sunk.scheduler.pods import PodStore
from sunk.scheduler.ports import SlurmPort
from sunk.scheduler.translate import Settings, podaffinity, translate
from sunk.slurm.models import SlurmJob, SlurmNode

Json = dict[str, Any]
# How old Slurm's view of a node may be when deciding a binding there.
NODE_STATE_TTL_S = 0.5
# How long a binding this process made counts for affinity rules before the informer shows it.
PLACING_TTL_S = 30.0


class Placement:
    def __init__(self, *, slurm: SlurmPort, cluster: ClusterView, pods: PodStore, settings: Settings) -> None:
        self.slurm = slurm
        self.cluster = cluster
        self.pods = pods
        self.settings = settings
        self._node_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._rules_lock = asyncio.Lock()
        # Pod UID → (when, the Pod as bound), from the decision until the informer shows the
        # binding (or PLACING_TTL_S, should the Pod go first).
        self._placing: dict[str, tuple[float, Json]] = {}
        self._node_states: dict[str, tuple[float, SlurmNode | None]] = {}

    async def choose(self, pod: Json, job: SlurmJob) -> tuple[str | None, str, bool]:
        """(the Node to bind `pod` to, "", _) or (None, why not, whether the node is the
        problem). Strict node locking: never a doubtful node or allocation. A Node chosen is
        counted as placed at once, before the informer shows the binding."""
        if len(job.nodes) != 1:
            return None, f"Slurm allocated {len(job.nodes)} nodes, not one", True
        slurm_node = job.nodes[0]
        wanted = translate(pod, self.settings).job
        short = (
            decide.allocation_problem(job, wanted.cpus, wanted.memory_mib, wanted.gres) if wanted else None
        )
        if short:
            return None, short, False
        # The lock serialises the decision for one node (R4.3); the binding itself, a plain
        # API call, happens outside it so a burst of Pods on one node is not queued behind it.
        # A Pod with affinity or spread rules also takes one lock shared by all such Pods:
        # their rules span Nodes (a zone), and each must count the others' placements.
        state = await self._slurm_node_state(slurm_node)
        rules_apply = podaffinity.has_rules(pod)
        rules = self._rules_lock if rules_apply else contextlib.nullcontext()
        async with rules, self._node_locks[slurm_node]:
            target = self.cluster.target(slurm_node, pod, self.placed(pod) if rules_apply else [])
            problem = target.problem or decide.slurm_node_problem(slurm_node, state)
            if problem is not None or target.node is None:
                return None, problem or "no Node", True
            node_name: str = target.node["metadata"]["name"]
            self.placing(pod, node_name)
        return node_name, "", False

    def placing(self, pod: Json, node_name: str) -> None:
        """Count `pod` as placed on `node_name` from now on (affinity and spread rules)."""
        spec = pod.get("spec") or {}
        self._placing[pod["metadata"]["uid"]] = (
            time.monotonic(),
            {**pod, "spec": {**spec, "nodeName": node_name}},
        )

    def forget(self, uid: str) -> None:
        """The binding of Pod `uid` failed: it no longer counts as placed."""
        self._placing.pop(uid, None)

    def excluded_for(self, pod: Json) -> dict[str, str]:
        """The Slurm nodes the Pod's own constraints rule out, with why. Only Pods with
        affinity or spread rules gather the Pods already placed."""
        return self.cluster.excluded_for(pod, self.placed(pod) if podaffinity.has_rules(pod) else [])

    def placed(self, pod: Json) -> list[Json]:
        """The Pods of this scheduler on a Node (or being bound to one), but `pod`: what its
        affinity and spread rules count. Terminating and finished Pods do not count."""
        uid = pod["metadata"].get("uid")
        placed: dict[str, Json] = {}
        for key in self.pods.all_keys():
            other = self.pods.get(key)
            if other is None or not (other.get("spec") or {}).get("nodeName"):
                continue
            placed[other["metadata"].get("uid", key)] = other
        now = time.monotonic()
        for other_uid in [
            u for u, (at, _) in self._placing.items() if u in placed or now - at > PLACING_TTL_S
        ]:
            del self._placing[other_uid]  # the informer shows it now (or it went meanwhile)
        placed.update({u: p for u, (_, p) in self._placing.items()})
        return [
            p
            for u, p in placed.items()
            if u != uid and not p["metadata"].get("deletionTimestamp") and not finished(p)
        ]

    async def _slurm_node_state(self, slurm_node: str) -> SlurmNode | None:
        """Slurm's own view of the node, read at most every NODE_STATE_TTL_S per node:
        every binding in a burst shares one fresh read."""
        cached = self._node_states.get(slurm_node)
        now = time.monotonic()
        if cached is None or now - cached[0] > NODE_STATE_TTL_S:
            cached = (now, await self.slurm.node(slurm_node))
            self._node_states[slurm_node] = cached
        return cached[1]

    def prune(self) -> None:
        now = time.monotonic()
        for node in [n for n, (at, _) in self._node_states.items() if now - at > 60]:
            del self._node_states[node]
        for node in [n for n, lock in self._node_locks.items() if not lock.locked()]:
            del self._node_locks[node]
        for uid in [u for u, (at, _) in self._placing.items() if now - at > PLACING_TTL_S]:
            del self._placing[uid]
