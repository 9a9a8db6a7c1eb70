"""slurmctld's scheduler statistics (sdiag, slurmrestd's `/diag`), read into one value.

Slurm 25.11+ serves these itself on its metrics endpoint; for older releases the operator
reads them here and publishes them under the same names (sunk.operator.metrics.slurm_families).
Every REST version sunk speaks names these fields alike at the top of `statistics`, the
numbers plain or in Slurm's {set, infinite, number} wrapper, so one parser serves all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sunk.slurm.dialect import number


@dataclass(frozen=True)
class SlurmDiag:
    """One answer of `/diag`. Cycle times are in microseconds, as slurmctld keeps them;
    `bf_when_last_cycle` is epoch seconds (0: backfill has not run since slurmctld started)."""

    server_thread_count: int = 0
    agent_queue_size: int = 0
    agent_count: int = 0
    dbd_agent_queue_size: int = 0
    schedule_cycle_last: int = 0
    schedule_cycle_max: int = 0
    schedule_cycle_mean: int = 0
    schedule_queue_length: int = 0
    bf_active: bool = False
    bf_cycle_last: int = 0
    bf_cycle_max: int = 0
    bf_queue_len: int = 0
    bf_when_last_cycle: int = 0
    jobs_submitted: int = 0
    jobs_started: int = 0
    jobs_completed: int = 0
    jobs_canceled: int = 0
    jobs_failed: int = 0


_COUNTS = tuple(name for name in SlurmDiag.__dataclass_fields__ if name != "bf_active")


def parse_diag(reply: dict[str, Any]) -> SlurmDiag:
    """The statistics of a `/diag` answer; a field the version leaves out reads as 0."""
    stats = reply.get("statistics")
    if not isinstance(stats, dict):
        stats = {}
    values: dict[str, Any] = {name: number(stats.get(name)) or 0 for name in _COUNTS}
    return SlurmDiag(bf_active=bool(stats.get("bf_active")), **values)
