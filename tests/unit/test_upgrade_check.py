"""R10.3: an upgrade that would drop a partition jobs still use is refused, naming them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sunk.operator.chart.upgrade_check import (
    CheckFailed,
    jobs_in_dropped_partitions,
    list_jobs,
    read_key,
    refusals,
)
from sunk.slurm.models import SlurmJob


def job(job_id: int, partition: str, state: str = "RUNNING") -> SlurmJob:
    return SlurmJob(
        job_id=job_id,
        name=f"job-{job_id}",
        state=state,
        reason="None",
        nodes=(),
        comment="",
        user_id=0,
        group_id=0,
        partition=partition,
        time_limit_min=None,
        priority=None,
    )


def test_r10_3_jobs_in_a_dropped_partition_are_named() -> None:
    jobs = [job(13, "old"), job(12, "old", "PENDING"), job(14, "main"), job(15, "gone", "SUSPENDED")]
    assert refusals(jobs, keep={"main"}) == [
        "refusing to drop partition gone: jobs 15 still use it",
        "refusing to drop partition old: jobs 12, 13 still use it",
    ]


def test_r10_3_finished_jobs_do_not_hold_a_partition() -> None:
    jobs = [job(1, "old", "COMPLETED"), job(2, "old", "CANCELLED"), job(3, "old", "FAILED")]
    assert refusals(jobs, keep={"main"}) == []


def test_r10_3_a_job_still_completing_holds_its_partition() -> None:
    assert jobs_in_dropped_partitions([job(7, "old", "COMPLETING")], keep={"main"}) == {"old": [7]}


def test_r10_3_a_job_naming_several_partitions_holds_each_of_them() -> None:
    jobs = [job(21, "main,old", "PENDING")]
    assert jobs_in_dropped_partitions(jobs, keep={"main"}) == {"old": [21]}
    assert jobs_in_dropped_partitions(jobs, keep={"main", "old"}) == {}


def test_r10_3_keeping_every_partition_in_use_is_allowed() -> None:
    assert refusals([job(1, "a"), job(2, "b")], keep={"a", "b", "new"}) == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_r10_3_an_unreachable_slurmrestd_fails_closed() -> None:
    with pytest.raises(CheckFailed, match="upgrade is stopped"):
        await list_jobs(f"http://127.0.0.1:{_closed_port()}", b"k" * 32, "slurm", attempts=2, pause_s=0)


def test_r10_3_a_missing_key_fails_closed(tmp_path: Path) -> None:
    with pytest.raises(CheckFailed, match="cannot read Slurm's JWT key"):
        read_key(tmp_path / "absent")
