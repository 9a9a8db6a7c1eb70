"""Job IDs never handed out before (issue #53): every job sunk submits asks for its own.

A slurmctld killed before it saved its state comes back with its job-ID counter rolled
back, and hands out again the IDs of the jobs it lost while their processes may still run
on their nodes: slurmd then refuses to launch the new job ("Duplicate jobid") and Slurm
drains the node. Cancelling and submitting again until an ID comes back new cannot outrun
a counter rolled back by several jobs. So a submission asks Slurm for an ID above every
one this scheduler has seen (listed, read, submitted, or named by one of its Pods), as
`sbatch --jobid` does: slurmctld lets root and SlurmUser choose, refuses an ID any job
record holds ("Duplicate job id", then the next is asked for), and does not move its own
counter for it. Slurm versions whose REST API cannot say it (22.05), and a token slurmctld
does not let choose, take Slurm's counter as before.

The IDs asked for come from a range of their own (`--job-id-range`, 50,000,000 to 67,108,863
by default) that Slurm's counter never reaches: the Slurm chart sets MaxJobId to the range's
start, and slurmctld wraps its counter back to FirstJobId before MaxJobId, while letting root
and SlurmUser ask for any ID above it. Sharing one number line, the counter would otherwise
walk into IDs this scheduler used (two jobs under one ID in accounting), and a rolled-back
counter could hand a person's job the ID of a lost job of ours still running.
"""

from __future__ import annotations

import logging

from sunk.scheduler.jobs import JobIdsExhausted, JobIndex
from sunk.scheduler.ports import SlurmPort
from sunk.slurm.errors import SlurmRejected, SlurmUnavailable

log = logging.getLogger(__name__)
# slurm_errno.h: ESLURM_DUPLICATE_JOB_ID (a job record holds that ID) and
# ESLURM_INVALID_JOB_ID (what slurmctld answers a user who may not choose one).
DUPLICATE_JOB_ID = 2011
INVALID_JOB_ID = 2017
# IDs asked for in a row that a record already held (jobs other users submitted after the
# last listing) before the submission is given up for this pass.
TRIES = 5


class FreshIds:
    """Chooses the IDs a submission asks for, and says what Slurm's refusal of one means;
    the Pod controller's executor makes the submissions (`PodExecutor.submit_new`)."""

    def __init__(self, slurm: SlurmPort, index: JobIndex) -> None:
        self.slurm = slurm
        self.index = index
        self.refused = False  # slurmctld did not let this scheduler's token choose

    @property
    def choosing(self) -> bool:
        """Whether submissions ask for their IDs (else Slurm's counter gives them)."""
        return self.slurm.dialect.chooses_job_ids and not self.refused

    def next(self, components: int = 1, *, counter_ok: bool = True) -> int | None:
        """The first of the next `components` unclaimed IDs, or None: Slurm's counter gives
        them. `counter_ok`: False when the job must not be submitted at all unless it can
        ask for its IDs (raises `SlurmRejected`)."""
        try:
            first = self.index.claim_ids(components) if self.choosing else None
        except JobIdsExhausted as err:
            raise SlurmUnavailable(
                f"{err}; the submission waits for jobs to end (or widen --job-id-range, "
                "keeping Slurm's MaxJobId at or below its start)"
            ) from None
        if first is None and not counter_ok:
            raise SlurmRejected("Slurm does not let this scheduler choose job IDs here")
        return first

    def asks_again(self, err: SlurmRejected, first: int) -> bool:
        """Whether Slurm's refusal of a submission asking for `first` means: ask again (the
        ID is held by a job not seen yet, or this token may not choose and the counter
        gives the ID from now on)."""
        if err.code == DUPLICATE_JOB_ID:
            log.info("job ID %s is held by a job not seen yet; asking for the next", first)
            return True
        if err.code == INVALID_JOB_ID:
            log.warning(
                "Slurm does not let this scheduler choose job IDs (%s): new jobs take Slurm's "
                "counter, which a slurmctld restarted without its state rolls back (give the "
                "scheduler a Slurm token of root or SlurmUser)",
                err,
            )
            self.refused = True
            return True
        return False

    @staticmethod
    def gave_up() -> SlurmUnavailable:
        return SlurmUnavailable(f"Slurm held a job record under each of {TRIES} new job IDs in a row")
