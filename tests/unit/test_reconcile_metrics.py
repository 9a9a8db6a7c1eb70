"""The worker loop counts and times every pass of every controller (sunk_reconcile_*)."""

from __future__ import annotations

import asyncio
import time

from sunk.metrics import REGISTRY
from sunk.runtime.controller import DONE, Outcome, work
from sunk.runtime.queue import WorkQueue


class FailsThenWorks:
    def __init__(self, name: str, failures: int) -> None:
        self.name = name
        self.failures = failures
        self.passes = 0
        self.succeeded = asyncio.Event()
        self.tried = asyncio.Event()

    async def reconcile(self, key: str) -> Outcome:
        self.passes += 1
        self.tried.set()
        if self.passes <= self.failures:
            raise ConnectionResetError("peer reset")
        self.succeeded.set()
        return DONE


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def run_until_success(controller: FailsThenWorks) -> None:
    queue = WorkQueue(base_delay=0.01)
    worker = asyncio.create_task(work(queue, controller))
    queue.add("a")
    await asyncio.wait_for(controller.succeeded.wait(), 2)
    worker.cancel()


async def test_passes_are_counted_by_controller_and_result() -> None:
    """Catches failed passes counted as successes (a wedged controller would look healthy)."""
    await run_until_success(FailsThenWorks("counted", failures=2))
    assert value("sunk_reconcile_total", controller="counted", result="error") == 2
    assert value("sunk_reconcile_total", controller="counted", result="success") == 1


async def test_every_pass_is_timed_failed_ones_too() -> None:
    """Catches a failing pass (often the slow one: a timeout) left out of the durations."""
    await run_until_success(FailsThenWorks("timed", failures=1))
    assert value("sunk_reconcile_duration_seconds_count", controller="timed") == 2


async def test_the_last_success_is_stamped_and_a_failure_does_not_move_it() -> None:
    """Catches the stamp moved by any pass: a controller failing for hours would look fresh."""
    before = time.time()
    await run_until_success(FailsThenWorks("stamped", failures=0))
    stamp = value("sunk_reconcile_last_success_timestamp_seconds", controller="stamped")
    assert stamp >= before
    queue = WorkQueue(base_delay=10)
    failing = FailsThenWorks("stamped", failures=99)
    worker = asyncio.create_task(work(queue, failing))
    queue.add("a")
    await asyncio.wait_for(failing.tried.wait(), 2)
    await asyncio.sleep(0)  # the worker counts the failure after the pass raised
    worker.cancel()
    assert value("sunk_reconcile_total", controller="stamped", result="error") == 1
    assert value("sunk_reconcile_last_success_timestamp_seconds", controller="stamped") == stamp
