"""R5.5 at the hooks API's door: which credentials let a call reach the scheduler, and
what the answer is signed over. The server listens on 127.0.0.1 for the test only."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sunk.runtime.ports import SystemClock
from sunk.scheduler.hooks.auth import Verifier, answer_signature, pod_key, pod_token, signature
from sunk.scheduler.hooks.server import HooksServer
from sunk.scheduler.translate import PodRef

SECRET = b"0123456789abcdef0123456789abcdef"
POD = PodRef("default", "web-1", "uid-1")
PATH = "/v1/pods/uid-1/jobs/7/started"


class Target:
    """The scheduler as the hooks API sees it: job 7 is Pod uid-1's."""

    def __init__(self) -> None:
        self.started: list[int] = []

    async def pod_of_job(self, job_id: int) -> PodRef | None:
        return POD if job_id == 7 else None

    async def job_started(self, ref: PodRef, job_id: int) -> None:
        self.started.append(job_id)

    async def job_terminating(self, ref: PodRef, job_id: int) -> None:
        raise AssertionError("not called in these tests")

    async def wait_pod_gone(self, ref: PodRef, job_id: int, within: float) -> bool:
        return False

    def why_waiting(self, ref: PodRef, job_id: int) -> str:
        return "its Pod is terminating"

    def acting_now(self) -> bool:
        return True


@pytest.fixture
async def served() -> AsyncIterator[tuple[TestClient, Target]]:
    target = Target()
    server = HooksServer(target, Verifier(SECRET, SystemClock()), SystemClock())
    async with TestClient(TestServer(server.app, host="127.0.0.1")) as client:
        yield client, target


async def test_r5_5_a_call_with_its_pods_token_is_taken_and_the_answer_signed_over_its_nonce(
    served: tuple[TestClient, Target],
) -> None:
    client, target = served
    headers = {"X-Sunk-Token": pod_token(SECRET, "uid-1"), "X-Sunk-Nonce": "n-42"}
    response = await client.post(PATH, headers=headers)
    assert response.status == 200 and target.started == [7]
    assert response.headers["X-Sunk-Answer"] == answer_signature(pod_key(SECRET, "uid-1"), PATH, "n-42", 200)


@pytest.mark.parametrize(
    "token",
    [pod_token(SECRET, "uid-2"), pod_key(SECRET, "uid-1"), ""],
    ids=["another-pods-token", "the-key-as-token", "empty"],
)
async def test_r5_5_a_call_without_its_pods_token_is_refused_and_changes_nothing(
    served: tuple[TestClient, Target], token: str
) -> None:
    client, target = served
    response = await client.post(PATH, headers={"X-Sunk-Token": token, "X-Sunk-Nonce": "n"})
    assert response.status == 401 and target.started == []
    assert "X-Sunk-Answer" not in response.headers


async def test_r5_5_a_signed_call_from_a_placeholder_submitted_before_tokens_is_taken(
    served: tuple[TestClient, Target],
) -> None:
    client, target = served
    ts, nonce = str(time.time()), "n-7"
    headers = {
        "X-Sunk-Timestamp": ts,
        "X-Sunk-Nonce": nonce,
        "X-Sunk-Signature": signature(pod_key(SECRET, "uid-1"), "POST", PATH, ts, nonce),
    }
    response = await client.post(PATH, headers=headers)
    assert response.status == 200 and target.started == [7]


async def test_r5_5_a_token_for_the_pod_does_not_reach_another_pods_job(
    served: tuple[TestClient, Target],
) -> None:
    client, target = served
    headers = {"X-Sunk-Token": pod_token(SECRET, "uid-2"), "X-Sunk-Nonce": "n"}
    response = await client.post("/v1/pods/uid-2/jobs/7/started", headers=headers)
    assert response.status == 403 and target.started == []


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Sunk-Token": "é" * 64, "X-Sunk-Nonce": "n"},
        {"X-Sunk-Token": pod_token(SECRET, "uid-1"), "X-Sunk-Nonce": "né"},
        {"X-Sunk-Timestamp": "nan", "X-Sunk-Nonce": "n", "X-Sunk-Signature": "0" * 64},
        {"X-Sunk-Timestamp": "1e999", "X-Sunk-Nonce": "n", "X-Sunk-Signature": "0" * 64},
        {"X-Sunk-Timestamp": str(time.time()), "X-Sunk-Nonce": "n", "X-Sunk-Signature": "é" * 64},
    ],
    ids=["non-ascii-token", "non-ascii-nonce", "nan-timestamp", "infinite-timestamp", "non-ascii-signature"],
)
async def test_r12_2_a_malformed_call_is_refused_with_a_401_and_no_traceback(
    served: tuple[TestClient, Target], headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Before issue #38, a non-ASCII token or signature made the comparison raise: a 500
    and a traceback at ERROR on every call, past the refusal log's throttle; a `nan`
    timestamp passed the time window."""
    client, target = served
    with caplog.at_level("WARNING"):
        response = await client.post(PATH, headers=headers)
    assert response.status == 401 and target.started == []
    assert "malformed" in (await response.json())["error"]
    assert not [r for r in caplog.records if r.levelname == "ERROR" or r.exc_info]


async def test_r12_2_a_call_for_a_malformed_pod_uid_is_refused(served: tuple[TestClient, Target]) -> None:
    client, target = served
    headers = {"X-Sunk-Token": pod_token(SECRET, "uid 1"), "X-Sunk-Nonce": "n"}
    response = await client.post("/v1/pods/uid%201/jobs/7/started", headers=headers)
    assert response.status == 401 and target.started == []
