"""R4.2: a `started` hook call binds its Pod from a read of its own job. Many jobs starting
together cost one read each, never a listing of every job, and never more than one read per
job however often a placeholder calls."""

from __future__ import annotations

import asyncio

from sunk.scheduler.jobs import StartedReads
from sunk.slurm.models import SlurmJob


def running(job_id: int) -> SlurmJob:
    return SlurmJob(job_id, f"job-{job_id}", "RUNNING", "None", ("sn-001",), "", 0, 0, "batch", 60, 1)


class Slurm:
    """Single job reads that finish when the test lets them."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.release = asyncio.Event()

    async def job_group(self, job_id: int) -> list[SlurmJob]:
        self.reads.append(job_id)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await self.release.wait()
        self.in_flight -= 1
        return [running(job_id)]


async def test_r4_2_many_jobs_starting_together_are_each_read_with_a_bounded_number_in_flight() -> None:
    slurm = Slurm()
    reads = StartedReads(slurm.job_group, at_once=3)
    calls = [asyncio.create_task(reads.read(job_id)) for job_id in range(1, 11)]
    await asyncio.sleep(0)
    slurm.release.set()
    answers = await asyncio.gather(*calls)
    assert sorted(slurm.reads) == list(range(1, 11))
    assert slurm.most_in_flight == 3
    assert [[job.job_id for job in jobs] for jobs in answers] == [[i] for i in range(1, 11)]


async def test_r4_2_repeated_calls_for_a_job_being_read_cost_no_second_read() -> None:
    slurm = Slurm()
    reads = StartedReads(slurm.job_group, at_once=3)
    first = asyncio.create_task(reads.read(7))
    await asyncio.sleep(0)
    repeats = await asyncio.gather(*(reads.read(7) for _ in range(5)))
    slurm.release.set()
    assert [job.job_id for job in await first] == [7]
    assert repeats == [[]] * 5
    assert slurm.reads == [7]


async def test_r4_2_a_job_is_read_again_once_its_earlier_read_is_done() -> None:
    """A later call (the placeholder's retry after a missed bind) still gets a fresh read."""
    slurm = Slurm()
    slurm.release.set()
    reads = StartedReads(slurm.job_group, at_once=3)
    await reads.read(7)
    await reads.read(7)
    assert slurm.reads == [7, 7]
