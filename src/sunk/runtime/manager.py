"""The manager: runs one component's informers, controllers and tasks, and decides when the
component may act (alone, or while it holds the Lease), in the spirit of
controller-runtime's manager.

A component registers what it runs and implements `Component`; the manager does the rest:
informers and background tasks from start to stop; then, for each term (a Lease held, or
the whole run without leader election), the component's term sources (pollers) and the
Lease's renewal, then, once the component says its first look is done, the workers. Every
task is supervised; only a lost Lease ends a term. The phase it is in is the one place
that says whether this replica acts, and what /readyz reports.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from functools import partial
from typing import Protocol

from sunk import metrics
from sunk.kube.informer import Informer
from sunk.kube.leader import LeaderElector, LostLeadership
from sunk.runtime import tasks
from sunk.runtime.controller import Controller, work
from sunk.runtime.queue import WorkQueue

log = logging.getLogger(__name__)
Task = Callable[[], Awaitable[None]]


class Phase(enum.Enum):
    SYNCING = "syncing"  # the informers list for the first time
    FOLLOWING = "following"  # another replica holds the Lease
    STARTING_TERM = "starting-term"  # leading; the term's first look is not done yet
    ACTING = "acting"  # leading (or alone) with the workers running
    STOPPED = "stopped"


class Component(Protocol):
    """What a component tells the manager, and is told by it."""

    def term_starting(self) -> None:
        """A term begins: forget what the previous term listed (called before its sources run)."""
        ...

    async def term_ready(self) -> None:
        """Returns once the term's sources have had their first look (e.g. a first listing)."""
        ...

    def acting(self) -> None:
        """The workers are about to start: queue every key once."""
        ...

    async def leadership(self, leading: bool) -> None:
        """The Lease was taken or given up (e.g. label this Pod for a Service)."""
        ...


class Manager:
    def __init__(self, elector: LeaderElector | None = None) -> None:
        self.elector = elector
        self.informers: list[Informer] = []
        self._always: list[tuple[str, Task]] = []
        self._term_sources: list[tuple[str, Task]] = []
        self._controllers: list[tuple[Controller, WorkQueue, int, Callable[[str, BaseException], None]]] = []
        self.phase = Phase.SYNCING

    # -- what a component registers -----------------------------------------------------------
    def watch(self, informer: Informer) -> Informer:
        self.informers.append(informer)
        return informer

    def run_always(self, name: str, task: Task) -> None:
        """A task from start to stop, on every replica (a certificate reload, gauges)."""
        self._always.append((name, task))

    def run_while_leading(self, name: str, task: Task) -> None:
        """A source that only the acting replica runs (a Slurm poller)."""
        self._term_sources.append((name, task))

    def control(
        self,
        controller: Controller,
        queue: WorkQueue,
        *,
        workers: int = 1,
        on_error: Callable[[str, BaseException], None] = lambda _key, _err: None,
    ) -> None:
        """Workers draining `queue` into `controller` while acting."""
        self._controllers.append((controller, queue, workers, on_error))

    # -- what it reports -------------------------------------------------------------------------
    @property
    def is_acting(self) -> bool:
        return self.phase is Phase.ACTING

    @property
    def is_leading(self) -> bool:
        return self.phase in (Phase.STARTING_TERM, Phase.ACTING)

    def not_ready(self) -> str | None:
        """Why the caches cannot be used yet, or None."""
        unsynced = [i.name for i in self.informers if not i.synced.is_set()]
        return f"caches not synced: {', '.join(unsynced)}" if unsynced else None

    def _enter(self, phase: Phase) -> None:
        self.phase = phase
        metrics.LEADER.set(1 if phase is Phase.ACTING else 0)

    # -- running ---------------------------------------------------------------------------------
    async def run(self, component: Component) -> None:
        background = [tasks.start(i.name, i.run) for i in self.informers]
        background += [tasks.start(name, task) for name, task in self._always]
        try:
            log.info("waiting for the Kubernetes caches")
            await asyncio.gather(*(i.synced.wait() for i in self.informers))
            log.info("caches synced: %s", ", ".join(f"{i.name} {len(i.store)}" for i in self.informers))
            if self.elector is None:
                await self._run_term(component)
            while self.elector is not None:
                self._enter(Phase.FOLLOWING)
                await component.leadership(False)
                log.info("waiting to become leader (Lease %s)", self.elector.name)
                await self.elector.acquire()
                await component.leadership(True)
                try:
                    await self._run_term(component)
                except LostLeadership as err:
                    log.warning("stopped acting: %s; waiting to lead again", err)
        finally:
            self._enter(Phase.STOPPED)
            await _stop(background)
            if self.elector is not None:
                # Hand over at once (a rolling update), not after the Lease runs out.
                await self.elector.release()

    async def _run_term(self, component: Component) -> None:
        """Act until the Lease is lost (or for ever, without leader election)."""
        self._enter(Phase.STARTING_TERM)
        component.term_starting()
        running = [tasks.start(name, task) for name, task in self._term_sources]
        if self.elector is not None:
            running.append(asyncio.create_task(self.elector.keep(), name="lease"))
        try:
            ready = asyncio.create_task(component.term_ready())
            done, _ = await asyncio.wait([ready, *running], return_when=asyncio.FIRST_COMPLETED)
            if ready not in done:
                ready.cancel()
                for task in done:
                    task.result()  # the Lease was lost before the first look
            component.acting()
            self._enter(Phase.ACTING)
            for controller, queue, workers, on_error in self._controllers:
                running += [
                    tasks.start(
                        f"{controller.name}-worker-{i}", partial(work, queue, controller, on_error=on_error)
                    )
                    for i in range(workers)
                ]
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            self._enter(Phase.STOPPED if self.elector is None else Phase.FOLLOWING)
            await _stop(running)


async def _stop(running: list[asyncio.Task[None]]) -> None:
    for task in running:
        task.cancel()
    with suppress(asyncio.CancelledError):
        await asyncio.gather(*running, return_exceptions=True)
