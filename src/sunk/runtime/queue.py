"""A work queue of keys (a Pod, a Slurm node), in the spirit of client-go's: a key is
queued at most once, never handed to two workers at the same time, re-queued if it changed
while being worked on, and retried with a per-key exponential backoff after failures."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable


class WorkQueue:
    def __init__(self, *, base_delay: float = 0.05, max_delay: float = 30.0) -> None:
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._queued: set[Hashable] = set()
        self._active: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._base_delay = base_delay
        self._max_delay = max_delay

    def __len__(self) -> int:
        return len(self._queued)

    def waiting(self) -> int:
        """Keys due later (a backoff after a failure, or a check set for later) and not queued
        now: what kube-scheduler would call its backoff queue."""
        return len(self._timers.keys() - self._queued)

    def add(self, key: Hashable) -> None:
        if key in self._active:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        """Add later; an earlier pending timer for the key wins."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        existing = self._timers.get(key)
        due = loop.time() + delay
        if existing is not None and existing.when() <= due:
            return
        if existing is not None:
            existing.cancel()
        self._timers[key] = loop.call_at(due, self._fire, key)

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def retry(self, key: Hashable) -> float:
        """Add with backoff after a failure; returns the delay chosen."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay: float = min(self._base_delay * 2.0**failures, self._max_delay)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        """The key succeeded: its next failure starts the backoff afresh."""
        self._failures.pop(key, None)

    async def get(self) -> Hashable:
        key = await self._queue.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: Hashable) -> None:
        self._active.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)
