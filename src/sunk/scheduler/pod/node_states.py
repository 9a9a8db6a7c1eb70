"""Slurm's view of each node, as the binding check reads it (R4.3): a node Slurm shows down
or draining gets no Pod, however the Node looks to Kubernetes.

A view is read from Slurm at most every NODE_STATE_TTL_S per node, so a burst of bindings
on one node shares one read; and only one read of a node is under way at a time, so the
bindings that find the view stale together wait for that one read instead of each sending
its own (issue #55: they queued for slurmrestd's connections behind each other, p99 0.7 s).
A view is stamped with when its read was asked for, never when the answer came: it is at
least as fresh as that, so a binding that joins a read under way gets a view no older than
the TTL allows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sunk.runtime.ports import Clock
from sunk.slurm.models import SlurmNode

# How old Slurm's view of a node may be when deciding a binding there.
NODE_STATE_TTL_S = 0.5
# How long a view no binding asked for again is kept.
KEEP_S = 60.0


class NodeStates:
    """Each node's view, read through `read` (one node's record, None when Slurm has none)."""

    def __init__(self, read: Callable[[str], Awaitable[SlurmNode | None]], clock: Clock) -> None:
        self._read = read
        self._clock = clock
        self._views: dict[str, tuple[float, SlurmNode | None]] = {}
        self._reading: dict[str, asyncio.Future[SlurmNode | None]] = {}

    async def get(self, name: str) -> SlurmNode | None:
        """The node's view, read now unless one younger than NODE_STATE_TTL_S is known or a
        read of it is under way. A read that fails raises to every binding waiting on it."""
        view = self._views.get(name)
        if view is not None and self._clock.monotonic() - view[0] <= NODE_STATE_TTL_S:
            return view[1]
        reading = self._reading.get(name)
        if reading is None:
            reading = asyncio.ensure_future(self._read_now(name))
            self._reading[name] = reading
        # A binding given up (its pass cancelled) must not cancel the read others wait on.
        return await asyncio.shield(reading)

    async def _read_now(self, name: str) -> SlurmNode | None:
        asked = self._clock.monotonic()
        try:
            node = await self._read(name)
        finally:
            del self._reading[name]
        self._views[name] = (asked, node)
        return node

    def prune(self) -> None:
        """Forget the views nobody asked for in KEEP_S."""
        now = self._clock.monotonic()
        for name in [n for n, (at, _) in self._views.items() if now - at > KEEP_S]:
            del self._views[name]
