"""Issue #39: a placeholder holding its node until its Pod is gone is visible. How long each
hold waited, by answer; a hold past half of KillWait is logged with its Pod, its job and why
the Pod is still there; a placeholder asking again after "gone" is logged as not having
taken the answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sunk.metrics import REGISTRY
from sunk.runtime.ports import SystemClock
from sunk.scheduler.hooks.holds import LOG_EVERY_S, Holds
from sunk.scheduler.hooks.server import PodGoneWaiters
from sunk.scheduler.pod_gone import PodGone
from sunk.scheduler.pods import PodStore
from sunk.scheduler.translate import PodRef
from tests.fakes.ports import MemoryCache

PREFIX = "sunk.coreweave.com/"
POD = PodRef("team-a", "infer-1", "uid-1")
MEMBER = PodRef("team-a", "infer-2", "uid-2")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(ref: PodRef, job_id: int, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
            "annotations": {PREFIX + "job-id": str(job_id)},
            **meta,
        },
        "spec": {"nodeName": "node-2"},
        "status": {"phase": "Running"},
    }


def waited(answer: str) -> tuple[float, float]:
    """(calls, seconds waited in all) observed for `answer` so far."""
    labels = {"answer": answer}
    count = REGISTRY.get_sample_value("sunk_hook_terminating_wait_seconds_count", labels) or 0.0
    total = REGISTRY.get_sample_value("sunk_hook_terminating_wait_seconds_sum", labels) or 0.0
    return count, total


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_each_answer_is_observed_with_how_long_its_job_had_been_asking() -> None:
    clock = Clock()
    holds = Holds(kill_wait_s=30, clock=clock)
    calls_before, seconds_before = waited("gone")
    holds.answered(41, str(POD), "terminating", lambda: "")
    clock.now += 8
    holds.answered(41, str(POD), "gone", lambda: "")
    calls, seconds = waited("gone")
    assert (calls - calls_before, seconds - seconds_before) == (1, 8)


def test_a_hold_past_half_of_killwait_is_logged_with_its_pod_job_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    holds = Holds(kill_wait_s=30, clock=clock)
    with caplog.at_level("WARNING", logger="sunk.scheduler.hooks.holds"):
        holds.answered(42, str(POD), "terminating", lambda: "it is terminating")
        clock.now += 14
        holds.answered(42, str(POD), "terminating", lambda: "it is terminating")
        assert warnings(caplog) == []  # under half of KillWait: a Pod may take that long
        clock.now += 2
        holds.answered(42, str(POD), "terminating", lambda: "it is terminating (grace period 60 s)")
        clock.now += 1
        holds.answered(42, str(POD), "terminating", lambda: "it is terminating (grace period 60 s)")
    [line] = warnings(caplog)  # throttled: one line per LOG_EVERY_S
    assert "Slurm job 42 has waited 16 s (KillWait 30 s) for Pod team-a/infer-1 to go" in line
    assert "it is terminating (grace period 60 s)" in line


def test_a_placeholder_asking_again_after_two_gone_answers_is_logged_as_not_taking_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One more call after "gone" is normal: Slurm's SIGTERM often kills the call in flight
    as its answer comes back. A third call means the script refused both answers."""
    clock = Clock()
    holds = Holds(kill_wait_s=30, clock=clock)
    with caplog.at_level("WARNING", logger="sunk.scheduler.hooks.holds"):
        holds.answered(43, str(POD), "gone", lambda: "")
        clock.now += 0.2
        holds.answered(43, str(POD), "gone", lambda: "")
        assert warnings(caplog) == []
        clock.now += 0.5
        holds.answered(43, str(POD), "gone", lambda: "")
        clock.now += LOG_EVERY_S / 2
        holds.answered(43, str(POD), "gone", lambda: "")
    [line] = warnings(caplog)
    assert (
        "Slurm job 43 (Pod team-a/infer-1) asks again 0.7 s after it was first told its Pod is gone" in line
    )


def test_why_a_terminating_pod_holds_its_job_names_its_grace_period_and_finalizers() -> None:
    terminating = pod(
        POD,
        7,
        deletionTimestamp="2026-11-27T11:59:13Z",
        deletionGracePeriodSeconds=30,
        finalizers=["example.com/cleanup"],
    )
    gone = PodGone(
        PodStore({"": MemoryCache([terminating])}),
        lambda r, j: [(r, j)],
        PodGoneWaiters(),
        PREFIX,
        SystemClock(),
    )
    why = gone.why_waiting(POD, 7)
    assert why.startswith("its Pod is terminating (phase Running on Node node-2, grace period 30 s")
    assert "finalizers example.com/cleanup" in why


def test_why_a_gang_job_is_held_names_the_member_still_there() -> None:
    cache = MemoryCache([pod(MEMBER, 8)])  # the script's own Pod is gone, another member is not
    gone = PodGone(
        PodStore({"": cache}), lambda r, j: [(r, j), (MEMBER, 8)], PodGoneWaiters(), PREFIX, SystemClock()
    )
    why = gone.why_waiting(POD, 7)
    assert why.startswith("its gang's member team-a/infer-2 has not been deleted (phase Running")
    assert not asyncio.run(gone.wait(POD, 7, within=0))


def test_a_pod_given_another_job_no_longer_holds_this_one() -> None:
    """A rejected placement: the Pod names its new job, so the old job's script may end."""
    gone = PodGone(
        PodStore({"": MemoryCache([pod(POD, 26)])}),
        lambda r, j: [(r, j)],
        PodGoneWaiters(),
        PREFIX,
        SystemClock(),
    )
    assert asyncio.run(gone.wait(POD, 22, within=0))
    assert not asyncio.run(gone.wait(POD, 26, within=0))


async def test_r5_2_a_call_overlapping_an_earlier_one_for_the_same_pod_still_hears_its_deletion() -> None:
    """The bug this catches: the first call's end forgot the Pod's event while a retry (its
    curl had given up) still waited on it, so the retry missed the deletion and waited out
    its whole long poll before answering."""
    waiters = PodGoneWaiters()
    there = True
    first = asyncio.create_task(waiters.wait("uid-1", lambda: there, 0.01))
    retry = asyncio.create_task(waiters.wait("uid-1", lambda: there, 30))
    assert await first is False  # its poll ended with the Pod still there
    there = False
    waiters.deleted("uid-1")
    assert await asyncio.wait_for(retry, 1) is True
