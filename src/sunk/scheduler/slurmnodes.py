"""The Slurm-node controller: one Slurm node at a time, drains that follow cordons and one
Event per drain (sunk.decide.slurm_node decides; this module gathers and carries out).

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

from sunk.decide.slurm_node import Drain, Explain, Resume, SlurmNodeFacts, for_slurm_node
from sunk.kube import events as ev
from sunk.runtime.controller import DONE, Outcome, after
from sunk.runtime.ports import SlurmPort
from sunk.runtime.queue import WorkQueue
from sunk.scheduler.cluster import ClusterView
from sunk.scheduler.pods import PodStore
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
    name = "slurm-nodes"

    def __init__(
        self,
        *,
        slurm: SlurmPort,
        cluster: ClusterView,
        pods: PodStore,
        recorder: ev.Recorder,
        scheduler: str,
        drain_cordoned: bool,
        watched: frozenset[str],
    ) -> None:
        self.slurm = slurm
        self.cluster = cluster
        self.pods = pods
        self.recorder = recorder
        self.scheduler = scheduler
        self.drain_cordoned = drain_cordoned
        self.watched = watched
        # Slurm node → the drain Event this process recorded for it (its unique name): the
        # Event is not written twice; a restart writing it again is refused by name.
        self._explained: dict[str, str] = {}

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
        )

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
            elif isinstance(action, Explain):
                if await self._explain(action):
                    self._explained[key] = action.name
                else:
                    outcome = after(SLURM_NODES_EVERY_S)
        return outcome

    async def _explain(self, action: Explain) -> bool:
        log.warning("%s", action.note)
        regarding: dict[str, Any] = {"apiVersion": "v1", "kind": action.kind, "name": action.object_name}
        if action.namespace is not None:
            found = self.pods.get(f"{action.namespace}/{action.object_name}") or {}
            regarding["namespace"] = action.namespace
        else:
            found = self.cluster.node(action.object_name) or {}
        regarding["uid"] = (found.get("metadata") or {}).get("uid")
        return await self.recorder.event_on(
            regarding, ev.NODE_DRAINED, action.note, warning=True, name=action.name
        )
