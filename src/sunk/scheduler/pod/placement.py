"""Where a started job's Pod goes (R4.3, R4.4, R9.3): the strict check of the node Slurm
chose, under that node's lock, and the Pods being bound, which affinity and spread rules
and the kubelet's count of each Node's room count until the informer shows their binding.

This is the one owner of what binding remembers: the node locks, the bindings in flight
(kube-scheduler's "assume") and Slurm's view of each node (`node_states.NodeStates`: read
at most every NODE_STATE_TTL_S, one read of a node at a time, so a burst of bindings on
one node shares one read).

Room on a Node (`sunk.kube.noderoom`) is counted from what this process sees: the slurmd
Pods and this scheduler's own Pods (bound, or being bound), finished ones left out and
terminating ones counted, as the kubelet does. Pods of DaemonSets or other schedulers are
not in its caches, so they are not counted (docs/user-guide.md says so).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sunk.kube import noderoom
from sunk.runtime.ports import Clock
from sunk.scheduler.cluster import ClusterView, Room
from sunk.scheduler.decide import problems
from sunk.scheduler.decide.bind_plan import Choice
from sunk.scheduler.decide.pod_state import finished
from sunk.scheduler.pod.node_states import NodeStates
from sunk.scheduler.pod.room import Tallies
from sunk.scheduler.pods import PodStore
from sunk.scheduler.ports import SlurmPort
from sunk.scheduler.translate import Settings, translate
from sunk.slurm.models import SlurmJob

Json = dict[str, Any]
# How long a binding this process made counts for affinity rules before the informer shows it.
PLACING_TTL_S = 30.0


class Placement:
    def __init__(
        self, *, slurm: SlurmPort, cluster: ClusterView, pods: PodStore, settings: Settings, clock: Clock
    ) -> None:
        self.clock = clock
        self.slurm = slurm
        self.cluster = cluster
        self.pods = pods
        self.settings = settings
        self._node_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._rules_lock = asyncio.Lock()
        # Pod UID → (when, the Pod as bound), from the decision until the informer shows the
        # binding (or PLACING_TTL_S, should the Pod go first).
        self._placing: dict[str, tuple[float, Json]] = {}
        self._node_states = NodeStates(slurm.node, clock)
        # What the Pods on each Node hold in the kubelet's count: this scheduler's, the slurmd Pods.
        self._sums = Tallies(pods.items, cluster.slurmd_pods)

    async def choose(self, pod: Json, job: SlurmJob, company: list[tuple[str, Json]] | None = None) -> Choice:
        """The Node to bind `pod` to, or why not. Strict node locking: never a doubtful node
        or allocation. A Node chosen is counted as placed at once, before the informer shows
        the binding. A Node without room in the kubelet's count is never chosen: where the
        Pod would fit beside the slurmd Pods alone, other Pods hold the room for now and the
        Pod waits for it (`Choice.waits_on`); where it would not, the node is left out of its
        next job. `company`: (Node, Pod) of a group's members placed before `pod`, counted
        beside the slurmd Pods; a Node without room even so is remembered on the member."""
        if len(job.nodes) != 1:
            return Choice(None, f"Slurm allocated {len(job.nodes)} nodes, not one", True)
        slurm_node = job.nodes[0]
        translation = translate(pod, self.settings)
        wanted = translation.job
        short = (
            problems.allocation_problem(job, wanted.cpus, wanted.memory_mib, wanted.gres) if wanted else None
        )
        if short:
            return Choice(None, short, False)
        # The lock serialises the decision for one node (R4.3); the binding itself, a plain
        # API call, happens outside it so a burst of Pods on one node is not queued behind it.
        # A Pod with affinity or spread rules also takes one lock shared by all such Pods:
        # their rules span Nodes (a zone), and each must count the others' placements.
        state = await self._node_states.get(slurm_node)
        rules_apply = translation.pod_rules
        rules = self._rules_lock if rules_apply else contextlib.nullcontext()
        async with rules, self._node_locks[slurm_node]:
            # From the room check to `placing` nothing awaits: no other binding comes between.
            placed = self.placed(pod) if rules_apply else None
            target = self.cluster.target(slurm_node, pod, placed, room=self.room(pod))
            node_problem = problems.slurm_node_problem(slurm_node, state)
            problem = target.problem or node_problem
            if problem is not None or target.node is None:
                lasting = target.problem is None or target.lasting
                if not lasting and target.node is not None:
                    beside = self.room(pod, with_mine=False, beside=company or ()).shortfall(target.node)
                    if beside is None and node_problem is None:
                        name = target.node["metadata"]["name"]
                        return Choice(None, problem or "", False, waits_on=name)
                    lasting = company is not None and beside is not None
                return Choice(None, problem or "no Node", True, remember=lasting)
            node_name: str = target.node["metadata"]["name"]
            self.placing(pod, node_name)
        return Choice(node_name)

    def placing(self, pod: Json, node_name: str) -> None:
        """Count `pod` as placed on `node_name` from now on (affinity and spread rules, room)."""
        spec = pod.get("spec") or {}
        self._placing[pod["metadata"]["uid"]] = (
            self.clock.monotonic(),
            {**pod, "spec": {**spec, "nodeName": node_name}},
        )

    def forget(self, uid: str) -> None:
        """The binding of Pod `uid` failed: it no longer counts as placed."""
        self._placing.pop(uid, None)

    def excluded_for(self, pod: Json, pod_rules: bool) -> dict[str, str]:
        """The Slurm nodes the Pod's own constraints rule out, with why: those of the Node
        (`ClusterView.target`), and Nodes where it can never fit in the kubelet's count:
        where the slurmd Pods alone leave too little of the Node's allocatable. Only Pods
        with affinity or spread rules gather the Pods already placed.

        A Node this scheduler's own Pods fill for now is not ruled out: Slurm counts their
        jobs on the node as well, so the Pod's job waits in Slurm's queue for it (in line,
        able to preempt), and a binding the kubelet would refuse is held back by `choose`
        until those Pods are gone. `pod_rules`: the Pod has inter-Pod rules
        (`Translation.pod_rules`)."""
        placed = self.placed(pod) if pod_rules else None
        return self.cluster.excluded_for(pod, placed, room=self.room(pod, with_mine=False))

    def placed(self, pod: Json) -> list[Json]:
        """The Pods of this scheduler on a Node (or being bound to one), but `pod`: what its
        affinity and spread rules count. Terminating and finished Pods do not count."""
        uid = pod["metadata"].get("uid")
        placed: dict[str, Json] = {}
        for key, other in self.pods.items():
            if (other.get("spec") or {}).get("nodeName"):
                placed[other["metadata"].get("uid", key)] = other
        placed.update(self._in_flight())
        return [
            p
            for u, p in placed.items()
            if u != uid and not p["metadata"].get("deletionTimestamp") and not finished(p)
        ]

    def room(self, pod: Json, *, with_mine: bool = True, beside: Sequence[tuple[str, Json]] = ()) -> Room:
        """What `pod` asks of a Node and what each Node holds in the kubelet's count (for a
        binding: under its node's lock). `with_mine` False: the slurmd Pods alone, and the
        (Node, Pod) pairs of `beside`."""
        meta = pod["metadata"]
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        held = (
            self._sums.around(key, meta.get("uid", ""), self._in_flight())
            if with_mine
            else self._sums.beside(beside)
        )
        return Room(noderoom.requests_of(pod), held)

    def _in_flight(self) -> dict[str, Json]:
        """UID → each Pod being bound that the informer does not show on its Node yet (those
        it shows, those gone from it, and those older than PLACING_TTL_S are forgotten
        here). A Pod bound and then deleted before any room check looked again would
        otherwise hold its room on the Node for PLACING_TTL_S after it is gone."""
        now = self.clock.monotonic()
        for uid, (at, pod) in list(self._placing.items()):
            meta = pod["metadata"]
            shown = self.pods.get(f"{meta.get('namespace')}/{meta.get('name')}")
            gone = shown is None or shown["metadata"].get("uid") != uid
            on_node = not gone and bool(((shown or {}).get("spec") or {}).get("nodeName"))
            if gone or on_node or now - at > PLACING_TTL_S:
                del self._placing[uid]
        return {uid: pod for uid, (_, pod) in self._placing.items()}

    def prune(self) -> None:
        now = self.clock.monotonic()
        self._node_states.prune()
        for node in [n for n, lock in self._node_locks.items() if not lock.locked()]:
            del self._node_locks[node]
        for uid in [u for u, (at, _) in self._placing.items() if now - at > PLACING_TTL_S]:
            del self._placing[uid]
