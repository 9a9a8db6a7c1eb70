"""The async slurmrestd client against the real slurmrestd 22.05."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from sunk.devcluster import DevCluster
from sunk.slurm.client import SlurmClient, TokenSource
from sunk.slurm.errors import SlurmAuthError, SlurmRejected, SlurmUnavailable

pytestmark = pytest.mark.integration
T = TypeVar("T")
SCRIPT = "#!/bin/sh\nsleep 300\n"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def client(cluster: DevCluster, token: str | None = None) -> SlurmClient:
    tokens = TokenSource(token) if token else TokenSource(path=cluster.layout.slurm_token)
    return SlurmClient(cluster.layout.rest_url, tokens)


def body(**job: Any) -> dict[str, Any]:
    return {
        "script": SCRIPT,
        "job": {"environment": {"PATH": "/bin"}, "current_working_directory": "/tmp", **job},
    }


def test_submit_read_and_cancel_a_job(dev_cluster: DevCluster) -> None:
    async def scenario() -> tuple[Any, Any]:
        slurm = client(dev_cluster)
        try:
            job_id = await slurm.submit(body(name="client-test", cpus_per_task=1))
            job = await slurm.job(job_id)
            await slurm.cancel(job_id)
            return job, await slurm.job(job_id)
        finally:
            await slurm.aclose()

    job, after = run(scenario())
    assert job is not None and job.name == "client-test"
    assert after is not None and after.state in ("CANCELLED", "COMPLETING")


def test_an_unknown_partition_is_a_rejection_with_slurms_words(dev_cluster: DevCluster) -> None:
    async def scenario() -> None:
        slurm = client(dev_cluster)
        try:
            await slurm.submit(body(partition="nope"))
        finally:
            await slurm.aclose()

    with pytest.raises(SlurmRejected, match="Invalid partition name") as err:
        run(scenario())
    assert err.value.code == 2000


def test_a_bad_token_is_an_auth_error(dev_cluster: DevCluster) -> None:
    async def scenario() -> None:
        slurm = client(dev_cluster, token="not-a-token")
        try:
            await slurm.jobs()
        finally:
            await slurm.aclose()

    with pytest.raises(SlurmAuthError):
        run(scenario())


def test_unknown_jobs_read_as_none_and_cancel_quietly(dev_cluster: DevCluster) -> None:
    async def scenario() -> Any:
        slurm = client(dev_cluster)
        try:
            await slurm.cancel(999999)
            return await slurm.job(999999)
        finally:
            await slurm.aclose()

    assert run(scenario()) is None


def test_an_unreachable_slurmrestd_is_unavailable_not_a_crash() -> None:
    async def scenario() -> None:
        slurm = SlurmClient("http://127.0.0.1:9", TokenSource("t"))
        try:
            await slurm.ping()
        finally:
            await slurm.aclose()

    with pytest.raises(SlurmUnavailable, match="cannot reach slurmrestd"):
        run(scenario())
