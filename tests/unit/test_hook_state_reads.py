"""R5.2: a `terminating` hook call has its Pod deleted once Slurm shows the job ending. Where
Slurm reads many jobs' states in one request, the calls of a burst (a hundred jobs
cancelled at once) share such reads instead of waiting for one full read each; whatever a
state cannot settle is still read whole."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from sunk.scheduler.hook_reads import HookReads
from sunk.scheduler.translate import PodRef
from sunk.slurm.errors import SlurmRejected, SlurmUnavailable
from sunk.slurm.models import SlurmJob

CANCELLED = ("COMPLETING", ("CANCELLED", "COMPLETING"))  # as `summarize_state` reads it


def job(job_id: int, state: str = "RUNNING", het_job_id: int = 0) -> SlurmJob:
    return SlurmJob(
        job_id, f"job-{job_id}", state, "None", ("sn-001",), "", 0, 0, "batch", 60, 1, het_job_id=het_job_id
    )


def ref(job_id: int) -> PodRef:
    return PodRef("ns", f"pod-{job_id}", f"uid-{job_id}")


class Slurm:
    """State reads that finish when the test lets them, and whole reads that finish at once."""

    def __init__(self) -> None:
        self.state_reads: list[list[int]] = []
        self.whole_reads: list[int] = []
        self.states: dict[int, tuple[str, tuple[str, ...]]] = {}
        self.release = asyncio.Event()
        self.refuse: Exception | None = None

    async def job_states(self, job_ids: list[int]) -> dict[int, tuple[str, tuple[str, ...]]]:
        self.state_reads.append(job_ids)
        await self.release.wait()
        if self.refuse is not None:
            raise self.refuse
        return {j: self.states[j] for j in job_ids if j in self.states}

    async def job_group(self, job_id: int) -> list[SlurmJob]:
        self.whole_reads.append(job_id)
        return [job(job_id, "CANCELLED")]


class Seen(list[tuple[PodRef, SlurmJob]]):
    """What the hook reads handed to the Pods' workers."""


NOW = 1_800_000_000.0


def reads(slurm: Slurm, seen: Seen, known: dict[int, SlurmJob]) -> HookReads:
    return HookReads(
        slurm.job_group,
        lambda j: ref(j.job_id),
        lambda r, j: seen.append((r, j)),
        8,
        read_states=slurm.job_states,
        known_job=known.get,
        now=lambda: NOW,
    )


async def test_r5_2_ending_calls_that_arrive_while_a_state_read_is_under_way_share_the_next() -> None:
    """The bug this catches: a hundred cancelled jobs' calls each waiting for a whole read of
    its own, eight at a time, so the last Pods were deleted seconds after Slurm's signal."""
    slurm, seen = Slurm(), Seen()
    known = {i: job(i) for i in range(1, 11)}
    slurm.states = dict.fromkeys(range(1, 11), CANCELLED)
    hook = reads(slurm, seen, known)
    first = asyncio.create_task(hook.deliver_ending(ref(1), 1))
    await asyncio.sleep(0)
    burst = [asyncio.create_task(hook.deliver_ending(ref(i), i)) for i in range(2, 11)]
    await asyncio.sleep(0)
    slurm.release.set()
    await asyncio.gather(first, *burst)
    assert slurm.state_reads == [[1], list(range(2, 11))]  # the first call did not wait for company
    assert slurm.whole_reads == []
    assert sorted((r.name, j.job_id, j.state, j.nodes) for r, j in seen) == [
        (f"pod-{i}", i, "COMPLETING", ("sn-001",)) for i in sorted(range(1, 11), key=lambda i: f"pod-{i}")
    ]


@pytest.mark.parametrize(
    "projected",
    [
        pytest.param(int(NOW) + 3600, id="a limit hours away: the drain would come after KillWait"),
        pytest.param(int(NOW) - 27, id="a limit Slurm enforced 27 s late: the node drained at once"),
    ],
)
async def test_r5_3_an_ending_job_read_by_its_state_ends_at_its_call(projected: int) -> None:
    """A running job's end time is only where its time limit would end it. The bugs this
    catches: the drain due when a Pod outlives KillWait counted from that time, too late to
    stop Slurm handing the resources on, or at once, draining a node for nothing."""
    slurm, seen = Slurm(), Seen()
    slurm.release.set()
    slurm.states = {4: CANCELLED}
    running = replace(job(4), start_time=int(NOW) - 60, end_time=projected)
    await reads(slurm, seen, {4: running}).deliver_ending(ref(4), 4)
    [(_, ending)] = seen
    assert (ending.state, ending.end_time, ending.start_time) == ("COMPLETING", int(NOW), int(NOW) - 60)


async def test_r5_2_a_job_slurm_is_not_ending_is_read_whole() -> None:
    """A placeholder also calls when its Pod is being deleted and Slurm has not ended its
    job: only a whole read tells the worker everything then (the bug: a state alone handed
    over, or nothing)."""
    slurm, seen = Slurm(), Seen()
    slurm.release.set()
    slurm.states = {5: ("RUNNING", ("RUNNING",))}
    await reads(slurm, seen, {5: job(5)}).deliver_ending(ref(5), 5)
    assert slurm.whole_reads == [5]
    assert [(r.name, j.state) for r, j in seen] == [("pod-5", "CANCELLED")]


@pytest.mark.parametrize(
    ("known", "why"),
    [({}, "a job the scheduler has not seen"), ({7: job(7, het_job_id=7)}, "a gang's job")],
)
async def test_r5_2_what_a_state_cannot_settle_is_read_whole(known: dict[int, SlurmJob], why: str) -> None:
    slurm, seen = Slurm(), Seen()
    slurm.release.set()
    await reads(slurm, seen, known).deliver_ending(ref(7), 7)
    assert (slurm.state_reads, slurm.whole_reads) == ([], [7]), why


async def test_r5_2_a_job_slurm_no_longer_has_is_handed_over_as_nothing() -> None:
    slurm, seen = Slurm(), Seen()
    slurm.release.set()
    await reads(slurm, seen, {3: job(3)}).deliver_ending(ref(3), 3)
    assert (slurm.state_reads, slurm.whole_reads, seen) == ([[3]], [], [])


async def test_r5_2_a_call_after_a_listing_showed_its_job_ending_reads_nothing() -> None:
    slurm, seen = Slurm(), Seen()
    await reads(slurm, seen, {3: job(3)}).deliver_ending(ref(3), 3, lambda: True)
    assert (slurm.state_reads, slurm.whole_reads, seen) == ([], [], [])


async def test_r5_2_a_slurmrestd_without_state_reads_gets_whole_reads_from_then_on() -> None:
    """The bug this catches: on a Slurm that answers no `/jobs/state`, every ending call
    failing, so each Pod waited for its worker's own slower look at Slurm."""
    slurm, seen = Slurm(), Seen()
    slurm.release.set()
    slurm.refuse = SlurmRejected("Unable to parse query", 9000)
    hook = reads(slurm, seen, {1: job(1), 2: job(2)})
    await hook.deliver_ending(ref(1), 1)
    await hook.deliver_ending(ref(2), 2)
    assert slurm.state_reads == [[1]]
    assert slurm.whole_reads == [1, 2]
    assert [r.name for r, _ in seen] == ["pod-1", "pod-2"]


async def test_r5_2_a_state_read_that_failed_reaches_every_call_it_served() -> None:
    """Each call then answers the placeholder that the scheduler could not act yet, and the
    Pod's worker asks Slurm itself; none is answered as if its job had been seen."""
    slurm, seen = Slurm(), Seen()
    slurm.refuse = SlurmUnavailable("slurmctld is not answering")
    hook = reads(slurm, seen, {1: job(1), 2: job(2), 3: job(3)})
    first = asyncio.create_task(hook.deliver_ending(ref(1), 1))
    await asyncio.sleep(0)
    burst = [asyncio.create_task(hook.deliver_ending(ref(i), i)) for i in (2, 3)]
    await asyncio.sleep(0)
    slurm.release.set()
    results = await asyncio.gather(first, *burst, return_exceptions=True)
    assert [type(r) for r in results] == [SlurmUnavailable] * 3
    assert (slurm.state_reads, seen) == ([[1], [2, 3]], [])
