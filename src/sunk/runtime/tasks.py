"""Background tasks that must never take the process down.

A poller or a gauge that raises is a bug, or a failure nobody foresaw (an API server
refusing connections mid-call). Either way the process must go on scheduling: the task is
logged with its traceback and started again after a back-off. Only cancellation ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from sunk.metrics import TASK_RESTARTS

log = logging.getLogger(__name__)
RESTART_FIRST_S = 0.5
RESTART_MAX_S = 10.0


async def supervised(
    name: str,
    run: Callable[[], Awaitable[None]],
    *,
    first_delay: float = RESTART_FIRST_S,
    max_delay: float = RESTART_MAX_S,
) -> None:
    """Run `run()` until cancelled, starting it again whenever it fails or returns."""
    delay = first_delay
    while True:
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("task %s failed; starting it again in %.1fs", name, delay)
        else:
            log.warning("task %s returned; starting it again in %.1fs", name, delay)
        TASK_RESTARTS.labels(name).inc()
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay)


def start(name: str, run: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
    """A supervised task, named for logs and debugging."""
    return asyncio.create_task(supervised(name, run), name=name)
