"""The controller runtime: work queue, worker loop, supervised tasks, transport errors."""

from __future__ import annotations

import asyncio
import socket

import pytest
from kubernetes_asyncio import client as k8s

from sunk.kube.client import KubeClient, KubeError
from sunk.metrics import REGISTRY
from sunk.runtime.controller import DONE, Outcome, after, work
from sunk.runtime.manager import Manager, Phase
from sunk.runtime.queue import WorkQueue
from sunk.runtime.tasks import supervised


async def within(seconds: float, condition: asyncio.Event) -> None:
    await asyncio.wait_for(condition.wait(), seconds)


def test_outcomes_merged_keep_the_sooner_recheck() -> None:
    assert after(5).merge(after(1)) == after(1)
    assert DONE.merge(after(5)) == after(5)
    assert after(2).merge(DONE) == after(2)
    assert DONE.merge(DONE) == DONE


async def test_a_key_added_twice_is_queued_once() -> None:
    queue = WorkQueue()
    queue.add("a")
    queue.add("a")
    assert len(queue) == 1


async def test_a_key_is_never_handed_to_two_workers_and_comes_back_if_it_changed_meanwhile() -> None:
    queue = WorkQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")  # changed while being worked on
    assert len(queue) == 0
    queue.done(key)
    assert len(queue) == 1


async def test_the_sooner_of_two_delayed_adds_wins() -> None:
    queue = WorkQueue()
    queue.add_after("a", 60)
    queue.add_after("a", 0.01)
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_failures_back_off_exponentially_and_success_resets_them() -> None:
    queue = WorkQueue(base_delay=0.1, max_delay=0.3)
    assert [queue.retry("a") for _ in range(4)] == [0.1, 0.2, 0.3, 0.3]
    queue.forget("a")
    assert queue.retry("a") == 0.1


class Flaky:
    name = "flaky"

    def __init__(self, failures: int, outcome: Outcome = DONE) -> None:
        self.failures = failures
        self.outcome = outcome
        self.passes: list[str] = []
        self.succeeded = asyncio.Event()

    async def reconcile(self, key: str) -> Outcome:
        self.passes.append(key)
        if len(self.passes) <= self.failures:
            raise ConnectionResetError("peer reset")
        self.succeeded.set()
        return self.outcome


async def test_a_failing_pass_is_retried_and_never_stops_the_worker() -> None:
    queue = WorkQueue(base_delay=0.01)
    controller = Flaky(failures=2)
    errors: list[str] = []
    worker = asyncio.create_task(work(queue, controller, on_error=lambda key, _err: errors.append(key)))
    queue.add("a")
    await within(2, controller.succeeded)
    worker.cancel()
    assert controller.passes == ["a", "a", "a"]
    assert errors == ["a", "a"]


async def test_an_outcome_asking_for_a_recheck_brings_the_key_back() -> None:
    queue = WorkQueue()
    controller = Flaky(failures=0, outcome=after(0.01))
    worker = asyncio.create_task(work(queue, controller))
    queue.add("a")
    await within(2, controller.succeeded)
    controller.succeeded.clear()
    await within(2, controller.succeeded)  # no event came: the outcome alone brought it back
    worker.cancel()
    assert controller.passes == ["a", "a"]


async def test_a_supervised_task_that_fails_is_started_again() -> None:
    runs: list[int] = []
    again = asyncio.Event()

    async def poller() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("unforeseen")
        again.set()
        await asyncio.sleep(3600)

    task = asyncio.create_task(supervised("poller", poller, first_delay=0.01))
    await within(2, again)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(runs) == 2
    assert REGISTRY.get_sample_value("sunk_task_restarts_total", {"task": "poller"}) == 1


async def test_r8_2_an_api_server_refusing_connections_is_a_kube_error_not_aiohttps() -> None:
    """Was: aiohttp's ClientConnectorError escaped a poller and the scheduler exited."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    configuration = k8s.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    client = KubeClient(k8s.ApiClient(configuration))
    try:
        with pytest.raises(KubeError) as caught:
            await client.get("/api/v1/nodes")
    finally:
        await client.close()
    assert caught.value.unreachable
    assert "unreachable" in str(caught.value)


class Component:
    """A component that records what the manager told it."""

    def __init__(self) -> None:
        self.told: list[str] = []
        self.first_look = asyncio.Event()
        self.asked_ready = asyncio.Event()

    def term_starting(self) -> None:
        self.told.append("term_starting")

    async def term_ready(self) -> None:
        self.asked_ready.set()
        await self.first_look.wait()
        self.told.append("term_ready")

    def acting(self) -> None:
        self.told.append("acting")

    async def leadership(self, leading: bool) -> None:
        self.told.append(f"leadership={leading}")


async def test_workers_start_only_once_the_terms_first_look_is_done() -> None:
    manager = Manager()
    component = Component()
    queue = WorkQueue()
    controller = Flaky(failures=0)
    manager.control(controller, queue)
    queue.add("a")
    running = asyncio.create_task(manager.run(component))
    await within(2, component.asked_ready)
    await asyncio.sleep(0)  # a worker started too early would run now
    assert controller.passes == []
    assert manager.phase is Phase.STARTING_TERM
    component.first_look.set()
    await within(2, controller.succeeded)
    assert manager.is_acting
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert component.told == ["term_starting", "term_ready", "acting"]
    assert not manager.is_acting


async def test_a_failing_term_source_never_ends_the_term() -> None:
    manager = Manager()
    component = Component()
    component.first_look.set()
    restarted = asyncio.Event()
    runs: list[int] = []

    async def poller() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise ConnectionRefusedError("slurmrestd")
        restarted.set()
        await asyncio.sleep(3600)

    manager.run_while_leading("term-poller", poller)
    running = asyncio.create_task(manager.run(component))
    await within(3, restarted)
    assert manager.is_acting
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


def test_an_expectation_holds_until_seen_or_too_old(monkeypatch: pytest.MonkeyPatch) -> None:
    from sunk.runtime import expectations

    now = [1000.0]
    monkeypatch.setattr(expectations.time, "monotonic", lambda: now[0])
    written = expectations.Expectations[int | None](within=10)
    assert not written.unseen("pod", 7)  # nothing written: the cache is believed
    written.expect("pod", 8)
    assert written.unseen("pod", 7)  # the cache lags behind the write
    assert not written.unseen("pod", 8)  # seen: dropped
    assert not written.unseen("pod", 7)
    written.expect("pod", None)
    now[0] += 10
    assert not written.unseen("pod", 7)  # too old: someone else may have changed it since
