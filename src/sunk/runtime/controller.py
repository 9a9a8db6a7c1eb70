"""The shape of a controller, and the worker loop that drives one from a work queue."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

from sunk.metrics import RECONCILE_LAST_SUCCESS, RECONCILE_SECONDS, RECONCILES
from sunk.runtime.queue import WorkQueue

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What the worker does with a key after a pass: look again after `requeue_after`
    seconds, or (None) only when an event says something changed."""

    requeue_after: float | None = None

    def merge(self, other: Outcome) -> Outcome:
        """Two parts of one pass each asked for a re-check: the sooner one wins."""
        times = [t for t in (self.requeue_after, other.requeue_after) if t is not None]
        return Outcome(min(times) if times else None)


DONE = Outcome()


def after(seconds: float) -> Outcome:
    return Outcome(requeue_after=seconds)


class Controller(Protocol):
    """One kind of object kept right: `reconcile(key)` takes at most one step for the key."""

    name: str

    async def reconcile(self, key: str) -> Outcome: ...


async def work(
    queue: WorkQueue,
    controller: Controller,
    *,
    on_error: Callable[[str, BaseException], None] = lambda _key, _err: None,
) -> None:
    """Take keys from `queue` for ever; a failed pass is retried with the key's back-off.
    An exception from a pass is never fatal: the key waits and the worker goes on. Every
    pass is counted by result and timed (sunk_reconcile_*), so both components' controllers
    show whether they work without each counting for itself."""
    name = controller.name
    succeeded, failed = RECONCILES.labels(name, "success"), RECONCILES.labels(name, "error")
    seconds, last_success = RECONCILE_SECONDS.labels(name), RECONCILE_LAST_SUCCESS.labels(name)
    while True:
        key: Hashable = await queue.get()
        started = time.perf_counter()
        try:
            outcome = await controller.reconcile(str(key))
        except asyncio.CancelledError:
            raise
        except Exception as err:
            failed.inc()
            seconds.observe(time.perf_counter() - started)
            on_error(str(key), err)
            delay = queue.retry(key)
            log.warning(
                "%s: reconcile %s failed (%s: %s); retrying in %.2fs",
                controller.name,
                key,
                type(err).__name__,
                err,
                delay,
            )
        else:
            succeeded.inc()
            seconds.observe(time.perf_counter() - started)
            last_success.set(time.time())
            queue.forget(key)
            if outcome.requeue_after is not None:
                queue.add_after(key, outcome.requeue_after)
        finally:
            queue.done(key)
