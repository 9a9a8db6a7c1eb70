"""The scheduler's view of its placeholder jobs, kept current by polling slurmrestd.

Jobs are recognised by the Pod identity the scheduler wrote into them (the dialect knows
where: the job's admin_comment on current Slurm, its name on 22.05), never by job ID alone. One listing
serves every Pod, so the cost per Pod stays flat however many Pods wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from sunk.runtime.ports import Clock
from sunk.scheduler.translate import PodRef
from sunk.slurm.client import SlurmClient
from sunk.slurm.errors import SlurmError
from sunk.slurm.models import SlurmJob

log = logging.getLogger(__name__)
Json = dict[str, Any]
# How long a job Slurm ended stays listed with its end state (Slurm's MinJobAge, 300 s by
# default). A job seen running less than this long ago that Slurm now has no record of
# was not ended but lost (slurmctld restarted without it).
MIN_JOB_AGE_S = 300.0
# The highest job ID Slurm makes sense of: the bits above it name a federation's cluster.
MAX_JOB_ID = 0x03FFFFFF
# The job IDs the scheduler asks for by default, where Slurm's own counter never comes: the
# Slurm chart (and `sunk dev up`) sets MaxJobId to the first of them, and slurmctld's
# counter wraps back to FirstJobId before it reaches MaxJobId.
DEFAULT_JOB_ID_RANGE = (50_000_000, MAX_JOB_ID)
# How long an ID a Pod named is passed over by claims after a wrap. A job Slurm lost can run
# on only until its slurmd registers again and is told to kill it (minutes); an hour also
# covers a slurmd cut off meanwhile, while IDs of Pods long gone come free again.
NAMED_ID_HOLD_S = 3600.0


class JobIdsExhausted(Exception):
    """Every run of IDs long enough in the scheduler's job-ID range is held by a job."""


@dataclass(frozen=True)
class LostJob:
    """A job of ours that a listing no longer showed while this process last knew it
    running: `job` as last seen, `seen_at` (monotonic) no later than when it was."""

    ref: PodRef
    job: SlurmJob
    seen_at: float


@dataclass(frozen=True)
class PodJobs:
    """The index's jobs for one Pod (`JobIndex.of_pod`)."""

    claims: list[tuple[PodRef, SlurmJob]]  # every job named for the Pod's key
    job: SlurmJob | None  # the Pod's own job
    leader: SlurmJob | None  # its gang's first component


class JobIndex:
    """Jobs of one scheduler; other schedulers' and users' jobs are not ours. Ages (what was
    recorded since a listing, lost and vanished jobs, IDs Pods named) are read on `clock`."""

    def __init__(
        self,
        owner: Callable[[SlurmJob], PodRef | None],
        clock: Clock,
        id_range: tuple[int, int] | None = None,
    ) -> None:
        self._owner = owner
        self._clock = clock
        # The job IDs this scheduler asks Slurm for (first, last), kept clear of Slurm's
        # own counter by its MaxJobId; None: the counter's line is shared (it then walks
        # into IDs this scheduler asked for).
        self.id_range = id_range
        self._by_id: dict[int, tuple[PodRef, SlurmJob]] = {}
        self._by_key: dict[tuple[str, str], set[int]] = {}  # (namespace, Pod name) → job IDs
        self._recorded_at: dict[int, float] = {}
        self.synced = asyncio.Event()
        # When the newest full listing taken in was requested (monotonic clock).
        self.listed_at = 0.0
        # Jobs of ours that vanished from a listing while last known running, by ID, for
        # MIN_JOB_AGE_S.
        self.lost: dict[int, LostJob] = {}
        # Every job of ours that vanished from a listing, whatever its last state, by ID →
        # when (monotonic), for MIN_JOB_AGE_S: this process saw it, so only what it saw
        # tells whether Slurm lost or ended it (never a Pod's own record).
        self.vanished: dict[int, float] = {}
        # The highest job ID (anyone's, inside `id_range` when there is one) listed, read,
        # submitted or claimed so far. IDs are handed out in order, so a new job given one
        # no higher was given it again: a slurmctld restarted from older state re-issues the
        # IDs of the jobs it lost, and their processes may still run under them. Once the
        # claims have wrapped to the range's start, it is the last ID claimed: the IDs
        # seen above it are then the last round's, passed over only while held.
        self._cursor = 0
        self.wrapped = False
        # The highest ID seen below the range: Slurm's counter's, which hands out every ID
        # where this scheduler may not choose.
        self._below = 0
        # IDs inside the range held, for claims after a wrap to pass over: the newest
        # listing's (anyone's jobs, ended ones Slurm still lists too) and those Pods named
        # in the last NAMED_ID_HOLD_S (a job Slurm lost may still run under one), → when.
        self._listed_ids: set[int] = set()
        self._named_ids: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def replace(self, jobs: list[SlurmJob], listed_at: float) -> list[PodRef]:
        """Take a full listing requested at `listed_at`; return the Pods whose jobs appeared,
        changed or vanished. What was recorded after the request began wins over it: the
        listing may predate a submission (forgetting it could mean submitting its Pod twice)
        or a fresher read (a job seen RUNNING must not go back to PENDING, which would make
        a bound Pod look requeued)."""
        fresh = {job.job_id: (ref, job) for job in jobs if (ref := self._owner(job))}
        self._note_lost({job.job_id for job in jobs}, fresh, listed_at)
        for job_id, recorded in list(self._recorded_at.items()):
            if recorded >= listed_at and job_id in self._by_id:
                fresh[job_id] = self._by_id[job_id]
            elif recorded < listed_at:
                del self._recorded_at[job_id]
        changed = [
            job_id for job_id, (_, job) in fresh.items() if self._by_id.get(job_id, (None, None))[1] != job
        ]
        touched = [fresh[job_id][0] for job_id in changed]
        touched += [ref for job_id, (ref, _) in self._by_id.items() if job_id not in fresh]
        # A gang's members follow its first component (only that one is marked started).
        groups = {fresh[job_id][1].het_job_id for job_id in changed} - {0}
        if groups:
            touched += [ref for ref, job in fresh.values() if job.het_job_id in groups]
        self._by_id = fresh
        self.listed_at = max(self.listed_at, listed_at)
        self._by_key = {}
        for job_id, (ref, _) in fresh.items():
            self._by_key.setdefault((ref.namespace, ref.name), set()).add(job_id)
        return touched

    def _note_lost(
        self, listed: set[int], fresh: dict[int, tuple[PodRef, SlurmJob]], listed_at: float
    ) -> None:
        """Remember our jobs last known running (from the last listing, or a read since:
        most Pods are bound on the read their placeholder's `started` call brings) that
        this listing shows in no state at all, or under another Pod (a restarted slurmctld
        handed the ID out again): Slurm keeps an ended job listed for MinJobAge, so these
        were lost, not ended."""
        now = self._clock.monotonic()
        for job_id in self._by_id.keys() - listed:
            if self._recorded_at.get(job_id, 0.0) < listed_at:  # not submitted or read since
                self.vanished[job_id] = now
        for job_id, (ref, job) in self._by_id.items():
            recorded = self._recorded_at.get(job_id)
            if not job.running or (recorded is not None and recorded >= listed_at):
                continue  # not running, or read after this listing was asked for
            if job_id in listed and fresh.get(job_id, (None,))[0] == ref:
                continue
            self.lost[job_id] = LostJob(ref, job, recorded if recorded is not None else self.listed_at)
        self._listed_ids = {job_id for job_id in listed if self._in_range(job_id)}
        self._see(max(self._listed_ids, default=0))
        if self.id_range is not None:  # the counter's, for a scheduler Slurm lets not choose
            self._see(max((job_id for job_id in listed if job_id < self.id_range[0]), default=0))
        self._named_ids = {i: at for i, at in self._named_ids.items() if now - at < NAMED_ID_HOLD_S}
        self.lost = {i: lost for i, lost in self.lost.items() if now - lost.seen_at < MIN_JOB_AGE_S}
        self.vanished = {i: at for i, at in self.vanished.items() if now - at < MIN_JOB_AGE_S}

    # What this process learned or did since the last listing. Each wins over a listing
    # requested before it, and is replaced by the first listing requested after it.
    def owner_of(self, job: SlurmJob) -> PodRef | None:
        """The Pod `job` was submitted for, when this scheduler submitted it."""
        return self._owner(job)

    def observe(self, ref: PodRef, job: SlurmJob) -> None:
        """A job just read from Slurm (a single read, not a listing). A job ID a slurmctld
        that lost its state handed out again leaves its old Pod's key."""
        self._record(ref, job)

    def expect_submitted(self, ref: PodRef, job_id: int, name: str, comment: str) -> None:
        """Slurm just accepted job `job_id` for `ref`: until a listing shows it, it counts
        as pending, so a retry of the Pod adopts it instead of submitting again."""
        self._record(
            ref,
            SlurmJob(
                job_id=job_id,
                name=name,
                state="PENDING",
                reason="None",
                nodes=(),
                comment=comment,
                user_id=None,
                group_id=None,
                partition="",
                time_limit_min=None,
                priority=None,
                submit_time=int(self._clock.now()),
            ),
        )

    def expect_excluded(self, job_id: int, nodes: tuple[str, ...]) -> None:
        """Slurm accepted new excluded nodes for pending job `job_id`."""
        found = self._by_id.get(job_id)
        if found is not None:
            self._record(found[0], replace(found[1], excluded_nodes=nodes))

    def expect_cancelled(self, leader: int) -> None:
        """Slurm accepted the cancel of `leader` and of every component of its job."""
        for ref, job in [
            v for v in self._by_id.values() if v[1].job_id == leader or v[1].het_job_id == leader
        ]:
            self._record(ref, replace(job, state="CANCELLED"))

    def _record(self, ref: PodRef, job: SlurmJob) -> None:
        old = self._by_id.get(job.job_id)
        if old is not None and (old[0].namespace, old[0].name) != (ref.namespace, ref.name):
            self._by_key.get((old[0].namespace, old[0].name), set()).discard(job.job_id)
        self._by_id[job.job_id] = (ref, job)
        self._by_key.setdefault((ref.namespace, ref.name), set()).add(job.job_id)
        self._recorded_at[job.job_id] = self._clock.monotonic()
        self._see(job.job_id)

    def _in_range(self, job_id: int) -> bool:
        return self.id_range is None or self.id_range[0] <= job_id <= self.id_range[1]

    def _see(self, job_id: int) -> None:
        """Job ID `job_id` was handed out: claims go above it, unless it lies outside the
        range (Slurm's counter: it never reaches the range) or the claims have wrapped."""
        if self._in_range(job_id):
            if not self.wrapped:
                self._cursor = max(self._cursor, job_id)
        elif self.id_range is not None and job_id < self.id_range[0]:
            self._below = max(self._below, job_id)

    @property
    def highest_id(self) -> int:
        """The ID a new job's must exceed to be one never handed out before: the last
        claimed (or seen in the range), else the highest of Slurm's counter seen."""
        return max(self._cursor, self._below)

    def note_id(self, job_id: int | None) -> None:
        """A job ID handed out before, seen elsewhere than in Slurm (a Pod names it): a
        slurmctld that lost that job may hand the ID out again."""
        if job_id:
            self._see(job_id)
            if self.id_range is not None and self._in_range(job_id):
                self._named_ids[job_id] = self._clock.monotonic()

    def note_ids_of_pods(self, pods: Iterable[Json], prefix: str) -> None:
        """Every job ID a Pod names was handed out before, though Slurm may have lost it
        and this process never saw it (it restarted since): no submission asks for one of
        them. Done once a term's first job listing is in, before any Pod is looked at."""
        for pod in pods:
            raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(prefix + "job-id")
            self.note_id(int(raw) if isinstance(raw, str) and raw.isdigit() else None)

    def claim_ids(self, count: int = 1) -> int | None:
        """The first of `count` consecutive job IDs above every one seen or claimed so far,
        for a submission to ask Slurm for; each is claimed once, so workers submitting at
        the same time never ask for the same one. Inside `id_range`: from its start while
        nothing was seen in it, and from its start again once its top is reached, passing
        over the IDs held (`JobIdsExhausted` when no run of `count` is free). Without a
        range, None while nothing was seen yet (a fresh cluster): Slurm's own counter then
        knows best."""
        if self.id_range is None:
            if not self._cursor:
                return None
            first = self._cursor + 1
            self._cursor += count
            return first
        low, high = self.id_range
        start = max(self._cursor + 1, low)
        wrapped_here = False
        while True:
            if start + count - 1 > high:
                if wrapped_here:
                    raise JobIdsExhausted(
                        f"no {count} free job IDs in a row in {low}-{high}: every one is held by a job"
                    )
                log.info("job IDs reached the top of the range %s-%s; starting again from %s", low, high, low)
                start, wrapped_here, self.wrapped = low, True, True
                continue
            held = [i for i in range(start, start + count) if self._held(i)]
            if not held:
                self._cursor = start + count - 1
                return start
            start = held[-1] + 1

    def _held(self, job_id: int) -> bool:
        """Whether a job record or a Pod holds `job_id`, as far as this process knows."""
        return job_id in self._listed_ids or job_id in self._by_id or job_id in self._named_ids

    def lost_job(self, job_id: int, uid: str) -> SlurmJob | None:
        """Job `job_id` of Pod `uid` as last seen, when a listing showed it running less
        than MIN_JOB_AGE_S ago and a later one not at all: Slurm lost it, it did not end it."""
        lost = self.lost.get(job_id)
        if lost is None or lost.ref.uid != uid or self._clock.monotonic() - lost.seen_at >= MIN_JOB_AGE_S:
            return None
        return lost.job

    def get(self, job_id: int) -> tuple[PodRef, SlurmJob] | None:
        return self._by_id.get(job_id)

    def with_group_mark(self, job: SlurmJob) -> SlurmJob:
        """A gang's placeholder script runs in the first component only and marks that one
        started; the other components count as started when it is."""
        if job.group_leader is None or job.het_job_offset == 0:
            return job
        leader = self._by_id.get(job.group_leader)
        return replace(job, started=leader is not None and leader[1].started)

    def of_pod(self, ref: PodRef, job_id: int | None) -> PodJobs:
        """What the index holds for one Pod, in one read: every job named for its key
        (whichever UID), the job its annotation names `job_id` if the index holds it for
        its UID (never an ID alone: IDs restart when Slurm's state is wiped), with a gang's
        start mark, and that job's group leader. The ID counts as handed out before."""
        self.note_id(job_id)
        found = self._by_id.get(job_id) if job_id is not None else None
        job = self.with_group_mark(found[1]) if found is not None and found[0].uid == ref.uid else None
        leader = self._by_id.get(job.group_leader) if job is not None and job.group_leader else None
        return PodJobs(self.for_key(ref.namespace, ref.name), job, leader[1] if leader else None)

    def for_key(self, namespace: str, name: str) -> list[tuple[PodRef, SlurmJob]]:
        """Every job named for this Pod name, whichever Pod UID: called on each reconcile."""
        return [self._by_id[job_id] for job_id in self._by_key.get((namespace, name), ())]

    def job_ids(self) -> set[int]:
        return set(self._by_id)

    def items(self) -> list[tuple[PodRef, SlurmJob]]:
        return list(self._by_id.values())

    def all_refs(self) -> list[PodRef]:
        return [ref for ref, _ in self._by_id.values()]


class JobPoller:
    """Polls slurmrestd and tells the scheduler which Pods' jobs changed."""

    def __init__(
        self,
        slurm: SlurmClient,
        index: JobIndex,
        on_change: Callable[[PodRef], None],
        clock: Clock,
        *,
        interval: float = 0.25,
        on_listing: Callable[[set[int]], None] = lambda _ids: None,
    ) -> None:
        self._slurm = slurm
        self._index = index
        self._on_change = on_change
        self._clock = clock
        self._on_listing = on_listing
        self._interval = interval
        self.last_error: str | None = None

    async def run(self) -> None:
        delay = self._interval
        while True:
            try:
                # A full listing each time: it also notices jobs that vanished.
                listed_at = self._clock.monotonic()
                jobs = await self._slurm.jobs()
                took = self._clock.monotonic() - listed_at
                touched = self._index.replace(jobs, listed_at)
                self._index.synced.set()
                self.last_error = None
                for ref in touched:
                    self._on_change(ref)
                self._on_listing(self._index.job_ids())
                # Listing thousands of jobs costs slurmrestd real time: keep it to a fifth.
                delay = max(self._interval, 4 * took)
            except SlurmError as err:
                if self.last_error != str(err):
                    log.warning("cannot list Slurm jobs: %s", err)
                self.last_error = str(err)
                delay = min(max(delay * 2, 0.5), 5.0)
                await asyncio.sleep(delay)
                continue
            await asyncio.sleep(delay)
