"""What the scheduler reads from Slurm when a placeholder calls the hooks API.

A `started` call is answered with a read of its own job (the bind waits for the started
mark, which only a full read shows). A `terminating` call needs to know only whether Slurm
is ending the job: where Slurm can say so for many jobs in one light request (`GET
/jobs/state`, Slurm 24.05 and later), the calls of a burst share such reads. Either way
the call only says which job to look at; Slurm's answer is what the Pod's worker acts on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from sunk.scheduler.translate import PodRef
from sunk.slurm.errors import SlurmError
from sunk.slurm.models import JobState, SlurmJob

log = logging.getLogger(__name__)
# Job IDs per state read: each is a query parameter of its own, and the URL stays short.
STATES_PER_READ = 200


class HookReads:
    """Reads the job a `started` or `terminating` hook call names, one single read per job,
    so that a Pod is bound as soon as its own job is seen started, and deleted as soon as
    Slurm shows its job ending, however many start or end together (a listing of every job
    costs slurmrestd and the scheduler far more than a read of one). At most `at_once`
    reads are in flight, the others wait their turn; a job already being read is not read
    again, so repeated calls for one job cost one read, and a call whose turn comes after a
    listing already showed what it wanted to know (a thousand jobs cancelled at once) costs
    none. A `terminating` call may be answered from a read of many jobs' states instead
    (`deliver_ending`). What a read finds goes to `seen` with the Pod it belongs to. Asking
    the poller for one listing in place of the reads waiting was measured and taken out:
    slurmrestd spends about as much on a listing of a thousand jobs as on 150 reads, and a
    call waited seconds for a listing where a read takes 0.1 s (docs/benchmarks.md, #55)."""

    def __init__(
        self,
        read: Callable[[int], Awaitable[list[SlurmJob]]],
        owner_of: Callable[[SlurmJob], PodRef | None],
        seen: Callable[[PodRef, SlurmJob], None],
        at_once: int,
        *,
        now: Callable[[], float],
        read_states: Callable[[list[int]], Awaitable[dict[int, JobState]]] | None = None,
        known_job: Callable[[int], SlurmJob | None] = lambda _job_id: None,
    ) -> None:
        """`read_states`: Slurm's states of many jobs in one request, where it can;
        `known_job`: the job as the scheduler last saw it, which a state read updates;
        `now`: wall-clock seconds (`Clock.now`), to compare with Slurm's times."""
        self._read = read
        self._owner_of = owner_of
        self._seen = seen
        self._slots = asyncio.Semaphore(at_once)
        self._reading: set[int] = set()
        self._states = JobStates(read_states, self._slots) if read_states else None
        self._known_job = known_job
        self._now = now

    async def read(self, job_id: int, known: Callable[[], bool] = lambda: False) -> list[SlurmJob]:
        """The job (a gang's leader with every component), or [] when an earlier call's
        read of it is still under way (that one delivers it) or, once this call's turn
        comes, `known()` says the read would tell nothing new."""
        if job_id in self._reading:
            return []
        self._reading.add(job_id)
        try:
            async with self._slots:
                return [] if known() else await self._read(job_id)
        finally:
            self._reading.discard(job_id)

    async def deliver(self, ref: PodRef, job_id: int, known: Callable[[], bool] = lambda: False) -> None:
        """Read the job `ref`'s placeholder called about (the hooks API has checked that
        the job is that Pod's) and hand it, and a gang's other components, to `seen`."""
        for job in await self.read(job_id, known):
            owner = ref if job.job_id == job_id else self._owner_of(job)
            if owner is not None:
                self._seen(owner, job)

    async def deliver_ending(
        self, ref: PodRef, job_id: int, known: Callable[[], bool] = lambda: False
    ) -> None:
        """For a `terminating` call: hand `seen` the job with the state Slurm gives it now
        once that shows it ending. A full read (`deliver`) where a state cannot settle it:
        no state reads here, a gang's job (its components end together, read as one), a
        job the scheduler has not seen, or one Slurm is not ending (the Pod's deletion
        signalled it) whose read then tells the worker everything."""
        job = self._known_job(job_id)
        if self._states is None or job is None or job.group_leader is not None:
            await self.deliver(ref, job_id, known)
            return
        if known():
            return
        called_at = self._now()  # Slurm was ending the job by then: its signal made this call
        try:
            state = await self._states.state(job_id)
        except SlurmError as err:
            if err.retryable:
                raise
            log.warning("slurmrestd refused to read job states (%s): from now on, jobs are read whole", err)
            self._states = None
            await self.deliver(ref, job_id, known)
            return
        if state is None:
            return  # Slurm has no such job any more: a full read would find nothing either
        ending = replace(job, state=state[0], flags=state[1])
        if not ending.ending:
            await self.deliver(ref, job_id, known)
            return
        # A running job's end time is only where its time limit would end it: hours away,
        # or already past when Slurm enforces the limit late. The drain due if the Pod
        # outlives KillWait counts from the job's end, which Slurm's signal put just before
        # this call; the poller's next listing brings Slurm's own time.
        self._seen(ref, replace(ending, end_time=int(called_at)))


class JobStates:
    """The state of each job asked about; what is asked while a read is under way is
    gathered into the next one. The first call of a quiet spell is read at once, alone:
    gathering never makes a lone call wait. When a hundred jobs are cancelled together,
    their placeholders call within a second or two of each other, and reading each in full
    kept those calls waiting for one another longer than Slurm took to signal them."""

    def __init__(
        self,
        read: Callable[[list[int]], Awaitable[dict[int, JobState]]],
        slots: asyncio.Semaphore,
    ) -> None:
        """`read`: Slurm's states of the given jobs (one it no longer has left out);
        `slots`: the connections to slurmrestd shared with single job reads."""
        self._read = read
        self._slots = slots
        self._asked: dict[int, asyncio.Future[JobState | None]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def state(self, job_id: int) -> JobState | None:
        """The job's state as Slurm has it now, or None when Slurm has no such job; raises
        what the read raised."""
        future = self._asked.get(job_id)
        if future is None:
            future = self._asked[job_id] = asyncio.get_running_loop().create_future()
            if self._reader is None or self._reader.done():
                self._reader = asyncio.create_task(self._read_all())
        return await asyncio.shield(future)

    async def _read_all(self) -> None:
        while self._asked:
            batch = dict(list(self._asked.items())[:STATES_PER_READ])
            for job_id in batch:
                del self._asked[job_id]
            try:
                async with self._slots:
                    states = await self._read(list(batch))
            except Exception as err:  # every caller of this read hears why
                for future in batch.values():
                    future.set_exception(err)
                    future.add_done_callback(_retrieved)
                continue
            for job_id, future in batch.items():
                future.set_result(states.get(job_id))


def _retrieved(future: asyncio.Future[JobState | None]) -> None:
    """Marks a failed read's outcome as seen: a caller that hung up never awaits it, and
    asyncio would log it as never retrieved."""
    future.exception()
