"""The Slurm-node controller: one Slurm node at a time, drains that follow cordons and one
Event per drain (sunk.scheduler.decide.slurm_node decides; this module gathers and carries out).

The poller is its source: it lists Slurm's nodes every few seconds, records the listing in
the cluster view (which placement reads too) and enqueues every node listed. Nothing here
writes from the poller itself: a write that fails (slurmrestd or the API server away) is
retried by the queue, and never ends a task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sunk.kube import events as ev
from sunk.kube.client import KubeError
from sunk.runtime.actions import Drain, Resume
from sunk.runtime.controller import DONE, Outcome, after
from sunk.runtime.queue import WorkQueue
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.decide.drains import out_of_use
from sunk.scheduler.decide.slurm_node import (
    DrainEvent,
    JobOnNode,
    Known,
    SlurmNodeFacts,
    event_key,
    for_slurm_node,
)
from sunk.scheduler.jobs import JobIndex
from sunk.scheduler.pods import PodStore
from sunk.scheduler.ports import KubePort, SlurmPort
from sunk.slurm.errors import SlurmError

log = logging.getLogger(__name__)
SLURM_NODES_EVERY_S = 5.0


class SlurmNodePoller:
    """Lists Slurm's nodes; the one writer of the cluster view's node listing."""

    def __init__(
        self,
        slurm: SlurmPort,
        cluster: ClusterView,
        queue: WorkQueue,
        *,
        interval: float = SLURM_NODES_EVERY_S,
        on_gone: Callable[[set[str]], None] = lambda _names: None,
    ) -> None:
        self._slurm = slurm
        self._cluster = cluster
        self._queue = queue
        self._interval = interval
        self._on_gone = on_gone
        # Set once a term has listed Slurm's nodes: no Pod is placed before (the nodes a
        # job may leave out, --placement=pack, come from that listing).
        self.listed = asyncio.Event()

    async def list_once(self) -> None:
        try:
            nodes = await self._slurm.nodes()
        except SlurmError as err:
            log.warning("cannot list Slurm nodes: %s", err)
            return
        gone = self._cluster.slurm_nodes - {n.name for n in nodes}
        self._cluster.record_slurm_nodes(nodes)
        self.listed.set()
        if gone:
            self._on_gone(gone)
        for node in nodes:
            self._queue.add(node.name)

    async def run(self) -> None:
        while True:
            await self.list_once()
            await asyncio.sleep(self._interval)


class SlurmNodeController:
    """Drains that follow cordons, and the Events that explain every drain.

    Whether a drain was explained already is read from state that outlives this process,
    so a restarted scheduler neither misses a drain made while it was down nor explains
    one twice, without asking the API server anything more than before:

    - on a Pod, its `drain-explained` annotation names the last drain Event recorded on it
      (written right after the Event). The Pod cache holds it, so reading it costs nothing,
      and unlike the Event it does not expire (the API server drops Events after an hour,
      while a drain may last days);
    - on a Node (which this scheduler may not write) and on a Pod already gone, the
      Event's name, derived from the drain: recording it again is refused by name.

    What this process recorded, or read in those annotations, is also kept in memory
    (`_explained`), so a cache that has not yet shown an annotation, or a Pod that went with
    its annotation, never costs a second write.
    """

    name = "slurm-nodes"

    def __init__(
        self,
        *,
        slurm: SlurmPort,
        kube: KubePort,
        cluster: ClusterView,
        pods: PodStore,
        index: JobIndex,
        recorder: ev.Recorder,
        scheduler: str,
        prefix: str,
        drain_cordoned: bool,
        watched: frozenset[str],
    ) -> None:
        self.slurm = slurm
        self.kube = kube
        self.cluster = cluster
        self.pods = pods
        self.index = index
        self.recorder = recorder
        self.scheduler = scheduler
        self.mark_key = prefix + "drain-explained"
        self.drain_cordoned = drain_cordoned
        self.watched = watched
        # Slurm node → (the drain in force, the Events recorded for it: namespace/name).
        self._explained: dict[str, tuple[str, frozenset[str]]] = {}

    def forget(self, names: set[str]) -> None:
        """Slurm no longer lists these nodes."""
        for name in names:
            self._explained.pop(name, None)

    def gather(self, name: str) -> SlurmNodeFacts | None:
        node = self.cluster.slurm_node(name)
        if node is None:
            return None
        hosts = frozenset(self.cluster.host_map().get(name, ()))
        host = self.cluster.node(next(iter(hosts))) if len(hosts) == 1 else None
        return SlurmNodeFacts(
            node=node,
            hosts=hosts,
            host=host,
            scheduler=self.scheduler,
            drain_cordoned=self.drain_cordoned,
            watched=self.watched,
            explained=self._explained.get(name),
            jobs=self._jobs_on(name) if out_of_use(node) else (),
        )

    def _jobs_on(self, name: str) -> tuple[JobOnNode, ...]:
        found = []
        for ref, job in self.index.items():
            if name not in job.nodes:
                continue
            pod = self.pods.get(f"{ref.namespace}/{ref.name}")
            meta = (pod or {}).get("metadata") or {}
            present = pod is not None and meta.get("uid") == ref.uid
            marked = (meta.get("annotations") or {}).get(self.mark_key) if present else None
            found.append(JobOnNode(ref, job, present, marked))
        return tuple(found)

    async def reconcile(self, key: str) -> Outcome:
        facts = self.gather(key)
        if facts is None:
            self._explained.pop(key, None)
            return DONE
        actions = for_slurm_node(facts)
        if any(isinstance(action, Drain | Resume) for action in actions):
            # A drain or resume changes Slurm: decided again on a fresh read of the node, so
            # a listing a few seconds old never overrides a drain an administrator just made.
            fresh = await self.slurm.node(key)
            if fresh is None:
                return DONE
            actions = for_slurm_node(replace(facts, node=fresh))
        outcome = DONE
        for action in actions:
            if isinstance(action, Drain):
                problem = await self.slurm.drain(action.node, action.reason)
                if problem:
                    log.warning("%s", problem)
                    outcome = after(SLURM_NODES_EVERY_S)
            elif isinstance(action, Resume):
                problem = await self.slurm.resume(action.node)
                if problem:
                    log.warning("%s", problem)
                    outcome = after(SLURM_NODES_EVERY_S)
                else:
                    log.info("resumed Slurm node %s: Node %s is no longer cordoned", action.node, action.host)
            elif isinstance(action, Known):
                self._remember(key, action.drain, action.keys)
            elif isinstance(action, DrainEvent):
                if await self._explain(action):
                    self._remember(key, action.drain, frozenset({event_key(action)}))
                else:
                    outcome = after(SLURM_NODES_EVERY_S)
        return outcome

    def _remember(self, key: str, drain: str, events: frozenset[str]) -> None:
        known, done = self._explained.get(key, (drain, frozenset()))
        self._explained[key] = (drain, (done if known == drain else frozenset()) | events)

    async def _explain(self, action: DrainEvent) -> bool:
        log.warning("%s", action.note)
        regarding: dict[str, Any] = {"apiVersion": "v1", "kind": action.kind, "name": action.object_name}
        if action.namespace is not None:
            found = self.pods.get(f"{action.namespace}/{action.object_name}") or {}
            regarding["namespace"] = action.namespace
        else:
            found = self.cluster.node(action.object_name) or {}
        regarding["uid"] = action.uid or (found.get("metadata") or {}).get("uid")
        if not await self.recorder.event_on(
            regarding, ev.NODE_DRAINED, action.note, warning=True, name=action.name
        ):
            return False
        if not (action.mark and action.namespace and action.uid):
            return True
        try:
            await self.kube.patch_pod(
                action.namespace,
                action.object_name,
                action.uid,
                {"metadata": {"annotations": {self.mark_key: action.name}}},
            )
        except KubeError as err:
            if err.not_found or err.conflict:  # gone, or another Pod of that name: nothing to mark
                return True
            log.warning(
                "could not mark Pod %s/%s as told of its drain: %s", action.namespace, action.object_name, err
            )
            return False
        return True
