"""The async slurmrestd client against the real slurmrestd of the dev cluster's Slurm."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from sunk.slurm.client import SUPPORTED_VERSIONS, TOP_PRIORITY, SlurmClient, SlurmVersionError, make_dialect
from sunk.slurm.dialect import JOB_PATH, Submission
from sunk.slurm.errors import SlurmAuthError, SlurmRejected, SlurmUnavailable
from sunk.slurm.request import JobRequest
from sunk.slurm.tokens import TokenSource
from sunk_dev import DevCluster
from sunk_dev.slurmcluster import rest_version
from sunk_dev.slurmrun import run_cli
from tests.support import SlurmRest

pytestmark = pytest.mark.integration
T = TypeVar("T")
SCRIPT = "#!/bin/sh\nsleep 300\n"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def connected(cluster: DevCluster, forced: str | None = None) -> SlurmClient:
    tokens = TokenSource(path=cluster.layout.slurm_token)
    return await SlurmClient.connect(cluster.layout.rest_url, tokens, forced=forced)


def test_r11_1_the_newest_version_both_sides_speak_is_chosen(dev_cluster: DevCluster) -> None:
    async def scenario() -> tuple[str, list[str], str]:
        slurm = await connected(dev_cluster)
        try:
            served = await slurm.served_versions()
            await slurm.ping()
            return slurm.version, served, slurm.release
        finally:
            await slurm.aclose()

    version, served, release = run(scenario())
    assert version == rest_version(dev_cluster.layout)
    assert version in served and version in SUPPORTED_VERSIONS
    assert all(v <= version for v in served if v in SUPPORTED_VERSIONS)
    assert release.startswith((dev_cluster.spec() or pytest.fail("no spec")).slurm)


def test_r11_1_a_forced_version_that_is_not_served_stops_with_a_sentence(dev_cluster: DevCluster) -> None:
    async def scenario() -> None:
        slurm = await connected(dev_cluster)
        try:
            served = await slurm.served_versions()
            missing = next(v for v in SUPPORTED_VERSIONS if v not in served)
        finally:
            await slurm.aclose()
        await connected(dev_cluster, missing)

    with pytest.raises(SlurmVersionError, match="is not served by this slurmrestd"):
        run(scenario())


def test_submit_read_and_cancel_a_job(dev_cluster: DevCluster, slurm: SlurmRest) -> None:
    async def scenario() -> tuple[Any, Any, Any]:
        client = await connected(dev_cluster)
        try:
            submitted = await client.submit(
                Submission(slurm.job_body(SCRIPT, name="client-test", cpus_per_task=1))
            )
            job = await client.job(submitted.job_id)
            await client.cancel(submitted.job_id)
            return submitted, job, await client.job(submitted.job_id)
        finally:
            await client.aclose()

    submitted, job, after = run(scenario())
    assert submitted.warning is None
    assert job is not None and job.name == "client-test"
    assert after is not None and after.state in ("CANCELLED", "COMPLETING")


def test_r8_2_a_job_submitted_held_waits_until_released_then_runs(dev_cluster: DevCluster) -> None:
    """A re-adopted Pod's new job is submitted held, and released once its ID is checked
    (issue #34): the hold must keep it from starting, and the release must start it, with
    the top priority so that it never queues behind jobs Slurm ranks higher (issue #53; a
    fault run lost a Pod whose new job waited for `Priority`)."""
    node = run_cli(dev_cluster.layout, "sinfo", "-h", "-N", "-o", "%N").split()[0]
    request = JobRequest(name="held-test", cpus=1, memory_mib=64, required_nodes=(node,), hold=True)

    async def scenario() -> tuple[Any, Any]:
        client = await connected(dev_cluster)
        try:
            submitted = await client.submit(client.submission(request, SCRIPT, {"PATH": JOB_PATH}))
            await asyncio.sleep(1.5)  # Slurm had time to start it, were it not held
            held = await client.job(submitted.job_id)
            await client.release_job(submitted.job_id)
            deadline = asyncio.get_running_loop().time() + 15
            released = await client.job(submitted.job_id)
            while released is not None and released.pending and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.2)
                released = await client.job(submitted.job_id)
            await client.cancel(submitted.job_id)
            return held, released
        finally:
            await client.aclose()

    held, released = run(scenario())
    assert held is not None and held.pending and held.reason.startswith("JobHeld"), held
    assert released is not None and released.running and released.nodes == (node,), released
    assert released.priority == TOP_PRIORITY, released


def test_r11_3_an_unknown_partition_is_final_with_slurms_words(
    dev_cluster: DevCluster, slurm: SlurmRest
) -> None:
    async def scenario() -> None:
        client = await connected(dev_cluster)
        try:
            await client.submit(Submission(slurm.job_body(SCRIPT, partition="nope")))
        finally:
            await client.aclose()

    with pytest.raises(SlurmRejected, match="Invalid partition name") as err:
        run(scenario())
    assert err.value.code == 2000 and not err.value.retryable


def test_r11_3_a_job_slurm_queues_with_an_error_is_returned_not_lost(
    dev_cluster: DevCluster, slurm: SlurmRest
) -> None:
    """Slurm queues a job that needs a drained node. 22.05 answers with a job ID *and*
    error 2068 (24.11 and later with the job ID alone): the job exists, so the client hands
    it back, with Slurm's words when there are any, instead of raising."""
    node = run_cli(dev_cluster.layout, "sinfo", "-h", "-N", "-o", "%N").split()[0]
    run_cli(dev_cluster.layout, "scontrol", "update", f"nodename={node}", "state=drain", "reason=test")

    async def scenario() -> Any:
        client = await connected(dev_cluster)
        try:
            return await client.submit(
                Submission(slurm.job_body(SCRIPT, name="needs-drained", nodelist=node))
            )
        finally:
            await client.aclose()

    try:
        submitted = run(scenario())
        assert submitted.job_id > 0
        if not slurm.modern:
            assert submitted.warning and "2068" in submitted.warning
        assert slurm.job(submitted.job_id)["job_state"] == "PENDING"
        slurm.cancel(submitted.job_id)
    finally:
        run_cli(dev_cluster.layout, "scontrol", "update", f"nodename={node}", "state=resume")


def test_r11_2_nodes_are_drained_over_rest_where_slurm_allows(
    dev_cluster: DevCluster, slurm: SlurmRest
) -> None:
    if not slurm.modern:
        pytest.skip("slurmrestd v0.0.38 cannot update nodes; the scheduler drains with scontrol there")
    node = run_cli(dev_cluster.layout, "sinfo", "-h", "-N", "-o", "%N").split()[-1]

    async def scenario() -> str | None:
        client = await connected(dev_cluster)
        try:
            return await client.drain(node, "sunk test: drained over REST")
        finally:
            await client.aclose()

    try:
        assert run(scenario()) is None
        state = run_cli(dev_cluster.layout, "sinfo", "-h", "-n", node, "-o", "%T|%E").split("|")
        assert "drain" in state[0] and state[1].strip() == "sunk test: drained over REST"
    finally:
        run_cli(dev_cluster.layout, "scontrol", "update", f"nodename={node}", "state=resume")


def test_a_bad_token_is_an_auth_error(dev_cluster: DevCluster) -> None:
    async def scenario() -> None:
        dialect = make_dialect(rest_version(dev_cluster.layout))
        client = SlurmClient(dev_cluster.layout.rest_url, TokenSource("not-a-token"), dialect=dialect)
        try:
            await client.jobs()
        finally:
            await client.aclose()

    with pytest.raises(SlurmAuthError):
        run(scenario())


def test_unknown_jobs_read_as_none_and_cancel_quietly(dev_cluster: DevCluster) -> None:
    async def scenario() -> Any:
        client = await connected(dev_cluster)
        try:
            await client.cancel(999999)
            return await client.job(999999)
        finally:
            await client.aclose()

    assert run(scenario()) is None


def test_an_unreachable_slurmrestd_is_unavailable_not_a_crash() -> None:
    async def scenario() -> None:
        await SlurmClient.connect("http://127.0.0.1:9", TokenSource("t"))

    with pytest.raises(SlurmUnavailable, match="cannot reach slurmrestd"):
        run(scenario())
