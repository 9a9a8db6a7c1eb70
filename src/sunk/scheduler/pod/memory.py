"""What the Pod controller and its collaborators remember beyond the caches: what this
process did or was told lately. All of it is pruned after every job listing; a restart
that loses it only repeats a step (a cancel, a signal, a drain try)."""

from __future__ import annotations

from sunk.runtime.expectations import Expectations
from sunk.runtime.ports import Clock

# How soon a Pod (or a PodGroup) is looked at again while the cache lags behind a write
# this process made on it: judged by the old copy, it would be acted on twice.
WRITE_UNSEEN_RECHECK_S = 0.2


class Memory:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        # Jobs are remembered by (job ID, Pod UID): a slurmctld that lost its state hands
        # the same job IDs out again, and what was done to the old job says nothing of the new.
        self.signalled: set[tuple[int, str]] = set()
        # → when Slurm accepted our cancel. A cancel that failed is not recorded (the next
        # pass tries again); one Slurm accepted but lost (a slurmctld crash) is sent again if
        # the job still runs CANCEL_CONFIRM_S later.
        self.cancelled: dict[tuple[int, str], float] = {}
        # Pod UID → when a submission for it got no answer: Slurm may hold a job for it that
        # no listing has shown yet, so it is not submitted again before one has.
        self._unanswered: dict[str, float] = {}
        self.drained: set[int] = set()
        # Pod key → UID of Pods this process asked the API server to delete, until they are
        # gone: the informer may not show the deletion yet, and a second Event saying the
        # same thing (or a second DELETE) would only add load when a thousand jobs end.
        self.deleting: dict[str, str] = {}
        # (job ID, Pod UID) whose placeholder said on the hooks API that Slurm is ending it:
        # a claim to check with Slurm before the Pod goes (a stolen key must not end a Pod).
        self.ending_reported: set[tuple[int, str]] = set()
        # Pod UID → the job ID this process last wrote on it, until the cache shows it.
        self.job_written: Expectations[int | None] = Expectations()
        # Pod UID → True once this process refused it for good, until the cache shows the
        # refusal: a pass in between would refuse again, and tell the Pod's owner twice.
        self.refused: Expectations[bool] = Expectations()
        # The components of a PodGroup's new job (a re-adoption) this process submitted and
        # has not yet recorded on the members nor cancelled. Until then a member's own pass
        # would see a job naming it that it does not name, and cancel the group's new job
        # (found by a fault run: the group was then re-adopted in part, or not at all).
        self.handing_over: set[int] = set()

    def note_unanswered(self, uid: str) -> None:
        """A submission for Pod `uid` got no answer: Slurm may hold a job for it that no
        listing has shown yet."""
        self._unanswered[uid] = self.clock.monotonic()

    def unanswered_since(self, uid: str) -> float:
        """When a submission for Pod `uid` last got no answer (monotonic), or 0."""
        return self._unanswered.get(uid, 0.0)

    def answered(self, uid: str) -> None:
        self._unanswered.pop(uid, None)

    def prune(self, live: set[int]) -> None:
        """Forget what was remembered about jobs Slurm no longer lists: nothing here is
        needed after a job is gone, and a process that runs for months must not grow."""
        self.ending_reported = {k for k in self.ending_reported if k[0] in live}
        for key in [k for k in self.cancelled if k[0] not in live]:
            del self.cancelled[key]
        self.signalled = {k for k in self.signalled if k[0] in live}
        self.drained &= live
        for uid in [u for u, at in self._unanswered.items() if self.clock.monotonic() - at > 600]:
            del self._unanswered[uid]
        self.job_written.prune()
        self.refused.prune()
