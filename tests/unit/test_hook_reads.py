"""R4.2, R5.2: a `started` hook call binds its Pod, and a `terminating` call deletes it, from a
read of its own job. Many jobs starting or ending together cost one read each, never a
listing of every job, and never more than one read per job however often a placeholder
calls; a call beyond the reads in flight waits its turn instead of being put off."""

from __future__ import annotations

import asyncio

from sunk.scheduler.hook_reads import HookReads
from sunk.scheduler.translate import PodRef
from sunk.slurm.models import SlurmJob


def running(job_id: int, state: str = "RUNNING", het_job_id: int = 0) -> SlurmJob:
    return SlurmJob(
        job_id, f"job-{job_id}", state, "None", ("sn-001",), "", 0, 0, "batch", 60, 1, het_job_id=het_job_id
    )


def ref(name: str) -> PodRef:
    return PodRef("ns", name, f"uid-{name}")


class Slurm:
    """Single job reads that finish when the test lets them."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.release = asyncio.Event()

        self.answers: dict[int, list[SlurmJob]] = {}

    async def job_group(self, job_id: int) -> list[SlurmJob]:
        self.reads.append(job_id)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await self.release.wait()
        self.in_flight -= 1
        return self.answers.get(job_id, [running(job_id)])


def hook_reads(slurm: Slurm, seen: list[tuple[PodRef, SlurmJob]], at_once: int = 3) -> HookReads:
    return HookReads(
        slurm.job_group,
        lambda job: ref(f"member-{job.job_id}"),
        lambda r, j: seen.append((r, j)),
        at_once,
        now=lambda: 0.0,
    )


async def test_r4_2_many_jobs_starting_together_are_each_read_with_a_bounded_number_in_flight() -> None:
    slurm = Slurm()
    reads = hook_reads(slurm, [])
    calls = [asyncio.create_task(reads.read(job_id)) for job_id in range(1, 11)]
    await asyncio.sleep(0)
    slurm.release.set()
    answers = await asyncio.gather(*calls)
    assert sorted(slurm.reads) == list(range(1, 11))
    assert slurm.most_in_flight == 3
    assert [[job.job_id for job in jobs] for jobs in answers] == [[i] for i in range(1, 11)]


async def test_r4_2_repeated_calls_for_a_job_being_read_cost_no_second_read() -> None:
    slurm = Slurm()
    reads = hook_reads(slurm, [])
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
    reads = hook_reads(slurm, [])
    await reads.read(7)
    await reads.read(7)
    assert slurm.reads == [7, 7]


async def test_r5_2_ending_jobs_beyond_the_reads_in_flight_are_each_read_and_handed_over_in_turn() -> None:
    """The bug this catches: a call finding every read slot taken put off by a second (or
    dropped), so a Pod whose job Slurm cancelled lingered seconds before being deleted."""
    slurm, seen = Slurm(), []
    slurm.answers = {i: [running(i, "CANCELLED")] for i in range(1, 11)}
    reads = hook_reads(slurm, seen)
    calls = [asyncio.create_task(reads.deliver(ref(f"pod-{i}"), i)) for i in range(1, 11)]
    await asyncio.sleep(0)
    slurm.release.set()
    await asyncio.gather(*calls)
    assert slurm.most_in_flight == 3
    assert sorted((r.name, j.job_id, j.state) for r, j in seen) == sorted(
        (f"pod-{i}", i, "CANCELLED") for i in range(1, 11)
    )


async def test_r4_2_a_gangs_read_hands_every_component_to_the_pod_it_belongs_to() -> None:
    slurm, seen = Slurm(), []
    slurm.release.set()
    slurm.answers = {20: [running(20, het_job_id=20), running(21, het_job_id=20)]}
    await hook_reads(slurm, seen).deliver(ref("leader"), 20)
    assert [(r.name, j.job_id) for r, j in seen] == [("leader", 20), ("member-21", 21)]


async def test_r5_2_a_call_whose_turn_comes_after_a_listing_showed_its_job_ending_costs_no_read() -> None:
    """The bug this catches: a thousand placeholders cancelled at once costing a thousand
    single reads, each waiting its turn, when one listing has already shown every job ending."""
    slurm, seen = Slurm(), []
    listed: set[int] = set()
    reads = hook_reads(slurm, seen, at_once=1)
    first = asyncio.create_task(reads.deliver(ref("pod-1"), 1, lambda: 1 in listed))
    later = asyncio.create_task(reads.deliver(ref("pod-2"), 2, lambda: 2 in listed))
    await asyncio.sleep(0)
    listed.add(2)  # the poller's listing shows job 2 ending while its call waits
    slurm.release.set()
    await asyncio.gather(first, later)
    assert slurm.reads == [1]
    assert [r.name for r, _ in seen] == ["pod-1"]
